"""The estimator :class:`PrivateFedRepRegressor` (Snedeker, Zhou & Bassily 2025, Alg. 1-2).

Parameters, constraints, documentation and predictions; the algorithm (its
configuration, budget plan, driver and kernels) is
:mod:`skdpp.linear_model._algorithms.fedrep`.
"""

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

from ._algorithms import fedrep
from ._representation import _RepresentationRegressor

__all__ = ["PrivateFedRepRegressor"]


class PrivateFedRepRegressor(_RepresentationRegressor):
    """Private FedRep: a shared linear embedding under user-level DP, personal heads.

    Learns ``y ≈ b_i + <x, U v_i>``: ``U`` (``n_features × n_components``,
    orthonormal) is released under user-level (ε, δ)-DP; each user's head
    ``v_i`` and intercept ``b_i`` come from the releases and its own rows.
    Algorithm 1 of Snedeker, Zhou & Bassily (2025) with their private
    initialisation (Algorithm 2), plus per-user intercepts, shrinkage towards
    a released cold-start part and private scale-free bounds (``"auto"``): raw
    data work with only ``epsilon`` set. Derivations: :ref:`fedrep`.

    Parameters
    ----------
    n_components : int, default=2
        Dimension ``k`` of the shared representation; ``1 <= k <= n_features``.
    init : {"private_spectral", "private_pairwise", "random"} or array-like of \
            shape (n_features, n_components), default="private_spectral"
        Initial embedding ``U_0``: Alg. 2 (phase ``"init"``); Jain et al.
        (2021), Alg. 3, with ``init_clip_norm`` as the label clip ``ζ``; a
        random orthonormal matrix (free); or a *public* warm start (free; not
        computed from the private data), orthonormalised by QR.
    max_iter : int, default=5
        Number of iterations ``T`` of Alg. 1 (one release each), ``>= 0``.
    learning_rate : float, default=1.5
        ``η > 0`` of the step on ``U`` (Alg. 1, line 10); the step is ``η / s_y^2``.
    label_scale : float or "auto", default="auto"
        ``s_y > 0``. ``"auto"``: the ``clip_quantile`` of the users' root mean
        square centred ``S^0`` targets. ``1.0``: the paper's step.
    fit_intercept : bool, default=True
        Per-user intercepts (rows centred on the user's own means) and a
        released cold-start intercept. ``False``: the paper's model.
    personal_rows : {"all", "holdout"}, default="all"
        Rows of the personal parts: all of a user's rows (post-processing), or
        the paper's ``S^1`` (Alg. 1, line 14).
    personal_ridge : float, default=10.0
        ``κ >= 0``: heads and mean levels are shrunk towards the cold-start
        part by ``κ k`` pseudo-rows, scaled by the share of the user's target
        variance its own fit leaves unexplained (scale-free). ``0``: least squares.
    clip_norm : float, "auto" or None, default="auto"
        ``ψ``: Frobenius clip of each user's gradient ``∇_{i,t}``. ``"auto"``:
        the ``clip_quantile`` of the users' gradient norms at ``U_0``. ``None``
        only with ``epsilon=np.inf``. A number must not come from the private data.
    init_clip_norm : float, "auto" or None, default="auto"
        ``ψ_init`` of Alg. 2 (clip of each ``Z_i``), or ``ζ`` with
        ``init="private_pairwise"``. ``"auto"``: the ``clip_quantile / 2``
        quantile of the users' ``||Z_i||_F`` (or root mean square targets).
    head_clip_norm : float, "auto" or None, default="auto"
        Clip of each head in the DP mean that gives the cold-start head.
        ``"auto"``: the ``clip_quantile`` of the users' head norms.
    clip_quantile : float in (0, 1], default=0.5
        Quantile an ``"auto"`` bound is set to; the radius quantile of the
        cold-start intercept.
    budget_shares : dict or None, default=None
        Budget shares by phase, e.g. ``{"init": 0.2}``; ``"iterations"`` takes
        the rest. ``"clip"`` (default ``"auto"``, :ref:`auto_rules`),
        ``"init"`` (default 0.1) and ``"cold_start"`` (default 0.02; ``0``:
        unseen users get the zero head and intercept).
    batch_mode : {"same", "disjoint"}, default="same"
        Head and gradient of a round on the same ``S^0`` rows (the authors'
        code), or on two disjoint batches (Alg. 1, line 5; see Notes).
    batch_size : int or None, default=None
        ``b >= 1``: rows per batch and user. ``None``: all ``S^0`` rows
        (``"same"``) or ``floor(|S^0_i| / 2)`` (``"disjoint"``).
    epsilon : float, default=1.0
        Privacy budget ε in (0, inf]; ``np.inf``: the same algorithm without
        noise (clipping still applies).
    delta : float, default=1e-6
        Privacy parameter δ in [0, 1); choose δ << 1 / n_users.
    random_state : int, RandomState instance or None, default=None
        Seeds the noise, the random initialisation and the key of the
        per-user randomness (split, batches). ``None``: OS entropy.
    verbose : int, default=0
        Print one line per iteration when positive (public quantities only).

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_components)
        The released embedding ``U^priv`` (orthonormal columns).
    heads_ : ndarray of shape (n_users_, n_components)
        Personal heads ``v_i``, aligned with ``user_ids_`` (local).
    intercepts_ : ndarray of shape (n_users_,)
        Personal intercepts ``b_i`` (local; zeros with ``fit_intercept=False``).
    cold_start_head_ : ndarray of shape (n_components,)
        Released head for users unseen in ``fit``.
    cold_start_intercept_ : float
        Released cold-start intercept (0 with ``fit_intercept=False``).
    clip_norm_, init_clip_norm_, head_clip_norm_, label_scale_ : float or None
        The bounds used (released when ``"auto"``; None when unused).
    intercept_clip_ : float or None
        Released radius of the cold-start intercept's clipped mean.
    feature_scales_ : ndarray of shape (n_features_in_,) or None
        Released per-feature scales (``inf``: a dropped column); the fitted
        parts apply to ``X / feature_scales_``.
    label_range_ : tuple of float or None
        Released range predictions are clamped to.
    local_only_ : bool
        Whether the plan predicted a useless fit (:ref:`auto_rules`).
    own_label_ranges_ : ndarray of shape (n_users_, 2)
        Each user's own minimum and maximum label (local): a useless fit
        clamps the user's predictions to it.
    user_ids_ : ndarray of shape (n_users_,)
        Sorted user ids seen in ``fit`` (and ``personalize``).
    n_users_ : int
        Number of users in ``fit``.
    n_iter_ : int
        Number of iterations run (1 in a useless fit: its one pass of
        personal fits).
    privacy_report_ : PrivacyReport
        Budget plan, sensitivities, noise multipliers and the spent (ε, δ).
    n_features_in_ : int
        Number of features seen during ``fit``.

    See Also
    --------
    PrivAltMinRegressor : Jain et al. (2021), alternating minimisation.

    Notes
    -----
    **Guarantee.** User-level (ε, δ)-DP for ``components_``, the cold-start
    part, the ``"auto"`` bounds, ``feature_scales_`` and ``label_range_``
    under *replace one user's entire data* (the number of users is public);
    heads and intercepts are computed by each user from the releases and its
    own rows (joint DP). ``groups=None``: row-level DP. Floating-point noise
    is not hardened against side channels.

    **Budget plan and sensitivities** (L2 / Frobenius; derivations:
    :ref:`fedrep`). Gaussian phases calibrated jointly on the exact (μ-GDP)
    composition with the shares of ``budget_shares`` (the paper's loose
    closed-form ``σ̂`` is not used): ``init`` (Alg. 2, line 6), ``sum_i
    clip(Z_i, ψ_init)`` with symmetric noise, ``2 ψ_init`` (``Z_i`` the
    user's U-statistic on ``S^0``, clipped by the norm of the matrix actually
    added; ``"private_pairwise"``: ``2 ζ^2``); ``iterations`` (line 10), ``T``
    releases of ``sum_i clip(∇_{i,t}, ψ)``, ``2 ψ`` (the rank-one ``g_i
    v_i^T`` is clipped by one scalar factor of unit vectors, so the bound
    holds for any magnitudes); ``cold_start``, ``sum_i clip(v_i, C_head)``,
    ``2 C_head``, and with ``fit_intercept`` clipped means of the users'
    offsets ``ȳ_i - <p̄_i, v_cold>`` and mean labels around private medians,
    ``2 R`` each; ``clip``, counts of users of sensitivity 1
    (:ref:`auto_rules`).

    **Randomness.** The split (``ceil(m_i / 2)`` rows in ``S^0``) and the
    batches are keyed hashes: a fit is a function of the *set* of records.

    **Deviations from the paper** (none affects privacy):

    * ``batch_mode="same"``: at 10 rows per user and ``T = 5`` Alg. 1's
      disjoint batches hold 1-2 rows and the iteration does not converge
      (Lemmas 7 and 9 assume independent batches). ``"disjoint"`` resamples
      every round (``b <= floor(m / 2T)`` needs ``|S^0_i| >= 2Tb``); users
      with fewer than 2 ``S^0`` rows contribute a zero gradient.
    * ``personal_rows="all"`` is not covered by Theorem 4's utility analysis
      (``benchmarks/results/real_data_linear_ablation.md``); a one-row
      user's final head uses its ``S^0`` row.
    * Head solves add a relative ridge (``1e-10 tr(A)/k``; ``1e-6`` below
      ``k`` rows); Alg. 2's rank-``k`` SVD takes the top-``k`` eigenvectors.
    * Added: the cold-start part, the intercepts (rows centred on the user's
      means: bounds unchanged), the shrinkage, the ``"auto"`` bounds and the
      step ``η / s_y^2``; ``personal_rows="holdout"``, ``personal_ridge=0``,
      ``fit_intercept=False`` and numeric bounds give the paper's algorithm.
    * A head that overflows, or a gradient that is not a number, is zero (a
      function of that user's rows): ``fit`` neither fails nor warns.

    **Input domain.** Finite ``X`` and ``y``, ``groups`` numbers or strings;
    see :class:`~skdpp.base.BasePersonalizedEstimator` (*Quiet numerics*).

    **Scales, label range, cold start, useless fits**: :ref:`auto_rules`.
    The released cold-start head is also shrunk by ``max(0, 1 - k σ^2 /
    ||v||^2)`` (``σ`` its noise std); in a useless fit each known user gets
    its own ridge fit towards zero and its mean on public random components.

    References
    ----------
    .. [1] Snedeker, C., Zhou, X. and Bassily, R. (2025). Private Model
           Personalization Revisited. Proceedings of the 42nd International
           Conference on Machine Learning (ICML). arXiv:2506.19220.
    .. [2] Collins, L., Hassani, H., Mokhtari, A. and Shakkottai, S. (2021).
           Exploiting Shared Representations for Personalized Federated
           Learning. ICML. arXiv:2102.07078.

    Examples
    --------
    >>> from skdpp.datasets import make_shared_representation_regression
    >>> from skdpp.linear_model import PrivateFedRepRegressor
    >>> X, y, groups, truth = make_shared_representation_regression(
    ...     n_users=2000, n_features=10, n_components=2, random_state=0)
    >>> est = PrivateFedRepRegressor(epsilon=4.0, random_state=0).fit(X, y, groups=groups)
    >>> est.components_.shape, est.heads_.shape
    ((10, 2), (2000, 2))
    >>> [(p.name, p.count) for p in est.privacy_report_.phases]
    [('clip', 163), ('init', 1), ('iterations', 5), ('cold_start', 3)]
    >>> est.intercepts_.shape, bool(est.clip_norm_ > 0)
    ((2000,), True)
    """

    _algorithm = fedrep
    _parameter_constraints = {
        **_RepresentationRegressor._parameter_constraints,
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "label_scale": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, *, n_components=2, init="private_spectral", max_iter=5,
                 learning_rate=1.5, label_scale="auto", fit_intercept=True,
                 personal_rows="all", personal_ridge=10.0, clip_norm="auto",
                 init_clip_norm="auto", head_clip_norm="auto", clip_quantile=0.5,
                 budget_shares=None, batch_mode="same", batch_size=None,
                 epsilon=1.0, delta=1e-6, random_state=None, verbose=0):
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.label_scale = label_scale
        self.fit_intercept = fit_intercept
        self.personal_rows = personal_rows
        self.personal_ridge = personal_ridge
        self.clip_norm = clip_norm
        self.init_clip_norm = init_clip_norm
        self.head_clip_norm = head_clip_norm
        self.clip_quantile = clip_quantile
        self.budget_shares = budget_shares
        self.batch_mode = batch_mode
        self.batch_size = batch_size
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state
        self.verbose = verbose

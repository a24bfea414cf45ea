"""The estimator :class:`PrivAltMinRegressor` (Jain, Rush, Smith, Song & Thakurta 2021).

Parameters, constraints, documentation and predictions; the algorithm (its
configuration, budget plan, driver and kernels) is
:mod:`skdpp.linear_model._algorithms.altmin`.
"""

from numbers import Real

from sklearn.utils._param_validation import Interval, StrOptions

from ._algorithms import altmin
from ._representation import _clip_constraint, _RepresentationRegressor

__all__ = ["PrivAltMinRegressor"]


class PrivAltMinRegressor(_RepresentationRegressor):
    """Priv-AltMin: private alternating minimisation for a shared linear embedding.

    Learns ``y ≈ b_i + <x, U v_i>`` with a shared embedding ``U``
    (``n_features × n_components``, orthonormal columns) released under
    user-level (ε, δ)-DP and a personal head ``v_i`` and intercept ``b_i``
    computed from the released values and each user's rows only (billboard
    model). Implements Jain, Rush, Smith, Song & Thakurta (2021): Alg. 1
    (alternating minimisation) with Alg. 2 (the ``U`` step by perturbing the
    least-squares sufficient statistics) and, optionally, Alg. 3 (private
    initialisation). The defaults add per-user intercepts, personal parts on
    all of a user's rows shrunk towards a released cold-start part, and
    scale-free clip bounds chosen privately (``"auto"``; see Notes).

    Parameters
    ----------
    n_components : int, default=2
        Dimension ``k`` of the shared representation; ``1 <= k <= n_features``.
    init : {"private_spectral", "private_pairwise", "random"} or array-like of \
            shape (n_features, n_components), default="private_spectral"
        Initial embedding. ``"private_spectral"``: Snedeker et al. (2025),
        Alg. 2 (as in their comparison with Priv-AltMin; uses
        ``init_clip_norm``). ``"private_pairwise"``: Jain et al.'s Alg. 3
        (normalised products of row pairs, labels clipped to ``label_clip``).
        ``"random"``: random orthonormal (free). An array: a *public* warm start.
    max_iter : int, default=1
        Number of rounds ``T`` of Alg. 1 (epochs with ``schedule="full"``).
        One full-batch epoch was best on the papers' setting for ``ε <= 8``
        (the paper's experiment picks the number of epochs in {1, 2, 5, 10}).
    schedule : {"full", "disjoint"}, default="full"
        ``"full"``: every user takes part in every round (full-batch epochs, as
        in the paper's experiment); the ``2T`` releases compose.
        ``"disjoint"``: every user is assigned to one of ``T`` rounds by a
        keyed hash of its id and round ``t`` uses its users only (Alg. 1,
        lines 2-4); by parallel composition the whole loop costs one round's
        two releases.
    fit_intercept : bool, default=True
        Per-user intercepts ``b_i``: every contribution is computed on the
        user's rows centred on the user's own means (the intercept profiled
        out), and unseen users get a released cold-start intercept (a private
        location, see Notes). ``False``: the paper's model ``<x, U v_i>``.
    personal_rows : {"all", "holdout"}, default="all"
        Rows of the personal parts: all of a user's rows (post-processing), or
        ``"holdout"``: the paper's final heads on ``S^1`` only.
    personal_ridge : float, default=10.0
        ``κ``: each user's head (and mean level) is shrunk towards the released
        cold-start part as if the prior contributed ``κ k`` pseudo-rows, scaled
        by the share of the user's target variance its own fit leaves
        unexplained. Scale-free. ``0``: least squares.
    clip_norm : float, "auto" or None, default="auto"
        ``η``: each row's ``vec(x v^T)`` is clipped to this norm (Alg. 2, line 1).
        ``"auto"``: the ``clip_quantile`` of the users' root mean square
        ``||x_r|| ||v_i||`` at ``U_0`` (a private quantile, phase ``"clip"``).
        ``None`` only with ``epsilon=np.inf``.
    label_clip : float, "auto" or None, default="auto"
        ``ζ``: each (centred) label is clipped to ``[-ζ, ζ]`` (Alg. 2 and
        Alg. 3). ``"auto"``: the ``clip_quantile`` of the users' root mean
        square (centred) targets (phase ``"clip"``).
    psd_floor : float, default=32.0
        Before the solve of Alg. 2, line 3, the eigenvalues of the noisy Gram
        ``W_priv`` are raised to at least ``psd_floor * σ * sqrt(dk)``, where
        ``σ`` is its noise std (``2 σ sqrt(dk)`` is about the spectral norm of
        the noise). Post-processing: no privacy cost. ``2`` only makes the
        problem convex; larger values shrink towards ``U ∝ QR(unvec(b_priv))``,
        which is much more accurate at ``ε <= 8`` on the papers' setting (see
        Notes). No effect with ``epsilon=np.inf``.
    init_clip_norm : float, "auto" or None, default="auto"
        ``ψ_init`` of Snedeker et al.'s Alg. 2 (``init="private_spectral"``).
        ``"auto"``: the ``clip_quantile / 2`` quantile of the users'
        ``||Z_i||_F`` (phase ``"clip"``).
    head_clip_norm : float, "auto" or None, default="auto"
        Clip of each head in the DP mean that gives the cold-start head.
        ``"auto"``: the ``clip_quantile`` of the users' head norms.
    clip_quantile : float in (0, 1], default=0.5
        Quantile of the per-user statistic an ``"auto"`` bound is set to, and
        the radius quantile of the cold-start intercept.
    budget_shares : dict or None, default=None
        Shares of the zCDP budget by phase: keys ``"clip"`` (default
        ``"auto"``), ``"init"`` (default 0.1) and ``"cold_start"`` (default
        0.02), as in :class:`PrivateFedRepRegressor`; ``"iterations"`` takes
        the rest.
    batch_mode : {"same", "disjoint"}, default="same"
        ``"same"``: heads and ``U`` statistics on the same ``S^0`` rows.
        ``"disjoint"``: on two halves of ``S^0`` (as written in Alg. 1; the
        halves are keyed random, fixed for the fit).
    epsilon : float, default=1.0
        Privacy budget ε in (0, inf]; ``np.inf`` runs the same algorithm without
        noise (clipping still applies).
    delta : float, default=1e-6
        Privacy parameter δ in [0, 1).
    random_state : int, RandomState instance or None, default=None
        Seeds the fit's randomness: the privacy noise, the random
        initialisation and the secret key of the per-user randomness (the
        ``S^0`` / ``S^1`` split, the halves of ``S^0`` and the rounds of
        ``schedule="disjoint"``). ``None``: fresh OS entropy.
    verbose : int, default=0
        Print one line per round when positive (public quantities only:
        statistics of the private data, such as row counts or the share of
        clipped rows, are never printed).

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_components)
        The released embedding ``U^priv`` (orthonormal columns).
    heads_ : ndarray of shape (n_users_, n_components)
        Personal heads, aligned with ``user_ids_`` (local, not released).
    intercepts_ : ndarray of shape (n_users_,)
        Personal intercepts (local; zeros with ``fit_intercept=False``).
    cold_start_head_ : ndarray of shape (n_components,)
        Released DP mean head for users unseen in ``fit``.
    cold_start_intercept_ : float
        Released cold-start intercept (0 with ``fit_intercept=False``).
    clip_norm_, label_clip_, init_clip_norm_, head_clip_norm_ : float or None
        The bounds used (released when ``"auto"``; None when unused).
    intercept_clip_, feature_scales_, label_range_, local_only_, user_ids_, n_users_
        As for :class:`PrivateFedRepRegressor`.
    n_iter_ : int
        Number of rounds run.
    privacy_report_ : PrivacyReport
        Budget plan, sensitivities, noise multipliers and spent (ε, δ).
    n_features_in_ : int
        Number of features seen during ``fit``.

    See Also
    --------
    PrivateFedRepRegressor : Snedeker et al. (2025), private federated gradient
        steps on ``U``.

    Notes
    -----
    **Guarantee.** User-level (ε, δ)-DP for ``components_``,
    ``cold_start_head_``, ``cold_start_intercept_`` and the ``"auto"`` bounds
    (``*_clip_norm_``, ``label_clip_``, ``intercept_clip_``) under
    replace-one-user (public number of users); heads and intercepts are
    local, so the output is jointly DP (billboard model).

    **The U step (Alg. 2).** Each row gives ``W_r = clip(vec(x_r v_i^T); η)``
    and ``ỹ_r = clip(y_r; ζ)``. Each user contributes the *mean* over its rows
    of ``W_r W_r^T`` (a ``dk × dk`` PSD matrix of trace ``<= η^2``) and of
    ``ỹ_r W_r`` (norm ``<= ζ η``); the sums over users are released as
    ``W_priv`` (symmetric Gaussian noise) and ``b_priv``, then
    ``u = argmin u^T W_priv u - 2 u^T b_priv`` and ``U = QR(unvec(u))``.
    The ``dk × dk`` statistic is built from Kronecker blocks
    ``sum_r w_r v_a v_b x_r x_r^T`` without per-row ``dk`` vectors. Clipped
    rows are formed as ``min(||x|| ||v||, η) vec(x̂ v̂^T)`` from the unit
    vectors ``x̂ = x/||x||``, ``v̂ = v/||v||``, so the norm bound holds in
    floating point for any magnitudes of ``x`` and ``v``.

    **Sensitivities** (replace one user, Frobenius / L2):

    * ``W_priv``: ``sqrt(2) η^2``. A user's contribution ``A`` is PSD with
      ``||A||_F <= tr(A) <= η^2``; for PSD ``A, A'``,
      ``||A - A'||_F^2 = ||A||_F^2 + ||A'||_F^2 - 2 <A, A'> <= 2 η^4``.
    * ``b_priv``: ``2 ζ η``.
    * ``init`` (``"private_spectral"``): ``2 ψ_init``; (``"private_pairwise"``):
      ``2 ζ^2`` (each user's mean pair matrix has norm ``<= ζ^2``).
    * ``cold_start``: ``2 C_head`` (the sum of the users' clipped heads); with
      ``fit_intercept``, ``2 R`` for the clipped mean of the users' offsets
      ``ȳ_i - <p̄_i, v_cold>`` around a private median
      (:func:`~skdpp.privacy._quantile.private_location`).
    * ``clip``: each ``"auto"`` bound is a noisy binary search over a public
      log grid (:func:`~skdpp.privacy._quantile.private_quantile`: 6 Gaussian
      counts of users, sensitivity 1 each) of a per-user statistic:
      ``clip_norm``, the root mean square ``||x_r|| ||v_i||`` at ``U_0``;
      ``label_clip``, the root mean square centred target; ``init_clip_norm``,
      ``||Z_i||_F``; ``head_clip_norm``, the head norm. The cold-start
      intercept's median and radius searches (29 counts) are in this phase.

    **Budget plan.** A :class:`~skdpp.privacy.BudgetPlan` with the phases
    ``clip`` (6 releases per ``"auto"`` bound, 29 for the cold-start
    intercept), ``init`` (private initialisations only), ``iterations``
    (``2T`` Gaussian releases with ``schedule="full"``; 2 with
    ``"disjoint"``; the rest of the budget) and ``cold_start`` (the head and
    the intercept's mean), with the shares of ``budget_shares``, calibrated
    jointly on the exact (μ-GDP) composition; the paper's
    ``Δ_{ε,δ} = sqrt(8 log(1/δ)) / ε`` is not used.
    With ``schedule="disjoint"`` only round 1's two releases are charged:
    every user's data enter exactly one round, chosen by a keyed hash of the
    user's own id, so by parallel (adaptive) composition the loop is as
    private as one round; later rounds draw noise with the same multiplier
    from the same stream and are recorded in the ledger as parallel branches
    at no cost (``Releaser.gaussian(..., branch=t)``). This also holds when
    the replacing user has another id and lands in another round: the two
    rounds then each see one user added or removed, with sensitivities
    ``η^2`` and ``ζ η``, whose μ-GDP composition is no larger than one
    round's ``sqrt(2) η^2`` and ``2 ζ η``. The report's notes say so.

    **Personal parts** and **randomness**: as for
    :class:`PrivateFedRepRegressor` (here the final heads of Theorem 4.2 use
    ``S^1``; ``personal_rows="holdout"``, ``personal_ridge=0``,
    ``fit_intercept=False`` and numeric bounds give the paper's algorithm).
    The halves of ``S^0`` and each user's round are keyed hashes too.

    **Deviations from the paper.**

    * Per-user weighting: Jain et al. sum ``m/4`` rows per user and calibrate
      the noise to ``m``; with users holding different numbers of rows that
      sensitivity is unbounded (a user with 10 000 rows), so each user
      contributes the mean over its rows. With equal row counts this is the
      paper's statistic divided by a constant, and the solve of line 3 is
      invariant to a common scaling of ``W_priv`` and ``b_priv``.
    * Line 3 minimises ``u^T W_priv u - 2 u^T b_priv``, which is not convex
      when noise makes ``W_priv`` indefinite. Eigenvalues of ``W_priv`` are
      raised to ``psd_floor * σ sqrt(dk)`` (``σ`` the noise std; ``2 σ
      sqrt(dk)`` is about the spectral norm of the noise), a post-processing.
      The default ``psd_floor=32`` was tuned on the papers' setting (n=20 000,
      d=50, k=2, m=10; ``benchmarks/bench_representation.py``): there it
      raises every eigenvalue for ``ε <= 8``, so the step becomes
      ``U = QR(unvec(b_priv))``, and the test MSE at ε = 1, 2, 4, 8 drops from
      0.07, 0.17, 0.08, 0.02 (``psd_floor=2``, non-monotone in ε) to 0.028,
      0.007, 0.003, 0.002. The noisy Gram is the weak point of Alg. 2: its
      per-user sensitivity ``η^2`` is spread over ``dk`` directions. With
      isotropic features the Gram is close to ``(sum_i v_i v_i^T) ⊗ I``, so
      dropping it mostly loses the ``(sum v v^T)^{-1}`` column mixing, which
      the QR absorbs. For much larger ε the floor falls below the spectrum and
      the exact solve of Alg. 2 is recovered (``epsilon=np.inf``: no floor).
    * ``batch_mode="same"`` (default) uses the same ``S^0`` rows for heads and
      statistics (the authors' experiments ran full-batch epochs); as written
      (``"disjoint"``), each gets half of ``S^0``, i.e. 2-3 rows per user at
      ``m = 10``, too few for the heads. Privacy is unaffected; the utility
      analysis assumes independent halves.
    * Initialisation and iterations use ``S^0`` (half of each user's rows) and
      the final heads ``S^1`` (Theorem 4.2); a user without ``S^1`` rows uses
      its ``S^0`` row. Alg. 3's ``sym`` is ``(M + M^T)/2`` (not the
      replication of the upper triangle, which can increase the norm).
    * ``schedule="disjoint"``: Alg. 1 permutes the users and cuts them into
      ``T`` chunks of equal size; here each user's round is a keyed hash of
      its id, so the rounds hold about ``n / T`` users each (binomial sizes).
    * The cold-start head and intercept, the per-user intercepts (rows
      centred on each user's means over all its rows: a per-user function,
      bounds unchanged), the shrinkage of the personal parts and the
      ``"auto"`` bounds are not in the paper; the private quantiles and the
      cold-start part have their own phases.
    * Floating point: heads are solved on per-user rescaled rows; a head that
      still overflows (values near the float maximum) is set to zero. This
      depends on that user's rows only, so the bounds above hold, ``fit``
      succeeds and no warning is emitted for any finite input.

    **Input domain**, **per-feature scales and label range**, the cold-start
    shrinkage and the ``UselessFitWarning``: as for
    :class:`PrivateFedRepRegressor` (the same code,
    :mod:`skdpp.linear_model._algorithms.representation`).

    References
    ----------
    .. [1] Jain, P., Rush, J., Smith, A., Song, S. and Thakurta, A. G. (2021).
           Differentially Private Model Personalization. Advances in Neural
           Information Processing Systems 34 (NeurIPS 2021), 29723-29735.
    .. [2] Snedeker, C., Zhou, X. and Bassily, R. (2025). Private Model
           Personalization Revisited. ICML. arXiv:2506.19220.

    Examples
    --------
    >>> from skdpp.datasets import make_shared_representation_regression
    >>> from skdpp.linear_model import PrivAltMinRegressor
    >>> X, y, groups, truth = make_shared_representation_regression(
    ...     n_users=2000, n_features=10, n_components=2, random_state=0)
    >>> est = PrivAltMinRegressor(epsilon=4.0, random_state=0).fit(X, y, groups=groups)
    >>> est.components_.shape, est.heads_.shape
    ((10, 2), (2000, 2))
    >>> [(p.name, p.count) for p in est.privacy_report_.phases]
    [('clip', 129), ('init', 1), ('iterations', 2), ('cold_start', 2)]
    """

    _algorithm = altmin
    _parameter_constraints = {
        **_RepresentationRegressor._parameter_constraints,
        "schedule": [StrOptions({"full", "disjoint"})],
        "label_clip": _clip_constraint(),
        "psd_floor": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, *, n_components=2, init="private_spectral", max_iter=1,
                 schedule="full", fit_intercept=True, personal_rows="all",
                 personal_ridge=10.0, clip_norm="auto", label_clip="auto", psd_floor=32.0,
                 init_clip_norm="auto", head_clip_norm="auto", clip_quantile=0.5,
                 budget_shares=None, batch_mode="same", epsilon=1.0, delta=1e-6,
                 random_state=None, verbose=0):
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.schedule = schedule
        self.fit_intercept = fit_intercept
        self.personal_rows = personal_rows
        self.personal_ridge = personal_ridge
        self.clip_norm = clip_norm
        self.label_clip = label_clip
        self.psd_floor = psd_floor
        self.init_clip_norm = init_clip_norm
        self.head_clip_norm = head_clip_norm
        self.clip_quantile = clip_quantile
        self.budget_shares = budget_shares
        self.batch_mode = batch_mode
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state
        self.verbose = verbose

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

    Learns ``y ≈ b_i + <x, U v_i>`` where the embedding ``U`` (``n_features ×
    n_components``, orthonormal columns) is shared by all users and released
    under user-level (ε, δ)-differential privacy, and each user's head ``v_i``
    and intercept ``b_i`` are computed from the released values and that
    user's rows only (billboard model). Implements Algorithm 1 of Snedeker,
    Zhou & Bassily (2025) with their private initialisation (Algorithm 2); the
    defaults add per-user intercepts, personal parts on all of a user's rows
    shrunk towards a released cold-start part, and scale-free clip bounds
    chosen privately (``"auto"``), so that raw data work with only ``epsilon``
    set (see Notes).

    Parameters
    ----------
    n_components : int, default=2
        Dimension ``k`` of the shared representation; ``1 <= k <= n_features``.
    init : {"private_spectral", "private_pairwise", "random"} or array-like of \
            shape (n_features, n_components), default="private_spectral"
        Initial embedding ``U_0``. ``"private_spectral"``: Snedeker et al.'s
        Alg. 2 (clipped per-user U-statistic, Gaussian noise, top-``k``
        eigenvectors), costing the ``init`` share of the budget.
        ``"private_pairwise"``: Jain et al. (2021), Alg. 3 (uses
        ``init_clip_norm`` as the label clip ``ζ``). ``"random"``: a random
        orthonormal matrix (free). An array is a *public* warm start (free; it
        must not be computed from the private data), orthonormalised by QR.
    max_iter : int, default=5
        Number of iterations ``T`` of Alg. 1 (each one private release).
    learning_rate : float, default=1.5
        Step size ``η`` of the gradient step on ``U`` (Alg. 1, line 10),
        relative to the label scale: the step is ``η / s_y^2``.
    label_scale : float or "auto", default="auto"
        ``s_y``, the scale of the (centred) targets the step is relative to.
        ``"auto"``: the ``clip_quantile`` of the users' root mean square
        ``S^0`` targets, a private quantile (phase ``"clip"``). ``1.0`` gives
        the paper's step ``η``.
    fit_intercept : bool, default=True
        Per-user intercepts ``b_i``: every contribution is computed on the
        user's rows centred on the user's own means (the intercept profiled
        out), and unseen users get a released cold-start intercept (a private
        location, see Notes). ``False``: the paper's model ``<x, U v_i>``.
    personal_rows : {"all", "holdout"}, default="all"
        Rows of the personal parts. ``"all"``: all of a user's rows (post-
        processing of the released values and the user's own rows).
        ``"holdout"``: the paper's final heads on ``S^1`` only (Alg. 1, line 14).
    personal_ridge : float, default=10.0
        ``κ``: each user's head is shrunk towards the released cold-start head
        as if the prior contributed ``κ k`` pseudo-rows, scaled by the share of
        the user's target variance its own fit leaves unexplained (a user with
        2 noisy rows is not fitted on noise; a noise-free user is hardly
        shrunk); the user's mean level is shrunk towards the cold-start
        prediction likewise. Scale-free (pseudo-rows). ``0``: least squares.
    clip_norm : float, "auto" or None, default="auto"
        ``ψ``: each user's gradient ``∇_{i,t}`` (``d × k``) is clipped to this
        Frobenius norm. ``"auto"``: the ``clip_quantile`` of the users'
        gradient norms at ``U_0`` (a private quantile, phase ``"clip"``).
        ``None`` (no clipping) only with ``epsilon=np.inf``.
    init_clip_norm : float, "auto" or None, default="auto"
        ``ψ_init`` of Alg. 2 (Frobenius clip of each user's ``Z_i``); the label
        clip ``ζ`` when ``init="private_pairwise"``. ``"auto"``: the
        ``clip_quantile / 2`` quantile of the users' ``||Z_i||_F`` (or root
        mean square targets), phase ``"clip"``.
    head_clip_norm : float, "auto" or None, default="auto"
        Clip of each user's head in the DP mean that gives the cold-start head.
        ``"auto"``: the ``clip_quantile`` of the users' head norms.
    clip_quantile : float in (0, 1], default=0.5
        Quantile of the per-user statistic an ``"auto"`` bound is set to, and
        the radius quantile of the cold-start intercept.
    budget_shares : dict or None, default=None
        Shares of the zCDP budget by phase of the ``privacy_report_``'s plan;
        phases left out keep their defaults, ``"iterations"`` takes the rest.
        Keys: ``"clip"`` (default ``"auto"``; the ``"auto"`` bounds' private
        quantiles and the cold-start intercept's searches, unused when there
        are none; ``"auto"``: the smallest of 0.05, 0.1, 0.2, 0.3, 0.5 whose
        count noise std is at most ``n_users / 8``, a public rule of ε, δ, the
        plan and the number of users, so that a private quantile is not pure
        noise), ``"init"`` (default 0.1; private initialisations only) and
        ``"cold_start"`` (default 0.02; the cold-start head and intercept;
        ``0`` disables the release: unseen users then get the zero head and
        intercept). E.g. ``budget_shares={"init": 0.2}``.
    batch_mode : {"same", "disjoint"}, default="same"
        ``"same"``: each round fits the local head and the gradient on the same
        ``S^0`` rows (the authors' code). ``"disjoint"``: two disjoint batches
        ``B_{i,t}``, ``B'_{i,t}`` per user and round, as written in Alg. 1
        (line 5). See Notes.
    batch_size : int or None, default=None
        ``b``: rows per batch and user. ``None``: all ``S^0`` rows (``"same"``)
        or ``floor(|S^0_i| / 2)`` rows per batch (``"disjoint"``).
    epsilon : float, default=1.0
        Privacy budget ε in (0, inf]; ``np.inf`` runs the same algorithm
        without noise (the non-private baseline; clipping still applies).
    delta : float, default=1e-6
        Privacy parameter δ in [0, 1); choose δ << 1 / n_users.
    random_state : int, RandomState instance or None, default=None
        Seeds the fit's randomness: the privacy noise, the random
        initialisation and the secret key of the per-user randomness (the
        ``S^0`` / ``S^1`` split and the batches). ``None``: fresh OS entropy.
    verbose : int, default=0
        Print one line per iteration when positive (public quantities only:
        statistics of the private data, such as the share of clipped users, are
        never printed).

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_components)
        The released embedding ``U^priv`` (orthonormal columns).
    heads_ : ndarray of shape (n_users_, n_components)
        Personal heads ``v_i^priv``, aligned with ``user_ids_`` (local, not
        released).
    intercepts_ : ndarray of shape (n_users_,)
        Personal intercepts ``b_i`` (local; zeros with ``fit_intercept=False``).
    cold_start_head_ : ndarray of shape (n_components,)
        The released DP mean head used for users unseen in ``fit``.
    cold_start_intercept_ : float
        The released cold-start intercept (0 with ``fit_intercept=False``).
    clip_norm_, init_clip_norm_, head_clip_norm_, label_scale_ : float or None
        The bounds and the label scale used (released when ``"auto"``; the
        given value otherwise; None when unused).
    intercept_clip_ : float or None
        The released radius of the cold-start intercept's clipped mean (the
        prior scale of the users' levels).
    feature_scales_ : ndarray of shape (n_features_in_,) or None
        Released per-feature scales (``inf``: a dropped column); the fitted
        parts apply to ``X / feature_scales_``. None when not released.
    label_range_ : tuple of float or None
        Released range predictions are clamped to (None: not released).
    local_only_ : bool
        Whether the plan predicted a useless fit (public rule, see Notes):
        known users then get their own ridge fit towards zero weights and
        their own mean (not clamped), new users the prior 0.
    user_ids_ : ndarray of shape (n_users_,)
        Sorted user ids seen in ``fit`` (and ``personalize``).
    n_users_ : int
        Number of users in ``fit``.
    n_iter_ : int
        Number of iterations run (``max_iter``).
    privacy_report_ : PrivacyReport
        Budget plan, sensitivities, noise multipliers and the spent (ε, δ).
    n_features_in_ : int
        Number of features seen during ``fit``.

    See Also
    --------
    PrivAltMinRegressor : Jain et al. (2021), exact alternating minimisation
        with sufficient-statistics perturbation.

    Notes
    -----
    **Guarantee.** User-level (ε, δ)-DP for ``components_``,
    ``cold_start_head_``, ``cold_start_intercept_`` and the ``"auto"``
    bounds (``*_clip_norm_``, ``label_scale_``, ``intercept_clip_``) under
    *replace one user's entire data* (the number of users is public); the
    heads and intercepts are computed by each user from the released values
    and their own rows, so the whole output is jointly DP (billboard model).
    ``groups=None`` makes each row a user (row-level DP).

    **Releases and sensitivities** (replace-one-user, L2 / Frobenius):

    * ``init`` (Alg. 2, line 6): ``sum_i clip(Z_i, ψ_init)``, ``d × d``,
      sensitivity ``2 ψ_init``, symmetric Gaussian noise; ``Z_i`` is the user's
      U-statistic ``1/(m_i(m_i-1)) sum_{j≠j'} y_j y_j' x_j x_j'^T`` on its
      ``S^0`` rows (zero for a one-row user). Each user's clipping factor is
      computed from the norm of the matrix actually added to the sum when
      ``Z_i`` cancels (a small difference of huge terms: thin-QR route), and
      otherwise from an ``m_i × m_i`` Gram formula that is accurate to ~1e-12
      relative for such users (see
      :func:`~skdpp.linear_model._spectral_init.spectral_statistic`), so the
      bound holds in floating point up to rounding. With
      ``init="private_pairwise"``: the sum of per-user mean pair matrices,
      sensitivity ``2 ζ^2`` with ``ζ = init_clip_norm``.
    * ``iterations`` (Alg. 1, line 10), one per round: ``sum_i clip(∇_{i,t}, ψ)``,
      ``d × k``, sensitivity ``2 ψ``. The average over users divides by the
      public ``n``, which is post-processing. The gradient is rank one,
      ``g_i v_i^T``; its clipped value is ``min(||g_i|| ||v_i||, ψ) ĝ_i v̂_i^T``
      (one scalar factor per user, unit vectors for extreme magnitudes), so
      the bound holds in floating point for any magnitudes.
    * ``cold_start``: ``sum_i clip(v_i, C_head)``, sensitivity ``2 C_head``
      (``v_i``: the user's least-squares head on its final rows); with
      ``fit_intercept``, the clipped mean of the users' offsets
      ``ȳ_i - <p̄_i, v_cold>`` around a private median, ``sum_i clip(o_i - m,
      R)``, sensitivity ``2 R`` (:func:`~skdpp.privacy._quantile.private_location`).
    * ``clip``: each ``"auto"`` bound is a noisy binary search over a public
      log grid of 64 candidates (:func:`~skdpp.privacy._quantile.private_quantile`:
      6 Gaussian counts ``#{users : statistic <= candidate}``, sensitivity 1
      each); the per-user statistics are: ``label_scale``, the root mean square
      of the user's centred ``S^0`` targets; ``clip_norm``, the norm of the
      user's gradient at ``U_0``; ``init_clip_norm``, ``||Z_i||_F``;
      ``head_clip_norm``, the norm of the user's head. With ``fit_intercept``,
      the cold-start intercept's median and radius searches (29 counts of
      sensitivity 1) are also in this phase.

    **Budget plan.** A :class:`~skdpp.privacy.BudgetPlan` with the phases
    ``clip`` (6 releases per ``"auto"`` bound plus 29 for the cold-start
    intercept), ``init`` (private initialisations only), ``iterations`` (``T``
    Gaussian releases sharing the rest) and ``cold_start`` (the head, and the
    intercept's mean), with the shares of ``budget_shares``, calibrated
    jointly so that the exact composition (μ-GDP) of all releases meets
    (ε, δ); the ``privacy_report_`` shows each
    phase's noise multiplier and the resolved bounds in its clip column. The
    paper's closed-form ``σ̂ = C ψ sqrt(T log(1/δ)) / (n ε)`` is not used: it
    is a loose upper bound.

    **Personal parts.** After the releases, each user's head and intercept
    minimise its squared error on its rows plus ``personal_ridge`` pseudo-rows
    of the released cold-start part (a public prior); ``personalize`` and the
    end of ``fit`` use the same block functions. With the default
    ``personal_rows="all"`` the final heads use all of a user's rows, not only
    ``S^1``: they are post-processing (privacy unchanged), but the paper's
    utility analysis (Theorem 4: the final heads are independent of ``U^priv``
    given ``S^0``, because ``U^priv`` is computed on ``S^0`` only) no longer
    applies to them (measured effect on real data:
    ``benchmarks/results/real_data_linear_ablation.md``). ``personal_rows="holdout"``,
    ``personal_ridge=0``, ``fit_intercept=False`` and numeric bounds (e.g.
    ``clip_norm=1.0``, ``label_scale=1.0``) give the paper's algorithm.

    **Randomness.** The split of each user's rows into ``S^0`` / ``S^1``
    (``ceil(m_i / 2)`` rows in ``S^0``) and the batches of every round are
    keyed hashes of the fit's secret 128-bit key, the user id, the position of
    the row within the user (rows ordered by their content) and the round,
    not draws from a stream in row order: a fit is a function of the *set* of
    records (permuting the rows gives the same ``components_``, heads and
    cold-start head), and one user's split and batches do not depend on the
    other users.

    **Deviations from the paper.**

    * ``batch_mode="same"`` (default) fits the head and the gradient on the
      same ``S^0`` rows every round, as the authors' experiment code does. With
      10 rows per user (5 in ``S^0``) and ``T = 5``, Alg. 1's disjoint batches
      hold 1–2 rows, a head fitted on 2 rows in ``k = 2`` dimensions
      interpolates the noise, and the iteration does not converge. *Privacy is
      unaffected* (each round is one Gaussian release of a sum of per-user
      clipped contributions, whatever rows each user uses); the utility
      analysis (Lemma 7, Lemma 9) assumes the head and gradient batches are
      independent, which no longer holds.
    * ``batch_mode="disjoint"`` follows line 5, but rows are *resampled every
      round*: a fresh keyed random order of each user's ``S^0`` rows gives
      ``B`` (first ``b_i`` rows) and ``B'`` (next ``b_i``). The paper's
      ``b <= floor(m / 2T)`` makes all batches of all rounds disjoint, which
      needs ``|S^0_i| >= 2 T b``; with fewer rows (the paper's own setting)
      this is impossible for ``b >= 1``, so rows are reused across rounds.
      Users with fewer than 2 ``S^0`` rows contribute a zero gradient.
    * Final heads (line 14) are fitted on ``S^1``; a user whose ``S^1`` is
      empty (a one-row user) uses its ``S^0`` row.
    * Head solves add a tiny relative ridge (``1e-10 tr(A)/k``; ``1e-6 tr(A)/k``
      for users with fewer rows than ``k``, close to the minimum-norm head).
    * Alg. 2's "rank-k SVD" of the symmetric noisy statistic takes the
      eigenvectors of the ``k`` largest (algebraic) eigenvalues: the
      population statistic is positive semi-definite.
    * The cold-start head (a DP mean of clipped heads), the per-user
      intercepts, the cold-start intercept, the shrinkage of the personal parts
      and the ``"auto"`` bounds are not in the paper; the private quantiles and
      the intercept have their own phases.
    * With ``fit_intercept`` each user's rows are centred on the user's means
      over *all* its rows (``S^0`` and ``S^1``) before the ``S^0``
      computations: a per-user function of its own rows, so the bounds are
      unchanged.
    * The step is ``η / s_y^2`` (scale-free); ``label_scale=1.0`` gives the
      paper's ``η``.
    * Floating point: heads are solved on per-user rescaled rows; a head that
      still overflows, or a gradient that is not a number (values near the
      float maximum), is set to zero. This depends on that user's rows only,
      so the bounds above hold, ``fit`` succeeds and no warning is emitted
      for any finite input.

    The per-user gradient clipping is the paper's; a numeric clipping *level*
    ``ψ`` must not be chosen from the private data (tune it on public or
    synthetic data, or leave it ``"auto"``: then it is chosen privately and
    charged).
    Floating-point noise is not hardened against side-channel attacks.

    **Input domain** (README, "Privacy model"). ``X``: finite floats; ``y``:
    finite numbers; ``groups``: user ids (numbers or strings). A non-finite
    value is rejected by ``validate_data`` with a ``ValueError`` before any
    computation; every finite value is handled without a warning or an
    exception that depends on it, and predictions are finite or raise (see
    *Quiet numerics* in :class:`~skdpp.base.BasePersonalizedEstimator`).

    **Per-feature scales and label range** (all clip bounds ``"auto"``; see
    :mod:`skdpp.linear_model._auto`). Phase ``"clip"`` also releases a label
    range: low/high quantiles of the users' minimum and maximum labels (two
    noisy bisections, ``LABEL_RANGE_STEPS`` counts of L2 sensitivity 1 under
    replace-one-user: one user moves each count by at most 1), widened; every
    prediction is clamped to ``label_range_`` (post-processing). When the
    plan's count noise with them stays at most ``SCALE_GATE_NOISE * n_users``
    (a public rule: ε, δ, the plan's release counts, ``n_users``), it also
    releases one scale per feature, the ``FEATURE_SCALE_QUANTILE`` of the
    users' within-user ranges of that column (one noisy bisection per column,
    ``FEATURE_SCALE_STEPS`` counts of sensitivity 1 each); the algorithm then
    runs on ``X / feature_scales_`` (fitted parts are in those units;
    ``predict`` and ``personalize`` divide by the same public constants), and
    the personal refit's penalty gives every coordinate at least
    ``VARIANCE_FLOOR`` of variance in those units, so a column nearly constant
    within a user (a session's timestamp) cannot extrapolate on the user's
    later rows. A column whose scale falls on the lower edge of the public
    grid (constant within most users) is dropped (scale ``inf``); an
    ``"auto"`` bound on the lower edge of its grid is treated as no
    information (post-processing; said in the report). The released
    cold-start head is shrunk towards 0 by the positive-part factor
    ``max(0, 1 - k sigma^2 / ||v||^2)``, ``sigma`` its public noise std per
    coordinate (post-processing): a head dominated by its noise leaves the
    cold start to the released intercept. A
    :class:`~skdpp.exceptions.UselessFitWarning`, computed from public values
    only, says when the plan predicts a useless fit (count noise of phase
    ``"clip"`` above ``USELESS_CLIP_NOISE * n_users``); such a fit gives every
    known user its own ridge fit, shrunk towards zero weights and its own mean
    (local data, ``local_only_``), rather than towards a noisy shared part.

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
    [('clip', 129), ('init', 1), ('iterations', 5), ('cold_start', 2)]
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

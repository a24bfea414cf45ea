"""Personalized-private SGD (PPSGD) for additive personalization.

The model of Bietti, Wei, Dudík, Langford and Wu (2022) predicts the target of
a row ``x`` of user ``i`` as ``<x, w + theta_i>`` (plus ``b + b_i`` with
intercepts): a global weight vector ``w`` shared by all users and released
under user-level differential privacy, and a personal offset ``theta_i`` that
never leaves user ``i``. Each round, every participating user takes a local
SGD step on ``theta_i`` and sends its clipped gradient with respect to ``w`` to
the server, which adds Gaussian noise to the sum and steps ``w``. The ratio
``alpha`` of the global to the local step size moves the model from local-only
learning (``alpha=0``: perfectly private) to global-only DP-SGD
(``alpha=np.inf``).

This module holds the estimator :class:`PPSGDRegressor` (parameters, budget
plan, predictions); the algorithm (Algorithms 1-3 of the paper as block
functions and a driver) is in :mod:`skdpp.linear_model._personalized_sgd`.
"""

# Authors: skdpp developers
# License: BSD 3 clause

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import (BasePersonalizedEstimator, FitResult, PersonalizedRegressorMixin,
                    linear_predictions)
from ..exceptions import UselessFitWarning
from ..privacy import BudgetPlan
from ..privacy._quantile import LOCATION_SEARCH_STEPS, private_location
from ..utils._executor import LocalExecutor
from ..utils._random import FitRandomness
from . import _auto
from ._auto import (AUTO_STEPS, CLIP_PHASE, FEATURE_SCALE_STEPS, LABEL_RANGE_STEPS,
                    VARIANCE_FLOOR, at_grid_edge, auto_bound, clamp_predictions,
                    feature_scales, gradient_bound_inconsistent, inverse_scales,
                    label_range, resolve_clip_share,
                    scaling_notes, standardize, standardize_block, useless_fit_message)
from ._personalized_sgd import (
    PHASE,
    PersonalPrior,
    SGDConfig,
    feature_scale_statistic,
    gradient_norm_statistic,
    make_sgd_blocks,
    offset_values,
    personal_refit,
    personal_sgd,
    run_ppsgd,
)
from ._scratch import release_scratch

__all__ = ["PPSGDRegressor"]


class PPSGDRegressor(PersonalizedRegressorMixin, BasePersonalizedEstimator):
    """Personalized-private SGD for the additive model ``y ≈ b + b_i + <x, w + theta_i>``.

    A global weight vector ``w`` is learned with user-level differentially
    private SGD (per-user clipped gradients, Gaussian noise on their sum) while
    every user learns a personal offset ``theta_i`` from its own rows only
    (Bietti et al. 2022, Algorithms 1-3). ``alpha``, the ratio of the global to
    the local step size, sets the level of personalization: ``alpha=0`` is
    local-only learning (``w`` stays 0, nothing is released, no privacy is
    spent) and ``alpha=np.inf`` is global-only DP-SGD (``theta_i`` stays 0).
    The defaults add per-user intercepts with a DP cold-start intercept ``b``,
    personal parts refitted on all of a user's rows and shrunk towards the
    released model, and scale-free bounds chosen privately (``"auto"``), so
    that raw data work with only ``epsilon`` set (see Notes).

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget ε in (0, inf]; ``np.inf`` runs the same algorithm
        without noise (clipping still applied when ``clip_norm`` is given).
        Ignored when ``noise_multiplier`` is given.
    delta : float, default=1e-6
        Privacy parameter δ in [0, 1); use ``delta`` much smaller than
        ``1 / n_users``.
    clip_norm : float, "auto" or None, default="auto"
        Bound ``C`` on the L2 norm of each user's gradient contribution per
        round (one clip per user and round, not per row). ``"auto"``: the
        ``clip_quantile`` of the users' gradient norms at ``w = 0`` (all their
        rows), a private quantile (phase ``"clip"``). ``None`` (no clipping)
        only with ``epsilon=np.inf``.
    feature_scale : float or "auto", default="auto"
        ``s``: the step sizes are relative to it (global step
        ``learning_rate / s^2``), so they do not depend on the features'
        units. ``"auto"``: the ``clip_quantile`` of the users' root mean
        squared (centred) row norms (phase ``"clip"``), and each user's local
        step is relative to the user's own root mean squared row norm (a
        function of its own rows). ``1.0`` gives the paper's steps.
    alpha : float, default=1.0
        Global/local step-size ratio in [0, inf] (the paper's ``αQ``, see
        Notes). The global step is ``learning_rate * min(1, alpha)`` and the
        local step ``learning_rate * min(1, 1 / alpha)``: ``alpha=0`` is
        local-only learning, ``alpha=np.inf`` global-only DP-SGD with global
        step ``learning_rate``.
    learning_rate : float, default=0.1
        The larger of the two step sizes (``η`` of the paper's experiments).
    n_rounds : int, default=200
        Number of communication rounds ``T`` (each one a DP release of the
        gradient sum unless ``alpha=0``).
    batch_size : int or None, default=10
        Per-user minibatch size ``m``; a user with fewer rows uses all of them
        (``m_i = min(batch_size, n_i)``). ``None`` uses all of each user's rows
        every round (requires ``weighting="user"``).
    sample_rate : float, default=1.0
        Poisson probability ``q`` in (0, 1] that a user participates in a
        round (``1.0``: every user every round, Alg. 1; ``< 1``: client
        sampling, Alg. 2/3, with privacy amplification).
    weighting : {"user", "sample"}, default="user"
        Objective optimised (paper §5). ``"user"``: the average of the users'
        risks, each user's gradient is its minibatch mean (Alg. 3).
        ``"sample"``: the risk weighted by minibatch size, each user's
        gradient is its minibatch sum divided by ``batch_size`` (Alg. 2); a
        user with fewer than ``batch_size`` rows then weighs less.
    average : bool, default=False
        Return the average of the iterates of rounds ``1..T`` (for ``w`` and
        every ``theta_i``) instead of the last iterate (the paper's theorems
        bound the averaged iterate).
    fit_intercept : bool, default=True
        Per-user intercepts: every gradient is computed on the user's rows
        centred on the user's own means (the intercept profiled out), and the
        cold-start intercept ``b`` is a private location of the users' offsets
        ``ȳ_i - <x̄_i, w>`` (phases ``"clip"`` and ``"cold_start"``).
        ``False``: no intercept (the paper's model).
    personal_ridge : float or None, default=10.0
        ``κ``: after the rounds, each user's ``theta_i`` and intercept are
        refitted exactly on all its rows, shrunk towards the released model as
        if it contributed ``κ d`` pseudo-rows scaled by the share of the
        user's target variance its own fit leaves unexplained (scale-free).
        ``None``: the paper's personal parts, the SGD offsets ``theta_i``.
    clip_quantile : float in (0, 1], default=0.5
        Quantile of the per-user statistic an ``"auto"`` bound is set to, and
        the radius quantile of the cold-start intercept.
    clip_share : float in (0, 1) or "auto", default="auto"
        Fraction of the budget for phase ``"clip"`` (the ``"auto"`` bounds'
        private quantiles and the cold-start intercept's searches; unused when
        there are none). ``"auto"``: the smallest of 0.05, 0.1, 0.2, 0.3, 0.5
        whose count noise std is at most ``n_users / 8`` (a public rule of ε,
        δ, the plan and the number of users: 0.05 for 20 000 users at ε = 1,
        0.5 for 300 users), so that a private quantile is not pure noise.
    cold_start_share : float in [0, 1), default=0.02
        Fraction of the budget for the cold-start intercept's clipped mean
        (``0``: no intercept release, ``intercept_ = 0``).
    noise_multiplier : float or None, default=None
        If given, overrides the calibration from ``epsilon``: each round adds
        Gaussian noise of standard deviation ``noise_multiplier * 2 *
        clip_norm`` to the gradient sum, and ``privacy_report_`` states the
        resulting ε at ``delta`` (``0`` gives ε = inf). For experiments that,
        like the paper, are parameterised by the noise level.
    verbose : int, default=0
        Print progress every tenth of the rounds when > 0: the round number
        only (nothing computed from the data: no norms, timings or numbers
        of participants, which client sampling keeps secret).
    random_state : int, RandomState instance or None, default=None
        Seeds the privacy noise and the 128-bit key of the client sampling and
        of the minibatch orders. ``None``: fresh entropy from the operating
        system.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Global weights ``w`` (released under DP).
    intercept_ : float
        Released cold-start intercept ``b`` (0.0 when ``fit_intercept=False``).
    offsets_ : ndarray of shape (n_users, n_features)
        Personal offsets ``theta_i`` (local), aligned with ``user_ids_``.
    intercept_offsets_ : ndarray of shape (n_users,)
        Personal intercepts ``b_i`` (local; zeros when ``fit_intercept=False``).
    clip_norm_ : float or None
        The clip norm used (released when ``"auto"``).
    feature_scale_ : float or None
        The feature scale used (released when ``"auto"``).
    intercept_clip_ : float or None
        Released radius of the cold-start intercept's clipped mean.
    feature_scales_ : ndarray of shape (n_features_in_,) or None
        Released per-feature scales (``inf``: a dropped column); the fitted
        parts apply to ``X / feature_scales_``. None when not released.
    label_range_ : tuple of float or None
        Released range predictions are clamped to (None: not released).
    local_only_ : bool
        Whether the plan predicted a useless fit (public rule, see Notes):
        known users then get their own ridge fit towards zero weights and
        their own mean (not clamped), cold-start rows the clamped cold-start
        part.
    user_ids_ : ndarray of shape (n_users,)
        Sorted ids of the users seen in ``fit`` or ``personalize``.
    n_users_ : int
        Number of users seen in ``fit``.
    n_iter_ : int
        Number of rounds run.
    noise_multiplier_ : float
        Noise multiplier used (std / (2 * clip_norm)); 0.0 without noise.
    privacy_report_ : PrivacyReport
        The privacy guarantee: ε, δ, the per-round Gaussian releases (count,
        sampling rate, noise multiplier, sensitivity, clip norm).
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during ``fit`` (only when ``X`` has string
        column names).

    See Also
    --------
    sklearn.linear_model.SGDRegressor : Non-private, non-personalized SGD.

    Notes
    -----
    **Algorithm.** Each round ``t = 1..T`` (Alg. 1/2/3): every user joins with
    probability ``q``; a participant ``i`` draws a minibatch of ``m_i`` rows,
    computes its squared-loss gradient ``g_i`` at ``(w, theta_i)`` (minibatch
    mean for ``weighting="user"``; minibatch sum divided by ``batch_size`` for
    ``"sample"``), steps ``theta_i -= η_loc g_i``, and sends ``g_i`` clipped
    to norm ``C``; the server releases ``s_t = Σ_i clip(g_i) + N(0, σ² I)``
    and steps ``w -= η_glob s_t / (q N)``. With ``η_glob = η min(1, alpha)``
    and ``η_loc = η min(1, 1/alpha)``. Users' minibatches come from an
    endless stream of random permutations of their rows (a fresh permutation
    per pass), so ``T m_i > n_i`` makes several passes over the user's rows.

    **Step sizes.** Alg. 1 steps ``theta_i`` by ``η/N`` times the user's
    gradient and ``w`` by ``αη`` times the average gradient; the ratio of the
    effective step sizes is ``αN`` (``αqN = αQ`` with client sampling), the
    quantity ``αQ`` the paper's experiments vary. ``alpha`` here is that
    ratio, and ``learning_rate`` the larger of the two effective steps (the
    convention of the authors' code), so both limits are exact and finite:
    ``alpha=0`` never touches ``w``; ``alpha=np.inf`` never touches
    ``theta_i`` and steps ``w`` by ``learning_rate``.

    **Privacy guarantee.** (ε, δ) user-level joint DP (billboard model):
    the sequence of global iterates is (ε, δ)-DP and each ``theta_i`` is a
    function of it and of user ``i``'s rows only. Neighbouring data sets
    replace one user's rows; the number of users is public. Each round
    releases one Gaussian sum of per-user contributions clipped to ``C``:
    L2 sensitivity ``2C``, noise std ``σ = z · 2C`` (z =
    ``noise_multiplier_``). Every other input of the global step is public:
    ``N``, ``q``, ``batch_size`` and the step sizes; the normaliser ``q N``
    (not the realised number of participants or of rows) keeps the release
    a post-processing of the noisy sum. Data-dependent quantities (``m_i``,
    ``n_i``, a diverged local model, whose contribution is set to 0) only
    change the user's own contribution, which is clipped.

    **Accounting and budget plan.** Phase ``"clip"`` (share ``clip_share``):
    6 Gaussian counts of users (sensitivity 1 each; a noisy binary search,
    :func:`~skdpp.privacy._quantile.private_quantile`) per ``"auto"`` bound,
    and with ``fit_intercept`` the 29 counts of the cold-start intercept's
    median and radius searches; phase ``"iterations"``: ``T`` Gaussian
    releases, all with the same noise multiplier; phase ``"cold_start"``
    (share ``cold_start_share``, with ``fit_intercept``): the clipped mean of
    the users' offsets around the private median, sensitivity ``2 R``
    (:func:`~skdpp.privacy._quantile.private_location`). The phases are
    calibrated together so that their composition meets (ε, δ) exactly. With ``sample_rate=1`` the
    composition is exactly μ-GDP with ``μ = sqrt(T) / z`` (analytic Gaussian
    conversion, accountant method ``"exact-gdp"``). With ``sample_rate < 1``
    each round is the event ``PoissonSampledEvent(q, GaussianEvent(z))``. The
    sampled-Gaussian RDP bound of Mironov, Talwar & Zhang (2019) is an
    add/remove analysis, and it does not cover replace-one by itself; the
    accountant (method ``"rdp-zero-out"``) therefore charges it through a
    *zero-out* neighbour: ``D`` and ``D'`` (user ``i`` replaced) are both
    neighbours of ``D0``, in which user ``i`` contributes zero to every
    sampled sum. Against ``D0`` the sum has sensitivity ``C``, so each round
    is the add/remove sampled Gaussian with noise multiplier ``2z``; the ``T``
    rounds compose in RDP to ``(ε0, δ0)`` against ``D0``, hence ``(2 ε0,
    (1 + e^ε0) δ0)`` under replace-one (group privacy of size 2). This is the
    conservative route: it is sound whatever the data of user ``i`` and of
    its replacement, and it never credits more amplification than the
    add/remove analysis. Users are sampled independently of the data, with
    the public rate ``q``. A given ``noise_multiplier`` fixes the phase's
    multiplier instead of calibrating it (every phase, also ``"clip"`` and
    ``"cold_start"``); the report then states the ε spent at ``delta``.

    **Randomness.** Whether user ``i`` takes part in round ``t`` is a keyed
    hash of ``(fit key, i, t)``
    (:func:`skdpp.privacy.mechanisms.poisson_sample`); the permutation of the
    ``p``-th pass over user ``i``'s rows sorts them by a keyed hash of ``(fit
    key, i, p, canonical rank of the row)``, where the canonical order of a
    user's rows is by content. A user's participation and minibatches are
    therefore functions of the secret key and of its own rows only:
    replacing another user, or permuting the rows, changes neither, and a fit
    is a function of the *set* of records (bit for bit). The sampling is
    secret: it is never printed or stored.

    ``alpha=0``: ``w`` is never updated; nothing is released and no privacy is
    spent (``privacy_report_`` says so, ε spent = 0). ``epsilon=np.inf``:
    noise multiplier 0 and the report says the releases are non-private.

    **Deviations from the paper.** (i) ``alpha`` is the paper's ``αQ`` and
    the step sizes follow the authors' code (see *Step sizes*), which makes
    ``alpha=np.inf`` well defined. (ii) ``weighting="sample"`` clips the
    minibatch sum divided by the public ``batch_size`` (Alg. 2 with clipping
    parameter ``batch_size * C``), and normalises by ``q N batch_size``
    instead of ``q M`` with ``M = Σ m_i``, because ``M`` depends on the
    users' row counts and is not public; the two coincide when every user has
    at least ``batch_size`` rows. (iii) Users are Poisson-sampled (Alg. 2),
    not a fixed number ``Q`` without replacement as in §6. (iv) The averaged
    iterate is the mean of rounds ``1..T`` (the paper averages ``0..T-1``).
    (v) The noise is calibrated with a tight accountant instead of
    Theorem 4.1/5.1's constants. (vi) The client sampling and the minibatches
    are keyed hashes (see *Randomness*), not draws from a shared stream. (vii)
    A user whose gradient is not finite (its local model diverged, or its
    values overflow) contributes 0 that round, a point of the clipping ball,
    and keeps its ``theta_i``; so does a user whose local step would
    overflow. Neither the fit nor the shape of a release depends on it.
    (viii) Not in the paper: the per-user intercepts (gradients on rows
    centred on each user's means: a per-user function of its own rows, so the
    sensitivity is unchanged), the cold-start intercept, the ``"auto"`` bounds
    and steps relative to the released feature scale, and the shrunk refit of
    the personal parts on all rows (``personal_ridge``). The refit is
    post-processing of the released ``w`` and the user's rows; the paper's
    utility analysis covers the SGD offsets (``personal_ridge=None``), not
    the refit (measured effect on real data:
    ``benchmarks/results/real_data_linear_ablation.md``). There is no
    held-out split, so ``personal_rows`` does not apply. ``clip_norm=1.0,
    feature_scale=1.0, fit_intercept=False, personal_ridge=None`` give the
    paper's algorithm.

    **Cold start and personalize.** A user unseen in ``fit`` is predicted
    with ``<x, w> + b``. :meth:`personalize` fits ``theta_i`` (and ``b_i``)
    for the given users with the same block functions as the end of ``fit``:
    the shrunk refit (``personal_ridge``), or, with ``personal_ridge=None``,
    the same local SGD as in ``fit`` with ``w`` fixed:
    ``max(1, round(q T))`` local steps (a user's expected number of
    participations) from ``theta_i = 0`` with step ``η_loc``, the same
    minibatch sampling (keyed by ``random_state``), ``weighting`` and
    averaging: the same block functions as ``fit`` with a global step of 0.
    It uses only the released ``w`` and the users' own rows, so
    ``privacy_report_`` is unchanged. With ``alpha=np.inf`` the offsets stay
    0.

    Floating-point noise is not hardened against floating-point side channels.

    **Input domain** (README, "Privacy model"). ``X``: finite floats; ``y``:
    finite numbers; ``groups``: user ids (numbers or strings). A non-finite
    value is rejected by ``validate_data`` with a ``ValueError`` before any
    computation: a documented rule, not a numeric accident. Every finite
    value is accepted, however large or small, and handled without a warning
    or an exception that depends on it, whatever the caller's
    ``np.errstate`` or warnings filters (every entry point runs under
    :func:`skdpp.base.quiet_numerics`). ``predict`` and ``score`` on finite
    ``X`` give finite values (an intermediate that overflows is re-evaluated
    on the row divided by its largest entry) or ``predict`` raises a
    ``ValueError`` naming the rows whose prediction exceeds the float64 range.

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
    information (post-processing; said in the report), and so is a released
    ``clip_norm`` larger than any user's gradient at ``w = 0`` can be
    (``GRADIENT_BOUND_SLACK`` times ``feature_scale_`` times the width of
    ``label_range_``: the noisy search went astray): ``coef_`` is then 0 and
    the cold start is the released intercept. A
    :class:`~skdpp.exceptions.UselessFitWarning` computed from public values only says when the plan predicts a useless
    fit (count noise of phase ``"clip"`` above ``USELESS_CLIP_NOISE *
    n_users``); such a fit gives every known user its own ridge fit, shrunk towards
    zero weights and its own mean (local data, ``local_only_``), rather than
    towards a noisy shared part.

    References
    ----------
    .. [1] Bietti, A., Wei, C.-Y., Dudík, M., Langford, J. and Wu, Z. S.
           (2022). Personalization Improves Privacy-Accuracy Tradeoffs in
           Federated Learning. ICML 2022. arXiv:2202.05318.
    .. [2] Mironov, I., Talwar, K. and Zhang, L. (2019). Rényi Differential
           Privacy of the Sampled Gaussian Mechanism. arXiv:1908.10530.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp import PPSGDRegressor
    >>> rng = np.random.default_rng(0)
    >>> n_users, n_rows, d = 500, 20, 5
    >>> groups = np.repeat(np.arange(n_users), n_rows)
    >>> X = rng.normal(size=(n_users * n_rows, d))
    >>> w_true = np.array([1.0, -2.0, 0.5, 0.0, 0.0])
    >>> theta_true = np.zeros((n_users, d))
    >>> theta_true[:, -1] = rng.normal(size=n_users)
    >>> y = np.einsum("ij,ij->i", X, w_true + theta_true[groups])
    >>> est = PPSGDRegressor(epsilon=2.0, delta=1e-5, alpha=1.0, n_rounds=100,
    ...                      random_state=0).fit(X, y, groups=groups)
    >>> round(est.score(X, y, groups=groups), 2) > 0.9
    True
    >>> [(p.name, p.count) for p in est.privacy_report_.phases]
    [('clip', 87), ('iterations', 100), ('cold_start', 1)]
    """

    _parameter_constraints: dict = {
        **BasePersonalizedEstimator._parameter_constraints,
        "clip_norm": [Interval(Real, 0, None, closed="neither"), None, StrOptions({"auto"})],
        "feature_scale": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "alpha": [Interval(Real, 0, np.inf, closed="both")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "n_rounds": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "sample_rate": [Interval(Real, 0, 1, closed="right")],
        "weighting": [StrOptions({"user", "sample"})],
        "average": ["boolean"],
        "fit_intercept": ["boolean"],
        "personal_ridge": [Interval(Real, 0, None, closed="left"), None],
        "clip_quantile": [Interval(Real, 0, 1, closed="right")],
        "clip_share": [Interval(Real, 0, 1, closed="neither"), StrOptions({"auto"})],
        "cold_start_share": [Interval(Real, 0, 1, closed="left")],
        "noise_multiplier": [Interval(Real, 0, None, closed="left"), None],
        "verbose": ["verbose"],
    }
    _personal_attributes = ("offsets_", "intercept_offsets_")

    def __init__(
        self,
        *,
        epsilon=1.0,
        delta=1e-6,
        clip_norm="auto",
        feature_scale="auto",
        alpha=1.0,
        learning_rate=0.1,
        n_rounds=200,
        batch_size=10,
        sample_rate=1.0,
        weighting="user",
        average=False,
        fit_intercept=True,
        personal_ridge=10.0,
        clip_quantile=0.5,
        clip_share="auto",
        cold_start_share=0.02,
        noise_multiplier=None,
        verbose=0,
        random_state=None,
    ):
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.feature_scale = feature_scale
        self.alpha = alpha
        self.learning_rate = learning_rate
        self.n_rounds = n_rounds
        self.batch_size = batch_size
        self.sample_rate = sample_rate
        self.weighting = weighting
        self.average = average
        self.fit_intercept = fit_intercept
        self.personal_ridge = personal_ridge
        self.clip_quantile = clip_quantile
        self.clip_share = clip_share
        self.cold_start_share = cold_start_share
        self.noise_multiplier = noise_multiplier
        self.verbose = verbose
        self.random_state = random_state

    # ------------------------------------------------------------ validation
    def _step_sizes(self):
        """(global, local) step sizes from ``learning_rate`` and ``alpha``."""
        alpha = float(self.alpha)
        lr = float(self.learning_rate)
        lr_global = lr * min(1.0, alpha)
        lr_local = 0.0 if alpha == np.inf else lr * min(1.0, 1.0 / alpha) if alpha > 0 else lr
        return lr_global, lr_local

    def _check_params(self):
        for name in ("alpha", "learning_rate", "sample_rate", "noise_multiplier"):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)):
                raise ValueError(
                    f"The '{name}' parameter must be a number, got the boolean {value!r}.")
        if not np.isfinite(self.learning_rate):
            raise ValueError(
                f"learning_rate must be a finite positive float, got {self.learning_rate!r}. "
                "Pass e.g. learning_rate=0.1.")
        if self.weighting == "sample" and self.batch_size is None:
            raise ValueError(
                "weighting='sample' needs an integer batch_size: the minibatch sums are "
                "normalised by the public batch_size (the total number of rows is not "
                "public); got batch_size=None. Pass batch_size=10, or weighting='user'.")
        if self.noise_multiplier is not None and self.noise_multiplier > 0 \
                and self.clip_norm is None:
            raise ValueError(
                f"noise_multiplier={self.noise_multiplier!r} needs a clip_norm (the noise "
                "std is noise_multiplier * 2 * clip_norm); got clip_norm=None. Pass a "
                "positive clip_norm.")

    def _validate_data_kwargs(self):
        # Integer X is converted (so that it hashes and fits like the equal
        # floats); float32 is kept (no copy).
        return {"y_numeric": True, "dtype": [np.float64, np.float32]}

    def _validate_fit_data(self, X, y, groups):
        data = super()._validate_fit_data(X, y, groups)
        self._check_params()
        data.y = np.asarray(data.y, dtype=np.float64)
        return data

    # ------------------------------------------------------ plan and core
    def _releases(self):
        """Whether the fit releases anything (``alpha > 0``)."""
        return self._step_sizes()[0] > 0

    def _auto_names(self):
        if not self._releases():
            return []
        return [name for name in ("clip_norm", "feature_scale")
                if getattr(self, name) == "auto"]

    def _cold_start(self):
        return bool(self.fit_intercept) and self._releases() and self.cold_start_share > 0

    def _releases_label_range(self):
        """A label range (predictions clamped to it): when both bounds are ``"auto"``
        and the fit releases (a public rule)."""
        return bool(_auto.SCALE_FEATURES) and self._releases() and \
            self.noise_multiplier is None and self.clip_norm == "auto" and \
            self.feature_scale == "auto"

    def _scales_features(self):
        """Per-feature scales: with a label range, when the public gate of
        ``_budget_plan`` is open."""
        return self._releases_label_range() and getattr(self, "_scaling_gate", True)

    def _budget_plan(self, meta):
        """Phases ``clip`` (``clip_share``: the ``"auto"`` bounds and the searches of
        the cold-start intercept), ``iterations`` (``n_rounds`` Gaussian releases,
        the rest) and ``cold_start`` (``cold_start_share``: the intercept); nothing
        if alpha=0."""
        plan = BudgetPlan(self.epsilon, self.delta)
        if not self._releases():  # alpha = 0: nothing is released
            return plan
        self._scaling_gate = True
        n_base = AUTO_STEPS * len(self._auto_names()) \
            + (LOCATION_SEARCH_STEPS if self._cold_start() else 0)
        if self._releases_label_range():
            n_base += LABEL_RANGE_STEPS
        n_scaling = FEATURE_SCALE_STEPS * int(meta["n_features"])
        n_clip = n_base + (n_scaling if self._scales_features() else 0)
        kwargs = dict(count=int(self.n_rounds), sampling_rate=float(self.sample_rate))
        if self.noise_multiplier is not None:  # every release at the given multiplier
            z = float(self.noise_multiplier)
            if n_clip:
                plan.fix(CLIP_PHASE, noise_multiplier=z, count=n_clip)
            plan.fix(PHASE, noise_multiplier=z, **kwargs)
            if self._cold_start():
                plan.fix("cold_start", noise_multiplier=z)
            return plan

        def build(share):
            plan = BudgetPlan(self.epsilon, self.delta)
            if n_clip:
                plan.add(CLIP_PHASE, share=share, count=n_clip, param="clip_share")
            plan.add_rest(PHASE, **kwargs)
            if self._cold_start():
                plan.add("cold_start", share=self.cold_start_share, param="cold_start_share")
            return plan

        if not n_clip:
            return build(0.05)
        plan = build(resolve_clip_share(self.clip_share, build, meta["n_users"]))
        if self._scales_features() and \
                plan.calibrate()[CLIP_PHASE] > _auto.SCALE_GATE_NOISE * max(meta["n_users"], 1):
            # public rule: too noisy for the per-feature searches, run without them
            self._scaling_gate = False
            n_clip = n_base
            plan = build(resolve_clip_share(self.clip_share, build, meta["n_users"]))
        return plan

    def _make_blocks(self, data, randomness):
        return make_sgd_blocks(data.X, data.y, data.index, batch_size=self.batch_size,
                               sample_rate=self.sample_rate)

    def _config(self, key, n_features, *, sample_rate, n_rounds, release, lr_local=None,
                clip_norm=None):
        if lr_local is None:
            lr_local = self._step_sizes()[1]
        return SGDConfig(
            key=key, n_features=int(n_features), fit_intercept=False,
            batch_size=self.batch_size, sample_rate=float(sample_rate),
            weighting=self.weighting, lr_local=lr_local, clip_norm=clip_norm,
            release=release, average=bool(self.average), n_rounds=int(n_rounds),
            center=bool(self.fit_intercept), local_scale=self.feature_scale == "auto")

    def _fit_core(self, executor, release, randomness, meta):
        try:
            return self._run(executor, release, randomness, meta)
        finally:
            release_scratch()  # this thread's per-round buffers (see _scratch.py)

    def _run(self, executor, release, randomness, meta):
        lr_global, lr_local = self._step_sizes()
        n_users, d = meta["n_users"], meta["n_features"]
        releases = lr_global > 0
        config = self._config(randomness.key, d, sample_rate=self.sample_rate,
                              n_rounds=self.n_rounds, release=releases)
        clip_norm, scale = self.clip_norm, self.feature_scale
        scaled = self._scales_features()
        scales, dropped, labels, message = None, 0, None, None
        if CLIP_PHASE in release.plan:
            message = useless_fit_message(release.noise_multiplier(CLIP_PHASE), n_users,
                                          type(self).__name__)
            if message is not None:
                warnings.warn(message, UselessFitWarning, stacklevel=5)
        labelled = self._releases_label_range()
        local_only = labelled and message is not None and bool(self.fit_intercept)
        if labelled:
            labels = label_range(executor, release, n_users=n_users)
        if scaled:
            scales, dropped = feature_scales(executor, release, n_features=d,
                                             n_users=n_users)
            executor.map(standardize_block, inverse_scales(scales))
        if releases and clip_norm == "auto":
            clip_norm = auto_bound(executor, release, gradient_norm_statistic, config,
                                   quantile=float(self.clip_quantile), n_users=n_users)
        if releases and scale == "auto":
            scale = auto_bound(executor, release, feature_scale_statistic, config,
                               quantile=float(self.clip_quantile), n_users=n_users)
        inv_s2 = 1.0 / float(scale) ** 2 if isinstance(scale, Real) else 1.0
        if not isinstance(clip_norm, Real):
            clip_norm = None
        if self.feature_scale != "auto":
            lr_local = lr_local * inv_s2  # (per-user scales otherwise, see Notes)
        config = self._config(randomness.key, d, sample_rate=self.sample_rate,
                              n_rounds=self.n_rounds, release=releases, lr_local=lr_local,
                              clip_norm=clip_norm)
        w, _ = run_ppsgd(executor, release, config, n_users=n_users,
                         lr_global=lr_global * inv_s2, verbose=self.verbose, offsets=False)
        astray = releases and self.fit_intercept and gradient_bound_inconsistent(
            clip_norm, scale, labels, centred=True)
        if releases and (at_grid_edge(clip_norm) or at_grid_edge(scale) or astray):
            # an "auto" bound on the lower edge of its public grid: the users'
            # (centred) contributions are about 0 -- no information; the global
            # weights are noise and are discarded (post-processing)
            w = np.zeros_like(w)
        intercept, intercept_scale = 0.0, None
        if self._cold_start():
            def reduce(fn):
                return executor.map(offset_values, (w, fn))

            intercept, intercept_scale = private_location(
                release, reduce, n_users=n_users, search_phase=CLIP_PHASE,
                mean_phase="cold_start", radius_quantile=float(self.clip_quantile))
        prior = PersonalPrior(w, float(intercept), intercept_scale,
                              float(self.personal_ridge or 0.0), config,
                              VARIANCE_FLOOR if scaled else 0.0, local_only)
        theta, b = self._personal(executor, prior, int(self.n_rounds))
        z = float(release.noise_multiplier(PHASE)) if PHASE in release.plan else 0.0
        attributes = {"coef_": w[:d].copy(), "intercept_": float(intercept),
                      "offsets_": theta, "intercept_offsets_": b - float(intercept),
                      "n_iter_": int(self.n_rounds), "noise_multiplier_": z,
                      "clip_norm_": None if clip_norm is None else float(clip_norm),
                      "feature_scale_": float(scale) if isinstance(scale, Real) else None,
                      "intercept_clip_": intercept_scale,
                      "feature_scales_": scales,
                      "label_range_": labels,
                      "local_only_": bool(local_only)}
        if float(self.alpha) == np.inf:  # global only: no personal parts
            attributes["offsets_"] = np.zeros_like(theta)
            attributes["intercept_offsets_"] = np.zeros(theta.shape[0])
        released = ()
        if releases:
            released = ("coef_",) + (("intercept_",) if self._cold_start() else ()) + tuple(
                f"{name}_" for name in self._auto_names())
            if self._cold_start():
                released += ("intercept_clip_",)
        notes = self._notes(z)
        if labelled:
            released += ("feature_scales_",) * scaled + ("label_range_",)
            notes += scaling_notes(scaled, dropped, labels,
                                   {"clip_norm": clip_norm, "feature_scale": scale}, message)
            if astray:
                notes += (
                    "The released clip_norm exceeds what any user's gradient at w = 0 can "
                    "be (feature_scale_ x the width of label_range_, with slack): its noisy "
                    "search went astray, so coef_ is set to 0 and the cold start is the "
                    "released intercept (post-processing, no privacy cost).",)
        return FitResult(attributes, released=released,
                         local=("offsets_", "intercept_offsets_"), notes=notes)

    def _personal(self, executor, prior, n_rounds):
        """The users' ``theta_i`` and intercepts ``b_i``: the exact shrunk refit
        (``personal_ridge``), or the SGD offsets (``personal_ridge=None``, or
        nothing released)."""
        if prior.local_only or (self.personal_ridge is not None and self._releases()):
            return executor.collect(personal_refit, prior)
        return executor.collect(personal_sgd, (prior.w, n_rounds, prior.config))

    def _notes(self, z):
        if float(self.alpha) == 0:
            return ("alpha=0: local-only learning; the global weights are never "
                    "updated, nothing is released and no privacy is spent.",)
        notes = [
            f"{self.n_rounds} rounds, each releasing the Gaussian sum of per-user "
            f"gradients clipped to clip_norm (L2 sensitivity 2*clip_norm under "
            f"replace-one-user), sample_rate q={self.sample_rate}, noise multiplier "
            f"{z:.6g} (noise std = multiplier * 2 * clip_norm); the global step "
            "divides the release by the public q * n_users."]
        if self._auto_names():
            notes.append(
                f"{', '.join(self._auto_names())}='auto': the {self.clip_quantile:g}-"
                f"quantile of a per-user statistic, released by a noisy bisection over a "
                f"public log grid ({AUTO_STEPS} Gaussian counts of sensitivity 1, phase "
                f"'clip').")
        if self._cold_start():
            notes.append(
                "fit_intercept=True: gradients are computed on each user's rows centred "
                "on the user's own means; the cold-start intercept is a private location "
                "of the users' offsets (median searches in phase 'clip', a clipped mean "
                "of sensitivity 2*radius in phase 'cold_start').")
        if self.sample_rate < 1:
            notes.append(
                "Client sampling: each round is charged as a Poisson-subsampled "
                "Gaussian through a zero-out neighbour (sensitivity clip_norm, noise "
                "multiplier 2z, add/remove RDP) and group privacy of size 2 for "
                "replace-one-user. The sample is a keyed hash, never published.")
        if float(self.alpha) == np.inf:
            notes.append("alpha=inf: global-only DP-SGD; personal offsets stay 0.")
        return tuple(notes)

    # ----------------------------------------------------------- personal
    def _fit_personal(self, X, y, index):
        """Personal parts of the given users with ``w`` fixed (see Notes); no release.

        The same block functions as the end of ``fit``: the exact shrunk refit
        (``personal_ridge``), or local SGD with a global step of 0.
        """
        y = np.asarray(y, dtype=np.float64)
        scaled = getattr(self, "feature_scales_", None) is not None
        if scaled:
            X = standardize(X, inverse_scales(self.feature_scales_))
        w = np.asarray(self.coef_, dtype=float)
        if float(self.alpha) == np.inf:
            n = index.n_users
            return {"offsets_": np.zeros((n, w.shape[0])), "intercept_offsets_": np.zeros(n)}
        n_steps = max(1, int(round(float(self.sample_rate) * int(self.n_rounds))))
        lr_local = self._step_sizes()[1]
        if self.feature_scale != "auto" or self.feature_scale_ is None:
            scale = self.feature_scale_ if self.feature_scale_ is not None else 1.0
            lr_local = lr_local / float(scale) ** 2
        config = self._config(FitRandomness(self.random_state).key, X.shape[1],
                              sample_rate=1.0, n_rounds=n_steps, release=False,
                              lr_local=lr_local, clip_norm=self.clip_norm_)
        executor = LocalExecutor(make_sgd_blocks(X, y, index, batch_size=self.batch_size,
                                                 sample_rate=1.0))
        prior = PersonalPrior(w, float(self.intercept_), self.intercept_clip_,
                              float(self.personal_ridge or 0.0), config,
                              VARIANCE_FLOOR if scaled else 0.0,
                              bool(getattr(self, "local_only_", False)))
        if self.personal_ridge is None or not self._releases():
            run_ppsgd(executor, None, config, n_users=index.n_users, lr_global=0.0,
                      w_init=w, offsets=False)
        theta, b = self._personal(executor, prior, n_steps)
        release_scratch()
        return {"offsets_": theta, "intercept_offsets_": b - float(self.intercept_)}

    def _validate_personal_input(self, X, y):
        return validate_data(self, X, y, reset=False, **self._validate_data_kwargs())

    def predict(self, X, groups=None):
        """Predict with each user's personal model; unseen users get ``<x, w> + b``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to predict.
        groups : array-like of shape (n_samples,), default=None
            User id of each row. Rows of users seen in ``fit`` or
            ``personalize`` use ``<x, w + theta_i> + b + b_i``; other rows
            (and all rows when ``groups=None``) the cold-start ``<x, w> + b``.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Predictions.

        Raises
        ------
        ValueError
            If a prediction exceeds the float64 range (about 1.8e308) for
            finite ``X``; the error names the rows. Products that overflow
            only in an intermediate are re-evaluated on the row divided by its
            largest entry (:func:`skdpp.base.linear_predictions`).
        """
        return self._predict_unchecked(X, groups)

    def _predict_unchecked(self, X, groups=None):
        """:meth:`predict` without the floating-point guard and the finiteness check."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        if getattr(self, "feature_scales_", None) is not None:
            X = standardize(X, inverse_scales(self.feature_scales_))
        codes = self._user_codes(groups, X.shape[0])
        pred = X @ self.coef_ + self.intercept_
        known = codes >= 0
        if known.any():
            c = codes[known]
            pred[known] += np.einsum("ij,ij->i", X[known], self.offsets_[c])
            pred[known] += self.intercept_offsets_[c]

        def linear_parts(rows):
            c = codes[rows]
            k = c >= 0
            A = np.tile(np.asarray(self.coef_, dtype=np.float64), (rows.shape[0], 1))
            A[k] += self.offsets_[c[k]]
            b = np.full(rows.shape[0], float(self.intercept_))
            b[k] += self.intercept_offsets_[c[k]]
            return A[:, None, :], b[:, None]

        return clamp_predictions(linear_predictions(X, pred, linear_parts),
                                 getattr(self, "label_range_", None),
                                 ~known if getattr(self, "local_only_", False) else None)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # A noisy fit of a few rounds on the checks' tiny data sets cannot meet
        # their score thresholds.
        tags.regressor_tags.poor_score = True
        return tags

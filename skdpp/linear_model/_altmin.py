"""The estimator :class:`PrivAltMinRegressor` (Jain, Rush, Smith, Song & Thakurta 2021);
the algorithm is :mod:`skdpp.linear_model._algorithms.altmin`."""

from numbers import Real

from sklearn.utils._param_validation import Interval, StrOptions

from ._algorithms import altmin
from ._representation import _clip_constraint, _RepresentationRegressor

__all__ = ["PrivAltMinRegressor"]


class PrivAltMinRegressor(_RepresentationRegressor):
    """Priv-AltMin: private alternating minimisation for a shared linear embedding.

    The model and defaults of :class:`PrivateFedRepRegressor`, fitted by Jain et al.
    (2021): Alg. 1 (alternating minimisation), Alg. 2 (perturbed least-squares
    statistics for ``U``) and optionally Alg. 3 (private initialisation).

    Read more in the :ref:`User Guide <altmin>`.

    Parameters
    ----------
    n_components : int, default=2
        Dimension ``k`` of the shared representation, ``1 <= k <= n_features``.
    init : {"private_spectral", "private_pairwise", "random"} or array-like of \
            shape (n_features, n_components), default="private_spectral"
        Initial ``U``: Snedeker et al. (2025), Alg. 2; Jain et al.'s Alg. 3;
        random orthonormal (free); or a *public* warm start.
    max_iter : int, default=1
        Number of rounds ``T >= 0`` of Alg. 1.
    schedule : {"full", "disjoint"}, default="full"
        Every user in every round (the paper's experiment), or each user in
        one round chosen by a keyed hash of its id (Alg. 1, lines 2-4).
    fit_intercept : bool, default=True
        Per-user and cold-start intercepts. ``False``: the paper's model.
    personal_rows : {"all", "holdout"}, default="all"
        All of a user's rows, or the paper's ``S^1``, for the personal parts.
    personal_ridge : float, default=10.0
        ``κ >= 0``, as in :class:`PrivateFedRepRegressor`; ``0``: least squares.
    clip_norm : float, "auto" or None, default="auto"
        ``η``: clip of each row's ``vec(x v^T)`` (Alg. 2, line 1); ``"auto"``: a private
        quantile (:ref:`auto_rules`); ``None`` only with ``epsilon=np.inf``.
    label_clip : float, "auto" or None, default="auto"
        ``ζ``: clip of each centred label (Alg. 2 and 3). ``"auto"``: a private quantile.
    psd_floor : float, default=32.0
        ``>= 0``: eigenvalues of the noisy Gram are raised to at least
        ``psd_floor * σ * sqrt(dk)`` before the solve (Alg. 2, line 3; post-processing).
    init_clip_norm, head_clip_norm : float, "auto" or None, default="auto"
        As in :class:`PrivateFedRepRegressor` (``init_clip_norm``: with
        ``init="private_spectral"``).
    clip_quantile : float in (0, 1], default=0.5
        Quantile every ``"auto"`` bound is set to.
    budget_shares : dict or None, default=None
        Shares of phases ``"clip"``, ``"init"``, ``"cold_start"``, as in
        :class:`PrivateFedRepRegressor`.
    batch_mode : {"same", "disjoint"}, default="same"
        Heads and ``U`` statistics on the same ``S^0`` rows, or on two halves (Alg. 1).
    epsilon : float, default=1.0
        Privacy budget in (0, inf]; ``np.inf``: no noise (clipping still applies).
    delta : float, default=1e-6
        Privacy parameter in [0, 1); choose ``delta << 1 / n_users``.
    random_state : int, RandomState instance or None, default=None
        Seeds the noise, the random init and the key of the split, halves and rounds.
    verbose : int, default=0
        Print one line per round (public values only) when positive.

    Attributes
    ----------
    components_, heads_, intercepts_, cold_start_head_, cold_start_intercept_, \
            clip_norm_, init_clip_norm_, head_clip_norm_, intercept_clip_, \
            feature_scales_, label_range_, local_only_, own_label_ranges_, user_ids_, \
            n_users_, privacy_report_, n_features_in_
        As for :class:`PrivateFedRepRegressor`.
    label_clip_ : float or None
        Label clip used (released when ``"auto"``; None when unused).
    n_iter_ : int
        Number of rounds run.

    See Also
    --------
    PrivateFedRepRegressor : Snedeker et al. (2025), private federated gradient
        steps on ``U``.

    Notes
    -----
    **Guarantee** as for :class:`PrivateFedRepRegressor` (``label_clip_`` is
    released too).

    **Budget plan** (Gaussian, calibrated jointly on the exact μ-GDP
    composition; replace-one-user sensitivities):

    * ``clip``, ``init``, ``cold_start``: as for :class:`PrivateFedRepRegressor`;
    * ``iterations``: per round, ``W_priv`` (the sum of the users' mean
      ``W_r W_r^T``), ``sqrt(2) η^2``, and ``b_priv``, ``2 ζ η``; ``2T``
      releases, 2 with ``schedule="disjoint"`` (parallel composition).

    **Deviations from the paper** (none affects privacy; reasons: :ref:`User Guide <altmin>`):

    * per-user means of the statistics, not sums of ``m/4`` rows;
    * ``psd_floor``; noise calibrated exactly, not by ``Δ_{ε,δ}``;
    * ``batch_mode="same"`` and personal parts on all rows by default;
    * added, as in :class:`PrivateFedRepRegressor`: cold start, intercepts,
      shrinkage and ``"auto"`` bounds.

    References
    ----------
    .. [1] Jain, P., Rush, J., Smith, A., Song, S. and Thakurta, A. G. (2021).
           Differentially Private Model Personalization. NeurIPS 2021, 29723-29735.
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
    [('clip', 163), ('init', 1), ('iterations', 2), ('cold_start', 3)]
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

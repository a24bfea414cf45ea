"""The estimator :class:`PrivateFedRepRegressor` (Snedeker, Zhou & Bassily 2025, Alg. 1-2);
the algorithm is :mod:`skdpp.linear_model._algorithms.fedrep`."""

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

from ._algorithms import fedrep
from ._representation import _RepresentationRegressor

__all__ = ["PrivateFedRepRegressor"]


class PrivateFedRepRegressor(_RepresentationRegressor):
    """Private FedRep: a shared linear embedding under user-level DP, personal heads.

    Learns ``y ≈ b_i + <x, U v_i>``: the orthonormal ``U`` (``n_features ×
    n_components``) is released under user-level (ε, δ)-DP; each user's head ``v_i``
    and intercept ``b_i`` come from the releases and its own rows. Algorithms 1-2 of
    Snedeker, Zhou & Bassily (2025), plus intercepts, a cold start and private
    scale-free bounds.

    Read more in the :ref:`User Guide <fedrep>`.

    Parameters
    ----------
    n_components : int, default=2
        Dimension ``k`` of the shared representation, ``1 <= k <= n_features``.
    init : {"private_spectral", "private_pairwise", "random"} or array-like of \
            shape (n_features, n_components), default="private_spectral"
        Initial ``U``: Alg. 2 (phase ``"init"``); Jain et al. (2021), Alg. 3;
        random orthonormal (free); or a *public* warm start (free, QR).
    max_iter : int, default=5
        Number ``T >= 0`` of iterations of Alg. 1, one release each.
    learning_rate : float, default=1.5
        ``η > 0``: the step on ``U`` is ``η / s_y^2`` (Alg. 1, line 10).
    label_scale : float or "auto", default="auto"
        ``s_y > 0``; ``"auto"``: a private quantile of the users' RMS centred
        targets; ``1.0``: the paper's step.
    fit_intercept : bool, default=True
        Per-user and cold-start intercepts. ``False``: the paper's model.
    personal_rows : {"all", "holdout"}, default="all"
        Rows of the personal parts: all of a user's rows, or the paper's ``S^1``.
    personal_ridge : float, default=10.0
        ``κ >= 0``: ``κ k`` pseudo-rows shrinking the personal parts to the cold start.
    clip_norm : float, "auto" or None, default="auto"
        ``ψ``: Frobenius clip of each user's gradient; ``"auto"``: a private
        quantile of the norms at ``U_0`` (:ref:`auto_rules`); ``None`` only with
        ``epsilon=np.inf``.
    init_clip_norm : float, "auto" or None, default="auto"
        ``ψ_init``: clip of each ``Z_i`` in Alg. 2 (pairwise init: label clip ``ζ``).
    head_clip_norm : float, "auto" or None, default="auto"
        Clip of each head in the DP mean that gives ``cold_start_head_``.
    clip_quantile : float in (0, 1], default=0.5
        Quantile every ``"auto"`` bound is set to.
    budget_shares : dict or None, default=None
        Shares of phases ``"clip"`` (``"auto"``, :ref:`auto_rules`), ``"init"``
        (0.1), ``"cold_start"`` (0.02); ``"iterations"`` takes the rest.
    batch_mode : {"same", "disjoint"}, default="same"
        Head and gradient on the same ``S^0`` rows, or on disjoint batches (Alg. 1).
    batch_size : int or None, default=None
        Rows ``b >= 1`` per batch and user. ``None``: all ``S^0`` rows
        (``"same"``) or ``floor(|S^0_i| / 2)`` (``"disjoint"``).
    epsilon : float, default=1.0
        Privacy budget in (0, inf]; ``np.inf``: no noise (clipping still applies).
    delta : float, default=1e-6
        Privacy parameter in [0, 1); choose ``delta << 1 / n_users``.
    random_state : int, RandomState instance or None, default=None
        Seeds the noise, the random init and the key of the split and batches.
    verbose : int, default=0
        Print one line per iteration (public values only) when positive.

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_components)
        Released embedding ``U`` (orthonormal columns).
    heads_, intercepts_ : ndarray of shape (n_users_, n_components), (n_users_,)
        Personal heads ``v_i`` and intercepts ``b_i`` (local), aligned with ``user_ids_``.
    cold_start_head_, cold_start_intercept_ : ndarray of shape (n_components,), float
        Released head and intercept of the users unseen in ``fit``.
    clip_norm_, init_clip_norm_, head_clip_norm_, label_scale_, intercept_clip_ : \
            float or None
        Bounds used (released when ``"auto"``; None when unused).
    feature_scales_ : ndarray of shape (n_features_in_,) or None
        Released per-feature scales (``inf``: a dropped column), :ref:`auto_rules`.
    label_range_ : tuple of float or None
        Released range predictions are clamped to.
    local_only_ : bool
        Whether the plan predicted a useless fit (:ref:`auto_rules`).
    own_label_ranges_ : ndarray of shape (n_users_, 2)
        Each user's label range (local): clamps its predictions in a useless fit.
    user_ids_ : ndarray of shape (n_users_,)
        Sorted user ids seen in ``fit`` and ``personalize``.
    n_users_ : int
        Number of users in ``fit``.
    n_iter_ : int
        Number of iterations run (1 in a useless fit).
    privacy_report_ : PrivacyReport
        Budget plan, sensitivities, noise multipliers and the spent (ε, δ).
    n_features_in_ : int
        Number of features seen during ``fit``.

    See Also
    --------
    PrivAltMinRegressor : Jain et al. (2021), alternating minimisation.

    Notes
    -----
    **Guarantee.** User-level (ε, δ)-DP under replace-one-user (public number
    of users) for ``U``, the cold start and every released bound, scale and
    range; heads and intercepts are local (joint DP).

    **Budget plan** (Gaussian, calibrated jointly on the exact μ-GDP
    composition; replace-one-user L2 sensitivities):

    * ``clip``: counts of users, 1 (:ref:`auto_rules`);
    * ``init``: ``sum_i clip(Z_i, ψ_init)``, ``2 ψ_init`` (``2 ζ^2`` pairwise);
    * ``iterations``: ``T`` releases of ``sum_i clip(∇_{i,t}, ψ)``, ``2 ψ``;
    * ``cold_start``: ``sum_i clip(v_i, C_head)``, ``2 C_head``; clipped
      means of offsets and mean labels, ``2 R`` each.

    **Deviations from the paper** (none affects privacy; reasons: :ref:`User Guide <fedrep>`):

    * ``batch_mode="same"`` (disjoint batches of 1-2 rows do not converge);
    * personal parts on all rows (outside Theorem 4's utility analysis);
    * added: intercepts, cold start, shrinkage, ``"auto"`` bounds, the step
      ``η / s_y^2`` (``personal_rows="holdout"``, ``personal_ridge=0``,
      ``fit_intercept=False`` and numeric bounds give Alg. 1);
    * noise calibrated exactly, not by the closed-form ``σ̂``.

    References
    ----------
    .. [1] Snedeker, C., Zhou, X. and Bassily, R. (2025). Private Model
           Personalization Revisited. ICML 2025. arXiv:2506.19220.
    .. [2] Collins, L., Hassani, H., Mokhtari, A. and Shakkottai, S. (2021). Exploiting
           Shared Representations for Personalized Federated Learning. arXiv:2102.07078.

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

"""The estimator :class:`PPSGDRegressor` (Bietti et al. 2022); the algorithm (Alg. 1-3)
is :mod:`skdpp.linear_model._algorithms.ppsgd`."""

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from ..base import BasePersonalizedEstimator, _reject_booleans
from ..privacy._plan import phase_shares
from ._algorithms import ppsgd
from ._representation import _LinearRegressor

__all__ = ["PPSGDRegressor"]


class PPSGDRegressor(_LinearRegressor):
    """Personalized-private SGD for the additive model ``y ≈ b + b_i + <x, w + theta_i>``.

    Global weights ``w`` are learned with user-level DP-SGD while each user
    learns an offset ``theta_i`` from its own rows (Bietti et al. 2022, Alg.
    1-3); ``alpha`` (``0``: local only, ``np.inf``: global only) sets the level
    of personalization. The defaults add intercepts, a DP cold-start intercept
    ``b``, a shrunk refit of the personal parts and private scale-free bounds.

    Read more in the :ref:`User Guide <ppsgd>`.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget in (0, inf]; ``np.inf``: no noise. Ignored when
        ``noise_multiplier`` is given.
    delta : float, default=1e-6
        Privacy parameter in [0, 1); choose ``delta << 1 / n_users``.
    clip_norm : float, "auto" or None, default="auto"
        ``C > 0``: L2 clip of each user's gradient per round. ``"auto"``: a
        private quantile (:ref:`auto_rules`). ``None`` only with ``epsilon=np.inf``.
    feature_scale : float or "auto", default="auto"
        ``s > 0``: the global step is ``learning_rate / s^2``. ``"auto"``: a
        private quantile, local steps relative to each user's own. ``1.0``: the paper.
    alpha : float, default=1.0
        Global/local step ratio in [0, inf] (the paper's ``αQ``): global step
        ``learning_rate * min(1, alpha)``, local ``learning_rate * min(1, 1 / alpha)``.
    learning_rate : float, default=0.1
        The larger of the two steps (``η`` of the paper); finite and positive.
    n_rounds : int, default=200
        Number of rounds ``T >= 1`` (each a DP release unless ``alpha=0``).
    batch_size : int or None, default=10
        Per-user minibatch size ``m >= 1`` (``m_i = min(batch_size, n_i)``).
        ``None``: all rows every round (``weighting="user"`` only).
    sample_rate : float, default=1.0
        Poisson probability ``q`` in (0, 1] that a user joins a round (Alg. 2/3).
    weighting : {"user", "sample"}, default="user"
        Average of the users' risks, minibatch-mean gradients (Alg. 3); or
        weighted by minibatch size, sums over ``batch_size`` (Alg. 2).
    average : bool, default=False
        Average the iterates of rounds ``1..T`` (``w`` and every ``theta_i``).
    fit_intercept : bool, default=True
        Per-user intercepts and a released cold-start intercept ``b``.
    personal_ridge : float or None, default=10.0
        ``κ >= 0``: refit of ``theta_i`` and ``b_i`` on all the user's rows,
        shrunk towards the released model by ``κ d`` pseudo-rows. ``None``: SGD offsets.
    clip_quantile : float in (0, 1], default=0.5
        Quantile every ``"auto"`` bound is set to.
    budget_shares : dict or None, default=None
        Shares of phases ``"clip"`` (``"auto"``, :ref:`auto_rules`) and
        ``"cold_start"`` (0.02; ``0``: ``intercept_ = 0``); ``"iterations"`` the rest.
    noise_multiplier : float or None, default=None
        ``>= 0``; overrides the calibration: noise std ``noise_multiplier * 2 *
        clip_norm`` per round, and the report states the resulting ε.
    verbose : int, default=0
        Print the round number every tenth of the rounds when positive.
    random_state : int, RandomState instance or None, default=None
        Seeds the noise and the key of sampling and minibatches; ``None``: OS entropy.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Global weights ``w`` (released).
    intercept_ : float
        Released cold-start intercept ``b`` (0.0 with ``fit_intercept=False``).
    offsets_, intercept_offsets_ : ndarray of shape (n_users_, n_features), (n_users_,)
        Personal offsets ``theta_i`` and intercepts ``b_i`` (local), by ``user_ids_``.
    clip_norm_, feature_scale_ : float or None
        The clip norm and feature scale used (released when ``"auto"``).
    intercept_clip_, feature_scales_, label_range_, local_only_, own_label_ranges_, \
            user_ids_, n_users_, n_features_in_, privacy_report_
        As for :class:`~skdpp.linear_model.PrivateFedRepRegressor`.
    n_iter_ : int
        Number of rounds run.
    noise_multiplier_ : float
        Noise multiplier used (std / (2 * clip_norm)); 0.0 without noise.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during ``fit`` (string column names only).

    See Also
    --------
    sklearn.linear_model.SGDRegressor : Non-private, non-personalized SGD.

    Notes
    -----
    **Guarantee.** User-level (ε, δ) joint DP: the global iterates are (ε,
    δ)-DP under replace-one-user (the number of users is public); each
    ``theta_i`` is a function of them and of user ``i``'s rows.

    **Budget plan** (calibrated together; :ref:`User Guide <ppsgd>`):

    * ``clip``: counts of users, sensitivity 1 (:ref:`auto_rules`);
    * ``iterations``: ``T`` Gaussian sums of gradients clipped to ``C``, L2
      sensitivity ``2C``, noise std ``2 C z`` (``z = noise_multiplier_``);
      exact μ-GDP with ``sample_rate=1``, else the sampled Gaussian in RDP
      (``"rdp-zero-out"``) and group privacy for replace-one-user;
    * ``cold_start``: two clipped means around private medians, ``2 R`` each.

    **Deviations from the paper** (reasons: :ref:`User Guide <ppsgd>`): ``alpha`` is
    ``αQ`` and the steps follow the authors' code; ``weighting="sample"``
    normalises by the public ``q N batch_size``; Poisson client sampling;
    averaging over rounds ``1..T``; a tight accountant; keyed-hash sampling;
    a non-finite user contributes 0; added intercepts, ``"auto"`` bounds and
    refit. ``clip_norm=1.0, feature_scale=1.0, fit_intercept=False,
    personal_ridge=None`` give the paper's algorithm.

    References
    ----------
    .. [1] Bietti, A., Wei, C.-Y., Dudík, M., Langford, J. and Wu, Z. S. (2022).
           Personalization Improves Privacy-Accuracy Tradeoffs in Federated
           Learning. ICML 2022. arXiv:2202.05318.
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
    [('clip', 121), ('iterations', 100), ('cold_start', 2)]
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
        "budget_shares": [dict, None],
        "noise_multiplier": [Interval(Real, 0, None, closed="left"), None],
        "verbose": ["verbose"],
    }
    _personal_attributes = ("offsets_", "intercept_offsets_", "own_label_ranges_")
    _algorithm = ppsgd

    def __init__(self, *, epsilon=1.0, delta=1e-6, clip_norm="auto", feature_scale="auto",
                 alpha=1.0, learning_rate=0.1, n_rounds=200, batch_size=10, sample_rate=1.0,
                 weighting="user", average=False, fit_intercept=True, personal_ridge=10.0,
                 clip_quantile=0.5, budget_shares=None, noise_multiplier=None, verbose=0,
                 random_state=None):
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
        self.budget_shares = budget_shares
        self.noise_multiplier = noise_multiplier
        self.verbose = verbose
        self.random_state = random_state

    def _validate_fit_data(self, X, y, groups):
        data = super()._validate_fit_data(X, y, groups)
        _reject_booleans(
            self, ("alpha", "learning_rate", "sample_rate", "noise_multiplier"))
        if not np.isfinite(self.learning_rate):
            raise ValueError(
                f"learning_rate must be a finite positive float, got {self.learning_rate!r}. "
                "Pass e.g. learning_rate=0.1.")
        if self.weighting == "sample" and self.batch_size is None:
            raise ValueError(
                "weighting='sample' needs an integer batch_size: the minibatch sums are "
                "normalised by the public batch_size (the total number of rows is not "
                "public); got batch_size=None. Pass batch_size=10, or weighting='user'.")
        if (self.noise_multiplier or 0) > 0 and self.clip_norm is None:
            raise ValueError(
                f"noise_multiplier={self.noise_multiplier!r} needs a clip_norm (the noise "
                "std is noise_multiplier * 2 * clip_norm); got clip_norm=None. Pass a "
                "positive clip_norm.")
        data.y = np.asarray(data.y, dtype=np.float64)
        return data

    def _validate_data_kwargs(self):
        # integer X converted (hashes and fits like equal floats); float32 kept
        return {"y_numeric": True, "dtype": [np.float64, np.float32]}

    def _make_blocks(self, data, randomness):
        return ppsgd.make_sgd_blocks(data.X, data.y, data.index, batch_size=self.batch_size,
                                     sample_rate=self.sample_rate)

    def _fit_config(self, meta=None):
        """The frozen :class:`~._algorithms.ppsgd.PPSGDConfig` of the parameters."""
        shares = phase_shares(self.budget_shares, ppsgd.DEFAULT_SHARES,
                              owner=type(self).__name__)
        if shares["clip"] == 0:
            raise ValueError(
                "budget_shares['clip'] must be in (0, 1) or 'auto', got 0: the 'auto' "
                "bounds need a private quantile. Pass a positive share or leave it out.")
        return ppsgd.PPSGDConfig(
            epsilon=float(self.epsilon), delta=float(self.delta), clip_norm=self.clip_norm,
            feature_scale=self.feature_scale, alpha=float(self.alpha),
            learning_rate=float(self.learning_rate), n_rounds=int(self.n_rounds),
            batch_size=self.batch_size, sample_rate=float(self.sample_rate),
            weighting=self.weighting, average=bool(self.average),
            fit_intercept=bool(self.fit_intercept), personal_ridge=self.personal_ridge,
            clip_quantile=float(self.clip_quantile), clip_share=shares["clip"],
            cold_start_share=float(shares["cold_start"]),
            noise_multiplier=self.noise_multiplier, verbose=int(self.verbose))

    def _fit_personal(self, X, y, index):
        """Personal parts of the given users with ``w`` fixed (User Guide); no release."""
        return ppsgd.fit_personal(X, y, index, self._fit_config(), self)

    def _linear_scores(self, X, codes):
        """``<x, w + theta_i> + b + b_i`` (known users) or ``<x, w> + b``."""
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

        return pred, linear_parts

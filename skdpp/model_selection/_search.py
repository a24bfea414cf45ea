"""Private hyperparameter search whose privacy cost is accounted (random stopping)."""

import math
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
import sklearn
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier
from sklearn.pipeline import Pipeline
from sklearn.utils import get_tags, indexable
from sklearn.utils._indexing import _safe_indexing
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import _num_samples, check_is_fitted

from .._export import _leaves
from ..base import BasePersonalizedEstimator, _reject_booleans, quiet_numerics
from ..pipeline import personalize, transform_then
from ..exceptions import PrivacyBudgetError, PrivacyLeakWarning
from ..privacy import MIN_CLIP, BudgetPlan, Releaser, gaussian_epsilon, mechanisms
from ..privacy._composed import (_budget_set, _children, _is_stateless, _normalised_shares,
                                 _private_leaves, privacy_report)
from ..privacy._quantile import cumulative_counts, private_quantile, quantile_grid, search_steps
from ..privacy._tuning import (STOPPING_DISTRIBUTIONS, RandomStopping,
                               SearchPrivacyReport, _cks_epsilon, epsilon_for_rho,
                               largest_root_below, release_validation_score, report_rho,
                               zcdp_epsilon)
from ..privacy.report import NON_PRIVATE_NOTE, PhaseReport, non_private_wording
from ..utils._grouped import UserBlock, UserIndex, _to_numpy, canonical_order
from ..utils._random import (DerivedRandomState, hash_ids, keyed_bits, noise_is_seeded,
                             row_hashes, seed_sequence)

__all__ = ["PrivateRandomizedSearchCV"]

_SCORE_PHASE = "validation_score"
#: Phase of the private quantile behind ``score_clip="auto"`` (regression losses).
_CLIP_PHASE = "score_clip"
#: ``score_clip="auto"`` = 3 x the median of the users' own-mean losses (on 1-5
#: ratings, 300-500 users, epsilon=1, the 0.9-quantile landed anywhere in
#: [3.6, 2.4e5], the median within one grid cell of the truth).
_AUTO_SCORE_QUANTILE = 0.5
_AUTO_SCORE_FACTOR = 3.0


def _estimator_has(name):
    def check(self):
        return hasattr(self.best_estimator_ if hasattr(self, "best_estimator_")
                       else self.estimator, name)
    return check


class PrivateRandomizedSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Randomized hyperparameter search under user-level DP (random stopping).

    Runs a random number ``K`` of *trials* (mean ``n_iter``): each samples a
    configuration (independently of the data), fits a copy of ``estimator`` on
    the training rows and releases a DP validation score on held-out rows of
    every user. The whole search is ``(epsilon, delta)``-DP (Papernot &
    Steinke 2022); it outputs the best trial's fitted estimator (no refit: it
    would spend the budget again), its parameters and its DP score.

    Read more in the :ref:`User Guide <tuning>`.

    Parameters
    ----------
    estimator : skdpp estimator or Pipeline
        A skdpp estimator, or a ``Pipeline`` ending in one whose other fitted
        steps (at any depth) are private or stateless. The search sets every
        private step's ``epsilon``, ``delta``, ``random_state`` and ``verbose=0``.
    param_distributions : dict or list of dicts
        Parameter names mapped to lists (sampled uniformly) or distributions
        with an ``rvs`` method; a list of dicts: each trial first picks one
        uniformly. Drawn per trial, with replacement; never ``epsilon``,
        ``delta`` or ``random_state``.
    epsilon : float, default=1.0
        Budget of the whole search, in ``(0, inf]`` (``np.inf``: non-private).
    delta : float, default=1e-6
        δ of the whole search, in ``(0, 1)``; much smaller than ``1 / n_users``.
    n_iter : float, default=10
        Mean number of trials ``E[K] >= 1``.
    stopping : {"truncated_negative_binomial", "poisson"}, default="truncated_negative_binomial"
        Law of ``K``. With Poisson, ``K = 0`` makes :meth:`fit` raise (its
        cost is still spent).
    stopping_shape : float, default=1.0
        Shape ``η > -1`` of the truncated negative binomial (``1``: geometric,
        ``0``: logarithmic; smaller costs less, with a heavier tail:
        :ref:`tuning_parameters`).
    validation_size : float in (0, 1), default=0.2
        Fraction of each user's rows held out, as
        :func:`~skdpp.model_selection.per_user_train_test_split`.
    loss : {"auto", "squared_error", "absolute_error", "zero_one"} or callable, default="auto"
        Per-row loss of the score (``"auto"``: squared error for regressors,
        zero-one for classifiers) or ``loss(y_true, y_pred) >= 0`` per row.
    score_clip : float or "auto", default="auto"
        Bound ``C`` on each user's mean validation loss (the score's noise is
        proportional to ``C / n_users``). ``"auto"``: 1 for the zero-one loss,
        else a private quantile (:ref:`tuning_parameters`; a classifier with
        another loss needs a number). A number is public and free.
    score_share : float in (0, 1), default=0.1
        Share of each trial's zCDP budget spent on its score.
    refit_personal : bool, default=True
        Refit the best estimator's personal parts on *all* of each user's
        rows (``personalize``: free; shared part and ``best_score_`` unchanged).
    step_shares : dict of str to float, default=None
        With a ``Pipeline``: each private step's share of every trial's zCDP
        fit budget, keyed as in :func:`~skdpp.privacy.split_budget` (``None``:
        equal; :ref:`tuning_pipelines`).
    random_state : int, RandomState instance, Generator instance or None, default=None
        Seeds ``K``, the configurations, the split, every trial and the score
        noise. ``None``: OS entropy (use it in deployments); a seed must stay
        secret (``privacy_report_`` says so).

    Attributes
    ----------
    best_estimator_ : estimator
        The selected trial's fitted estimator (released; ``random_state=None``).
    best_params_ : dict
        The selected configuration (released).
    best_score_ : float
        The selected trial's DP score: ``-(1/n_users) * sum_u min(mean
        held-out loss of u, C)`` plus Gaussian noise (released).
    score_clip_ : float
        The bound ``C`` used (released).
    privacy_report_ : SearchPrivacyReport
        The whole search's guarantee; ``chosen_trial`` nests the selected
        trial's report.
    n_users_ : int
        Number of users (public).
    n_trials_ : int
        **Private, not a release.** The number of trials ``K``.
    best_index_ : int
        **Private, not a release.** Position of the best trial.
    cv_results_ : dict of ndarray
        **Private, not a release.** Per trial: ``params``, ``param_<name>``,
        ``validation_score`` (noisy) and ``trial_epsilon``.

    Notes
    -----
    **Guarantee**: ``(epsilon, delta)``-DP under replace-one-user for the
    shared part of ``best_estimator_``, ``best_params_``, ``best_score_``,
    ``score_clip_`` and ``privacy_report_`` (joint DP for the personal
    parts). ``n_trials_``, ``best_index_``, ``cv_results_``, the other trials
    and the running time are *not* covered: the analysis needs ``K`` secret.

    **Stopping**: ``K`` truncated negative binomial or Poisson (Theorems 2
    and 6 of [1]_); every trial is held to one zCDP budget ``ρ``, the largest
    at which the search's RDP bound, converted to (ε, δ) [3]_, meets
    ``(epsilon, delta)``; ``score_share * ρ`` goes to the score, the rest to
    the fit (each configuration's ``epsilon`` solved from its budget plan).

    **Score sensitivity**: a user's mean held-out loss, clipped to ``[0,
    C]``; the sum has sensitivity ``C`` under replace-one-user and is divided
    by the public number of users. Derivations, the automatic bound and what
    the search never lets depend on one user: :ref:`tuning`.

    References
    ----------
    .. [1] Papernot, N. and Steinke, T. (2022). Hyperparameter Tuning with
           Renyi Differential Privacy. ICLR 2022. arXiv:2110.03620.
    .. [2] Liu, J. and Talwar, K. (2019). Private Selection from Private
           Candidates. STOC 2019. arXiv:1811.07971.
    .. [3] Canonne, C., Kamath, G. and Steinke, T. (2020). The Discrete
           Gaussian for Differential Privacy. arXiv:2004.00010.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.linear_model import PrivateFedRepRegressor
    >>> from skdpp.model_selection import PrivateRandomizedSearchCV
    >>> rng = np.random.default_rng(0)
    >>> groups = np.repeat(np.arange(300), 10)
    >>> X = rng.normal(size=(3000, 5))
    >>> y = X @ rng.normal(size=5) + 0.1 * rng.normal(size=3000)
    >>> search = PrivateRandomizedSearchCV(
    ...     PrivateFedRepRegressor(n_components=2),
    ...     {"clip_norm": [0.1, 1.0, 10.0], "learning_rate": [0.5, 1.0]},
    ...     epsilon=2.0, delta=1e-5, n_iter=3, random_state=0)
    >>> search = search.fit(X, y, groups=groups)
    >>> sorted(search.best_params_)
    ['clip_norm', 'learning_rate']
    >>> bool(search.privacy_report_.epsilon_spent <= 2.0)
    True
    """

    _parameter_constraints: dict = {
        "estimator": [BasePersonalizedEstimator, Pipeline],
        "param_distributions": [dict, list],
        "epsilon": [Interval(Real, 0, np.inf, closed="right")],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "n_iter": [Interval(Real, 1, None, closed="left")],
        "stopping": [StrOptions(set(STOPPING_DISTRIBUTIONS))],
        "stopping_shape": [Interval(Real, -1, None, closed="neither")],
        "validation_size": [Interval(Real, 0, 1, closed="neither")],
        "loss": [StrOptions({"auto", "squared_error", "absolute_error", "zero_one"}),
                 callable],
        "score_clip": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "score_share": [Interval(Real, 0, 1, closed="neither")],
        "refit_personal": ["boolean"],
        "step_shares": [dict, None],
        "random_state": ["random_state", np.random.Generator],
    }

    # groups is the privacy unit: requested by default once metadata routing is on.
    __metadata_request__fit = {"groups": True}
    __metadata_request__predict = {"groups": True}
    __metadata_request__score = {"groups": True}

    def __init__(self, estimator, param_distributions, *, epsilon=1.0, delta=1e-6, n_iter=10,
                 stopping="truncated_negative_binomial", stopping_shape=1.0,
                 validation_size=0.2, loss="auto", score_clip="auto", score_share=0.1,
                 refit_personal=True, step_shares=None, random_state=None):
        self.estimator = estimator
        self.param_distributions = param_distributions
        self.epsilon = epsilon
        self.delta = delta
        self.n_iter = n_iter
        self.stopping = stopping
        self.stopping_shape = stopping_shape
        self.validation_size = validation_size
        self.loss = loss
        self.score_clip = score_clip
        self.score_share = score_share
        self.refit_personal = refit_personal
        self.step_shares = step_shares
        self.random_state = random_state

    def _check_params(self):
        self._validate_params()
        _reject_booleans(self, ("epsilon", "delta", "n_iter", "stopping_shape",
                                "validation_size", "score_clip", "score_share"))
        clip = self._public_score_clip()
        if clip is not None and not MIN_CLIP <= clip < np.inf:
            raise ValueError(
                f"score_clip must be 'auto' or a finite bound >= {MIN_CLIP:g}, got "
                f"{self.score_clip!r}.")
        for k, dist in enumerate(self._distributions()):
            if not isinstance(dist, dict) or not dist:
                raise ValueError(
                    f"param_distributions must be a non-empty dict or a list of non-empty "
                    f"dicts; entry {k} is {dist!r}.")
            for name, values in dist.items():
                if name.split("__")[-1] in ("epsilon", "delta", "random_state"):
                    raise ValueError(
                        f"param_distributions may not set {name!r}: the search sets each "
                        f"trial's epsilon, delta and random_state (the per-trial budget). "
                        f"Remove {name!r}; tune the search's epsilon instead.")
                if not hasattr(values, "rvs") and (
                        isinstance(values, (str, bytes)) or not hasattr(values, "__len__")
                        or len(values) == 0):
                    raise ValueError(
                        f"Parameter {name!r} must map to a non-empty list of values or "
                        f"a distribution with an rvs method; got {values!r}.")
        if isinstance(self.estimator, Pipeline):
            _check_private_pipeline(self.estimator)
            _normalised_shares([n for n, _ in _private_leaves(self.estimator)],
                               self.step_shares)
        valid = set(self.estimator.get_params(deep=True))
        unknown = sorted({n for d in self._distributions() for n in d} - valid)
        if unknown:
            raise ValueError(
                f"Invalid parameter(s) {unknown} for estimator "
                f"{type(self.estimator).__name__}; valid parameters are {sorted(valid)}.")

    def _public_score_clip(self):
        """The bound ``C`` if public (a number; 1 for the zero-one loss), None if it is
        a private quantile (``"auto"`` with a regression loss)."""
        if not (isinstance(self.score_clip, str) and self.score_clip == "auto"):
            return float(self.score_clip)
        if self.loss == "zero_one" or (self.loss == "auto" and is_classifier(self.estimator)):
            return 1.0
        if is_classifier(self.estimator):
            raise ValueError(
                f"score_clip='auto' bounds a classifier's loss only for the zero-one loss "
                f"(its range is [0, 1]); got loss={self.loss!r}. Pass score_clip as a "
                f"number: a public bound of your loss.")
        return None

    def _distributions(self):
        d = self.param_distributions
        return [d] if isinstance(d, dict) else list(d)

    def fit(self, X, y, groups=None):
        """Run the private search and keep the best trial.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        groups : array-like of shape (n_samples,)
            User id of each row (the privacy unit). Required.

        Returns
        -------
        self : object

        Raises
        ------
        PrivacyBudgetError
            If a trial's fit spends more than the per-trial budget or the
            search would exceed ``epsilon``.
        RuntimeError
            With ``stopping="poisson"`` when ``K = 0``.
        """
        BasePersonalizedEstimator._discard_fitted_attributes(self)
        self._check_params()
        if groups is None:
            raise ValueError(
                "PrivateRandomizedSearchCV needs groups (one user id per row) to hold out "
                "rows within users. Pass fit(X, y, groups=groups) (inside a Pipeline, "
                "enable sklearn.set_config(enable_metadata_routing=True)).")
        if sp.issparse(X):
            raise TypeError("PrivateRandomizedSearchCV does not support sparse X; pass a "
                            "dense array.")
        X, y, groups = indexable(X, y, groups)  # (checks that the lengths agree)
        if y is None:
            raise ValueError(f"y must have one value per row of X ({_num_samples(X)} rows).")
        index = UserIndex.from_groups(groups, _num_samples(X))
        groups = _to_numpy(groups)
        n_users = int(index.n_users)
        delta = float(self.delta)
        BasePersonalizedEstimator._check_delta(self, n_users)

        # the budget (data-independent)
        stopping = RandomStopping(self.stopping, float(self.n_iter),
                                  float(self.stopping_shape))
        score_clip = self._public_score_clip()  # None: a private quantile (below)
        rho_clip_share = float(self.score_share) if score_clip is None else 0.0
        rho = _calibrate_search(stopping, float(self.epsilon), delta, rho_clip_share)
        rho_fit = (1.0 - self.score_share) * rho
        z_score = 0.0 if math.isinf(rho) else 1.0 / math.sqrt(2.0 * (self.score_share * rho))

        # randomness: K, configurations, split key, trial seeds, the automatic bound
        seeded = noise_is_seeded(self.random_state)
        ss_stop, ss_config, ss_key, ss_trials, ss_clip = seed_sequence(
            self.random_state).spawn(5)
        mechanisms.warn_seeded_secure(self.random_state)
        n_trials = mechanisms.sample_trial_count(stopping, np.random.default_rng(ss_stop))
        if n_trials == 0:
            raise RuntimeError(
                f"The Poisson number of trials was K=0 (probability exp(-{self.n_iter:g})): "
                "nothing to output, the privacy cost spent all the same. Use "
                "stopping='truncated_negative_binomial' to always run a trial.")
        configs = _sample_configurations(self._distributions(), n_trials,
                                         np.random.default_rng(ss_config))
        trial_seeds = ss_trials.spawn(n_trials)
        key = ss_key.generate_state(2, dtype=np.uint64)

        # the split within users (keyed, permutation invariant)
        with quiet_numerics():
            order, train, held_out = _split_within_users(X, y, index, key,
                                                         self.validation_size)
        X_tr, y_tr, g_tr = (_safe_indexing(a, train) for a in (X, y, groups))
        X_va, y_va, g_va = (_safe_indexing(a, held_out) for a in (X, y, groups))
        codes_va = index.codes[held_out]
        n_held_out = np.bincount(codes_va, minlength=n_users)

        # the bound of the users' losses (before any trial)
        z_clip = 0.0
        if score_clip is None:
            z_clip = 0.0 if math.isinf(rho) else math.sqrt(
                _CLIP_STEPS / (2.0 * rho_clip_share * rho))
            plan = BudgetPlan(self.epsilon, delta)
            plan.fix(_CLIP_PHASE, noise_multiplier=z_clip, count=_CLIP_STEPS)
            release = Releaser(plan, np.random.default_rng(ss_clip), seeded=seeded)
            with quiet_numerics():
                values = _own_mean_losses(self._loss_function(), y_tr, index.codes[train],
                                          n_users)
                grid = quantile_grid()
                score_clip = max(_AUTO_SCORE_FACTOR * private_quantile(
                    release, _CLIP_PHASE, cumulative_counts(values, grid), grid,
                    quantile=_AUTO_SCORE_QUANTILE, n_users=n_users), MIN_CLIP)
            del release

        # plan every trial before any fit (data-independent; a Pipeline's budgets are
        # set step by step in its trial)
        estimators, trial_eps = [], []
        for params, seed in zip(configs, trial_seeds):  # loop over trials
            est = clone(self.estimator).set_params(**params)
            _set_on_leaves(est, "verbose", 0)
            estimators.append(est)
            trial_eps.append(np.nan if isinstance(est, Pipeline) else self._set_trial_budget(
                est, rho_fit, delta, X_tr, y_tr, g_tr, seed))

        # run the trials (only the best so far is kept)
        loss = self._loss_function()
        scores = np.empty(n_trials)
        best, best_est, best_seed, best_warnings = 0, None, None, []
        for k, (est, seed) in enumerate(zip(estimators, trial_seeds)):  # loop over trials
            estimators[k] = None
            noise = np.random.default_rng(seed.spawn(1)[0])
            with warnings.catch_warnings(record=True) as caught, quiet_numerics():
                warnings.simplefilter("always")
                if isinstance(est, Pipeline):
                    trial_seed, trial_eps[k] = self._fit_pipeline_trial(
                        est, rho_fit, delta, X_tr, y_tr, g_tr, seed)
                else:
                    trial_seed = _fit_trial(est, rho_fit, X_tr, y_tr, g_tr)
                user_loss = np.zeros(n_users)
                if held_out.size:  # (no held-out row at all: every user scores 0)
                    user_loss = _user_losses(est, loss, X_va, y_va, g_va, codes_va,
                                             n_held_out)
                plan = BudgetPlan(self.epsilon, delta)
                plan.fix(_SCORE_PHASE, noise_multiplier=z_score)
                total = release_validation_score(Releaser(plan, noise, seeded=seeded),
                                                 _SCORE_PHASE, user_loss,
                                                 score_clip=score_clip)
            scores[k] = -total / n_users
            if best_est is None or scores[k] > scores[best]:  # ties: the first trial
                best, best_est, best_seed = k, est, trial_seed
                best_warnings = _replayable(caught)
            del trial_seed

        _replay(best_warnings)
        if self.refit_personal:
            # all rows in canonical order; the seed is lent back for this call only
            final = best_est[-1] if isinstance(best_est, Pipeline) else best_est
            final.set_params(random_state=best_seed)
            try:
                with warnings.catch_warnings(record=True) as caught, quiet_numerics():
                    warnings.simplefilter("always")
                    personalize(best_est,
                                *(_safe_indexing(a, order) for a in (X, y, groups)))
            finally:
                _take_back_seed(final)
            _replay(_replayable(caught))
        del best_seed

        report = self._report(stopping, rho, rho_fit, z_score, n_users, best_est, seeded,
                              score_clip, rho_clip_share, z_clip)
        self.privacy_report_ = report
        self.best_estimator_ = best_est
        self.best_params_ = dict(configs[best])
        self.best_score_ = float(scores[best])
        self.score_clip_ = float(score_clip)
        self.n_users_ = n_users
        self.n_trials_ = n_trials
        self.best_index_ = best
        self.cv_results_ = _results(configs, scores, trial_eps)
        return self

    def _set_trial_budget(self, est, rho_fit, delta, X, y, groups, seed):
        """Set ``est``'s budget for ``rho_fit`` (``_trial_budget``) and its trial
        ``random_state``; return its epsilon."""
        with warnings.catch_warnings(), quiet_numerics():
            warnings.simplefilter("ignore")
            eps, delta = _trial_budget(est, rho_fit, delta, X, y, groups)
        est.set_params(epsilon=eps, delta=delta, random_state=self._trial_random_state(seed))
        return eps

    def _fit_pipeline_trial(self, pipe, rho_fit, delta, X, y, groups, seed):
        """Fit a Pipeline trial whose private steps share ``rho_fit`` (``step_shares``),
        check every step's report, take every seed back; return the final step's seed
        and epsilon."""
        leaves, final = _private_leaves(pipe), pipe[-1]
        rhos = {name: share * rho_fit for name, share in _normalised_shares(
            [n for n, _ in leaves], self.step_shares).items()}
        rho_last = rhos[next(n for n, leaf in leaves if leaf is final)]
        try:
            for name, leaf in leaves:
                if leaf is not final:  # gaussian_epsilon(inf) is inf
                    eps_i = gaussian_epsilon(math.sqrt(2.0 * rhos[name]), delta)
                    leaf.set_params(epsilon=eps_i, delta=delta,
                                    random_state=self._trial_random_state(seed))
            Xt = X
            if len(pipe) > 1:
                with sklearn.config_context(enable_metadata_routing=True):
                    Xt = pipe[:-1].fit_transform(X, y, groups=groups)
            for name, leaf in leaves:
                if leaf is not final:
                    _take_back_seed(leaf)
                    _check_trial_budget(leaf, rhos[name])
            eps_k = self._set_trial_budget(final, rho_last, delta, Xt, y, groups, seed)
            final_seed = _fit_trial(final, rho_last, Xt, y, groups)
            # (with a finite rho_fit, every step's rho was checked to be known above)
            spent = 0.0 if math.isinf(rho_fit) else sum(
                report_rho(leaf.privacy_report_) for _, leaf in leaves)
            if spent > rho_fit * (1.0 + 1e-9):
                raise PrivacyBudgetError(
                    f"A Pipeline trial's steps spent rho={spent:.6g} (zCDP) together, more "
                    f"than the per-trial budget rho={rho_fit:.6g}.")
        finally:
            _set_on_leaves(pipe, "random_state", None)
        return final_seed, eps_k

    def _trial_random_state(self, seed):
        """A trial's ``random_state``: an int for an int search seed, else 128 bits
        (a 32-bit seed could be searched) marked with whether the user seeded."""
        child = seed.spawn(1)[0]
        if isinstance(self.random_state, Integral):
            return int(child.generate_state(1, dtype=np.uint32)[0])
        return DerivedRandomState(child, user_seeded=noise_is_seeded(self.random_state))

    def _loss_function(self):
        loss = self.loss
        if callable(loss):
            return loss
        if loss == "auto":
            loss = "zero_one" if is_classifier(self.estimator) else "squared_error"
        if loss == "zero_one":
            return lambda y_true, y_pred: (np.asarray(y_true) != np.asarray(y_pred)).astype(float)
        power = 1 if loss == "absolute_error" else 2
        return lambda y_true, y_pred: np.abs(
            np.asarray(y_true, dtype=float) - np.asarray(y_pred, dtype=float)) ** power

    def _report(self, stopping, rho, rho_fit, z_score, n_users, best_est, seeded,
                score_clip, rho_clip_share, z_clip):
        delta, C = float(self.delta), float(score_clip)
        if math.isinf(rho):  # no noise, no guarantee: no delta is spent (as a fit's report)
            spent, accountant, delta_spent, notes = math.inf, "non-private", 0.0, (
                NON_PRIVATE_NOTE,)
        else:
            spent = _search_epsilon(stopping, rho, delta, rho_clip_share)
            accountant, delta_spent, notes = "rdp-random-stopping", delta, ()
            if spent > float(self.epsilon) * (1 + 1e-9):
                raise PrivacyBudgetError(
                    f"The search would spend epsilon={spent:.6g} at delta={delta:g}, more "
                    f"than the requested epsilon={self.epsilon:g}.")
        notes += (
            "Random stopping (Papernot & Steinke 2022, Theorem 2 / 6): only the best "
            "trial is released; K, the other trials, cv_results_ and the running time are "
            "not covered and must stay private.",
            "Each trial is held to the same zCDP budget (fit and validation score); "
            "best_estimator_ is the selected trial's fit (no refit).",
        )

        def phase(name, share, mechanism, epsilon, z=None, sens=None, count=1, clip=None):
            if z is not None and mechanism == "gaussian" and not z > 0:
                mechanism = "exact (gaussian without noise)"
            return PhaseReport(name=name, share=share, mechanism=mechanism,
                               sensitivity=sens, noise_multiplier=z, count=count,
                               sampling_rate=1.0, clip_norm=clip, epsilon=epsilon)

        clip_phase = ()
        if rho_clip_share:
            clip_phase = (phase(_CLIP_PHASE, None, "gaussian",
                                zcdp_epsilon(rho_clip_share * rho, delta), z=z_clip,
                                sens=1.0, count=_CLIP_STEPS),)
            note = (f"score_clip='auto': C = {_AUTO_SCORE_FACTOR:g} x the "
                    f"{_AUTO_SCORE_QUANTILE:g}-quantile of the users' mean loss of predicting "
                    f"their own mean training label, released by a noisy bisection over a "
                    f"public log grid ({_CLIP_STEPS} Gaussian counts of sensitivity 1, phase "
                    f"'{_CLIP_PHASE}', zCDP cost score_share * rho) before the trials; "
                    f"C = {C:.6g}.")
            notes += (non_private_wording(note) if math.isinf(rho) else note,)
        phases = clip_phase + (
            phase("trial_fit", 1.0 - self.score_share, f"{type(best_est).__name__} plan",
                  zcdp_epsilon(rho_fit, delta)),
            phase(_SCORE_PHASE, self.score_share, "gaussian",
                  gaussian_epsilon(1.0 / z_score, delta) if z_score > 0 else math.inf,
                  z=z_score, sens=C, clip=C),
            phase("selection", None, "random-stopping", spent),
        )
        chosen = privacy_report(best_est) if isinstance(best_est, Pipeline) \
            else best_est.privacy_report_
        return SearchPrivacyReport(
            epsilon=float(self.epsilon), delta=delta, epsilon_spent=float(spent),
            delta_spent=delta_spent, accountant=accountant, n_users=n_users, phases=phases,
            released=("best_estimator_ (shared part)", "best_params_", "best_score_",
                      "score_clip_"),
            local=tuple(getattr(chosen, "local", ())), notes=notes,
            stopping=stopping.describe(), trial_rho=float(rho),
            trial_epsilon=float(zcdp_epsilon(rho, delta)), chosen_trial=chosen,
            noise_seeded=seeded)

    @available_if(_estimator_has("predict"))
    def predict(self, X, groups=None):
        """Predict with the best estimator (``groups``: user id of each row)."""
        check_is_fitted(self)
        return transform_then(self.best_estimator_, "predict", X, groups=groups)

    @available_if(_estimator_has("predict_proba"))
    def predict_proba(self, X, groups=None):
        """Class probabilities of the best estimator."""
        check_is_fitted(self)
        return transform_then(self.best_estimator_, "predict_proba", X, groups=groups)

    @available_if(_estimator_has("decision_function"))
    def decision_function(self, X, groups=None):
        """Decision function of the best estimator."""
        check_is_fitted(self)
        return transform_then(self.best_estimator_, "decision_function", X, groups=groups)

    def score(self, X, y, groups=None, sample_weight=None):
        """The best estimator's ``score`` (R² or accuracy) on ``X, y``."""
        check_is_fitted(self)
        return transform_then(self.best_estimator_, "score", X, y, groups=groups,
                              sample_weight=sample_weight)

    def personalize(self, X, y, groups):
        """Fit personal parts of the best estimator for the given users (no privacy cost)."""
        check_is_fitted(self)
        personalize(self.best_estimator_, X, y, groups)
        return self

    @property
    def classes_(self):
        """Class labels of the best estimator (classifiers)."""
        check_is_fitted(self)
        return self.best_estimator_.classes_

    @property
    def n_features_in_(self):
        """Number of features seen by the best estimator."""
        check_is_fitted(self)
        return self.best_estimator_.n_features_in_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        sub = get_tags(self.estimator)
        for name in ("estimator_type", "classifier_tags", "regressor_tags", "input_tags",
                     "target_tags"):
            setattr(tags, name, getattr(sub, name))
        tags.non_deterministic = False
        return tags


def _take_back_seed(est):
    """Reset ``est``'s ``random_state`` (it rebuilds the trial's noise) to None; return it."""
    value = est.get_params(deep=False)["random_state"]
    est.set_params(random_state=None)
    return value


def _set_on_leaves(est, name, value):
    """Set ``name`` to ``value`` on every leaf of ``est`` (:func:`skdpp._export._leaves`:
    itself, or a Pipeline's steps at any depth) that has that parameter."""
    for leaf in _leaves(est):
        if hasattr(leaf, "get_params") and name in leaf.get_params(deep=False):
            leaf.set_params(**{name: value})


def _fit_trial(est, rho_fit, X, y, groups):
    """Fit ``est``, take its seed back and check its report; return the seed."""
    try:
        est.fit(X, y, groups=groups)
    finally:
        seed = _take_back_seed(est)
    _check_trial_budget(est, rho_fit)
    return seed


def _trial_budget(est, rho_fit, delta, X, y, groups):
    """``(epsilon, delta)`` at which ``est``'s plan spends ``rho_fit`` (zCDP),
    solved from ``_budget_plan`` (Gaussian without one; the report is checked
    after the fit). ``delta`` shrinks while the trial's epsilon would be 0."""
    if math.isinf(rho_fit):
        return math.inf, delta
    mu = math.sqrt(2.0 * rho_fit)
    while gaussian_epsilon(mu, delta) == 0.0:
        delta /= 10.0
    if est._algorithm is None:  # no public plan (e.g. a subclass overriding fit)
        return gaussian_epsilon(mu, delta), delta
    meta = est._validate_fit_data(X, y, groups).meta
    selections = est._budget_plan(meta).selection_phases
    if selections:
        # Random stopping composes rho-zCDP trials; a private partition selection
        # adds a delta outside any zCDP curve (a function of the configuration only).
        raise ValueError(
            f"{type(est).__name__} with {est.get_params(deep=False)!r} selects a "
            f"catalogue or label set privately (phase(s) {', '.join(selections)}), "
            "outside the rho-zCDP trials the search accounts. Pass the public catalogue "
            "or label set (AdaptiveWeightMF(items=...), JLMarginClassifier(classes=...)).")

    def plan_at(eps):
        with _budget_set(est, eps, delta):
            return est._budget_plan(meta).calibrate()

    return epsilon_for_rho(plan_at, rho_fit, delta), delta


def _check_trial_budget(est, rho_fit):
    """Refuse a trial whose report spends more than the per-trial budget."""
    if math.isinf(rho_fit):
        return
    if not est.privacy_report_.is_private:
        raise PrivacyBudgetError(
            f"A trial of {type(est).__name__} released values its guarantee does not "
            f"cover ({', '.join(est.privacy_report_.not_covered)}): pass them explicitly "
            "(e.g. the public catalogue or label set) so that every trial is private.")
    spent = report_rho(est.privacy_report_)
    if spent is None or spent > rho_fit * (1.0 + 1e-9):
        shown = "an undetermined amount" if spent is None else f"rho={spent:.6g}"
        raise PrivacyBudgetError(
            f"A trial of {type(est).__name__} spent {shown} (zCDP), more than the "
            f"per-trial budget rho={rho_fit:.6g}: without a budget plan (_budget_plan) "
            "it is calibrated as if Gaussian, and its other releases exceed the budget "
            "(a function of the configuration, not of the data). Expose its plan.")


def _check_private_pipeline(pipe, path=""):
    """Every fitted step of ``pipe`` is private or stateless; the final step is skdpp's."""
    final = pipe.steps[-1][1] if isinstance(pipe, Pipeline) else None
    if path == "" and not isinstance(final, BasePersonalizedEstimator):
        raise ValueError(
            f"PrivateRandomizedSearchCV needs a Pipeline ending in an estimator of skdpp; "
            f"its final step is {type(final).__name__}.")
    for name, step in _children(pipe):
        where = f"{path}__{name}" if path else name
        if _children(step) is not None:
            _check_private_pipeline(step, where)
        elif not _is_stateless(step) and not (
                hasattr(step, "get_params")
                and {"epsilon", "delta"} <= set(step.get_params(deep=False))):
            raise ValueError(
                f"Step {where!r} ({type(step).__name__}) of the Pipeline is fitted on the "
                "private data without a privacy guarantee. Replace it with a private "
                "transformer (skdpp.preprocessing, e.g. PrivateStandardScaler), fit it on "
                "public data and pass it prefitted in a FunctionTransformer, or drop it.")


def _replayable(caught):
    """The caught PrivacyLeakWarnings (functions of parameters and ``n_users`` only)."""
    return [(w.message, w.category) for w in caught
            if issubclass(w.category, PrivacyLeakWarning)]


def _replay(recorded):
    for message, category in recorded:
        if "1/n_users" not in str(message):  # the search warned about its delta already
            warnings.warn(message, category, stacklevel=3)


def _trial_predictions(est, X, groups):
    """Held-out predictions by ``_predict_unchecked`` when present (``predict``'s
    non-finite check would raise on one user's rows), else ``predict``."""
    final = est[-1] if isinstance(est, Pipeline) else est
    method = "_predict_unchecked" if hasattr(final, "_predict_unchecked") else "predict"
    return transform_then(est, method, X, groups=groups)


def _user_losses(est, loss, X_va, y_va, g_va, codes_va, n_held_out):
    """Each user's mean held-out loss (0 without held-out rows; a non-finite loss
    makes only its own user's mean non-finite, released as ``score_clip``)."""
    row_loss = np.asarray(loss(y_va, _trial_predictions(est, X_va, g_va)),
                          dtype=np.float64).reshape(-1)
    sums = np.bincount(codes_va, weights=row_loss, minlength=n_held_out.shape[0])
    return sums / np.maximum(n_held_out, 1)


_CLIP_STEPS = search_steps(quantile_grid())


def _search_epsilon(stopping, rho, delta, clip_share):
    """ε at δ of the search plus, if ``clip_share``, one ``clip_share * rho``-zCDP release."""
    if not clip_share:
        return stopping.epsilon(rho, delta)
    if math.isinf(rho):
        return math.inf
    return _cks_epsilon(
        lambda lam: stopping.zcdp_rdp(rho, lam) + clip_share * rho * np.asarray(lam, float),
        delta)


def _calibrate_search(stopping, epsilon, delta, clip_share):
    """The largest per-trial ρ whose search plus the automatic bound's
    ``clip_share * ρ * λ`` (adaptive composition) meets (ε, δ)."""
    if not clip_share or math.isinf(epsilon):
        return stopping.calibrate(epsilon, delta)

    def f(log_rho):
        return _search_epsilon(stopping, math.exp(log_rho), delta, clip_share) - epsilon

    hi = math.log(stopping.calibrate(epsilon, delta)) + 1e-9  # the bound only adds
    lo = hi - math.log1p(clip_share) - 1.0
    while f(lo) >= 0.0:
        lo -= 2.0
    if f(hi) <= 0.0:
        return math.exp(hi)
    return math.exp(largest_root_below(f, lo, hi))


def _own_mean_losses(loss, y, codes, n_users):
    """Each user's mean ``loss(y, its own mean label)`` (NaN without rows; an
    overflow makes only its own user's value non-finite)."""
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    counts = np.bincount(codes, minlength=n_users).astype(np.float64)
    sizes = np.maximum(counts, 1.0)
    # the mean without overflow for finite labels: sum of y / m per row
    means = np.bincount(codes, weights=y / sizes[codes], minlength=n_users)
    row_loss = np.asarray(loss(y, means[codes]), dtype=np.float64).reshape(-1)
    values = np.bincount(codes, weights=row_loss / sizes[codes], minlength=n_users)
    return np.where(counts > 0, values, np.nan)


def _sample_configurations(distributions, n, rng):
    """``n`` independent configurations: a dict uniformly, then each parameter
    (sorted by name) from its list or ``rvs(random_state=rng)``."""
    out = []
    for _ in range(n):  # loop over trials
        dist = distributions[int(rng.integers(len(distributions)))]
        out.append({name: dist[name].rvs(random_state=rng) if hasattr(dist[name], "rvs")
                    else dist[name][int(rng.integers(len(dist[name])))]
                    for name in sorted(dist)})
    return out


def _row_keys(X, y):
    """A hash of each row's content (numeric or not), for the canonical order."""
    try:
        Xa, ya = np.asarray(X), np.asarray(y)
        if Xa.dtype.kind in "biuf" and ya.dtype.kind in "biuf":
            return row_hashes(Xa, ya)
    except (TypeError, ValueError):
        pass
    Xa = np.asarray(X, dtype=object)
    Xa = Xa.reshape(Xa.shape[0], -1)
    words = [hash_ids(Xa[:, j]) for j in range(Xa.shape[1])]  # loop over columns
    words.append(hash_ids(np.asarray(y, dtype=object).reshape(-1)))
    return keyed_bits(np.zeros(2, dtype=np.uint64), "row-content", *words)


def _split_within_users(X, y, index, key, validation_size):
    """All, training and held-out row indices in canonical order (keyed within-user split)."""
    n = index.n_samples
    order = canonical_order(index.codes, index.n_users, _row_keys(X, y))
    block = UserBlock(np.empty((n, 0)), np.empty(n), order, index.users,
                      hash_ids(index.users), index.counts)
    train_mask = block.split_users_rows(1.0 - float(validation_size),
                                        block.row_uniforms(key, "validation"))
    rows = block.source_rows()
    return rows, rows[train_mask], rows[~train_mask]


def _results(configs, scores, trial_eps):
    results = {"params": [dict(c) for c in configs]}
    for name in sorted({n for c in configs for n in c}):
        values = np.ma.masked_all(len(configs), dtype=object)
        for i, c in enumerate(configs):  # loop over trials
            if name in c:
                values[i] = c[name]
        results[f"param_{name}"] = values
    results["validation_score"] = np.asarray(scores, dtype=float)
    results["trial_epsilon"] = np.asarray(trial_eps, dtype=float)
    return results

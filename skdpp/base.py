"""Base of skdpp's estimators: the fit template (:ref:`architecture`), privacy
parameters, ``groups`` and the cold start, ``personalize`` and the numerical
environment of every entry point."""

import copy
import functools
import inspect
import os
import sys
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from numbers import Real

import numpy as np
from sklearn import get_config
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from .exceptions import PrivacyLeakWarning
from .privacy import MIN_CLIP as _MIN_CLIP
from .privacy import Releaser
from .utils._executor import LocalExecutor
from .utils._grouped import UserIndex, _to_numpy, id_kinds, make_blocks
from .utils._random import FitRandomness

__all__ = ["BasePersonalizedEstimator", "FitData", "FitResult",
           "PersonalizedClassifierMixin", "PersonalizedRegressorMixin", "quiet_numerics"]

MULTITHREAD_MIN_FEATURES = 2048


def blas_threads(n_features):
    """BLAS thread limit of ``fit`` / ``personalize``: 1 below 2048 features, else None
    (the caller's pool; measurements in :ref:`architecture`)."""
    return 1 if n_features < MULTITHREAD_MIN_FEATURES else None


#: ``np.errstate`` of every entry point: no warning may depend on one user's values.
FIT_ERRSTATE = {"divide": "ignore", "over": "ignore", "invalid": "ignore", "under": "ignore"}


@contextmanager
def quiet_numerics():
    """Run a block under :data:`FIT_ERRSTATE` whatever the caller's ``np.errstate``: a
    warning that depends on one user's values would leak outside the releases."""
    with np.errstate(**FIT_ERRSTATE):
        yield


#: Public methods wrapped in :func:`quiet_numerics` in every subclass.
ENTRY_POINTS = ("fit", "personalize", "predict", "decision_function", "predict_proba",
                "predict_log_proba", "score", "recommend", "transform")

#: Entry points whose float output must be finite (:func:`_check_finite_output`).
CHECKED_OUTPUTS = ("predict", "decision_function", "predict_proba", "transform")


def _caller_stacklevel():
    """``stacklevel`` of a warning pointing at the first frame outside skdpp."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1  # the function that warns
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _check_finite_output(estimator, method, values):
    """Return ``values`` unless a float output is not finite (``ValueError`` naming rows)."""
    arr = None if np.isscalar(values) else np.asarray(values)
    if arr is None or arr.dtype.kind not in "fc":
        return values
    with quiet_numerics():
        finite = np.isfinite(arr)
    if finite.all():
        return values
    bad = np.flatnonzero(~finite.reshape(finite.shape[0], -1).all(axis=1)) \
        if finite.ndim else np.array([0])
    shown = ", ".join(map(str, bad[:10].tolist())) + (", ..." if len(bad) > 10 else "")
    raise ValueError(
        f"{type(estimator).__name__}.{method}: the output of {bad.shape[0]} of "
        f"{arr.shape[0] if arr.ndim else 1} row(s) (rows {shown}) is not finite "
        f"although X is finite: the values of X are too large for float64 arithmetic "
        f"with this model (beyond about 1.8e308). Rescale X (e.g. StandardScaler) and "
        f"refit.")


def linear_predictions(X, plain, linear_parts):
    """``plain`` predictions ``<x, a_r> + c_r`` with each non-finite row recomputed as
    ``s * (<x / s, a> + c / s)``, ``s = max(1, max_j |x_j|)``, from ``linear_parts(rows)
    -> (A, c)`` of shapes (rows, n_outputs, n_features) and (rows, n_outputs)."""
    rows, scaled, s = scaled_linear_scores(X, plain, linear_parts)
    if rows is None:
        return plain
    with quiet_numerics():
        out = np.array(plain, dtype=np.float64).reshape(plain.shape[0], -1)
        out[rows] = s[:, None] * scaled
    return out.reshape(plain.shape)


def scaled_linear_scores(X, plain, linear_parts):
    """``(rows, scaled, s)`` of :func:`linear_predictions` (``rows`` None if all finite);
    ``scaled`` keeps the signs and ordering of ``<x, a> + c``."""
    with quiet_numerics():
        bad = ~np.isfinite(plain.reshape(plain.shape[0], -1)).all(axis=1)
        if not bad.any():
            return None, None, None
        rows = np.flatnonzero(bad)
        A, c = linear_parts(rows)
        Xr = np.asarray(X[rows], dtype=np.float64)
        s = np.maximum(np.max(np.abs(Xr), axis=1, initial=0.0), 1.0)
        scaled = np.einsum("rd,rpd->rp", Xr / s[:, None], A) + c / s[:, None]
    return rows, scaled, s


def _quiet_entry_point(method, name):
    @functools.wraps(method)
    def entry_point(self, *args, **kwargs):
        with quiet_numerics():  # looked up at call time: tests patch it
            result = method(self, *args, **kwargs)
        if name in CHECKED_OUTPUTS:
            _check_finite_output(self, name, result)
        return result

    entry_point._quiet_entry_point = True
    return entry_point


def check_unclipped(estimator, names):
    """Raise if a bound of ``names`` is ``None`` (unbounded sensitivity) with finite epsilon."""
    if estimator.epsilon == np.inf:
        return
    for name in names:
        if getattr(estimator, name, "absent") is None:
            auto = any(isinstance(c, StrOptions) and "auto" in c.options
                       for c in getattr(estimator, "_parameter_constraints", {}).get(name, ()))
            remedy = f"a positive {name}, 'auto'" if auto else f"a positive {name}"
            raise ValueError(
                f"{name}=None (no clipping) gives unbounded sensitivity and is only "
                f"allowed with epsilon=np.inf; got epsilon={estimator.epsilon!r}. Pass "
                f"{remedy}, or epsilon=np.inf for the non-private baseline.")


@contextmanager
def _fit_environment(n_features):
    """:func:`quiet_numerics` and the :func:`blas_threads` limit, restored after."""
    limit = blas_threads(n_features)
    with quiet_numerics(), (nullcontext() if limit is None
                            else threadpool_limits(limits=limit, user_api="blas")):
        yield


_INPUT_ATTRIBUTES = ("n_features_in_", "feature_names_in_")


@dataclass
class FitData:
    """Validated ``X``, ``y``, the users' ``index``, the public ``meta`` and the fitted
    ``attributes`` validation decides (set only after the fit)."""

    X: object
    y: object
    index: UserIndex
    meta: dict = field(default_factory=dict)
    attributes: dict = field(default_factory=dict)


@dataclass
class FitResult:
    """An algorithm's ``run`` result: ``attributes``, the names of the ``released`` and
    ``local`` (joint DP) ones, report ``notes`` and ``not_covered`` released names."""

    attributes: dict
    released: tuple = ()
    local: tuple = ()
    notes: tuple = ()
    not_covered: tuple = ()


def _reject_booleans(estimator, names):
    """Reject a boolean in the numeric parameters ``names`` (numeric constraints admit it)."""
    for name in names:
        value = getattr(estimator, name)
        if isinstance(value, (bool, np.bool_)):
            raise ValueError(
                f"The '{name}' parameter must be a number, got the boolean {value!r}. "
                "Pass an int or float instead.")


class BasePersonalizedEstimator(BaseEstimator):
    """Base class for user-level DP personalized estimators.

    Subclasses declare ``epsilon``, ``delta`` and ``random_state``, ``_algorithm``,
    ``_fit_config(meta)``, ``_predict_unchecked(X, groups)`` (behind ``predict``; the
    search scores with it) and ``_fit_personal(X, y, index) -> dict`` of the
    ``_personal_attributes`` (:ref:`architecture`).

    Notes
    -----
    **Privacy unit.** One user: all rows sharing a ``groups`` value, under
    *replace one user's entire data*; the number of users is public.
    ``groups=None`` makes every row its own user (row-level DP).

    **Quiet numerics.** Every public entry point runs under
    :func:`quiet_numerics`, whatever the caller's ``np.errstate`` or warnings
    filters. Predictions on finite inputs are finite
    (:func:`linear_predictions`) or ``predict`` raises a ``ValueError`` naming
    the rows beyond the float64 range.

    **Joint DP.** Each personal part is a function of the DP releases and that
    user's rows only (billboard lemma). ``epsilon=np.inf``: no noise (said in
    the report).
    """

    _parameter_constraints: dict = {
        "epsilon": [Interval(Real, 0, np.inf, closed="right")],
        "delta": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    _personal_attributes: tuple = ()  # per-user parameters, aligned with user_ids_
    _clip_bounds: tuple = ("clip_norm",)  # None: no clipping (check_unclipped)
    _algorithm = None  # the module with plan(config, meta) and run(...)

    def __init_subclass__(cls, **kwargs):
        """Wrap each :data:`ENTRY_POINTS` method once in :func:`quiet_numerics`."""
        super().__init_subclass__(**kwargs)
        for hook in ("_fit_core", "_budget_plan", "_fit_executor"):
            if hook in vars(cls):  # ignored, or a plan other than the run's releases
                raise TypeError(
                    f"{cls.__name__} defines {hook}: the fit template calls only "
                    f"_algorithm.plan(config, meta) and _algorithm.run(...). Declare "
                    f"_algorithm and _fit_config(meta) instead (docs: architecture).")
        for name in ENTRY_POINTS:
            method = inspect.getattr_static(cls, name, None)
            if not inspect.isfunction(method) or getattr(method, "_quiet_entry_point", False):
                continue
            setattr(cls, name, _quiet_entry_point(method, name))

    # Route ``groups`` by default once ``sklearn.set_config(enable_metadata_routing=True)``.
    __metadata_request__fit = {"groups": True}
    __metadata_request__predict = {"groups": True}
    __metadata_request__score = {"groups": True}

    def _validate_privacy_params(self):
        """Checks ``_parameter_constraints`` cannot express (booleans, ``*clip*`` range)."""
        _reject_booleans(self, ("epsilon", "delta"))
        for name, value in self.get_params(deep=False).items():
            if "clip" not in name or value is None or isinstance(value, str):
                continue
            if not _MIN_CLIP <= value < np.inf:
                raise ValueError(
                    f"The {name!r} parameter must be a finite bound >= {_MIN_CLIP:g}, got "
                    f"{value!r}: at smaller scales floating-point rounding can exceed the "
                    f"stated sensitivity. Rescale the data (e.g. StandardScaler) instead.")
        # getattr: transformers of skdpp.preprocessing call this unbound
        check_unclipped(self, getattr(self, "_clip_bounds", ("clip_norm",)))

    def fit(self, X, y, groups=None):
        """Fit the shared part under user-level DP and every user's personal part.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,)
            Targets.
        groups : array-like of shape (n_samples,), default=None
            User id of each row (the privacy unit). ``None``: every row is its
            own user (row-level DP).

        Returns
        -------
        self : object

        Notes
        -----
        The fit template of :ref:`architecture`: overspending raises
        :class:`~skdpp.exceptions.PrivacyBudgetError`; a fit that raises leaves the
        estimator unfitted.
        """
        try:
            self._discard_fitted_attributes()  # e.g. a distributed fit's handle
            with quiet_numerics():
                data = self._validate_fit_data(X, y, groups)
            self._check_delta(data.meta["n_users"])
            randomness = FitRandomness(self.random_state)
            with _fit_environment(data.meta["n_features"]):
                executor = LocalExecutor(self._make_blocks(data, randomness))
                fitted = self._fit_executor(executor, randomness, data.meta)
        except BaseException:
            self._discard_fitted_attributes()
            raise
        self._set_fitted_attributes({**data.attributes, **fitted})
        return self

    def _fit_executor(self, executor, randomness, meta):
        """Config, plan, releaser, run, report: the fitted attributes (also Dask's driver)."""
        config = self._fit_config(meta)
        release = Releaser(self._algorithm.plan(config, meta), randomness.noise,
                           seeded=randomness.seeded)
        result = self._algorithm.run(executor, release, randomness, meta, config)
        report = release.report(n_users=meta["n_users"], released=result.released,
                                local=result.local, notes=result.notes,
                                not_covered=result.not_covered)
        return {**result.attributes, "privacy_report_": report}

    def _validate_fit_data(self, X, y, groups):
        """Validate parameters, ``X``, ``y`` and ``groups`` into :class:`FitData`."""
        self._validate_params()
        self._validate_privacy_params()
        _reject_sparse(self, X)
        probe = copy.copy(self)  # validate_data(reset=True) sets n_features_in_ on it
        # the finiteness check sums X: an overflow warning would depend on one user
        with np.errstate(over="ignore", invalid="ignore"):
            X, y = validate_data(probe, X, y, reset=True, **self._validate_data_kwargs())
        index = UserIndex.from_groups(groups, X.shape[0])
        inputs = {name: getattr(probe, name) for name in _INPUT_ATTRIBUTES
                  if hasattr(probe, name)}
        return FitData(
            X=X, y=y, index=index,
            meta={"n_users": int(index.n_users), "n_features": int(X.shape[1])},
            attributes={**inputs, "user_ids_": index.users, "n_users_": int(index.n_users),
                        "_fitted_with_groups": groups is not None},
        )

    def _validate_data_kwargs(self):
        """Keyword arguments of ``validate_data`` in ``fit``."""
        return {"y_numeric": True}

    def _make_blocks(self, data, randomness):
        """Blocks of whole users in canonical order (override for other layouts)."""
        return make_blocks(data.X, data.y, data.index)

    def _fit_config(self, meta):
        """The algorithm's frozen configuration from the parameters and public ``meta``."""
        raise NotImplementedError(f"{type(self).__name__} declares no algorithm configuration")

    def _budget_plan(self, meta):
        """The fit's :class:`~skdpp.privacy.BudgetPlan` from public values only."""
        return self._algorithm.plan(self._fit_config(meta), meta)

    def _set_fitted_attributes(self, attributes):
        for name, value in attributes.items():
            setattr(self, name, value)

    def _discard_fitted_attributes(self):
        """Remove every fitted attribute (a failed fit leaves no usable model)."""
        for name in [n for n in vars(self) if n.endswith("_") and not n.startswith("__")]:
            delattr(self, name)

    def _check_delta(self, n_users):
        if self.epsilon != np.inf and self.delta >= 1.0 / n_users:
            warnings.warn(
                f"delta={self.delta!r} is at least 1/n_users = 1/{n_users}: publishing "
                f"one random user's data would meet this guarantee. Use delta much "
                f"smaller than 1/n_users (e.g. 1/n_users**1.1).",
                PrivacyLeakWarning, stacklevel=_caller_stacklevel())

    def _validate_personal_input(self, X, y):
        """Validate data for :meth:`personalize` as ``fit`` does, without a reset."""
        return validate_data(self, X, y, reset=False, **self._validate_data_kwargs())

    def _has_user_ids(self):
        """Whether ``user_ids_`` holds caller-given ids (not row numbers)."""
        return bool(getattr(self, "_fitted_with_groups", True))

    def _user_codes(self, groups, n_samples):
        """Each row's position in ``user_ids_`` (-1: cold start); warns for ``groups=None``
        on a model fitted with ids, ids for one fitted without, unseen id types."""
        name = type(self).__name__
        if groups is None:
            if self._has_user_ids():
                warnings.warn(_dropped_groups_message(name), UserWarning,
                              stacklevel=_caller_stacklevel())
            return np.full(n_samples, -1, dtype=np.intp)
        groups = _to_numpy(groups)
        if groups.ndim != 1 or groups.shape[0] != n_samples:
            raise ValueError(f"groups must be 1-D with one user id per row of X: expected "
                             f"shape ({n_samples},), got {groups.shape}.")
        if not self._has_user_ids():
            warnings.warn(
                f"{name} was fitted without user ids (groups=None: row-level DP), so "
                f"these ids match no user: every row gets the cold-start prediction. "
                f"To personalize, fit with groups=... (in Pipeline or a search, call "
                f"sklearn.set_config(enable_metadata_routing=True) to route groups).",
                UserWarning, stacklevel=_caller_stacklevel())
            return np.full(n_samples, -1, dtype=np.intp)
        known = UserIndex.from_groups(self.user_ids_, self.user_ids_.shape[0])
        codes = known.lookup(groups)
        unseen = codes < 0
        mismatch = unseen.any() and self._id_type_mismatch(
            groups[unseen], "these rows get the cold-start prediction, as new users")
        if mismatch:
            warnings.warn(mismatch, UserWarning, stacklevel=_caller_stacklevel())
        return codes

    def _id_type_mismatch(self, ids, consequence):
        """The message for ``ids`` of a type no fitted id has ("" if none)."""
        fitted, given = id_kinds(self.user_ids_), id_kinds(ids)
        if given <= fitted:
            return ""
        return (
            f"{type(self).__name__}: the user ids in groups are of type "
            f"{' and '.join(sorted(given - fitted))}, but the model's user ids "
            f"(user_ids_) are of type {' and '.join(sorted(fitted))} (dtype "
            f"{self.user_ids_.dtype}). Ids of different types never match: "
            f"{consequence}. If they are users seen in fit, pass ids of the type used "
            f"in fit, e.g. {_conversion_hint(self.user_ids_)}.")

    def personalize(self, X, y, groups):
        """Fit personal parts for the given users from their own rows.

        Uses only the released shared part and each user's rows (Snedeker et
        al. 2025, Corollary 11): the shared part and ``privacy_report_`` are
        unchanged. Known users are refitted; new users join ``user_ids_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The users' rows.
        y : array-like of shape (n_samples,)
            Their targets.
        groups : array-like of shape (n_samples,)
            User id of each row, of the type given to ``fit`` (required).

        Returns
        -------
        self : object

        Raises
        ------
        ValueError
            If ``groups`` is None or the model was fitted without user ids.
        TypeError
            If ``groups`` holds ids of a type no fitted id has.
        """
        check_is_fitted(self)
        if groups is None:
            raise ValueError("personalize requires groups (one user id per row); got "
                             "groups=None. Pass the user ids of the rows.")
        if not self._has_user_ids():
            raise ValueError(
                f"{type(self).__name__} was fitted without user ids (groups=None), so "
                f"its user_ids_ are row numbers and personalize cannot add users. "
                f"Refit with groups=...; if every row is a different user, pass "
                f"groups=np.arange(n_samples) (or your own row ids) to fit.")
        _reject_sparse(self, X)
        X, y = self._validate_personal_input(X, y)
        index = UserIndex.from_groups(groups, X.shape[0])
        mismatch = self._id_type_mismatch(
            index.users, "personalize would add them as new users (give new users "
            "ids of the fitted type too) and change the type of user_ids_")
        if mismatch:
            raise TypeError(mismatch)
        with _fit_environment(X.shape[1]):
            personal = self._fit_personal(X, y, index)
        self._merge_personal(index.users, personal)
        return self

    def _merge_personal(self, new_ids, personal):
        """Insert or replace the personal parameters of ``new_ids`` (sorted ``user_ids_``)."""
        merged_index = UserIndex.from_groups(np.concatenate([self.user_ids_, new_ids]))
        pos_old = merged_index.lookup(self.user_ids_)
        pos_new = merged_index.lookup(new_ids)
        for name in self._personal_attributes:
            old, new = getattr(self, name), np.asarray(personal[name])
            merged = np.zeros((merged_index.n_users,) + old.shape[1:],
                              dtype=np.result_type(old, new))
            merged[pos_old] = old
            merged[pos_new] = new
            setattr(self, name, merged)
        self.user_ids_ = merged_index.users

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


_SCORE_DOC = """Return the {what} of the personalized predictions.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test rows.
        y : array-like of shape (n_samples,)
            {y}
        groups : array-like of shape (n_samples,), default=None
            User id of each row (unseen users get the cold-start prediction).
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the test rows in the score (evaluation only).

        Returns
        -------
        score : float
            {score}
        """


class PersonalizedRegressorMixin(RegressorMixin):
    """``score`` as the R² of ``predict(X, groups)`` (scikit-learn's convention)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # a noisy fit on scikit-learn's tiny check data cannot meet their thresholds
        tags.regressor_tags.poor_score = True
        return tags

    def score(self, X, y, groups=None, sample_weight=None):
        return _r2(y, self.predict(X, groups=groups), sample_weight)

    score.__doc__ = _SCORE_DOC.format(
        what="coefficient of determination R²", y="True targets.",
        score="R² of ``self.predict(X, groups=groups)`` (computed on ``y`` and the\n"
              "            predictions divided by their largest magnitude if the sums "
              "overflow).")


class PersonalizedClassifierMixin(ClassifierMixin):
    """``score`` as the accuracy of ``predict(X, groups)``."""

    def score(self, X, y, groups=None, sample_weight=None):
        return float(accuracy_score(y, self.predict(X, groups=groups),
                                    sample_weight=sample_weight))

    score.__doc__ = _SCORE_DOC.format(what="accuracy", y="True labels.",
                                      score="Mean accuracy of ``self.predict(X, groups=groups)``.")


def _r2(y, pred, sample_weight):
    """R² of ``pred``; rescaled by the largest magnitude when the sums overflow."""
    with quiet_numerics():
        score = float(r2_score(y, pred, sample_weight=sample_weight))
        if not np.isfinite(score):
            y = np.asarray(y, dtype=np.float64)
            scale = max(float(np.max(np.abs(y), initial=0.0)),
                        float(np.max(np.abs(pred), initial=0.0)))
            if 0.0 < scale < np.inf:
                score = float(r2_score(y / scale, pred / scale, sample_weight=sample_weight))
    return score


def _reject_sparse(estimator, X):
    """Refuse a sparse ``X`` with the recipe."""
    if hasattr(X, "tocsr") and hasattr(X, "nnz"):  # a scipy.sparse matrix or array
        raise TypeError(
            f"{type(estimator).__name__} needs dense X; got a sparse "
            f"{type(X).__name__}. Densify it first: "
            f"OneHotEncoder(sparse_output=False), or the step "
            f"FunctionTransformer(skdpp.pipeline.to_dense, "
            f"accept_sparse=True) before it (user guide, 'Sparse input').")


def _dropped_groups_message(name):
    """The warning for ``groups=None`` on a model fitted with ids."""
    if not get_config().get("enable_metadata_routing", False):
        hint = ("Metadata routing is disabled (scikit-learn's default), so Pipeline, "
                "GridSearchCV and cross_validate cannot pass groups on: call "
                "sklearn.set_config(enable_metadata_routing=True).")
    else:
        hint = ("Metadata routing is enabled, but string scorers (e.g. scoring='r2') never "
                "pass groups: use scoring=None or skdpp.metrics.make_personalized_scorer.")
    return (f"{name} was fitted with user ids (groups) but was called with groups=None: "
            f"every row is treated as a new user and gets the cold-start prediction. "
            f"Pass the rows' user ids as groups. {hint} scikit-learn's cross_val_predict "
            f"never passes groups to predict: use skdpp.model_selection.cross_val_predict.")


def _conversion_hint(user_ids):
    types = id_kinds(user_ids)
    if user_ids.dtype.kind in "biuf":
        return f"np.asarray(groups).astype({user_ids.dtype.name!r})"
    if types == {"str"}:
        return "np.asarray(groups).astype(str)"
    if types == {"number"}:
        return "np.asarray(groups).astype(np.int64)"
    return "convert them to the types of user_ids_"


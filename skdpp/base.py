"""Shared base for skdpp's personalized, user-level differentially private estimators.

Every estimator in skdpp learns a *shared* part of the model, released under
user-level differential privacy, and a *personal* part for every user, computed
from the shared part and that user's rows only (the billboard model). This module
holds what they all share:

* the privacy parameters ``epsilon`` / ``delta`` and their validation,
* the meaning of ``groups`` (one user id per row; ``None`` means every row is its
  own user) and the mapping of ids to users at predict time (cold start for
  unseen users),
* :meth:`BasePersonalizedEstimator.personalize`, which fits personal parts for
  new or known users without touching the shared part or the privacy report,
* building ``privacy_report_`` from the fit's accountant,
* the default metadata requests that let ``Pipeline``, ``GridSearchCV`` and
  ``cross_validate`` route ``groups`` once metadata routing is enabled.
"""

import functools
import inspect
import os
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from numbers import Real

import numpy as np
from sklearn import get_config
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from .exceptions import PrivacyLeakWarning
from .privacy import MIN_CLIP as _MIN_CLIP
from .privacy import Releaser
from .utils._executor import LocalExecutor
from .utils._grouped import UserIndex, id_kinds, make_blocks
from .utils._random import FitRandomness

__all__ = [
    "BasePersonalizedEstimator",
    "FitData",
    "FitResult",
    "PersonalizedClassifierMixin",
    "PersonalizedRegressorMixin",
    "quiet_numerics",
]

#: Number of features from which ``fit`` and ``personalize`` leave the BLAS
#: thread pool as the caller set it; below it they run BLAS on one thread.
#: See :func:`blas_threads`.
MULTITHREAD_MIN_FEATURES = 2048


def blas_threads(n_features):
    """BLAS threads used by ``fit`` / ``personalize`` on ``n_features`` columns.

    The rule (parameter-free, a function of the public problem size only, so
    a fit's rounding does not depend on the machine's load): **one BLAS
    thread** when ``n_features < MULTITHREAD_MIN_FEATURES`` (2048), otherwise
    ``None`` (the pool is left as the caller or the library set it).

    Why: every round of an skdpp fit runs over blocks of whole users of at
    most ~32768 rows, so each BLAS call is at most ``32768 x d`` by ``d x k``
    (or a ``d x d`` Gram of one block) whatever the number of users: larger
    problems make more calls, not larger ones. On a 2-core machine such
    calls are memory-bound or too small to amortise OpenBLAS's thread
    hand-off. Measured on the 2-core development machine (shared, see
    ``benchmarks/results/scaling.md``): with two threads instead of one,
    ``32768 x d`` products and Grams for ``d <= 1024`` took 0.7-20x the
    one-thread wall time (7.7x for ``(32768 x 50) @ (50 x 5)``, 14x for its
    Gram); whole fits (FedRep, AltMin, 10^5 users) gained at most 12% wall
    for 1.6-1.7x the CPU, and ran 1.8-1.9x *slower* beside one CPU-bound
    process. The largest products gained only sometimes (the Gram of a
    ``32768 x 1024`` block: 1.7x slower near idle, 0.71x the time beside a
    CPU-bound process; a ``1000^3`` product: 1.3x slower / 0.54x), so
    ``d >= 2048`` is left to the caller (not measured).

    On Dask workers the same holds without a limit: Dask's nanny starts
    them with ``OPENBLAS_NUM_THREADS=1`` (:func:`skdpp.distributed.local_cluster`).

    The limit never raises the thread count: a caller's outer
    ``threadpoolctl.threadpool_limits`` (or ``OPENBLAS_NUM_THREADS``) below
    it is kept, and the previous limits are restored when the fit returns
    or raises.

    Parameters
    ----------
    n_features : int
        Number of columns of ``X``.

    Returns
    -------
    limit : int or None
        The BLAS thread limit (``None``: unchanged).
    """
    return 1 if n_features < MULTITHREAD_MIN_FEATURES else None


#: Floating-point error handling in force inside every entry point (fit,
#: personalize, predict, decision_function, score, the search's trials, Dask
#: tasks): every floating-point condition is ignored, so no warning and no
#: exception can depend on one user's values (DESIGN section 7, "quiet numerics").
#: Quiet does not mean wrong: each computation that can overflow either handles
#: non-finite intermediates explicitly or its entry point checks its output.
FIT_ERRSTATE = {"divide": "ignore", "over": "ignore", "invalid": "ignore", "under": "ignore"}


@contextmanager
def quiet_numerics():
    """Run a block under :data:`FIT_ERRSTATE` whatever the caller's ``np.errstate``.

    The one guard of every public entry point (and of the search's trials and
    the Dask tasks): a floating-point warning, or under a caller's
    ``np.errstate(all="raise")`` an exception, that depends on one user's
    values would reveal something about that user outside the accounted
    releases.
    """
    with np.errstate(**FIT_ERRSTATE):
        yield


#: Public methods that run under :func:`quiet_numerics` in every subclass of
#: :class:`BasePersonalizedEstimator` (wrapped when the class is created, see
#: ``BasePersonalizedEstimator.__init_subclass__``): a new estimator cannot
#: forget the guard.
ENTRY_POINTS = ("fit", "personalize", "predict", "decision_function", "predict_proba",
                "predict_log_proba", "score", "recommend", "transform")

#: Entry points whose floating-point output must be finite: a non-finite value
#: computed from finite inputs raises :func:`_check_finite_output`'s ValueError
#: instead of being returned (quiet must not mean wrong).
CHECKED_OUTPUTS = ("predict", "decision_function", "predict_proba", "transform")


def _caller_stacklevel():
    """``stacklevel`` of a warning issued by the caller of this function that
    points at the first frame outside skdpp (the user's call), however many
    skdpp frames (entry-point guard, unchecked core) lie in between."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1  # the function that warns
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _check_finite_output(estimator, method, values):
    """Raise a clear ``ValueError`` if the float array ``values`` has a non-finite entry.

    ``values`` is the output of ``estimator.method`` on finite inputs (``X``
    is validated finite before any computation), so a non-finite entry means
    that a prediction left the range of float64 (about 1.8e308), even with
    the overflow-safe evaluation of :func:`linear_predictions`. Non-float
    outputs (labels) are returned as they are.
    """
    values_arr = np.asarray(values) if not np.isscalar(values) else None
    if values_arr is None or values_arr.dtype.kind not in "fc":
        return values
    with quiet_numerics():
        finite = np.isfinite(values_arr)
    if finite.all():
        return values
    bad_rows = np.flatnonzero(~finite.reshape(finite.shape[0], -1).all(axis=1)) \
        if finite.ndim else np.array([0])
    shown = ", ".join(str(int(i)) for i in bad_rows[:10])
    more = ", ..." if bad_rows.shape[0] > 10 else ""
    raise ValueError(
        f"{type(estimator).__name__}.{method}: the output of {bad_rows.shape[0]} of "
        f"{values_arr.shape[0] if values_arr.ndim else 1} row(s) (rows {shown}{more}) is "
        f"not finite although X is finite: the values of X are too large for float64 "
        f"arithmetic with this model (a prediction would exceed about 1.8e308 in "
        f"magnitude). Rescale X (e.g. divide it by a constant, or StandardScaler) and "
        f"refit on the rescaled data."
    )


def linear_predictions(X, plain, linear_parts):
    """Predictions ``<x, a_r> + c_r`` that do not overflow in their intermediates.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Validated (finite) rows.
    plain : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        The predictions computed the ordinary way (kept bit for bit where
        finite).
    linear_parts : callable
        ``linear_parts(rows) -> (A, c)`` with ``A`` of shape ``(len(rows),
        n_outputs, n_features)`` and ``c`` of shape ``(len(rows), n_outputs)``:
        the affine map of each given row.

    Returns
    -------
    pred : ndarray like ``plain``
        ``plain``, where each row with a non-finite entry is recomputed as
        ``s * (<x / s, a> + c / s)`` with ``s = max(1, max_j |x_j|)``: a row
        whose products or partial sums overflowed while its prediction is
        within the float range gets its finite value; a prediction really
        beyond the range stays non-finite (and the entry point raises). Row by
        row: a row's value depends on that row only.
    """
    rows, scaled, s = scaled_linear_scores(X, plain, linear_parts)
    if rows is None:
        return plain
    with quiet_numerics():
        out = np.array(plain, dtype=np.float64).reshape(plain.shape[0], -1)
        out[rows] = s[:, None] * scaled
    return out.reshape(plain.shape)


def scaled_linear_scores(X, plain, linear_parts):
    """The rows of ``plain`` with a non-finite entry, and their scores divided by ``s``.

    See :func:`linear_predictions`. Returns ``(rows, scaled, s)``: ``rows``
    is None when every prediction is finite; ``scaled`` (shape ``(len(rows),
    n_outputs)``) is ``<x / s, a> + c / s``, which has the signs and the
    ordering across outputs of ``<x, a> + c`` (``s >= 1``) and is finite
    whenever the model's weights are (``|x_j / s| <= 1``).
    """
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
    """``method`` run under :func:`quiet_numerics` (its output checked if ``name`` says so)."""

    @functools.wraps(method)
    def entry_point(self, *args, **kwargs):
        # ``quiet_numerics`` is looked up at call time (tests patch it to show
        # that the guard is what keeps these calls silent).
        with quiet_numerics():
            result = method(self, *args, **kwargs)
        if name in CHECKED_OUTPUTS:
            _check_finite_output(self, name, result)
        return result

    entry_point._quiet_entry_point = True
    return entry_point


@contextmanager
def _fit_environment(n_features):
    """The numerical environment of a fit, for the duration of a ``with`` block.

    * BLAS threads: :func:`blas_threads`.
    * Floating-point errors: all ignored (:func:`quiet_numerics`), whatever
      the caller's ``np.errstate``: a warning, or under ``np.errstate(all=
      "raise")`` an exception, whose occurrence depends on one user's values
      would leak (DESIGN section 7).
    """
    with quiet_numerics():
        limit = blas_threads(n_features)
        if limit is None:
            yield
            return
        with threadpool_limits(limits=limit, user_api="blas"):
            yield


@dataclass
class FitData:
    """Validated training data of one fit.

    Attributes
    ----------
    X, y : ndarray
        Validated data (not copied unless validation had to).
    index : UserIndex
        The users of the rows.
    meta : dict
        Public metadata the algorithm may use (``n_users``, ``n_features``
        and estimator-specific public values such as the label set). The
        algorithm sees the data only through blocks and ``meta``, so the same
        core runs in-process and on a cluster.
    attributes : dict
        Fitted attributes decided by validation (``user_ids_``,
        ``n_users_``, ...), set with the others at the end of ``fit``.
    """

    X: object
    y: object
    index: UserIndex
    meta: dict = field(default_factory=dict)
    attributes: dict = field(default_factory=dict)


@dataclass
class FitResult:
    """What an algorithm's core returns to the fit template.

    Attributes
    ----------
    attributes : dict
        Fitted attributes (released values and personal parts).
    released : tuple of str
        Names of the released attributes (for the report).
    local : tuple of str
        Names of the personal attributes (kept local, joint DP).
    notes : tuple of str
        Notes for the report.
    not_covered : tuple of str
        Released attributes the guarantee does not cover (e.g. a catalogue
        inferred from the data as is); the report's headline names them and
        its ``is_private`` is False.
    """

    attributes: dict
    released: tuple = ()
    local: tuple = ()
    notes: tuple = ()
    not_covered: tuple = ()


class BasePersonalizedEstimator(BaseEstimator):
    """Base class for user-level DP personalized estimators.

    Subclasses declare ``_algorithm`` (the module implementing the paper's
    algorithm: ``plan`` and ``run``) and ``_fit_config(meta)`` (its frozen
    configuration), implement ``_predict_unchecked(X, groups)`` (raw
    predictions, no guard and no check; the search scores its trials with it)
    and a public ``predict`` returning it, and the two hooks used by
    :meth:`personalize`:

    * ``_fit_personal(X, y, index) -> dict`` returning the personal parameters
      of the users of ``index`` (arrays whose first axis is ``index.n_users``,
      keyed by the fitted attribute names listed in ``_personal_attributes``),
      computed from the released shared part and each user's own rows only;
    * ``_validate_personal_input(X, y)`` (optional) to validate data the same
      way ``fit`` does without resetting ``n_features_in_``.

    Parameters common to all subclasses (declared by each subclass's
    ``__init__``): ``epsilon``, ``delta``, ``random_state``.

    Notes
    -----
    **Privacy unit.** One user: all rows sharing a ``groups`` value. The
    neighbouring relation is *replace one user's entire data*; the number of
    users is public. ``groups=None`` makes every row its own user, so the
    guarantee degrades gracefully to row-level DP.

    **Quiet numerics.** Every public entry point (``fit``, ``personalize``,
    ``predict``, ``decision_function``, ``score``, ...) runs with all numpy
    floating-point conditions ignored (:func:`quiet_numerics`), whatever the
    caller's ``np.errstate`` or warnings filters: no warning or exception may
    depend on one user's values. Predictions on finite inputs are finite
    (products that overflow in an intermediate are re-evaluated on the row
    scaled by its largest entry) or ``predict`` raises a ``ValueError`` naming
    the rows whose prediction exceeds the float64 range.

    **Joint DP.** The shared part (and every other DP release of ``fit``) is
    differentially private; each user's personal part is a function of the
    shared part and that user's rows only, so the collection of personal
    parts is jointly DP (billboard lemma).

    ``epsilon=np.inf`` runs the same algorithm without privacy noise (the
    non-private baseline); the report then says so.
    """

    _parameter_constraints: dict = {
        "epsilon": [Interval(Real, 0, np.inf, closed="right")],
        "delta": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    # Fitted attributes holding per-user parameters, aligned with ``user_ids_``.
    _personal_attributes: tuple = ()

    #: The module (or object) implementing the paper's algorithm, with
    #: ``plan(config, meta) -> BudgetPlan`` (every release the run will make)
    #: and ``run(executor, release, randomness, meta, config) -> FitResult``
    #: (the driver; every release through ``release``). ``config`` is
    #: :meth:`_fit_config`'s frozen configuration. See the architecture page.
    _algorithm = None

    def __init_subclass__(cls, **kwargs):
        """Run every public entry point of ``cls`` under :func:`quiet_numerics`.

        Each method named in :data:`ENTRY_POINTS` that ``cls`` has (its own or
        inherited, mixins included) is wrapped once, so no floating-point
        warning or exception can depend on the data, whatever the caller's
        ``np.errstate`` or warnings filters; the outputs named in
        :data:`CHECKED_OUTPUTS` are checked finite (a clear ``ValueError``
        otherwise). By construction: a subclass cannot forget the guard.
        """
        super().__init_subclass__(**kwargs)
        for hook in ("_fit_core", "_budget_plan", "_fit_executor"):
            if hook in vars(cls):
                # The template calls only the algorithm's plan and run: an override of
                # these would be ignored, or would plan other releases than the run makes.
                raise TypeError(
                    f"{cls.__name__} defines {hook}: the fit template of "
                    f"BasePersonalizedEstimator calls only _algorithm.plan(config, meta) and "
                    f"_algorithm.run(...). Declare _algorithm and _fit_config(meta) instead "
                    f"(see the architecture page of the docs).")
        for name in ENTRY_POINTS:
            method = inspect.getattr_static(cls, name, None)
            if not inspect.isfunction(method) or getattr(method, "_quiet_entry_point", False):
                continue
            setattr(cls, name, _quiet_entry_point(method, name))

    # Route ``groups`` by default once ``sklearn.set_config(enable_metadata_routing=True)``.
    __metadata_request__fit = {"groups": True}
    __metadata_request__predict = {"groups": True}
    __metadata_request__score = {"groups": True}

    # ------------------------------------------------------------------ #
    # Validation
    # ------------------------------------------------------------------ #
    def _validate_privacy_params(self):
        """Checks that ``_parameter_constraints`` cannot express.

        Booleans are rejected for ``epsilon`` and ``delta`` (``True`` is a
        ``Real`` in Python); every clip bound (a parameter whose name contains
        ``clip``) must be finite and at least ``1e-100``; ``clip_norm=None``
        (no clipping, unbounded sensitivity) is only allowed with
        ``epsilon=np.inf``.
        """
        for name in ("epsilon", "delta"):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)):
                raise ValueError(
                    f"The '{name}' parameter must be a float, got the boolean {value!r}. "
                    f"Pass a number, e.g. {name}=1.0."
                )
        for name, value in self.get_params(deep=False).items():
            if "clip" not in name or value is None or isinstance(value, str):
                continue
            if not _MIN_CLIP <= value < np.inf:
                raise ValueError(
                    f"The {name!r} parameter must be a finite bound >= {_MIN_CLIP:g}, got "
                    f"{value!r}: at smaller scales floating-point rounding can exceed the "
                    f"stated sensitivity. Rescale the data (e.g. StandardScaler) instead."
                )
        clip_norm = getattr(self, "clip_norm", "absent")
        if clip_norm is None and self.epsilon != np.inf:
            raise ValueError(
                f"clip_norm=None (no clipping) gives unbounded sensitivity and is only "
                f"allowed with epsilon=np.inf; got epsilon={self.epsilon!r}. Pass a "
                f"positive clip_norm, or epsilon=np.inf for the non-private baseline."
            )

    # ------------------------------------------------------------------ #
    # The fit template
    # ------------------------------------------------------------------ #
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
            Fitted estimator.

        Notes
        -----
        The order is fixed for every estimator: validate the data and groups;
        plan the budget (calibrated once); run the algorithm, every release
        through one :class:`~skdpp.privacy.Releaser`; build the report from
        its ledger and check it (a fit that would overspend raises
        :class:`~skdpp.exceptions.PrivacyBudgetError`); only then set the
        fitted attributes. A fit that raises leaves the estimator unfitted.

        The algorithm runs with BLAS limited to one thread unless ``X`` has
        at least 2048 columns (:func:`skdpp.base.blas_threads`); the caller's
        thread limits are restored afterwards and never raised. It runs with
        every floating-point condition ignored (:func:`quiet_numerics`)
        whatever the caller's ``np.errstate`` (so that no warning or exception
        depends on one user's values).
        """
        try:
            # Nothing of an earlier fit survives (e.g. a distributed fit's handle).
            self._discard_fitted_attributes()
            with quiet_numerics():
                data = self._validate_fit_data(X, y, groups)
            self._check_delta(data.meta["n_users"])
            randomness = FitRandomness(self.random_state)
            # BLAS threads by problem size, numpy's floating-point defaults
            # (see ``_fit_environment``), both restored after.
            with _fit_environment(data.meta["n_features"]):
                executor = LocalExecutor(self._make_blocks(data, randomness))
                fitted = self._fit_executor(executor, randomness, data.meta)
        except BaseException:
            self._discard_fitted_attributes()
            raise
        self._set_fitted_attributes({**data.attributes, **fitted})
        return self

    def _fit_executor(self, executor, randomness, meta):
        """Plan, run the core on ``executor`` and build the checked report.

        The part of the template shared by in-process ``fit`` and the
        distributed driver (:mod:`skdpp.distributed`): everything after the
        data have been turned into blocks of whole users.

        Returns
        -------
        attributes : dict
            The fitted attributes, ``privacy_report_`` included.
        """
        config = self._fit_config(meta)
        release = Releaser(self._algorithm.plan(config, meta), randomness.noise,
                           seeded=randomness.seeded)
        result = self._algorithm.run(executor, release, randomness, meta, config)
        report = release.report(n_users=meta["n_users"], released=result.released,
                                local=result.local, notes=result.notes,
                                not_covered=result.not_covered)
        return {**result.attributes, "privacy_report_": report}

    def _validate_fit_data(self, X, y, groups):
        """Validate parameters, ``X``, ``y`` and ``groups``; return :class:`FitData`.

        Subclasses override it (calling ``super()``) to validate more, e.g.
        encode labels; ``_validate_data_kwargs()`` gives the keyword
        arguments of ``validate_data``.
        """
        self._validate_params()
        self._validate_privacy_params()
        _reject_sparse(self, X)
        # scikit-learn's finiteness check sums X: values near the float maximum
        # would warn about an overflow that depends on one user's data.
        with np.errstate(over="ignore", invalid="ignore"):
            X, y = validate_data(self, X, y, reset=True, **self._validate_data_kwargs())
        index = UserIndex.from_groups(groups, X.shape[0])
        return FitData(
            X=X, y=y, index=index,
            meta={"n_users": int(index.n_users), "n_features": int(X.shape[1])},
            attributes={"user_ids_": index.users, "n_users_": int(index.n_users),
                        "_fitted_with_groups": groups is not None},
        )

    def _validate_data_kwargs(self):
        """Keyword arguments of ``validate_data`` in ``fit`` (override as needed)."""
        return {"y_numeric": True}

    def _make_blocks(self, data, randomness):
        """Blocks of whole users in canonical order (override for other layouts)."""
        return make_blocks(data.X, data.y, data.index)

    def _fit_config(self, meta):
        """The frozen configuration of the algorithm, from the parameters and ``meta``.

        A pure function of the estimator's parameters and the public metadata
        (no data), declared by each estimator that has an ``_algorithm``.
        """
        raise NotImplementedError(f"{type(self).__name__} declares no algorithm configuration")

    def _budget_plan(self, meta):
        """The fit's :class:`~skdpp.privacy.BudgetPlan`, from public values only.

        ``algorithm.plan(config, meta)``; :class:`~skdpp.PrivateRandomizedSearchCV`
        and :func:`skdpp.privacy.privacy_report` use it to plan a fit without
        running it.
        """
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
                f"delta={self.delta!r} is at least 1/n_users = 1/{n_users}: a mechanism "
                f"that publishes one whole user's data at random would meet this "
                f"guarantee. Use delta much smaller than 1/n_users (e.g. 1/n_users**1.1).",
                PrivacyLeakWarning,
                stacklevel=_caller_stacklevel(),
            )

    def _validate_personal_input(self, X, y):
        """Validate data for :meth:`personalize` (override when ``fit`` differs)."""
        return validate_data(self, X, y, reset=False, y_numeric=True)

    # ------------------------------------------------------------------ #
    # Users at predict time
    # ------------------------------------------------------------------ #
    def _has_user_ids(self):
        """Whether ``user_ids_`` holds caller-given ids (False after ``fit(X, y)``).

        A fit with ``groups=None`` makes every training row its own user; its
        ``user_ids_`` are the row numbers ``0..n_samples-1``, which must never
        be matched against ids given later.
        """
        return bool(getattr(self, "_fitted_with_groups", True))

    def _user_codes(self, groups, n_samples):
        """Map each row's user id to its position in ``user_ids_`` (-1: unseen).

        Rows of unseen users get the cold-start prediction. Three calls are
        almost always mistakes and are not silent:

        * ``groups=None`` on an estimator fitted with user ids (e.g.
          ``Pipeline.score`` or a string scorer dropping ``groups``): every row
          is a new user, with a ``UserWarning``;
        * ``groups`` given to an estimator fitted without user ids: its users
          were the training rows, so no id can match (they are *not* compared
          with row numbers); every row is a new user, with a ``UserWarning``;
        * unseen ids of a type no fitted id has (e.g. ``"3"`` for the integer
          id ``3``): they are new users (cold start), with a ``UserWarning``.
          :meth:`personalize` raises a ``TypeError`` for them instead: it would
          change the type of ``user_ids_`` for good.

        Each decision depends only on the call (routing configuration, whether
        ``groups`` was passed, the types of the ids) and on ``user_ids_``, not
        on any other data.
        """
        if groups is None:
            if self._has_user_ids():
                warnings.warn(_dropped_groups_message(type(self).__name__), UserWarning,
                              stacklevel=_caller_stacklevel())
            return np.full(n_samples, -1, dtype=np.intp)
        groups = _as_1d_ids(groups, n_samples)
        if not self._has_user_ids():
            warnings.warn(
                f"{type(self).__name__} was fitted without user ids (groups=None: "
                f"every training row was its own user, i.e. row-level DP), so the user "
                f"ids passed now cannot match any user and every row gets the "
                f"cold-start prediction. To personalize, fit with groups=... (inside "
                f"Pipeline, GridSearchCV or cross_validate call "
                f"sklearn.set_config(enable_metadata_routing=True) so that groups "
                f"reach fit).",
                UserWarning,
                stacklevel=_caller_stacklevel(),
            )
            return np.full(n_samples, -1, dtype=np.intp)
        known = UserIndex.from_groups(self.user_ids_, self.user_ids_.shape[0])
        codes = known.lookup(groups)
        unseen = codes < 0
        if unseen.any():
            mismatch = self._id_type_mismatch(groups[unseen])
            if mismatch:
                warnings.warn(
                    f"{mismatch}: these rows get the cold-start prediction, as new "
                    f"users. If they are users seen in fit, pass ids of the type used "
                    f"in fit, e.g. {_conversion_hint(self.user_ids_)}.",
                    UserWarning,
                    stacklevel=_caller_stacklevel(),
                )
        return codes

    def _id_type_mismatch(self, ids):
        """Describe the id types of ``ids`` that no fitted id has ("" if none).

        Ids of different types never match (``3`` is not ``"3"``). Numbers
        (int, float, bool) are one type; ``str`` (numpy or Python, as in a
        pandas ``Series``) is one type. Depends only on the types of ``ids``
        and of ``user_ids_``.
        """
        fitted = id_kinds(self.user_ids_)
        given = id_kinds(ids)
        if given <= fitted:
            return ""
        return (
            f"{type(self).__name__}: the user ids in groups are of type "
            f"{_join_types(given - fitted)}, but the model's user ids (user_ids_) are of "
            f"type {_join_types(fitted)} (dtype {self.user_ids_.dtype}). Ids of "
            f"different types never match"
        )

    # ------------------------------------------------------------------ #
    # Personalization
    # ------------------------------------------------------------------ #
    def personalize(self, X, y, groups):
        """Fit personal parts for the given users from their own rows.

        Uses only the released shared part of the model and each user's rows
        (Snedeker et al. 2025, Corollary 11), so it never changes the shared
        part nor ``privacy_report_``. Known users are refitted on the given
        rows; new users are added to ``user_ids_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The users' rows.
        y : array-like of shape (n_samples,)
            Their targets.
        groups : array-like of shape (n_samples,)
            User id of each row, of the same type as the ids given to ``fit``
            (numbers, or strings). Required: without ids the new personal
            parts could not be told apart from the fitted ones.

        Returns
        -------
        self : object
            The estimator, with personal parts for these users.

        Raises
        ------
        ValueError
            If ``groups`` is None, or the estimator was fitted without user ids
            (``fit(X, y)``: its users were the training rows; refit with
            ``groups``, e.g. ``groups=np.arange(n_samples)`` if every row is a
            different user).
        TypeError
            If ``groups`` holds ids of a type that no fitted id has (e.g.
            strings for a model fitted with integer ids: ``"3"`` is not ``3``).
        """
        check_is_fitted(self)
        if groups is None:
            raise ValueError(
                "personalize requires groups (one user id per row); got groups=None. "
                "Pass the user ids of the rows."
            )
        if not self._has_user_ids():
            raise ValueError(
                f"{type(self).__name__} was fitted without user ids (groups=None: every "
                f"training row was its own user, i.e. row-level DP), so personalize "
                f"cannot add users to it: its user_ids_ are row numbers, which the new "
                f"ids would be confused with. Refit with groups=...; if every training "
                f"row is a different user, pass groups=np.arange(n_samples) (or your own "
                f"row ids) to fit."
            )
        _reject_sparse(self, X)
        X, y = self._validate_personal_input(X, y)
        index = UserIndex.from_groups(groups, X.shape[0])
        mismatch = self._id_type_mismatch(index.users)
        if mismatch:
            raise TypeError(
                f"{mismatch}: personalize would add these rows as new users next to the "
                f"fitted ones and change the type of user_ids_. If they are users seen "
                f"in fit, pass ids of the type used in fit, e.g. "
                f"{_conversion_hint(self.user_ids_)}; give new users ids of that type "
                f"too."
            )
        with _fit_environment(X.shape[1]):
            personal = self._fit_personal(X, y, index)
        self._merge_personal(index.users, personal)
        return self

    def _merge_personal(self, new_ids, personal):
        """Insert or replace the personal parameters of ``new_ids`` (vectorised).

        ``user_ids_`` stays in :meth:`UserIndex.from_groups` order (sorted;
        mixed-type ids by type, then value).
        """
        old_ids = self.user_ids_
        merged_index = UserIndex.from_groups(np.concatenate([old_ids, new_ids]))
        all_ids = merged_index.users
        pos_old = merged_index.lookup(old_ids)
        pos_new = merged_index.lookup(new_ids)
        for name in self._personal_attributes:
            old = getattr(self, name)
            new = np.asarray(personal[name])
            merged = np.zeros((all_ids.shape[0],) + old.shape[1:], dtype=np.result_type(old, new))
            merged[pos_old] = old
            merged[pos_new] = new
            setattr(self, name, merged)
        self.user_ids_ = all_ids

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


class PersonalizedRegressorMixin(RegressorMixin):
    """``score`` as the R² of ``predict(X, groups)`` (scikit-learn's convention)."""

    def score(self, X, y, groups=None, sample_weight=None):
        """Return the coefficient of determination R² of the personalized predictions.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test rows.
        y : array-like of shape (n_samples,)
            True targets.
        groups : array-like of shape (n_samples,), default=None
            User id of each row; rows of users seen in ``fit`` (or
            ``personalize``) use their personal model, others the cold start.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the test rows in the score (evaluation only: ``fit``
            takes no sample weights). Accepted because ``Pipeline.score``
            passes it on when metadata routing is enabled.

        Returns
        -------
        score : float
            R² of ``self.predict(X, groups=groups)``. R² does not change when
            ``y`` and the predictions are divided by one positive number; when
            the sums of squares overflow (targets near the float maximum) it is
            computed on ``y`` and the predictions divided by their largest
            magnitude.
        """
        return _r2(y, self.predict(X, groups=groups), sample_weight)


class PersonalizedClassifierMixin(ClassifierMixin):
    """``score`` as the accuracy of ``predict(X, groups)``."""

    def score(self, X, y, groups=None, sample_weight=None):
        """Return the accuracy of the personalized predictions.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test rows.
        y : array-like of shape (n_samples,)
            True labels.
        groups : array-like of shape (n_samples,), default=None
            User id of each row (unseen users get the cold-start prediction).
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the test rows in the score (evaluation only).

        Returns
        -------
        score : float
            Mean accuracy of ``self.predict(X, groups=groups)``.
        """
        return float(
            accuracy_score(y, self.predict(X, groups=groups), sample_weight=sample_weight)
        )


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
    """A sparse ``X`` is refused with the recipe (see docs/user_guide/own_data.rst)."""
    if hasattr(X, "tocsr") and hasattr(X, "nnz"):  # a scipy.sparse matrix or array
        raise TypeError(
            f"{type(estimator).__name__} needs dense X; got a sparse {type(X).__name__} "
            f"(e.g. from OneHotEncoder or CountVectorizer). Densify it before the "
            f"estimator: OneHotEncoder(sparse_output=False), or add "
            f"FunctionTransformer(skdpp.pipeline.to_dense, accept_sparse=True) as the step "
            f"before it (see the user guide, 'Sparse input').")


def _dropped_groups_message(name):
    """The warning for ``groups=None`` on an estimator fitted with user ids.

    The hint depends on scikit-learn's routing configuration only.
    """
    message = (
        f"{name} was fitted with user ids (groups) but was called with groups=None: "
        f"every row is treated as a new user and gets the cold-start prediction. "
        f"Pass the rows' user ids as groups."
    )
    if not get_config().get("enable_metadata_routing", False):
        message += (
            " Metadata routing is disabled (scikit-learn's default), so Pipeline, "
            "GridSearchCV and cross_validate cannot pass groups on: call "
            "sklearn.set_config(enable_metadata_routing=True)."
        )
    else:
        message += (
            " Metadata routing is enabled, but string scorers (e.g. scoring='r2') never "
            "pass groups: use scoring=None or skdpp.metrics.make_personalized_scorer."
        )
    return message + (
        " scikit-learn's cross_val_predict never passes groups to predict: use "
        "skdpp.model_selection.cross_val_predict."
    )


def _join_types(types):
    return " and ".join(sorted(types))


def _conversion_hint(user_ids):
    types = id_kinds(user_ids)
    if user_ids.dtype.kind in "biuf":
        return f"np.asarray(groups).astype({user_ids.dtype.name!r})"
    if types == {"str"}:
        return "np.asarray(groups).astype(str)"
    if types == {"number"}:
        return "np.asarray(groups).astype(np.int64)"
    return "convert them to the types of user_ids_"


def _as_1d_ids(groups, n_samples):
    """``groups`` as a 1-D array of length ``n_samples`` (pandas Series accepted)."""
    if hasattr(groups, "to_numpy") and not isinstance(groups, np.ndarray):
        groups = groups.to_numpy()
    groups = np.asarray(groups)
    if groups.ndim != 1 or groups.shape[0] != n_samples:
        raise ValueError(
            f"groups must be 1-D with one user id per row of X: expected shape "
            f"({n_samples},), got {groups.shape}. Pass one id per row."
        )
    return groups

"""Export only what a fit released: DP attributes, report, no user ids, no personal parts.

Examples
--------
>>> import numpy as np, pickle
>>> from skdpp import PPSGDRegressor, export_released
>>> rng = np.random.default_rng(0)
>>> X, g = rng.normal(size=(600, 3)), np.repeat(np.arange(100), 6)
>>> est = PPSGDRegressor(n_rounds=5, random_state=0).fit(X, X @ [1.0, 2.0, 0.0], groups=g)
>>> public = export_released(est)
>>> public.estimator.user_ids_.shape, public.estimator.offsets_.shape
((0,), (1, 3))
>>> public.predict(X[:2], groups=[7, 7]).shape   # cold start: user 7 is not in it
(2,)
>>> public = pickle.loads(pickle.dumps(public)).personalize(X[:6], X[:6] @ [1.0, 2.0, 0.0], [7] * 6)
>>> public.estimator.user_ids_
array([7])
"""

import copy
import warnings

import numpy as np

from .pipeline import personalize as _personalize
from .pipeline import transform_then
from .privacy._composed import _children, privacy_report

__all__ = ["ReleasedModel", "export_released"]


class ReleasedModel:
    """The released part of a fitted estimator or Pipeline (:func:`export_released`):
    every user is new (cold-start ``predict``) until ``personalize`` adds it.

    Attributes
    ----------
    estimator : estimator or Pipeline
        The scrubbed copy: every step's DP attributes; no user ids, personal parts
        emptied (trailing shape kept), ``random_state`` of every step ``None``.
    privacy_report : PipelinePrivacyReport
        The composed report of everything released
        (:func:`skdpp.privacy.privacy_report`).
    """

    def __init__(self, estimator, report):
        self.estimator = estimator
        self.privacy_report = report

    def _call(self, method, X, groups):
        with warnings.catch_warnings():  # every user is new: groups=None is cold start
            warnings.filterwarnings("ignore", message=".*called with groups=None")
            return transform_then(self.estimator, method, X, groups=groups)

    def predict(self, X, groups=None):
        """Predictions (cold start for users not personalized here)."""
        return self._call("predict", X, groups)

    def predict_proba(self, X, groups=None):
        """Class probabilities (classifiers)."""
        return self._call("predict_proba", X, groups)

    def decision_function(self, X, groups=None):
        """Decision function (classifiers)."""
        return self._call("decision_function", X, groups)

    def personalize(self, X, y, groups):
        """Fit personal parts for these users (no privacy cost); returns ``self``."""
        _personalize(self.estimator, X, y, groups)
        return self

    def __repr__(self):
        return f"ReleasedModel({self.estimator!r})"


def _leaves(obj):
    """The leaves of a composite (any depth, "drop"/"passthrough"/None steps included)."""
    children = _children(obj)
    return [obj] if children is None else [x for _, c in children for x in _leaves(c)]


def _scrub(est):
    """Empty the user ids and per-user attributes of a fitted leaf, in place."""
    params = est.get_params(deep=False) if hasattr(est, "get_params") else {}
    if "random_state" in params:
        est.set_params(random_state=None)  # a seed rebuilds the noise
    n_users = getattr(est, "n_users_", None)
    if getattr(est, "user_ids_", None) is not None:
        dtype = np.asarray(est.user_ids_).dtype
        est.user_ids_ = np.empty(0, dtype="<U1" if dtype.kind in "OUS" else dtype)
    personal = set(getattr(type(est), "_personal_attributes", ()))
    per_user = personal | set(getattr(type(est), "_per_user_data_attributes", ()))
    released = set(getattr(getattr(est, "privacy_report_", None), "released", ()))
    for name, value in list(vars(est).items()):
        if name in params or name == "user_ids_":
            continue
        shape = getattr(value, "shape", None)
        if name in personal:
            # one row of zeros, no id: predict's gathers stay in bounds, every user
            # is new (cold start), personalize replaces it by the new users' rows
            setattr(est, name, np.zeros((1,) + tuple(shape[1:]), dtype=value.dtype))
        elif name in per_user or (n_users and shape and shape[0] == n_users
                                  and name not in released):
            setattr(est, name, value[:0])  # keeps the public trailing shape
    return est


def export_released(obj):
    """The released part of a fitted object: a picklable :class:`ReleasedModel`.

    Parameters
    ----------
    obj : fitted estimator, Pipeline or PrivateRandomizedSearchCV
        An skdpp estimator, a ``Pipeline`` (or composite) of private steps, or
        :class:`~skdpp.model_selection.PrivateRandomizedSearchCV` (its
        ``best_estimator_`` is exported).

    Returns
    -------
    released : ReleasedModel

    Raises
    ------
    ValueError
        If a step fitted on the data is outside the guarantee (NOT COVERED,
        e.g. scikit-learn's ``StandardScaler``): exporting it would publish
        its non-private statistics. Use a private transformer.
    """
    report = privacy_report(obj)
    if not report.covered:
        raise ValueError(
            f"export_released refuses to publish steps outside the guarantee: "
            f"{', '.join(report.not_covered)}. Replace them with private transformers "
            f"(skdpp.preprocessing) or fit them on public data.")
    model = copy.deepcopy(getattr(obj, "best_estimator_", obj))
    for leaf in _leaves(model):
        if not isinstance(leaf, str) and leaf is not None:
            _scrub(leaf)
    return ReleasedModel(model, report)

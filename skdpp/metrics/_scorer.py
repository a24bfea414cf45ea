"""Scorers that pass each row's user id (``groups``) to the estimator."""

import numpy as np
from sklearn.utils.metadata_routing import MetadataRequest

__all__ = ["make_personalized_scorer"]

_RESPONSE_METHODS = ("predict", "predict_proba", "decision_function")


class _PersonalizedScorer:
    """Scorer calling ``estimator.<response_method>(X, groups=groups)``; built by
    :func:`make_personalized_scorer`."""

    def __init__(self, metric, sign, response_method, kwargs):
        self._metric, self._sign, self._kwargs = metric, sign, kwargs
        self._response_method = response_method  # as given (for repr)
        self._methods = (response_method,) if isinstance(response_method, str) \
            else tuple(response_method)
        self._groups_request = True

    def __call__(self, estimator, X, y_true, groups=None):
        """``sign * metric(y_true, y_pred)``, ``y_pred`` from the response method with
        ``groups``."""
        method = next((getattr(estimator, name) for name in self._methods
                       if getattr(estimator, name, None) is not None), None)
        if method is None:
            raise AttributeError(f"{type(estimator).__name__} has none of the response "
                                 f"methods {list(self._methods)} required by this scorer.")
        y_pred = method(X) if groups is None else method(X, groups=groups)
        return self._sign * float(self._metric(y_true, y_pred, **self._kwargs))

    def _accept_sample_weight(self):  # consulted by scikit-learn when routing is disabled
        return False

    def set_score_request(self, *, groups=True):
        """Set how ``groups`` is requested for scoring (``True``: requested, the default;
        ``False``: not; ``None``: error if passed; str: alias)."""
        self._groups_request = groups
        return self

    def get_metadata_routing(self):
        """The ``MetadataRequest``: ``groups`` for ``score`` (by default)."""
        request = MetadataRequest(owner=self)
        request.score.add_request(param="groups", alias=self._groups_request)
        return request

    def __repr__(self):
        name = getattr(self._metric, "__name__", repr(self._metric))
        sign = "" if self._sign > 0 else ", greater_is_better=False"
        method = "" if self._response_method == "predict" else \
            f", response_method={self._response_method!r}"
        extra = "".join(f", {k}={v!r}" for k, v in self._kwargs.items())
        return f"make_personalized_scorer({name}{sign}{method}{extra})"


def make_personalized_scorer(metric, *, greater_is_better=True, response_method="predict",
                             **kwargs):
    """Make a scorer that passes the rows' user ids to the estimator.

    scikit-learn's string scorers call ``predict(X)`` without ``groups`` (every test row
    a cold-start user). This scorer calls ``predict(X, groups=groups)`` and requests
    ``groups`` through metadata routing (``GridSearchCV(..., scoring=scorer)`` with
    routing enabled: :ref:`groups`).

    Parameters
    ----------
    metric : callable
        ``metric(y_true, y_pred, **kwargs) -> float``, e.g. :func:`skdpp.metrics.rmse` or
        ``sklearn.metrics.r2_score``.
    greater_is_better : bool, default=True
        Whether a higher metric is better; if False the scorer returns ``-metric``
        (scikit-learn maximises scores).
    response_method : {"predict", "predict_proba", "decision_function"} or \
            tuple of them, default="predict"
        Estimator method producing ``y_pred``; with a tuple, the first one the estimator
        has.
    **kwargs : dict
        Extra keyword arguments of ``metric``.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y_true, groups=None) -> float``, with
        ``get_metadata_routing()`` requesting ``groups`` for ``score`` and
        ``set_score_request(groups=...)`` to change it.

    Notes
    -----
    With metadata routing disabled (scikit-learn's default), meta-estimators never pass
    ``groups`` to scorers; the scorer then calls ``estimator.predict(X)`` and skdpp
    estimators fitted with user ids warn that the rows are treated as new users. Every
    fit of a search spends its own budget (:ref:`tuning`).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.dummy import DummyRegressor
    >>> from skdpp.metrics import make_personalized_scorer, rmse
    >>> scorer = make_personalized_scorer(rmse, greater_is_better=False)
    >>> scorer
    make_personalized_scorer(rmse, greater_is_better=False)
    >>> est = DummyRegressor().fit(np.zeros((4, 1)), [1.0, 1.0, 3.0, 3.0])
    >>> scorer(est, np.zeros((4, 1)), [1.0, 1.0, 3.0, 3.0])
    -1.0
    """
    if not callable(metric):
        raise TypeError(f"`metric` must be a callable metric(y_true, y_pred); got {metric!r}.")
    methods = (response_method,) if isinstance(response_method, str) \
        else tuple(response_method)
    if not methods or any(m not in _RESPONSE_METHODS for m in methods):
        raise ValueError(f"`response_method` must be one of {list(_RESPONSE_METHODS)} or a "
                         f"tuple of them; got {response_method!r}.")
    if not isinstance(greater_is_better, (bool, np.bool_)):
        raise TypeError(f"`greater_is_better` must be True or False; got "
                        f"{greater_is_better!r}.")
    return _PersonalizedScorer(metric, 1 if greater_is_better else -1, response_method, kwargs)

"""Pipeline helpers: personalize a fitted Pipeline, densify sparse features.

Examples
--------
>>> import numpy as np, sklearn
>>> from sklearn.pipeline import make_pipeline
>>> from sklearn.preprocessing import FunctionTransformer
>>> from skdpp import PPSGDRegressor
>>> from skdpp.pipeline import personalize
>>> rng = np.random.default_rng(0)
>>> X, g = rng.normal(size=(600, 3)), np.repeat(np.arange(100), 6)
>>> y = X @ [1.0, 2.0, 0.0]
>>> pipe = make_pipeline(FunctionTransformer(), PPSGDRegressor(n_rounds=5, random_state=0))
>>> pipe = pipe.fit(X, y, ppsgdregressor__groups=g)
>>> new = np.repeat([1000, 1001], 4)
>>> personalize(pipe, X[:8], y[:8], new) is pipe
True
>>> bool(np.isin([1000, 1001], pipe[-1].user_ids_).all())
True
"""

import numpy as np
from sklearn.pipeline import Pipeline

__all__ = ["personalize", "to_dense", "transform_then"]


def to_dense(X):
    """``X`` as a dense ndarray (``FunctionTransformer(to_dense, accept_sparse=True)``)."""
    return X.toarray() if hasattr(X, "toarray") else np.asarray(X)


def transform_then(pipe, method, X, *args, groups=None, **kwargs):
    """Run ``pipe``'s transform steps on ``X``, then ``method`` of its final step (which
    alone gets ``groups``)."""
    if isinstance(pipe, Pipeline):
        X, pipe = (X if len(pipe) == 1 else pipe[:-1].transform(X)), pipe[-1]
    return getattr(pipe, method)(X, *args, groups=groups, **kwargs)


def personalize(pipe, X, y, groups):
    """Personalize a fitted Pipeline: transform ``X`` with the fitted steps (no refit,
    no privacy cost, reports unchanged), then call the final step's ``personalize``.

    Parameters
    ----------
    pipe : fitted Pipeline or skdpp estimator
        Its final step has ``personalize`` (a skdpp estimator or
        :class:`~skdpp.model_selection.PrivateRandomizedSearchCV`).
    X : array-like of shape (n_samples, n_features)
        The users' raw rows (as given to ``pipe.fit``).
    y : array-like of shape (n_samples,)
        Their targets.
    groups : array-like of shape (n_samples,)
        User id of each row.

    Returns
    -------
    pipe : object
        The same object, personalized.
    """
    last = pipe[-1] if isinstance(pipe, Pipeline) else pipe
    if not hasattr(last, "personalize"):
        raise TypeError(
            f"The final step of the pipeline ({type(last).__name__}) has no personalize "
            "method; it must be an estimator of skdpp (or PrivateRandomizedSearchCV).")
    transform_then(pipe, "personalize", X, y, groups=groups)
    return pipe

"""Model selection for personalized models: splitters that hold out rows within
each user, out-of-fold predictions that pass ``groups`` to ``predict``, and a
hyperparameter search whose privacy cost is accounted."""

from ._search import PrivateRandomizedSearchCV
from ._split import PerUserKFold, PerUserShuffleSplit, per_user_train_test_split
from ._validation import cross_val_predict

__all__ = ["PerUserKFold", "PerUserShuffleSplit", "PrivateRandomizedSearchCV",
           "cross_val_predict", "per_user_train_test_split"]

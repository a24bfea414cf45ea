"""Cross-validation splitters that hold out rows within each user, and private search."""

from ._search import PrivateRandomizedSearchCV
from ._split import PerUserKFold, PerUserShuffleSplit, per_user_train_test_split

__all__ = [
    "PerUserKFold",
    "PerUserShuffleSplit",
    "PrivateRandomizedSearchCV",
    "per_user_train_test_split",
]

"""Cross-validation splitters that hold out rows within each user, and
out-of-fold predictions that pass ``groups`` to ``predict``."""

from ._split import PerUserKFold, PerUserShuffleSplit, per_user_train_test_split
from ._validation import cross_val_predict

__all__ = [
    "PerUserKFold",
    "PerUserShuffleSplit",
    "cross_val_predict",
    "per_user_train_test_split",
]

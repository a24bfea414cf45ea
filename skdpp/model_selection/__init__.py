"""Cross-validation splitters that hold out rows within each user."""

from ._split import PerUserKFold, PerUserShuffleSplit, per_user_train_test_split

__all__ = ["PerUserKFold", "PerUserShuffleSplit", "per_user_train_test_split"]

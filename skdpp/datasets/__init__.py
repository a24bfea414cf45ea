"""Synthetic personalized data sets from the papers' experiments and a MovieLens loader."""

from ._movielens import load_movielens
from ._synthetic import (
    make_additive_personalized_regression,
    make_personalized_margin_classification,
    make_shared_representation_regression,
    make_skewed_ratings,
)

__all__ = [
    "load_movielens",
    "make_additive_personalized_regression",
    "make_personalized_margin_classification",
    "make_shared_representation_regression",
    "make_skewed_ratings",
]

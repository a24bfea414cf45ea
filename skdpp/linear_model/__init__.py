"""Personalized linear models under user-level differential privacy."""

from ._altmin import PrivAltMinRegressor
from ._fedrep import PrivateFedRepRegressor
from ._jl_margin import JLMarginClassifier
from ._ppsgd import PPSGDRegressor

__all__ = [
    "JLMarginClassifier",
    "PPSGDRegressor",
    "PrivAltMinRegressor",
    "PrivateFedRepRegressor",
]

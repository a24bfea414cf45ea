"""Metrics and scorers for personalized models."""

from ._metrics import recall_at_k, rmse
from ._scorer import make_personalized_scorer

__all__ = ["make_personalized_scorer", "recall_at_k", "rmse"]

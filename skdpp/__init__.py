"""skdpp: user-level differentially private model personalization for scikit-learn.

Estimators learn a shared part of the model under user-level differential
privacy and a personal part for every user from that user's rows only.
"""

from ._export import ReleasedModel, export_released
from ._config import config_context, get_config, set_config
from .decomposition import AdaptiveWeightMF
from .exceptions import PrivacyBudgetError, PrivacyLeakWarning
from .linear_model import (JLMarginClassifier, PPSGDRegressor, PrivAltMinRegressor,
                           PrivateFedRepRegressor)
from .privacy import PrivacyReport

__version__ = "0.1.0.dev0"

__all__ = ["AdaptiveWeightMF", "JLMarginClassifier", "PPSGDRegressor",
           "PrivAltMinRegressor", "PrivacyBudgetError", "PrivacyLeakWarning",
           "PrivacyReport", "PrivateFedRepRegressor", "__version__", "ReleasedModel",
           "config_context", "export_released", "get_config", "set_config"]

"""skdpp: user-level differentially private model personalization for scikit-learn."""

__version__ = "0.1.0.dev0"

"""The papers' algorithms behind the linear estimators, one module per algorithm
(:ref:`architecture`)."""

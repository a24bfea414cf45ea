"""Demo tour run by ``python -m skdpp`` (one module per estimator)."""

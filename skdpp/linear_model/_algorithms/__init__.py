"""The papers' algorithms behind the linear estimators, one module per algorithm.

Each module exposes a frozen configuration, ``plan(config, meta)`` (the budget
plan: every release the run makes, counted next to the calls that spend them),
``run(executor, release, randomness, meta, config)`` (the driver, citing the
paper's lines) and the personal-part fit; the kernels it names sit beside it.
The estimators in :mod:`skdpp.linear_model` only declare parameters and build
the configuration (see ``docs/architecture.rst``).
"""

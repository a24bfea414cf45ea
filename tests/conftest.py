"""Shared pytest fixtures."""

import numpy as np
import pytest


@pytest.fixture
def full_plan(monkeypatch):
    """Run the estimators' full plan even where the public rule predicts a useless fit.

    The privacy tests of the full machinery (sensitivities, noise levels, the
    one-user checks) use a few dozen users at small budgets, where the public
    rule of :func:`skdpp.linear_model._auto.fallback_plan` would replace the
    plan by its one-release fallback. Those releases are still made at larger
    budgets, so their tests keep running them here; the fallback has its own
    tests (``tests/privacy/test_fallback_plan.py`` and the ``"fallback"``
    configurations of ``tests/privacy/test_one_user.py``).
    """
    from skdpp.linear_model import _auto

    monkeypatch.setattr(_auto, "USELESS_CLIP_NOISE", np.inf)

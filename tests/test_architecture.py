"""The algorithm interface, checked on the call stack (issue 21, docs/architecture.rst).

At every noise draw of a fit we record the chain of skdpp modules on the stack (runs of one
module collapsed), from the fit template in ``base`` down to ``privacy.mechanisms``. Two
properties make "where does ``epsilon`` become noise" a downward read:

- no back-and-forth: no module appears twice in the chain (control never returns to a file
  it left on the way down);
- the template hands over once: ``base`` calls the estimator's algorithm module, never the
  estimator class module, and the last two links are a releaser and the mechanisms.

The iterations and selections of all five are ``base -> algorithm -> releaser ->
mechanisms`` (with the estimator's ``_fit_config`` before ``base``: 4 hops); automatic bounds
go further down through ``_auto`` and ``privacy._quantile``.
"""

import traceback
import warnings

import numpy as np
import pytest

from skdpp.datasets import (make_additive_personalized_regression,
                            make_personalized_margin_classification,
                            make_shared_representation_regression, make_skewed_ratings)
from skdpp.decomposition import AdaptiveWeightMF
from skdpp.linear_model import (JLMarginClassifier, PPSGDRegressor, PrivAltMinRegressor,
                                PrivateFedRepRegressor)
from skdpp.privacy import mechanisms

DRAWS = ("_add_noise", "_sample_index", "_secure_additive", "_secure_index")
RELEASERS = {"privacy._release", "privacy._product"}


def _module_chain(stack):
    """skdpp modules of ``stack`` from the fit template down, consecutive repeats collapsed."""
    chain = []
    for frame in stack:
        if "/skdpp/" not in frame.filename.replace("\\", "/"):
            continue
        name = frame.filename.replace("\\", "/").split("/skdpp/", 1)[1][:-3].replace("/", ".")
        if not chain or chain[-1] != name:
            chain.append(name)
    return tuple(chain[chain.index("base"):]) if "base" in chain else tuple(chain)


def _chain_problems(chain, algorithm):
    """What is wrong with one release's chain ([] if nothing)."""
    problems = []
    if len(chain) != len(set(chain)):
        problems.append("back-and-forth (a module appears twice)")
    if chain[:2] != ("base", algorithm):
        problems.append(f"the template does not hand over to {algorithm}")
    if len(chain) < 2 or chain[-1] != "privacy.mechanisms" or chain[-2] not in RELEASERS:
        problems.append("the noise is not drawn through a releaser")
    return problems


def _record(monkeypatch, fit):
    chains = []
    for name in DRAWS:
        draw = getattr(mechanisms, name)

        def recorded(*args, _draw=draw, **kwargs):
            chains.append(_module_chain(traceback.extract_stack()[:-1]))
            return _draw(*args, **kwargs)
        monkeypatch.setattr(mechanisms, name, recorded)
    fit()
    return chains


def _fits():
    X, y, g = make_shared_representation_regression(
        n_users=300, n_samples_per_user=8, n_features=6, random_state=0)[:3]
    Xa, ya, ga = make_additive_personalized_regression(
        n_users=300, n_samples_per_user=8, n_features=6, random_state=0)[:3]
    Xj, yj, gj = make_personalized_margin_classification(
        n_users=300, n_samples_per_user=8, n_features=6, random_state=0)[:3]
    Xm, ym, gm = make_skewed_ratings(n_users=300, n_items=30, random_state=0)[:3]
    return {
        "linear_model._algorithms.fedrep":
            lambda: PrivateFedRepRegressor(epsilon=1.0, random_state=0).fit(X, y, groups=g),
        "linear_model._algorithms.altmin":
            lambda: PrivAltMinRegressor(epsilon=1.0, random_state=0).fit(X, y, groups=g),
        "linear_model._algorithms.ppsgd":
            lambda: PPSGDRegressor(epsilon=1.0, random_state=0).fit(Xa, ya, groups=ga),
        "linear_model._algorithms.jl_margin":
            lambda: JLMarginClassifier(epsilon=1.0, random_state=0).fit(Xj, yj, groups=gj),
        "decomposition._algorithms.adaptive_mf":
            lambda: AdaptiveWeightMF(epsilon=1.0, random_state=0).fit(Xm, ym, groups=gm),
    }


@pytest.mark.parametrize("algorithm", sorted(_fits()))
def test_epsilon_reaches_the_noise_downward(monkeypatch, algorithm):
    with warnings.catch_warnings():  # MF's small catalogue warns; not what is checked
        warnings.simplefilter("ignore")
        chains = _record(monkeypatch, _fits()[algorithm])
    assert chains, "the fit drew no noise"
    bad = {c: _chain_problems(c, algorithm) for c in set(chains) if _chain_problems(c, algorithm)}
    assert not bad, bad
    # the iterations and selections: base -> algorithm -> releaser -> mechanisms
    assert min(len(c) for c in chains) == 4


def test_chain_check_catches_back_and_forth():
    """Broken variants: a call back into the algorithm module, a template that hands over
    to the estimator class module, and noise drawn outside a releaser."""
    algorithm = "linear_model._algorithms.fedrep"
    good = ("base", algorithm, "privacy._release", "privacy.mechanisms")
    assert _chain_problems(good, algorithm) == []
    back = ("base", algorithm, "linear_model._auto", algorithm, "privacy._release",
            "privacy.mechanisms")
    assert "back-and-forth" in _chain_problems(back, algorithm)[0]
    via_class = ("base", "linear_model._fedrep", algorithm, "privacy._release",
                 "privacy.mechanisms")
    assert any("hand over" in p for p in _chain_problems(via_class, algorithm))
    direct = ("base", algorithm, "privacy.mechanisms")
    assert any("releaser" in p for p in _chain_problems(direct, algorithm))


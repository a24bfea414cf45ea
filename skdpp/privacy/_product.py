"""Several selections as one exponential mechanism over their product.

``P`` independent selections at ``ε / P`` (scores of sensitivity ``Δ`` each) sample
exactly the exponential mechanism over the product of the candidate sets with summed
score of sensitivity ``P Δ``, an ε-DP mechanism charged once (:ref:`partition_selection`).

Examples
--------
>>> import numpy as np
>>> from skdpp.privacy import BudgetPlan, Releaser
>>> from skdpp.privacy._product import product_exponential
>>> plan = BudgetPlan(epsilon=1.0, delta=0.0)
>>> plan.add_rest("selection", mechanism="exponential")
>>> release = Releaser(plan, np.random.default_rng(0))
>>> product_exponential(release, "selection", np.array([[0.0, 90.0], [80.0, 0.0]]),
...                     sensitivity=1.0)
array([1, 0])
>>> len(release.accountant.ledger)
1
"""

import numpy as np

from . import mechanisms

__all__ = ["product_exponential", "product_sensitivity"]


def product_sensitivity(sensitivity, n_problems):
    """Sensitivity ``P Δ`` of the summed score of ``P`` selections of sensitivity ``Δ`` each."""
    return float(sensitivity) * int(n_problems)


def product_exponential(release, phase, scores, *, sensitivity, clip_norm=None):
    """The selected index of every row of ``scores`` (n_problems, n_candidates), each row
    of L∞ sensitivity ``sensitivity``, at the ε of the exponential ``phase``."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or scores.shape[0] == 0:
        raise ValueError(f"`scores` must be 2-D with at least one row, got shape "
                         f"{scores.shape}.")
    n_problems = scores.shape[0]
    epsilon = float(release.noise_multiplier(phase))
    total = product_sensitivity(sensitivity, n_problems)  # of the summed score
    out = np.empty(n_problems, dtype=np.int64)
    for p in range(n_problems):  # independent factors of the product mechanism
        out[p], event = mechanisms.exponential_mechanism(
            scores[p], sensitivity=total, epsilon=epsilon, rng=release.rng)
    # each factor's event is that of the whole product: charged once
    release.charge(phase, event, mechanism="exponential", sensitivity=total,
                   clip_norm=clip_norm)
    return out

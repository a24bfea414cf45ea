"""Task-user weights of Krichene et al. (2023): eq. (11)-(12) and the sampling baselines.

Every user ``j`` spends a budget ``beta``: ``sum_i w_ij^2 <= beta`` over the items (tasks)
it rated (Theorem 3.3), which bounds the sensitivity of the weighted item statistics of
Alg. 1 and 2. A user's weights depend on its items, the public DP counts and the fit key
only (keyed per-row uniforms).
"""

import numpy as np

# so that sum_j w_ij^2 <= beta holds in floating point (rescaling rounds ~1e-16)
_SAFETY = 1.0 - 1e-12


def log_adaptive_item_weights(counts, *, mu, budget, n_users):
    """``log(omega_i)``, ``omega_i = n_i^-mu / sqrt(sum_i' n_i'^(1 - 2 mu) / (n beta))``
    (eq. (11), noisy counts floored at 1, in log space): a user whose items follow the
    counts spends ``beta = budget`` in expectation."""
    n_hat = np.maximum(np.asarray(counts, dtype=np.float64), 1.0)
    log_n = np.log(n_hat)
    log_sum = np.logaddexp.reduce((1.0 - 2.0 * mu) * log_n)
    return -mu * log_n + 0.5 * (np.log(n_users * budget) - log_sum)


def adaptive_weights(block, item, log_omega, *, budget, normalization):
    """Per-entry weights of eq. (12) (``"clip"``) or the budget normalisation (``sum w^2 <=
    budget`` in floating point)."""
    # Relative to each user's largest omega_i: rel = omega_i / top_j lies in (0, 1] and
    # B_j / top_j^2 = sum_i rel^2 in [1, n^j], so neither underflows (B_j itself underflows
    # for large mu, and beta / B_j = inf would give infinite weights).
    log_om = log_omega[item]
    top = block.segment_max(log_om)
    rel = np.exp(log_om - block.expand(top))
    b_rel = block.segment_sum(rel * rel)  # B_j / top_j^2
    scale = np.sqrt(np.divide(budget, b_rel, out=np.zeros(block.n_users), where=b_rel > 0))
    if normalization == "clip":
        # eq. (12): omega_i min(1, sqrt(beta / B_j)) = rel min(top_j, scale_j)
        with np.errstate(under="ignore"):
            factor = np.minimum(np.exp(top), scale)
    else:
        factor = scale  # omega_i sqrt(beta / B_j): every user spends exactly beta
    return rel * block.expand(factor) * _SAFETY


def task_weights(block, item, *, weighting, budget, key, log_omega=None, counts=None,
                 normalization="budget"):
    """Per-entry task weights ``w_ij`` (0: row unused); the baselines keep ``floor(budget)``
    items per user (keyed tie-breaks)."""
    if weighting == "adaptive":
        return adaptive_weights(block, item, log_omega, budget=budget,
                                normalization=normalization)
    tie_break = block.row_uniforms(key, "mf-task-weights")
    if weighting == "uniform":
        ranks = block.ranks_by(tie_break)
    else:  # "tail": least frequent items first (by DP count), ties at random
        item_counts = np.asarray(counts, dtype=np.float64)[item]
        ranks = np.empty(block.n_rows, dtype=np.int64)
        ranks[np.lexsort((tie_break, item_counts, block.row_user))] = block.rank
    return (ranks < int(np.floor(budget))).astype(np.float64)

"""DP item biases of :class:`~skdpp.decomposition.AdaptiveWeightMF` (phase ``"item_bias"``):
Alg. 1 of Krichene et al. (2023) with ``d = 1``. The weighted counts ``W_i = sum_j w_ij``
(once), then per pass the weighted sums ``S_i = sum_j w_ij t_ij`` of user-centred ratings
(:func:`bias_sums`). User ``j``'s weights ``w_ij = min(1, sqrt(cap / n_j))`` on its ``n_j``
published items (``cap=None``: 1) are non-negative with norm at most ``sqrt(cap)``, so
``W`` moves by at most ``sqrt(2 cap)`` and ``S`` by ``2 sqrt(cap) C_r``. The biases are
post-processing (:func:`shrunk_item_biases`).
"""

import numpy as np

from ...privacy._clipping import clip_values
from ._task_weights import _SAFETY  # sum_i w_ij^2 <= cap exactly in floating point

# The residual scale of one rating, in units of C_r: the "auto" rating_clip is
# twice a typical user's deviation.
_RESIDUAL_SCALES = 2.0


def item_bias_sensitivities(cap, rating_clip):
    """L2 sensitivities of ``W`` and ``S`` (``None``: unbounded, epsilon=inf only)."""
    if cap is None:
        return None, None
    sens_w = float(np.sqrt(2.0 * cap))
    if rating_clip is None:
        return sens_w, None
    with np.errstate(over="ignore"):
        return sens_w, float(2.0 * np.sqrt(np.float64(cap)) * np.float64(rating_clip))


def bias_weights(block, state, broadcast):
    """Per-entry weights ``min(1, sqrt(cap / n_j))`` (kept as ``bias_w``) and the weighted
    counts ``W``."""
    cap, m = broadcast
    sel = state["sel"]
    user = block.row_user[sel]
    if cap is None:
        w = np.ones(sel.shape[0])
    else:
        n_pub = np.bincount(user, minlength=block.n_users)[user]  # >= 1 on these rows
        w = np.minimum(1.0, np.sqrt(cap / n_pub)) * _SAFETY
    state["bias_w"] = w
    return np.bincount(state["pub"][sel], weights=w, minlength=m), state


def bias_sums(block, state, broadcast):
    """The weighted sums ``S`` of ``t_ij = clip(y_ij - mean - c_j, C_r)``, ``c_j = sum_i (y_ij
    - mean - b_i) / (n_j + ridge)`` over all user ``j``'s ratings (``b``: the previous
    pass's released biases)."""
    mean, item_biases, rating_clip, ridge = broadcast
    m = item_biases.shape[0] - 1
    sel = state["sel"]
    with np.errstate(over="ignore", invalid="ignore"):
        resid = state["rating"] - mean - item_biases[state["pub"]]
        centre = block.segment_sum(resid) / (block.counts + ridge)
        t = clip_values(state["rating"][sel] - mean - centre[block.row_user[sel]],
                        rating_clip)
        values = state["bias_w"] * t
    values[~np.isfinite(values)] = 0.0  # inf - inf from huge ratings: no contribution
    return np.bincount(state["pub"][sel], weights=values, minlength=m), state


def shrunk_item_biases(sums, weights, *, ridge, rating_clip, noise_std):
    """``b_i = S_i / (W_i + ridge + ridge (2 sigma_S / C_r)^2 / W_i)`` (``W_i >= 1``), clipped
    to ``C_r``: the posterior mean under a prior ``N(0, s^2 / ridge)``, residual std ``s =
    C_r / 2``, noise std ``sigma_S``. Post-processing."""
    w = np.maximum(np.asarray(weights, dtype=np.float64), 1.0)
    denom = w + ridge
    if noise_std > 0 and rating_clip is not None:
        with np.errstate(over="ignore"):
            denom = denom + ridge * (_RESIDUAL_SCALES * noise_std / rating_clip) ** 2 / w
    with np.errstate(over="ignore", invalid="ignore"):
        b = np.asarray(sums, dtype=np.float64) / denom
    b[~np.isfinite(b)] = 0.0
    return clip_values(b, rating_clip)

"""Automatic (private, scale-free) bounds shared by the linear models.

A clip bound, or a scale a step size is relative to, whose right value depends
on the data's units is chosen from the private data by a private quantile of
one statistic per user and charged in the plan's phase ``"clip"``:

* :func:`auto_bound` -- the driver: the users' values are counted over the
  public grid by a block function (map/reduce), and the quantile is released
  by a noisy bisection (:func:`~skdpp.privacy._quantile.private_quantile`:
  ``AUTO_STEPS`` Gaussian counts of sensitivity 1);
* :func:`user_means`, :func:`rms_per_user` -- per-user statistics over a
  block's rows (overflow-free for finite values).
"""

import numpy as np

from ..privacy._plan import AUTO_CLIP_NOISE, AUTO_CLIP_SHARES, resolve_clip_share
from ..privacy._quantile import cumulative_counts, private_quantile, quantile_grid, search_steps
from ..utils._grouped import _UNIFORM_MAX_ROWS, _uniform_segment_sum

__all__ = ["AUTO_CLIP_NOISE", "AUTO_CLIP_SHARES", "AUTO_STEPS", "CLIP_PHASE",
           "LEVEL_PRIOR_VARIANCE", "auto_bound", "resolve_clip_share", "rms_per_user",
           "shrink_levels", "shrinkage_penalty", "user_means"]

#: The phase of every private quantile that resolves an ``"auto"`` bound.
CLIP_PHASE = "clip"
#: Releases of one ``"auto"`` bound (a noisy bisection over the positive grid).
AUTO_STEPS = search_steps(quantile_grid())


def user_means(block, A):
    """Per-user means of the row-aligned ``A`` (``sum_r A_r / m``: no overflow for finite ``A``)."""
    c = block.uniform_count()
    if 2 <= c <= _UNIFORM_MAX_ROWS and A.ndim == 2 and A.shape[1] >= 8 \
            and A.dtype == np.float64:
        # users of equal size: A / m scaled chunk by chunk (no scaled copy of A),
        # bit-identical to the general path
        with np.errstate(under="ignore"):
            return _uniform_segment_sum(A, c, scale=1.0 / c)
    if c:  # every row's weight is 1 / c: a scalar (the same products), no expand
        with np.errstate(under="ignore"):
            return block.segment_sum(A * (1.0 / c))
    w = block.expand(1.0 / np.maximum(block.counts, 1))
    with np.errstate(under="ignore"):
        if A.ndim == 1:
            return block.segment_sum(A * w)
        return block.segment_sum(A * w[:, None])


def rms_per_user(block, values):
    """``sqrt(mean_r values_r^2)`` per user (overflow-safe; 0 for users without rows)."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        top = block.segment_max(np.abs(values), initial=0.0)
        s = np.where(top > 0, top, 1.0)
        mean_sq = user_means(block, (values / block.expand(s)) ** 2)
        return s * np.sqrt(mean_sq)


def _statistic_counts(block, state, config):
    """Block function: cumulative counts of one statistic per user over the public grid."""
    statistic, broadcast, grid = config
    values, state = statistic(block, state, broadcast)
    with np.errstate(invalid="ignore", over="ignore"):
        return cumulative_counts(np.abs(values), grid), state


def auto_bound(executor, release, statistic, broadcast, *, quantile, n_users):
    """A bound chosen as a private quantile of one value per user (phase ``"clip"``).

    Parameters
    ----------
    executor : LocalExecutor or compatible
    release : Releaser
        Its plan must hold ``AUTO_STEPS`` Gaussian releases of phase
        ``"clip"`` for this call.
    statistic : callable
        ``statistic(block, state, broadcast) -> (values, state)``: each of the
        block's users' value (e.g. the norm of its contribution before
        clipping; the absolute value is used). A module-level function, so the
        call runs on any executor.
    broadcast : object
        Public input of ``statistic``.
    quantile : float in (0, 1]
    n_users : int
        The public number of users.

    Returns
    -------
    bound : float
        A point of the public grid cell holding the ``quantile``
        (:func:`~skdpp.privacy._quantile.private_quantile`).
    """
    grid = quantile_grid()
    counts = executor.map(_statistic_counts, (statistic, broadcast, grid))
    return private_quantile(release, CLIP_PHASE, counts, grid, quantile=quantile,
                            n_users=n_users)


#: A user's mean level has prior variance ``LEVEL_PRIOR_VARIANCE * R_b^2``
#: around the cold-start prediction, ``R_b`` the released radius of the
#: cold-start intercept (the ``clip_quantile``, by default the median, of the
#: users' absolute deviations: about 0.67 standard deviations for normal
#: spreads, so ``2 R_b^2`` is about the between-user variance).
LEVEL_PRIOR_VARIANCE = 2.0


def shrink_levels(levels, counts, noise_var, prior_levels, radius):
    """Users' mean levels shrunk towards the cold-start prediction (normal-normal model).

    ``a_i = (m_i ȳ_i / σ_i^2 + a0_i / τ^2) / (m_i / σ_i^2 + 1 / τ^2)`` with
    ``τ^2 = LEVEL_PRIOR_VARIANCE * radius^2``; a user without a noise estimate
    (``σ_i^2`` NaN: one row) counts as ``σ_i^2 = τ^2``. Non-finite results
    fall back to ``ȳ_i`` (or the prior when the weight is infinite).
    """
    with np.errstate(all="ignore"):
        tau2 = LEVEL_PRIOR_VARIANCE * float(radius) ** 2
        s2 = np.where(np.isnan(noise_var), tau2, noise_var)
        weight = s2 / (np.maximum(counts, 1) * tau2)
        shrunk = (levels + weight * prior_levels) / (1.0 + weight)
        return np.where(np.isfinite(shrunk), shrunk,
                        np.where(np.isfinite(weight), levels, prior_levels))


def shrinkage_penalty(ridge, n_params, noise_var, target_var, feature_var):
    """Diagonal penalties of a personal fit: ``κ p min(1, σ_i^2 / s_i^2)`` pseudo-rows.

    A personal part of ``p`` parameters is shrunk towards the released prior as
    if the prior contributed ``κ p`` pseudo-rows scaled by the share of the
    user's target variance ``s_i^2`` that its own fit leaves unexplained
    (``σ_i^2``): a user whose own rows determine its part (noise-free data) is
    hardly shrunk, a user whose data look like noise gets ``κ p`` pseudo-rows.
    Each coordinate's pseudo-rows have the user's own variance ``v_ij`` of that
    coordinate, so the penalty ``q_ij = λ_i v_ij`` is invariant to rescaling a
    feature (and the whole is scale-free).

    Parameters
    ----------
    ridge : float
        ``κ`` (``personal_ridge``).
    n_params : int
        ``p``.
    noise_var, target_var : ndarray of shape (n_users,)
        ``σ_i^2`` and ``s_i^2`` in the same units (NaN or non-positive
        ``s_i^2``: the share is 1).
    feature_var : ndarray of shape (n_users, p)
        ``v_ij``.

    Returns
    -------
    penalty : ndarray of shape (n_users, p)
    """
    with np.errstate(all="ignore"):
        share = np.where(target_var > 0, noise_var / target_var, 1.0)
        share = np.where(np.isfinite(share), np.minimum(share, 1.0), 1.0)
        return (float(ridge) * n_params * share)[:, None] * feature_var

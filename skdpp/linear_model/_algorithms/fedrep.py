"""Private FedRep (Snedeker, Zhou & Bassily 2025, Alg. 1; Alg. 2 initialisation) of
:class:`~skdpp.linear_model.PrivateFedRepRegressor`: :func:`run` (lines 10-11) and
:func:`fedrep_round` (lines 5-9); the rest is shared with Priv-AltMin
(:mod:`.representation`, :mod:`.spectral_init`)."""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ...privacy._clipping import clipped_outer_sum, unit_rows
from .._auto import FallbackPlan, auto_bound
from . import representation as rep

__all__ = ["Config", "plan", "run"]


@dataclass(frozen=True, eq=False)
class Config(rep.RepresentationConfig):
    """:class:`~skdpp.linear_model.PrivateFedRepRegressor`'s parameters (frozen)."""

    learning_rate: float
    label_scale: object
    batch_size: object

    owner = "PrivateFedRepRegressor"
    clip_names = ("clip_norm", "init_clip_norm", "head_clip_norm")
    scale_names = ("label_scale",)
    iteration_bounds = ("label_scale", "clip_norm")


def _iteration_releases(config):
    """Phase ``iterations``: one Gaussian release per round (line 10)."""
    return int(config.max_iter)


def plan(config, meta):
    """The fit's :class:`~skdpp.privacy.BudgetPlan` (:func:`.representation.plan`)."""
    return rep.plan(config, meta, iteration_releases=_iteration_releases(config))[0]


def fedrep_batches(local, key, t, batch_mode, batch_size):
    """``(head_block, grad_block)`` of round ``t`` (Alg. 1, line 5): the ``S^0`` rows
    ``local`` ranked by ``hash(key, "fedrep_batch", user id, rank, t)``. ``"same"``:
    both all of ``S^0`` (``batch_size=None``) or its first ``batch_size`` rows;
    ``"disjoint"``: the first and next ``b_i = min(floor(|S^0_i| / 2), batch_size)``.
    """
    if batch_mode == "same" and batch_size is None:
        return local, local
    rank = local.ranks_by(local.row_uniforms(key, "fedrep_batch", t))
    if batch_mode == "same":
        batch = local.select(rank < batch_size)
        return batch, batch
    half = local.counts // 2
    b = local.expand(half if batch_size is None else np.minimum(batch_size, half))
    return local.select(rank < b), local.select((rank >= b) & (rank < 2 * b))


def _user_gradients(grad, X0, P, y0, V):
    """``g_i`` with ``∇_{i,t} = -(2/b) sum_{B'} (y - <x, U v>) x v_i^T = g_i v_i^T``
    (Alg. 1, lines 7-8), one sparse product over ``X0``; zero if not a number."""
    with np.errstate(over="ignore", invalid="ignore"):
        resid = grad.take(y0) - np.einsum("ij,ij->i", grad.take(P), grad.expand(V))
        w = -2.0 * resid / grad.expand(np.maximum(grad.counts, 1))
    W = sp.csr_matrix((w, grad.source_rows(), grad.offsets),
                      shape=(grad.n_users, X0.shape[0]))
    g = np.asarray(W @ X0)
    # NaN (magnitudes near the float maximum): zero, a function of the user's rows
    with np.errstate(invalid="ignore", over="ignore"):
        suspect = ~np.isfinite(g.sum(axis=1))  # one pass, no n x d temporary
    if suspect.any():
        rows = np.flatnonzero(suspect)
        g[rows[np.isnan(g[rows]).any(axis=1)]] = 0.0
    return g


def _clipped_gradient_sum(grad, X0, P, y0, V, clip_norm):
    """``sum_i clip(∇_{i,t}, ψ)`` (Alg. 1, lines 7-9) on the batch ``grad`` of ``X0``
    (``P = X0 U``): rank-one ``g_i v_i^T`` clipped per user
    (:func:`~skdpp.privacy._clipping.clipped_outer_sum`)."""
    return clipped_outer_sum(_user_gradients(grad, X0, P, y0, V), V, clip_norm)


def _round_inputs(state, rnd):
    """``(grad, P, V)``: the gradient batch, ``P = X0 U`` and the heads (lines 5-6)."""
    head, grad = fedrep_batches(state.local, rnd.key, rnd.t, rnd.config.batch_mode,
                                rnd.config.batch_size)
    return (grad,) + rep.round_heads(state, rnd.U, head)


def fedrep_round(block, state, rnd):
    """Block function: the block's ``sum_i clip(∇_{i,t}, ψ)`` (lines 5-9)."""
    grad, P, V = _round_inputs(state, rnd)
    return _clipped_gradient_sum(grad, state.X0, P, state.y0, V,
                                 rnd.bounds["clip_norm"]), state


def gradient_norms(block, state, rnd):
    """Block function: each user's ``||∇_{i,t}||_F = ||g_i|| ||v_i||`` (the ``"auto"`` ``ψ``)."""
    grad, P, V = _round_inputs(state, rnd)
    g = _user_gradients(grad, state.X0, P, state.y0, V)
    with np.errstate(over="ignore", invalid="ignore"):
        return unit_rows(g)[1] * unit_rows(V)[1], state


def run(executor, release, randomness, meta, config):
    """The fit: :func:`.representation.start`, Alg. 1 lines 1-12 on ``S^0``, then
    :func:`.representation.finish` (or :func:`.representation.fallback_fit`). The
    step ``U - (η / s_y^2) (1/n) sum clip(∇)`` is scale-free in ``X`` and ``y``."""
    if isinstance(release.plan, FallbackPlan):
        return rep.fallback_fit(executor, release, randomness, meta, config)
    begun = rep.start(executor, release, randomness, meta, config)
    key, n_users, n_iter = randomness.key, meta["n_users"], int(config.max_iter)
    quantile = float(config.clip_quantile)
    U = np.array(begun.U0, dtype=np.float64, copy=True)  # line 1
    clip_norm = None if config.clip_norm == "auto" and n_iter == 0 else config.clip_norm
    label_scale = None if config.label_scale == "auto" and n_iter == 0 else config.label_scale
    if label_scale == "auto":
        label_scale = auto_bound(executor, release, rep.label_statistic, None,
                                 quantile=quantile, n_users=n_users)
    if clip_norm == "auto":
        clip_norm = auto_bound(executor, release, gradient_norms,
                               rep.Round(U, 0, key, config, {}),
                               quantile=quantile, n_users=n_users)
    sensitivity = None if clip_norm is None else 2.0 * clip_norm
    step = float(config.learning_rate) / float(label_scale) ** 2 if n_iter else 0.0
    for t in range(n_iter):  # line 2
        total = executor.map(fedrep_round, rep.Round(
            U, t, key, config, {"clip_norm": clip_norm}))  # lines 3-9
        noisy = release.gaussian("iterations", total, sensitivity=sensitivity,
                                 clip_norm=clip_norm)  # line 10: the sum plus noise
        # dividing by the public n is post-processing; line 11: QR
        U, _ = np.linalg.qr(U - step * (noisy / n_users))
        if config.verbose:
            # public quantities only
            print(f"[PrivateFedRep] iteration {t + 1}/{n_iter}: released the clipped "
                  f"gradient sum (noise multiplier "
                  f"{release.noise_multiplier('iterations'):.3g})")
    notes = (f"batch_mode={config.batch_mode!r}: each round releases one Gaussian sum of "
             "per-user gradients clipped to clip_norm (sensitivity 2*clip_norm).",)
    return rep.finish(executor, release, meta, config, begun, U,
                      {"clip_norm": clip_norm, "label_scale": label_scale}, notes)

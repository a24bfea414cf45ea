"""Priv-AltMin (Jain, Rush, Smith, Song & Thakurta 2021, Alg. 1-3) of
:class:`~skdpp.linear_model.PrivAltMinRegressor`: :func:`run` (Alg. 2, lines 2-4) and
:func:`altmin_round` (Alg. 1, line 5; Alg. 2, line 1); the rest is shared with FedRep
(:mod:`.representation`)."""

from dataclasses import dataclass

import numpy as np

from ...privacy._clipping import clip_values, clipped_magnitudes, unit_rows
from .._auto import FallbackPlan, auto_bound, rms_per_user, user_weights
from .._heads import psd_floor_solve
from . import representation as rep

__all__ = ["Config", "plan", "run"]


@dataclass(frozen=True, eq=False)
class Config(rep.RepresentationConfig):
    """:class:`~skdpp.linear_model.PrivAltMinRegressor`'s parameters (frozen)."""

    schedule: str
    label_clip: object
    psd_floor: float

    owner = "PrivAltMinRegressor"
    clip_names = ("clip_norm", "label_clip", "init_clip_norm", "head_clip_norm")
    iteration_bounds = ("clip_norm", "label_clip")
    pairwise_label_clip = "label_clip"  # ζ of Alg. 3 (init="private_pairwise")


def _iteration_releases(config):
    """Phase ``iterations``: each round's Gram and moments (Alg. 2, line 2); only the
    first round's with ``schedule="disjoint"`` (parallel composition)."""
    rounds = config.max_iter if config.schedule == "full" else min(config.max_iter, 1)
    return 2 * int(rounds)


def plan(config, meta):
    """The fit's :class:`~skdpp.privacy.BudgetPlan` (:func:`.representation.plan`)."""
    return rep.plan(config, meta, iteration_releases=_iteration_releases(config))[0]


_CHUNK_BYTES = 16 * 2**20  # per-chunk temporaries of the Kronecker Gram blocks


def user_rounds(block, key, n_rounds):
    """Each user's round ``floor(T u_i)``, ``u_i = hash(key, "altmin_round", user id)``
    (``schedule="disjoint"``, Alg. 1, lines 2, 4): its own id only, unlike a permutation."""
    u = block.user_uniforms(key, "altmin_round")
    return np.minimum((u * n_rounds).astype(np.int64), n_rounds - 1)


def prepare_altmin(block, state, config):
    """Block function (once): rows of the heads and of the ``U`` statistics: ``S^0``
    for both (``"same"``), or two keyed random halves of ``S^0`` (``"disjoint"``)."""
    key, batch_mode = config
    local = state.local
    if batch_mode == "same":
        state.extra["halves"] = (local, local)
    else:
        first = local.split_users_rows(0.5, local.row_uniforms(key, "altmin_halves"))
        state.extra["halves"] = (local.select(first), local.select(~first))
    return None, state


def _kron_blocks(Xu, Vr, w):
    """``sum_r w_r v_{r,a} v_{r,b} x_r x_r^T`` for ``a <= b``, shape ``(d, d, k(k+1)/2)``:
    the blocks of the ``dk × dk`` Gram (``vec(x v^T) = v ⊗ x``), chunked."""
    n, d = Xu.shape
    k = Vr.shape[1]
    pairs = [(a, b) for a in range(k) for b in range(a, k)]
    W = np.stack([w * Vr[:, a] * Vr[:, b] for a, b in pairs], axis=1)
    q = W.shape[1]
    out = np.zeros((d, d * q))
    chunk = max(1, _CHUNK_BYTES // (8 * max(1, d * q)))
    for lo in range(0, n, chunk):  # memory chunks of rows
        Xc = Xu[lo:lo + chunk]
        out += Xc.T @ (Xc[:, :, None] * W[lo:lo + chunk, None, :]).reshape(-1, d * q)
    return out.reshape(d, d, q)


def _assemble_gram(blocks, k):
    """The ``dk × dk`` Gram from its ``k(k+1)/2`` Kronecker blocks (exactly symmetric)."""
    d = blocks.shape[0]
    G = np.empty((d * k, d * k))
    idx = 0
    for a in range(k):  # k(k+1)/2 blocks
        for b in range(a, k):
            G[a * d:(a + 1) * d, b * d:(b + 1) * d] = blocks[:, :, idx]
            G[b * d:(b + 1) * d, a * d:(a + 1) * d] = blocks[:, :, idx].T
            idx += 1
    return (G + G.T) / 2.0


def altmin_statistics(stats, X0, y0, V, clip_norm, label_clip):
    """A block's partial sums of Alg. 2, line 1: ``(gram_blocks, moments)``. With ``W_r =
    min(||x|| ||v||, η) vec(x̂ v̂^T)`` (``||W_r|| <= η`` for any magnitudes) and ``ỹ_r =
    clip(y_r; ζ)``, each user adds its *mean* of ``W_r W_r^T`` (trace ``<= η^2``) and
    of ``ỹ_r W_r`` (norm ``<= ζ η``)."""
    xu, xn = unit_rows(stats.take(X0))
    vu, vn = unit_rows(V)
    Vr, vnr = stats.expand(vu), stats.expand(vn)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.where((xn > 0) & (vnr > 0), xn * vnr, 0.0)
    mag, _ = clipped_magnitudes(norms, clip_norm)  # ||W_r|| = min(||x|| ||v||, eta)
    yt = clip_values(stats.take(y0), label_clip)
    w = user_weights(stats)  # each user contributes the mean over its rows
    with np.errstate(over="ignore", invalid="ignore"):
        gram = _kron_blocks(xu, Vr, w * mag**2)
        moments = xu.T @ ((w * mag * yt)[:, None] * Vr)
    return gram, moments


def _round_heads(state, rnd, all_users=False):
    """``(stats, V)``: the round's statistics rows and heads (Alg. 1, lines 4-5;
    ``all_users``: the ``"auto"`` ``η`` pass)."""
    heads, stats = state.extra["halves"]
    if rnd.config.schedule == "disjoint" and not all_users:  # line 4: round t's users
        active = user_rounds(state.local, rnd.key, int(rnd.config.max_iter)) == rnd.t
        heads = heads.select(heads.expand(active))
        stats = stats.select(stats.expand(active))
    return stats, rep.round_heads(state, rnd.U, heads)[1]  # line 5


def altmin_round(block, state, rnd):
    """Block function of one round: heads (Alg. 1, line 5), then Alg. 2, line 1."""
    stats, V = _round_heads(state, rnd)
    return altmin_statistics(stats, state.X0, state.y0, V, rnd.bounds["clip_norm"],
                             rnd.bounds["label_clip"]), state


def row_norm_statistic(block, state, rnd):
    """Block function: each user's RMS of ``||x_r|| ||v_i||`` at ``U_0`` (``"auto"`` ``η``)."""
    stats, V = _round_heads(state, rnd, all_users=True)
    xn = unit_rows(stats.take(state.X0))[1]
    with np.errstate(over="ignore", invalid="ignore"):
        norms = xn * stats.expand(unit_rows(V)[1])
    return rms_per_user(stats, norms), state


def label_statistic(block, state, rnd):
    """Block function: each user's RMS (centred) target (``"auto"`` ``ζ``)."""
    stats = state.extra["halves"][1]
    return rms_per_user(stats, stats.take(state.y0)), state


def run(executor, release, randomness, meta, config):
    """The fit: :func:`.representation.start`, Alg. 1 lines 1-6 with Alg. 2 as the
    private ``U`` step, then :func:`.representation.finish` (or
    :func:`.representation.fallback_fit`). ``max_iter=0`` resolves no bound."""
    if isinstance(release.plan, FallbackPlan):
        return rep.fallback_fit(executor, release, randomness, meta, config)
    begun = rep.start(executor, release, randomness, meta, config)
    executor.map(prepare_altmin, (randomness.key, config.batch_mode))
    key, n_users, n_rounds = randomness.key, meta["n_users"], int(config.max_iter)
    schedule, quantile = config.schedule, float(config.clip_quantile)
    d, k = begun.U0.shape
    U = np.array(begun.U0, dtype=np.float64, copy=True)  # Alg. 1, line 1
    clip_norm, label_clip = None, None
    if n_rounds:
        clip_norm = config.clip_norm
        label_clip = begun.bounds.get("label_clip", config.label_clip)  # pairwise init's ζ
        rnd0 = rep.Round(U, 0, key, config, {})
        if clip_norm == "auto":
            clip_norm = auto_bound(executor, release, row_norm_statistic, rnd0,
                                   quantile=quantile, n_users=n_users)
        if label_clip == "auto":
            label_clip = auto_bound(executor, release, label_statistic, rnd0,
                                    quantile=quantile, n_users=n_users)
        sens_G = None if clip_norm is None else np.sqrt(2.0) * clip_norm**2
        sens_b = None if clip_norm is None or label_clip is None \
            else 2.0 * label_clip * clip_norm
        floor = float(config.psd_floor) * release.noise_std("iterations", sens_G) \
            * np.sqrt(d * k)
    # schedule="disjoint": parallel composition, branch 0 charged (estimator Notes)
    for t in range(n_rounds):  # line 3
        grams, moments = executor.map(altmin_round, rep.Round(U, t, key, config, {
            "clip_norm": clip_norm, "label_clip": label_clip}))  # lines 4-5, Alg. 2 l. 1
        branch = t if schedule == "disjoint" else None
        # Alg. 2, line 2: symmetric noise on the Gram, Gaussian noise on b.
        G = release.gaussian("iterations", _assemble_gram(grams, k), sensitivity=sens_G,
                             clip_norm=clip_norm, symmetric=True, branch=branch)
        b = release.gaussian("iterations", moments.T.ravel(), sensitivity=sens_b,
                             clip_norm=clip_norm, branch=branch)  # vec(B): columns consecutive
        # Alg. 2, line 3: the (regularised) least-squares solve, then line 4: QR.
        Z = psd_floor_solve(G, b, floor).reshape(k, d).T  # un-vec
        if np.linalg.matrix_rank(Z) == k:  # else (e.g. a round without users) keep U
            U, _ = np.linalg.qr(Z)
        if config.verbose:
            # public quantities only
            users = "all users" if schedule == "full" else f"the users of round {t + 1}"
            print(f"[PrivAltMin] round {t + 1}/{n_rounds}: {users}; released the Gram "
                  f"and moment statistics (noise multiplier "
                  f"{release.noise_multiplier('iterations'):.3g})")
    notes = ("Each round releases the per-user-mean Gram (sensitivity "
             "sqrt(2)*clip_norm**2, symmetric noise) and moment vector (sensitivity "
             "2*label_clip*clip_norm).",)
    if schedule == "disjoint" and config.max_iter > 1:
        notes += (
            f"schedule='disjoint': every user takes part in one of {config.max_iter} "
            "rounds (a keyed hash of its id); by parallel composition only one round's "
            "two releases are charged.",)
    return rep.finish(executor, release, meta, config, begun, U,
                      {"clip_norm": clip_norm, "label_clip": label_clip}, notes)

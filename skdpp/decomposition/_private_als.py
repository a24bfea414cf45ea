"""Private alternating minimisation for matrix completion (Krichene et al. 2023, Alg. 1-3).

The algorithm of :class:`~skdpp.decomposition.AdaptiveWeightMF`, written as
pure functions over blocks of whole users plus one driver
(:func:`fit_private_mf`), following DESIGN §4:

* the data are *entries*: one row per distinct (user, item) pair with the
  mean of the user's ratings of that item (:func:`aggregate_entries`), in
  blocks of whole users whose rows are sorted by item code
  (:func:`entry_blocks`), so a fit is a function of the set of ratings;
* block functions ``fn(block, state, broadcast) -> (partial, state)`` compute
  each block's partial sum of per-user contributions (clipped) and keep the
  per-user state (residuals, task weights, user embeddings) in the block;
* the driver adds the privacy noise once per release, through the fit's
  :class:`~skdpp.privacy.Releaser`, and computes the next broadcast.

Releases, in order (replace-one-user, L2 sensitivities):

1. ``"mean"`` (Alg. 3, line 2): the mean over users of each user's mean
   rating clipped to ``mean_clip``: ``2 mean_clip / n_users``;
2. ``"counts"`` (App. B, D.1): item counts from at most ``count_cap`` items per
   user: ``sqrt(2 count_cap)``;
3. ``"items"``, each iteration (Alg. 3, line 5): the weighted Gram stack
   ``A_i = sum_j w_ij u_j u_j^T`` (symmetric noise) and right-hand sides
   ``b_i = sum_j w_ij t_ij u_j`` (Alg. 1, lines 5-6): ``2 sqrt(beta) C_u^2``
   and ``2 sqrt(beta) C_u C_r``; or, per gradient step, the weighted sum of
   per-entry clipped gradients (Alg. 2, line 5): ``2 sqrt(beta) Gamma``.

The user step (Alg. 3, line 4) is an exact ridge solve per user, local and
free in privacy; it runs inside the block and its result stays there. The
personal parts of :meth:`~skdpp.base.BasePersonalizedEstimator.personalize`
use the same block functions (:func:`prepare_residuals`,
:func:`personal_parts`).
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..linear_model._heads import gram_ridge_solve, psd_ridge_solve
from ..privacy._clipping import (
    clip_by_norm,
    clip_values,
    clipped_magnitudes,
    unit_rows,
)
from ..utils._grouped import UserIndex, make_blocks
from ._task_weights import log_adaptive_item_weights, task_weights

__all__ = [
    "BLOCK_ROWS",
    "MFConfig",
    "aggregate_entries",
    "als_statistics",
    "count_partial",
    "entry_blocks",
    "fit_private_mf",
    "item_gradient",
    "mean_partial",
    "personal_parts",
    "prepare_residuals",
    "prepare_weights",
    "user_step",
]

# Entries per block. Every block returns a dense partial Gram stack of
# n_items x k (k + 1) / 2 floats (42 MB for 10^4 items at k = 32), and the
# fixed-order tree sum holds about log2(n_blocks) of them: large blocks keep
# that memory (and the cost of adding partials) small next to the per-entry work.
BLOCK_ROWS = 2**20
# Users per memory chunk inside a block (bounds the chunk x k (k + 1) / 2
# temporaries of the user solves and the Gram statistics: 35 MB at k = 32).
_USER_CHUNK = 8192
# Entries per chunk of the row-wise dot products of the gradient step.
_ENTRY_CHUNK = 2**17


@dataclass(frozen=True)
class MFConfig:
    """Public configuration of one fit (the estimator's resolved parameters)."""

    n_items: int
    n_components: int
    reg: float
    user_bias: bool
    clip_norm: object  # float or None (epsilon=inf only)
    rating_clip: object  # float or None (epsilon=inf only)
    center: bool
    mean_clip: float
    count_cap: int
    weighting: str
    mu: float
    user_budget: float
    weight_normalization: str
    solver: str
    n_iter: int
    gd_steps: int
    learning_rate: float
    grad_clip: object  # float or None
    noise_ridge: float

    @property
    def needs_counts(self):
        """DP item counts are released for adaptive/tail weights and for the GD steps."""
        return self.weighting in ("adaptive", "tail") or self.solver == "sgd"


# --------------------------------------------------------------------------- #
# Entries and blocks
# --------------------------------------------------------------------------- #
def aggregate_entries(user, item, y, n_items):
    """Merge duplicate (user, item) rows into one entry with their mean rating.

    A user then contributes at most once to each item's statistics, which the
    sensitivity analysis requires (one rating per (user, item), as in the
    paper). The mean is a sum of ``y / count`` (no overflow for finite
    ratings) taken in increasing rating order within each pair, so it does
    not depend on the order of the rows.

    Parameters
    ----------
    user, item : ndarray of shape (n,), int
        User and item codes of the rows.
    y : ndarray of shape (n,)
        Ratings.
    n_items : int

    Returns
    -------
    user, item, rating : ndarray of shape (n_entries,)
        Entries sorted by user, then item.
    """
    y = np.asarray(y, dtype=np.float64)
    pair = np.asarray(user, dtype=np.int64) * np.int64(n_items) + np.asarray(item, np.int64)
    uniq, inverse, n_dup = np.unique(pair, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    values = y / n_dup[inverse]
    dup = np.flatnonzero(n_dup[inverse] > 1)
    if dup.size:
        # Place each duplicated pair's rows in increasing rating order (bincount
        # sums every bin in array order).
        rows = np.arange(pair.shape[0])
        rows[dup] = dup[np.lexsort((values[dup], inverse[dup]))]
        inverse, values = inverse[rows], values[rows]
    with np.errstate(over="ignore"):  # a mean near the float maximum may round to inf
        rating = np.bincount(inverse, weights=values, minlength=uniq.shape[0])
    return uniq // n_items, uniq % n_items, rating


def entry_blocks(user, item, rating, users, n_items, *, max_rows=BLOCK_ROWS):
    """Blocks of whole users over the entries, each user's rows sorted by item.

    Parameters
    ----------
    user, item, rating : ndarray of shape (n_entries,)
        Entries from :func:`aggregate_entries` (sorted by user, then item).
    users : ndarray of shape (n_users,)
        The sorted user ids (users without entries are kept: they are users).
    n_items : int
    max_rows : int, default=BLOCK_ROWS

    Returns
    -------
    blocks : list of UserBlock
        Sources: ``X`` = item codes (n_entries, 1), ``y`` = ratings.
    """
    item = np.asarray(item, dtype=np.int64)
    index = UserIndex(users, user)
    # Item codes are the row keys (in the top bits, which canonical_order keeps);
    # the entries are already in (user, item) order, which the stable sort keeps.
    shift = np.uint64(64 - max(1, int(n_items - 1).bit_length()))
    keys = item.astype(np.uint64) << shift
    return make_blocks(item[:, None], np.asarray(rating, dtype=np.float64), index,
                       row_keys=keys, max_rows=max_rows)


def _state(block, state):
    """The block's state, created on first use: its entries' items and ratings."""
    if state is None:
        state = {"item": np.asarray(block.take(block.X)[:, 0], dtype=np.int64),
                 "rating": block.take(block.y)}
    return state


def _user_csr(block, data, item, n_items, indptr=None):
    """(block users x n_items) CSR of per-entry ``data`` (rows in canonical order)."""
    indptr = block.offsets if indptr is None else indptr
    return sp.csr_matrix((data, item, indptr), shape=(block.n_users, n_items))


def _unflatten_sym(flat, k):
    """(n, k (k + 1) / 2) upper triangles -> (n, k, k) symmetric matrices."""
    iu, ju = np.triu_indices(k)
    position = np.empty((k, k), dtype=np.intp)  # entry (a, b) -> its triangle column
    position[iu, ju] = position[ju, iu] = np.arange(iu.shape[0])
    # One gather along the columns (5x faster than two fancy-index assignments).
    return np.take(flat, position.ravel(), axis=1).reshape(-1, k, k)


# --------------------------------------------------------------------------- #
# Pre-processing (Alg. 3, line 2)
# --------------------------------------------------------------------------- #
def mean_partial(block, state, mean_clip):
    """Sum over the block's users of their mean rating clipped to ``mean_clip``.

    Each user contributes ``a_j = clip(mean_i clip(y_ij, b), b)`` in
    ``[-b, b]`` (the outer clip only guards against rounding); users without
    entries contribute 0.
    """
    state = _state(block, state)
    sums = block.segment_sum(clip_values(state["rating"], mean_clip))
    per_user = np.divide(sums, block.counts, out=np.zeros(block.n_users),
                         where=block.counts > 0)
    return np.array([clip_values(per_user, mean_clip).sum()]), state


def count_partial(block, state, broadcast):
    """Item counts from at most ``count_cap`` items per user (App. B, D.1).

    A user with more items keeps ``count_cap`` of them chosen uniformly at
    random: the smallest keyed per-row uniforms (stream ``"mf-count-sample"``).
    Each user adds a 0/1 indicator with at most ``count_cap`` ones.
    """
    key, cap, n_items = broadcast
    state = _state(block, state)
    ranks = block.ranks_by(block.row_uniforms(key, "mf-count-sample"))
    kept = state["item"][ranks < cap]
    return np.bincount(kept, minlength=n_items).astype(np.float64), state


def prepare_residuals(block, state, broadcast):
    """Centred ratings clipped to ``rating_clip`` and the rating matrix of the block.

    ``broadcast = (mean, rating_clip, n_items)``. Stores ``resid`` and the
    CSR matrices used by the user step; returns no partial.
    """
    mean, rating_clip, n_items = broadcast
    state = _state(block, state)
    with np.errstate(over="ignore", invalid="ignore"):  # huge ratings clip to C_r
        resid = clip_values(state["rating"] - mean, rating_clip)
    state["resid"] = resid
    state["R"] = _user_csr(block, resid, state["item"], n_items)
    state["ones"] = _user_csr(block, np.ones(block.n_rows), state["item"], n_items)
    return None, state


def prepare_weights(block, state, broadcast):
    """Task weights of every entry (eq. (11)-(12) or a sampling baseline), kept in the state.

    ``broadcast = (config, key, log_omega, counts)``. Entries with weight 0
    are dropped from the item step; the weights of the others are stored with
    their (users x items) CSR structure.
    """
    cfg, key, log_omega, counts = broadcast
    w = task_weights(block, state["item"], weighting=cfg.weighting,
                     budget=cfg.user_budget, key=key, log_omega=log_omega, counts=counts,
                     normalization=cfg.weight_normalization)
    keep = np.flatnonzero(w > 0)
    user = block.row_user[keep]
    indptr = np.zeros(block.n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(user, minlength=block.n_users), out=indptr[1:])
    state.update(keep=keep, keep_user=user, keep_item=state["item"][keep], w=w[keep],
                 indptr=indptr)
    state["W"] = _user_csr(block, state["w"], state["keep_item"], cfg.n_items, indptr)
    return None, state


# --------------------------------------------------------------------------- #
# User step (Alg. 3, line 4): exact ridge least squares per user, local
# --------------------------------------------------------------------------- #
def _solve_users(block, state, V, cfg):
    """``u_j = (sum_{i in j} v_i v_i^T + reg I)^-1 sum_i r_ij v_i`` for every user.

    With ``user_bias`` every item embedding is extended by a constant 1, so
    each user also gets a bias (ridge-penalised like the embedding). Per-user
    Gram matrices are ``ones @ P`` with ``P`` the items' upper-triangular
    outer products (a sparse-dense product indexed by item), solved as stacks
    of ``k x k`` systems in chunks of users. A user whose solve is not finite
    (only possible for astronomically large item embeddings) gets 0.

    Returns
    -------
    U : ndarray of shape (block.n_users, k)
    bias : ndarray of shape (block.n_users,)
    """
    Vx = np.hstack([V, np.ones((V.shape[0], 1))]) if cfg.user_bias else V
    k = Vx.shape[1]
    iu, ju = np.triu_indices(k)
    with np.errstate(over="ignore", invalid="ignore"):
        P = Vx[:, iu] * Vx[:, ju]
        rhs = np.asarray(state["R"] @ Vx)
        U = np.empty((block.n_users, k))
        ones = state["ones"]
        for start in range(0, block.n_users, _USER_CHUNK):  # memory chunks, not users
            stop = min(block.n_users, start + _USER_CHUNK)
            G = _unflatten_sym(np.asarray(ones[start:stop] @ P), k)
            U[start:stop] = gram_ridge_solve(G, rhs[start:stop], cfg.reg)
    U[~np.isfinite(U).all(axis=1)] = 0.0
    if cfg.user_bias:
        return U[:, :-1], U[:, -1].copy()
    return U, np.zeros(block.n_users)


def _item_targets(state, bias, rating_clip):
    """Item-step targets: residual minus the user's bias, clipped to ``C_r``."""
    with np.errstate(over="ignore", invalid="ignore"):
        return clip_values(state["resid"][state["keep"]] - bias[state["keep_user"]],
                           rating_clip)


def personal_parts(block, state, broadcast):
    """Each user's embedding and bias from the released items (App. D, Remark D.1).

    ``broadcast = (V, config)``; for :meth:`LocalExecutor.collect`. The
    embeddings are not clipped (they are personal, never released).
    """
    V, cfg = broadcast
    return _solve_users(block, state, V, cfg)


# --------------------------------------------------------------------------- #
# Private item step (Alg. 3, line 5)
# --------------------------------------------------------------------------- #
def als_statistics(block, state, broadcast):
    """User step, then the block's weighted item statistics (Alg. 1, lines 2, 5-6).

    ``broadcast = (V, config)``. Every user embedding is clipped to
    ``C_u`` (line 2) before it enters ``A_i = sum_j w_ij u_j u_j^T`` (as
    upper triangles, ``(n_items, k (k + 1) / 2)``) and ``b_i = sum_j w_ij
    t_ij u_j`` with targets ``|t_ij| <= C_r``.

    Returns
    -------
    partial : tuple (A_flat, b)
    state
    """
    V, cfg = broadcast
    U, bias = _solve_users(block, state, V, cfg)
    U = clip_by_norm(U, cfg.clip_norm)
    target = _item_targets(state, bias, cfg.rating_clip)
    k = U.shape[1]
    iu, ju = np.triu_indices(k)
    W = state["W"]
    A = np.zeros((cfg.n_items, iu.shape[0]))
    for start in range(0, block.n_users, _USER_CHUNK):  # memory chunks, not users
        stop = min(block.n_users, start + _USER_CHUNK)
        Uc = U[start:stop]
        A += np.asarray(W[start:stop].T @ (Uc[:, iu] * Uc[:, ju]))
    WT = _user_csr(block, state["w"] * target, state["keep_item"], cfg.n_items,
                   state["indptr"])
    b = np.asarray(WT.T @ U)
    return (A, b), state


def user_step(block, state, broadcast):
    """User step of the gradient solver: clipped embeddings and targets kept in the state.

    ``broadcast = (V, config)``; returns no partial.
    """
    V, cfg = broadcast
    U, bias = _solve_users(block, state, V, cfg)
    U = clip_by_norm(U, cfg.clip_norm)
    state["U"] = U
    state["unit"], state["norm"] = unit_rows(U)
    state["target"] = _item_targets(state, bias, cfg.rating_clip)
    return None, state


def item_gradient(block, state, broadcast):
    """Weighted sum of per-entry clipped gradients of the item loss (Alg. 2, line 5).

    ``g_i = sum_j w_ij clip((<v_i, u_j> - t_ij) u_j, Gamma)``. The clip of
    ``e u`` only rescales the scalar: the clipped gradient is
    ``sign(e) min(|e| ||u||, Gamma) u / ||u||`` (magnitudes and unit vectors
    from :mod:`skdpp.privacy._clipping`, so a huge or non-finite ``e`` still
    gives a gradient of norm at most ``Gamma``; a NaN residual gives 0).

    ``broadcast = (V, grad_clip, n_items)``; returns the ``(n_items, k)`` partial.
    """
    V, grad_clip, n_items = broadcast
    user, item = state["keep_user"], state["keep_item"]
    U = state["U"]
    resid = np.empty(user.shape[0])
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, user.shape[0], _ENTRY_CHUNK):  # memory chunks
            stop = min(user.shape[0], start + _ENTRY_CHUNK)
            resid[start:stop] = np.einsum("ek,ek->e", U[user[start:stop]],
                                          V[item[start:stop]])
        resid -= state["target"]
        magnitude, _ = clipped_magnitudes(np.abs(resid) * state["norm"][user], grad_clip)
        coef = state["w"] * np.sign(resid) * magnitude
    coef[~np.isfinite(coef)] = 0.0
    C = _user_csr(block, coef, item, n_items, state["indptr"])
    return np.asarray(C.T @ state["unit"]), state


# --------------------------------------------------------------------------- #
# Driver
# --------------------------------------------------------------------------- #
def _sensitivities(cfg):
    """Stated sensitivities of the item releases (``None``: no clipping, epsilon=inf).

    Overflow gives ``inf``; the release then raises if it adds noise.
    """
    sqrt_beta = np.sqrt(np.float64(cfg.user_budget))
    cu, cr = cfg.clip_norm, cfg.rating_clip
    grad_clip = cfg.grad_clip
    with np.errstate(over="ignore"):
        if grad_clip is None and cu is not None and cr is not None:
            # Default Gamma = C_u C_r: the bound of |t_ij| ||u_j||, the
            # per-entry gradient at v_i = 0.
            grad_clip = float(np.float64(cu) * cr)
        sens_A = None if cu is None else float(2.0 * sqrt_beta * np.float64(cu) ** 2)
        sens_b = None if cu is None or cr is None else float(2.0 * sqrt_beta * cu * cr)
        sens_g = None if grad_clip is None else float(2.0 * sqrt_beta * grad_clip)
    if grad_clip is not None and not np.isfinite(grad_clip):
        grad_clip = None  # C_u C_r overflows: no finite clip (the release raises)
    return sens_A, sens_b, sens_g, grad_clip


def fit_private_mf(executor, release, randomness, meta, cfg, *, log=None):
    """Alternating minimisation with a private item step (Alg. 3), over user blocks.

    Parameters
    ----------
    executor : LocalExecutor
        Blocks of entries from :func:`entry_blocks`.
    release : Releaser
        The fit's release helper (phases ``"mean"``, ``"counts"``, ``"items"``
        as planned by the estimator).
    randomness : FitRandomness
    meta : dict
        Public metadata (``n_users``).
    cfg : MFConfig
    log : callable or None
        Called with public progress messages (verbose output).

    Returns
    -------
    result : dict
        ``item_embeddings``, ``item_counts`` (or None), ``mean``,
        ``user_embeddings``, ``user_biases``.
    """
    n_users, n_items, k = int(meta["n_users"]), cfg.n_items, cfg.n_components
    key = randomness.key
    # Alg. 3, line 1: data-independent initialisation v_i ~ N(0, I / k), drawn
    # first from the public stream (no privacy cost).
    V = randomness.public.standard_normal((n_items, k)) / np.sqrt(k)

    # Alg. 3, line 2: pre-processing -- DP mean, DP item counts.
    mean = 0.0
    if cfg.center:
        total = executor.map(mean_partial, cfg.mean_clip)
        noisy = release.gaussian("mean", total / n_users,
                                 sensitivity=2.0 * cfg.mean_clip / n_users,
                                 clip_norm=cfg.mean_clip)
        # Post-processing: the mean of values in [-b, b] lies in that range.
        mean = float(np.clip(noisy[0], -cfg.mean_clip, cfg.mean_clip))
    counts = None
    if cfg.needs_counts:
        total = executor.map(count_partial, (key, cfg.count_cap, n_items))
        counts = release.gaussian("counts", total,
                                  sensitivity=float(np.sqrt(2.0 * cfg.count_cap)),
                                  clip_norm=float(np.sqrt(cfg.count_cap)))
    executor.map(prepare_residuals, (mean, cfg.rating_clip, n_items))

    # Task weights (eq. (11)-(12)): public omega from the DP counts, then per user.
    log_omega = omega = None
    if cfg.weighting == "adaptive":
        log_omega = log_adaptive_item_weights(counts, mu=cfg.mu, budget=cfg.user_budget,
                                              n_users=n_users)
        omega = np.exp(log_omega)
    executor.map(prepare_weights, (cfg, key, log_omega, counts))

    sens_A, sens_b, sens_g, grad_clip = _sensitivities(cfg)
    # Item-side ridge: `reg` plus `noise_ridge` times sigma_A sqrt(k), the spectral
    # scale of the symmetric Gram noise of this phase (public: post-processing).
    z = release.noise_multiplier("items")
    item_ridge = float(cfg.reg)
    if z > 0 and sens_A is not None:
        item_ridge += cfg.noise_ridge * z * sens_A * np.sqrt(k)
    if cfg.solver == "sgd":
        # Per-item steps from public quantities: a curvature estimate
        # sum_j w_ij ||u_j||^2 <= C_u^2 omega_i n_i.
        scale = np.ones(n_items) if omega is None else omega
        c2 = 1.0 if cfg.clip_norm is None else np.float64(cfg.clip_norm) ** 2
        with np.errstate(over="ignore"):  # absurd clip norms: step -> 0
            step = cfg.learning_rate / (c2 * scale * np.maximum(counts, 1.0) + item_ridge)

    for t in range(cfg.n_iter):
        if cfg.solver == "als":
            # Alg. 1, lines 2, 5-6: clipped users, weighted statistics, Gaussian noise.
            A_flat, b = executor.map(als_statistics, (V, cfg))
            A_hat = release.gaussian("items", _unflatten_sym(A_flat, k),
                                     sensitivity=sens_A, clip_norm=cfg.clip_norm,
                                     symmetric=True)
            b_hat = release.gaussian("items", b, sensitivity=sens_b,
                                     clip_norm=cfg.clip_norm)
            # Alg. 1, line 7: PSD projection, then a data-independent ridge.
            V = psd_ridge_solve(A_hat, b_hat, item_ridge)
        else:
            executor.map(user_step, (V, cfg))
            for _ in range(cfg.gd_steps):
                # Alg. 2, line 5: weighted sum of per-entry clipped gradients.
                g = executor.map(item_gradient, (V, grad_clip, n_items))
                g_hat = release.gaussian("items", g, sensitivity=sens_g,
                                         clip_norm=grad_clip)
                # Alg. 2, line 6 (the ridge gradient is data-independent).
                V = V - step[:, None] * (g_hat + item_ridge * V)
        if log is not None:
            log(f"iteration {t + 1}/{cfg.n_iter} done")

    # Personal parts (billboard model): exact least squares from the released items.
    U, bias = executor.collect(personal_parts, (V, cfg))
    return {"item_embeddings": V, "item_counts": counts, "mean": mean,
            "user_embeddings": U, "user_biases": bias}

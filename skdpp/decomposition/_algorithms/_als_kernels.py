"""Block kernels of private alternating minimisation (Krichene et al. 2023, Alg. 1-3),
over *entries* (one row per distinct (user, item) pair, each user's rows by item); the
user step (Alg. 3, line 4) is an exact ridge solve per user (batched BLAS products).
"""

import numpy as np
import scipy.sparse as sp

from ...linear_model._heads import _lu_each, gram_ridge_solve  # per-system solves
from ...privacy._clipping import clip_by_norm, clip_values, clipped_magnitudes, unit_rows
from ...privacy._quantile import cumulative_counts
from ...utils._grouped import UserIndex, make_blocks, padded_sizes
from ._task_weights import task_weights

BLOCK_ROWS = 2**20  # entries per block (a partial is n_items x k x k: 82 MB at 10^4, 32)
_USER_CHUNK = 8192  # systems per batched user solve (71 MB at k = 32)
_GATHER_BYTES = 2**24  # of one gathered (segments, size, k) stack
# Users with at most this many entries (values within _DUAL_SAFE) are solved in the
# dual: 2.1x on a whole fit (bench_adaptive_mf.py --n-ratings 1000000, 4.8 vs 10.2 s).
_DUAL_MAX_ROWS = 32
_DUAL_SAFE = 1e100
_ENTRY_CHUNK = 2**17  # entries per chunk of paired_dots
AUTO_SCALE = 2.0  # rating_clip="auto": a quantile of twice the users' RMS deviation
_TINY_RIDGE = 1e-300  # smallest embedding ridge (all item embeddings zero)
# embedding_ridge="auto": the grid scored on held-out ratings (VALIDATION_FRACTION of
# each user's, rounded); the last is kept unless another wins by VALIDATION_MARGIN std.
RIDGE_GRID = np.array([1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0])
VALIDATION_MARGIN = 3.0
VALIDATION_FRACTION = 0.1


def aggregate_entries(user, item, y, n_items):
    """``(user, item, rating)`` sorted by user, then item: duplicate pairs merged into their
    mean rating (one contribution per item, as the sensitivities require; summed in
    increasing rating order, independent of the row order)."""
    y = np.asarray(y, dtype=np.float64)
    pair = np.asarray(user, dtype=np.int64) * np.int64(n_items) + np.asarray(item, np.int64)
    uniq, inverse, n_dup = np.unique(pair, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    values = y / n_dup[inverse]
    dup = np.flatnonzero(n_dup[inverse] > 1)
    if dup.size:
        # each duplicated pair's rows in increasing rating order (bincount sums in order)
        rows = np.arange(pair.shape[0])
        rows[dup] = dup[np.lexsort((values[dup], inverse[dup]))]
        inverse, values = inverse[rows], values[rows]
    with np.errstate(over="ignore"):  # a mean near the float maximum may round to inf
        rating = np.bincount(inverse, weights=values, minlength=uniq.shape[0])
    return uniq // n_items, uniq % n_items, rating


def entry_blocks(user, item, rating, users, n_items, *, max_rows=BLOCK_ROWS):
    """Blocks of whole users over the entries, ``X`` the item codes, ``y`` the ratings."""
    item = np.asarray(item, dtype=np.int64)
    # item codes as row keys, in the top bits (canonical_order keeps them)
    shift = np.uint64(64 - max(1, int(n_items - 1).bit_length()))
    return make_blocks(item[:, None], np.asarray(rating, dtype=np.float64),
                       UserIndex(users, user), row_keys=item.astype(np.uint64) << shift,
                       max_rows=max_rows)


def _state(block, state):
    return state if state is not None else {
        "item": np.asarray(block.take(block.X)[:, 0], dtype=np.int64),
        "rating": block.take(block.y)}


def _batches(counts, rows):
    """``(segments, rows)`` per :func:`~skdpp.utils._grouped.padded_sizes` size ``s``:
    the rows an ``(n, s)`` array padded with ``-1``."""
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.zeros(counts.shape[0], dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    rows = np.append(np.asarray(rows, dtype=np.int64), -1)  # -1: padding
    sizes = padded_sizes(counts)
    sentinel = rows.shape[0] - 1
    batches = []
    for size in np.unique(sizes[counts > 0]):  # a small number of sizes, not segments
        seg = np.flatnonzero(sizes == size)
        within = np.arange(size)
        pos = starts[seg][:, None] + within
        pos[within >= counts[seg][:, None]] = sentinel
        batches.append((seg, rows[pos].astype(np.int32 if sentinel < 2**31 else np.int64)))
    return batches


def _chunks(n, size, k, max_n=None):
    """Slices of ``n`` segments of ``size`` rows of ``k`` floats within ``_GATHER_BYTES``."""
    step = max(1, _GATHER_BYTES // max(1, size * k * 8))
    if max_n is not None:
        step = min(step, max_n)
    return [slice(a, min(n, a + step)) for a in range(0, n, step)]


def _batched_gram(E, index, weights, targets, out_G, out_b):
    """``out_G[n] = X_n^T diag(w_n) X_n``, ``out_b[n] = X_n^T t_n`` for ``X_n = E[index[n]]``
    (batched ``np.matmul``; padding rows point at a zero row of ``E``)."""
    k = E.shape[1]
    for j, w in enumerate(_chunks(index.shape[1], 1, k)):
        X = E[index[:, w]]                     # (n, rows, k)
        Xt = X.transpose(0, 2, 1)
        Xw = Xt if weights is None else (X * weights[:, w, None]).transpose(0, 2, 1)
        if j == 0:
            np.matmul(Xw, X, out=out_G)
            np.matmul(Xt, targets[:, w, None], out=out_b[..., None])
        else:
            out_G += np.matmul(Xw, X)
            out_b += np.matmul(Xt, targets[:, w, None])[..., 0]


def paired_dots(U, user, V, item):
    """``<U[user[e]], V[item[e]]>`` of every entry ``e``, in chunks of entries (memory)."""
    out = np.empty(user.shape[0])
    for start in range(0, user.shape[0], _ENTRY_CHUNK):
        part = slice(start, start + _ENTRY_CHUNK)
        out[part] = np.einsum("ek,ek->e", U[user[part]], V[item[part]])
    return out


def _eligible(block, rows):
    mask = np.zeros(block.n_rows, dtype=bool)
    mask[rows] = True
    return block.select(mask)


# Pre-processing (Alg. 3, line 2): clip bounds, mean, counts, catalogue
def _user_means(block, state):
    """Each user's mean rating (a sum of ``y / n_j``: no overflow; 0 without entries)."""
    counts = np.maximum(block.counts, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = block.segment_sum(state["rating"] / block.expand(counts))
    return np.where(np.isnan(mean), 0.0, mean)


def user_mean_statistic(block, state, fn):
    """``fn`` of the block's users' mean ratings (for ``private_location``)."""
    state = _state(block, state)
    return fn(_user_means(block, state)), state


def deviation_counts(block, state, broadcast):
    """Cumulative counts over ``grid`` of each user's ``2 sqrt(mean_i (y_ij - mean)^2)``."""
    mean, grid = broadcast
    state = _state(block, state)
    counts = np.maximum(block.counts, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        dev = state["rating"] - mean
        values = AUTO_SCALE * np.sqrt(block.segment_sum(dev * dev) / counts)
    return cumulative_counts(values, grid), state


def mean_partial(block, state, radius):
    """Sum of the users' means of ratings clipped to ``[-radius, radius]``."""
    state = _state(block, state)
    sums = block.segment_sum(clip_values(state["rating"], radius))
    per_user = np.divide(sums, block.counts, out=np.zeros(block.n_users),
                         where=block.counts > 0)
    return np.array([per_user.sum()]), state


def count_partial(block, state, broadcast):
    """Item counts (codes ``< n_count``) of at most ``cap`` items per user, those of smallest
    keyed uniforms (App. B, D.1)."""
    key, cap, n_count = broadcast
    state = _state(block, state)
    rows = np.flatnonzero(state["item"] < n_count)
    items = state["item"][rows]
    if cap is not None:
        sub = _eligible(block, rows)
        items = items[sub.ranks_by(sub.row_uniforms(key, "mf-count-sample")) < cap]
    return np.bincount(items, minlength=n_count).astype(np.float64), state


def select_items(block, state, broadcast):
    """Store ``pub = remap[item]`` (``m``: unpublished) and ``sel``, the published rows."""
    remap, m = broadcast
    state = _state(block, state)
    state["m"] = int(m)
    index = np.int32 if max(m + 1, block.n_rows) < 2**31 else np.int64
    state["pub"] = remap[state.pop("item")].astype(index)
    state["sel"] = np.flatnonzero(state["pub"] < m).astype(index)
    return None, state


def prepare_residuals(block, state, broadcast):
    """Store the targets ``r_ij = y_ij - mean - b_i`` (not clipped: personal) and each
    user's number of published entries."""
    mean, item_biases = broadcast
    with np.errstate(over="ignore", invalid="ignore"):  # huge ratings: inf, solved as 0
        state["r"] = state["rating"] - mean - item_biases[state["pub"]]
    state["n_pub"] = np.bincount(block.row_user[state["sel"]], minlength=block.n_users)
    for name in ("batches", "batches_fit"):  # residuals changed: rebuild on use
        state.pop(name, None)
    return None, state


def prepare_weights(block, state, broadcast):
    """Task weights of the published entries (eq. (11)-(12) or a sampling baseline), after
    holding out a keyed ``VALIDATION_FRACTION`` with ``embedding_ridge="auto"``."""
    cfg, key, log_omega, counts = broadcast
    sel, m = state["sel"], state["m"]
    if cfg.embedding_ridge == "auto":
        sub = _eligible(block, sel)
        n_val = np.floor(VALIDATION_FRACTION * sub.counts + 0.5).astype(np.int64)
        val = sub.ranks_by(sub.row_uniforms(key, "mf-validation")) < sub.expand(n_val)
        state["val"] = sel[val]
        sel = sel[~val]
        fit = np.ones(block.n_rows, dtype=bool)
        fit[state["val"]] = False
        state["fit_rows"] = np.flatnonzero(fit).astype(sel.dtype)
        state.pop("batches_fit", None)
        state["n_pub_fit"] = np.bincount(block.row_user[sel], minlength=block.n_users)
    sub = _eligible(block, sel)
    w = task_weights(sub, state["pub"][sel], weighting=cfg.weighting,
                     budget=cfg.user_budget, key=key, log_omega=log_omega, counts=counts,
                     normalization=cfg.weight_normalization)
    keep = sel[w > 0]
    user = block.row_user[keep].astype(keep.dtype)
    indptr = np.zeros(block.n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(user, minlength=block.n_users), out=indptr[1:])
    item = state["pub"][keep]
    state.update(keep=keep, keep_user=user, keep_item=item, w=w[w > 0], indptr=indptr)
    # entries by item, batched by the item's count; padding (-1): zero row and weight
    users, weights = np.append(user, -1), np.append(state["w"], 0.0)
    state["item_batches"] = [
        (items, pos, users[pos].astype(pos.dtype), weights[pos]) for items, pos in
        _batches(np.bincount(item, minlength=m), np.argsort(item, kind="stable"))]
    return None, state


def _user_batches(block, state, rows):
    """The user step's cached batches of ``rows`` (None: all; ``"fit"``: not held out)."""
    name = "batches" if rows is None else "batches_" + rows
    if name not in state:
        if rows is None:
            idx, counts = np.arange(block.n_rows), block.counts
        else:
            idx = state["fit_rows"]
            counts = np.bincount(block.row_user[idx], minlength=block.n_users)
        pub = np.append(state["pub"], state["m"] + 1)  # position -1: padding
        r = np.append(state["r"], 0.0)
        state[name] = [(users, pub[pos].astype(pos.dtype), r[pos])
                       for users, pos in _batches(counts, idx)]
    return state[name]


def _solve_users(block, state, V, cfg, rho, rows=None):
    """Every user's ``(U, bias)``: ``argmin sum_i (r_ij - b_j - <u_j, v_i>)^2 + personal_ridge
    b_j^2 + lambda_j ||u_j||^2``, ``lambda_j = rho mean_i ||v_i||^2 / k`` (scale-free;
    unpublished items only move the bias; non-finite: 0)."""
    (U, bias), = _solve_users_grid(block, state, V, cfg, [rho], rows=rows)
    return U, bias


def _solve_users_grid(block, state, V, cfg, rhos, rows=None, users=None):
    """:func:`_solve_users` for several ridges ``rhos`` (``users``: a mask): ``k x k``
    systems in stacks of ``_USER_CHUNK``, users with few entries in the dual."""
    k0, m = V.shape[1], V.shape[0]
    n_pub = state["n_pub" + ("" if rows is None else "_" + rows)]
    k = k0 + int(bool(cfg.user_bias))
    Vx = np.zeros((m + 2, k))  # row m: unpublished items; row m + 1: padding
    Vx[:m, :k0] = V
    if cfg.user_bias:
        Vx[:m + 1, k0] = 1.0
    energy_item = np.zeros(m + 2)
    row_of = np.arange(block.n_users) if users is None else np.cumsum(users) - 1
    U = np.zeros((len(rhos), row_of[-1] + 1 if row_of.size else 0, k))
    pending = []  # (G, rhs, e, users) of k x k systems not yet solved

    def ridges(e, rho):  # (n, k): the embedding ridge rho e_j, the bias ridge
        ridge = np.empty((e.shape[0], k))
        ridge[:, :k0] = np.maximum(rho * e, _TINY_RIDGE)[:, None]
        ridge[~np.isfinite(ridge)] = np.finfo(np.float64).max
        if cfg.user_bias:
            ridge[:, k0] = cfg.personal_ridge
        return ridge

    def solve():  # one stack per call: gram_ridge_solve has a fixed cost per call
        G, rhs, e, who = (np.concatenate(part) for part in zip(*pending))
        pending.clear()
        for g, rho in enumerate(rhos):  # a few public ridges; the last may overwrite G
            U[g, row_of[who]] = gram_ridge_solve(G, rhs, ridges(e, rho),
                                                 overwrite_g=g == len(rhos) - 1)

    def primal(seg, items, r):  # queue k x k systems, solved in stacks
        for c in _chunks(seg.shape[0], items.shape[1], k, max_n=_USER_CHUNK):
            n = c.stop - c.start
            if sum(p[0].shape[0] for p in pending) + n > _USER_CHUNK:
                solve()
            G, rhs = np.empty((n, k, k)), np.empty((n, k))
            _batched_gram(Vx, items[c], None, r[c], G, rhs)
            e = energy_item[items[c]].sum(axis=1) / np.maximum(n_pub[seg[c]], 1)
            pending.append((G, rhs, e, seg[c]))

    def dual(seg, items, r):
        # Few entries: z = D^-1 X^T a with (X D^-1 X^T + I) a = r. D is lam_j
        # on the embedding and personal_ridge on the bias coordinate, so
        # X D^-1 X^T = X_v X_v^T / lam_j + 1 1^T / personal_ridge (padding
        # rows: 0): the product X_v X_v^T serves every ridge of the grid.
        size = items.shape[1]
        redo = []
        for c in _chunks(seg.shape[0], size, k):
            it, rc, who = items[c], r[c], seg[c]
            Xv = Vx_emb[it]
            Kv = np.matmul(Xv, Xv.transpose(0, 2, 1))
            e = energy_item[it].sum(axis=1) / np.maximum(n_pub[who], 1)
            safe = (np.abs(rc) <= _DUAL_SAFE).all(axis=1) & safe_item[it].all(axis=1)
            if cfg.user_bias:
                real = (it <= m).astype(np.float64)  # not padding
                Kb = (real[:, :, None] * real[:, None, :]) / cfg.personal_ridge
            for g, rho in enumerate(rhos):  # a few public ridges
                ridge = ridges(e, rho)
                safe &= ((ridge >= 1.0 / _DUAL_SAFE) & (ridge <= _DUAL_SAFE)).all(axis=1)
                lam = ridge[:, 0]
                K = Kv / lam[:, None, None]
                if cfg.user_bias:
                    K += Kb
                K.reshape(K.shape[0], -1)[:, ::size + 1] += 1.0  # + I
                # per system: an exactly singular K (not reached for finite safe
                # values) gives NaN for that user alone, who is then redone by
                # the k x k solve below; the others keep their dual solution
                a = _lu_each(K, rc[..., None])
                z = np.empty((K.shape[0], k))
                z[:, :k0] = np.matmul(Xv.transpose(0, 2, 1), a)[..., 0] / lam[:, None]
                if cfg.user_bias:
                    z[:, k0] = np.einsum("ns,ns->n", real, a[..., 0]) / cfg.personal_ridge
                safe &= np.isfinite(z).all(axis=1)
                U[g, row_of[who]] = z
            redo.append(np.flatnonzero(~safe) + c.start)
        redo = np.concatenate(redo)
        if redo.size:  # unsafe values or a non-finite solution: the k x k solve
            primal(seg[redo], items[redo], r[redo])

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        energy_item[:m] = np.einsum("ik,ik->i", V, V) / max(k0, 1)
        safe_item = (np.abs(Vx) <= _DUAL_SAFE ** 0.5).all(axis=1)
        Vx_emb = np.ascontiguousarray(Vx[:, :k0])
        for seg, items, r in _user_batches(block, state, rows):
            if users is not None:
                keep = users[seg]
                seg, items, r = seg[keep], items[keep], r[keep]
            if not seg.shape[0]:
                continue
            if items.shape[1] <= min(_DUAL_MAX_ROWS, k - 1):
                dual(seg, items, r)
            else:
                primal(seg, items, r)
        if pending:
            solve()
    U[~np.isfinite(U).all(axis=2)] = 0.0
    return [(Ug[:, :k0], Ug[:, k0].copy() if cfg.user_bias else np.zeros(Ug.shape[0]))
            for Ug in U]


def ridge_scores(block, state, broadcast):
    """Held-out error of every ridge of ``RIDGE_GRID``: each user's mean squared held-out
    errors (fitted without them), residuals clipped to ``C_r``: entries in ``[0, C_r^2]``,
    sensitivity ``sqrt(len(grid)) C_r^2``."""
    V, cfg, rating_clip = broadcast
    val = state["val"]
    user = block.row_user[val]
    n_val = np.bincount(user, minlength=block.n_users)
    per_user = np.zeros((RIDGE_GRID.shape[0], block.n_users))
    # slices of _USER_CHUNK users (memory); per-user results do not depend on it
    solved = np.flatnonzero(n_val > 0)
    for lo in range(0, solved.size, _USER_CHUNK):
        users = np.zeros(block.n_users, dtype=bool)
        users[solved[lo:lo + _USER_CHUNK]] = True
        row_of = np.cumsum(users) - 1
        mine = users[user]
        e_user, e_val = user[mine], val[mine]
        x = V[state["pub"][e_val]]
        for g, (U, bias) in enumerate(_solve_users_grid(  # a few public grid values
                block, state, V, cfg, RIDGE_GRID, rows="fit", users=users)):
            with np.errstate(over="ignore", invalid="ignore"):
                at = row_of[e_user]
                resid = state["r"][e_val] - bias[at] - np.einsum("ek,ek->e", U[at], x)
                sq = clip_values(resid, rating_clip) ** 2
                sq[np.isnan(sq)] = 0.0 if rating_clip is None else np.float64(rating_clip) ** 2
                per_user[g] += np.bincount(e_user, weights=sq, minlength=block.n_users)
    with np.errstate(over="ignore", invalid="ignore"):
        per_user = np.divide(per_user, n_val, out=np.zeros_like(per_user), where=n_val > 0)
    return per_user.sum(axis=1), state


def choose_ridge(noisy_scores, noise_std):
    """The grid ridge with the smallest noisy held-out error if it beats the last by
    ``VALIDATION_MARGIN`` noise std of the difference (post-processing)."""
    best = int(np.argmin(noisy_scores))
    if noisy_scores[-1] - noisy_scores[best] > VALIDATION_MARGIN * np.sqrt(2.0) * noise_std:
        return float(RIDGE_GRID[best])
    return float(RIDGE_GRID[-1])


def _item_targets(state, bias, rating_clip):
    """Item-step targets: residual minus the user's bias, clipped to ``C_r``."""
    with np.errstate(over="ignore", invalid="ignore"):
        t = clip_values(state["r"][state["keep"]] - bias[state["keep_user"]], rating_clip)
    t[np.isnan(t)] = 0.0  # inf - inf from huge ratings: no contribution
    return t


def own_mean_parts(block, state, k):
    """Parts of a useless fit (``local_only_``): zero embedding, own mean rating."""
    state = _state(block, state)
    return (np.zeros((block.n_users, int(k))), _user_means(block, state))


def personal_parts(block, state, broadcast):
    """Each user's embedding and bias from the released items (App. D, Remark D.1), not
    clipped (personal, never released); ``broadcast = (V, config, rho)``."""
    V, cfg, rho = broadcast
    state.pop("batches_fit", None)  # the iterations are over: free their batches
    return _solve_users(block, state, V, cfg, rho)


# Private item step (Alg. 3, line 5)
def _clipped_users(block, state, broadcast):
    """The user step (Alg. 3, line 4) without held-out ratings: embeddings clipped
    to ``C_u`` (Alg. 1, line 2) and targets."""
    V, cfg, rho, rating_clip = broadcast
    U, bias = _solve_users(block, state, V, cfg, rho, rows="fit" if "val" in state else None)
    return clip_by_norm(U, cfg.clip_norm), _item_targets(state, bias, rating_clip)


def als_statistics(block, state, broadcast):
    """User step, then ``A_i = sum_j w_ij u_j u_j^T`` (the release uses its upper triangle)
    and ``b_i = sum_j w_ij t_ij u_j``, ``||u_j|| <= C_u``, ``|t_ij| <= C_r`` (Alg. 1, 2, 5-6)."""
    U, target = _clipped_users(block, state, broadcast)
    k, m = U.shape[1], broadcast[0].shape[0]
    Uz = np.vstack([U, np.zeros((1, k))])  # row -1: padding
    wt = np.append(state["w"] * target, 0.0)
    A, b = np.zeros((m, k, k)), np.zeros((m, k))
    for items, pos, users, weights in state["item_batches"]:
        for c in _chunks(items.shape[0], pos.shape[1], k):
            Ac, bc = np.empty((c.stop - c.start, k, k)), np.empty((c.stop - c.start, k))
            _batched_gram(Uz, users[c], weights[c], wt[pos[c]], Ac, bc)
            A[items[c]], b[items[c]] = Ac, bc
    return (A, b), state


def user_step(block, state, broadcast):
    """User step of the gradient solver (clipped embeddings and targets kept)."""
    state["U"], state["target"] = _clipped_users(block, state, broadcast)
    state["unit"], state["norm"] = unit_rows(state["U"])
    return None, state


def item_gradient(block, state, broadcast):
    """``g_i = sum_j w_ij clip((<v_i, u_j> - t_ij) u_j, Gamma)`` (Alg. 2, line 5) as
    ``sign(e) min(|e| ||u||, Gamma) u / ||u||`` (norm <= ``Gamma`` for any ``e``; NaN: 0)."""
    V, grad_clip = broadcast
    user, item, U = state["keep_user"], state["keep_item"], state["U"]
    with np.errstate(over="ignore", invalid="ignore"):
        resid = paired_dots(U, user, V, item) - state["target"]
        magnitude, _ = clipped_magnitudes(np.abs(resid) * state["norm"][user], grad_clip)
        coef = state["w"] * np.sign(resid) * magnitude
    coef[~np.isfinite(coef)] = 0.0
    C = sp.csr_matrix((coef, item, state["indptr"]), shape=(block.n_users, V.shape[0]))
    return np.asarray(C.T @ state["unit"]), state



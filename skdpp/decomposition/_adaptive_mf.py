"""Differentially private matrix factorisation with adaptive per-item budget allocation.

Implements Krichene, Jain, Song, Sundararajan, Thakurta and Zhang (2023),
"Multi-Task Differential Privacy Under Distribution Skew" (arXiv:2302.07975):
task-weighted sufficient-statistics perturbation (Alg. 1) and task-weighted
noisy gradient descent (Alg. 2) as the private item update of alternating
minimisation (Alg. 3, App. D), with the adaptive weights of eq. (11)-(12)
computed from private item counts (App. B), and the uniform-sampling and
tail-sampling baselines of Chien et al. (2021).

The module pairs the estimator :class:`AdaptiveWeightMF` with private pure
functions that follow the paper line by line; all per-user and per-item
computations are vectorised (sparse matrix products indexed by item, batched
``k x k`` solves), with no Python loop over users, items or ratings.
"""

import time
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from ..base import BasePersonalizedEstimator, PersonalizedRegressorMixin
from ..privacy import Phase, calibrate, mechanisms
from ..linear_model._heads import psd_ridge_solve
from ..utils._grouped import UserIndex

__all__ = ["AdaptiveWeightMF"]

# Users per block in the batched user solves and the item statistics: bounds the
# temporary (block, k (k + 1) / 2) dense arrays (8192 x 528 floats = 35 MB at k=32).
_USER_BLOCK = 8192
# Ratings per chunk in row-wise dot products (2**20 x k floats).
_ENTRY_CHUNK = 2**20
# Weights are shrunk by this factor so that sum_j w_ij^2 <= beta holds exactly in
# floating point (the rounding of the per-user rescaling is ~1e-16 relative).
_SAFETY = 1.0 - 1e-12


# --------------------------------------------------------------------------- #
# Item keys: one column of ids, or whole rows of a multi-column X
# --------------------------------------------------------------------------- #
def _item_keys(X):
    """1-D keys identifying the item of each row of ``X`` (validated, 2-D).

    One column: the column itself (numbers as float64, strings/objects as is).
    Several columns: each distinct row is an item; rows are viewed as opaque
    fixed-size records (float64, ``-0.0`` normalised to ``0.0``) so that numpy
    can sort and search them.
    """
    if X.shape[1] == 1:
        col = X[:, 0]
        if col.dtype.kind in "biuf":
            return col.astype(np.float64)
        return col
    Xf = np.ascontiguousarray(np.asarray(X, dtype=np.float64) + 0.0)
    return Xf.view(np.dtype((np.void, Xf.dtype.itemsize * Xf.shape[1]))).ravel()


def _keys_to_ids(keys, n_features):
    """Inverse of :func:`_item_keys` for the catalogue (item ids shown to users)."""
    if keys.dtype.kind == "V":
        return keys.view(np.float64).reshape(-1, n_features).copy()
    return np.asarray(keys).copy()


# --------------------------------------------------------------------------- #
# Data layout: one entry per (user, item) pair, sorted by user then item
# --------------------------------------------------------------------------- #
def _aggregate_entries(user, item, y, n_items):
    """Merge duplicate (user, item) rows into one entry with their mean rating.

    Returns ``(user, item, rating)`` arrays sorted by user then item. A user
    contributes at most once to each item's statistics, which the sensitivity
    analysis requires (each user holds one rating per item, as in the paper).
    """
    pair = user.astype(np.int64) * np.int64(n_items) + item.astype(np.int64)
    uniq, inverse = np.unique(pair, return_inverse=True)
    inverse = inverse.reshape(-1)
    sums = np.bincount(inverse, weights=y, minlength=uniq.shape[0])
    counts = np.bincount(inverse, minlength=uniq.shape[0])
    return (uniq // n_items).astype(np.int64), (uniq % n_items).astype(np.int64), sums / counts


def _csr(user, item, data, n_users, n_items):
    """CSR matrix (n_users, n_items) from entries sorted by user then item."""
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(user, minlength=n_users), out=indptr[1:])
    return sp.csr_matrix(
        (np.asarray(data, dtype=np.float64), item, indptr), shape=(n_users, n_items)
    )


def _entry_uniforms(rng, user, item, n_items):
    """Pseudo-random uniforms in [0, 1), one per (user, item) entry.

    A salt is drawn from ``rng``; each entry's value is a splitmix64 hash of
    ``(salt, user * n_items + item)``. A user's values therefore depend only
    on that user's own entries (not on how many entries other users have), so
    replacing one user leaves every other user's sampling unchanged: the
    coupling under which the stated sensitivities hold for a fixed seed.
    """
    salt = np.uint64(rng.randint(0, 2**63 - 1, dtype=np.int64))
    x = (user.astype(np.uint64) * np.uint64(n_items) + item.astype(np.uint64)) ^ salt
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def _rank_within_user(user, n_users, keys):
    """Rank of each entry inside its user's entries, ordered by ``keys``.

    ``keys`` is a tuple of 1-D arrays, most significant last (``np.lexsort``).
    """
    n = user.shape[0]
    perm = np.lexsort(tuple(keys) + (user,))
    offsets = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(user, minlength=n_users), out=offsets[1:])
    rank = np.empty(n, dtype=np.int64)
    rank[perm] = np.arange(n, dtype=np.int64) - offsets[user[perm]]
    return rank


# --------------------------------------------------------------------------- #
# Pre-processing (Alg. 3, line 2): DP mean, DP item counts
# --------------------------------------------------------------------------- #
def _dp_mean(user, rating, n_users, *, bound, noise_multiplier, rng):
    """DP global mean: average over users of each user's mean clipped rating.

    Each user contributes ``a_j = mean_i clip(y_ij, -bound, bound)`` in
    ``[-bound, bound]``; the release is ``sum_j a_j / n_users`` (``n_users`` is
    public). Replacing one user moves it by at most ``2 * bound / n_users``.
    """
    clipped = np.clip(rating, -bound, bound)
    per_user = np.bincount(user, weights=clipped, minlength=n_users)
    n_per_user = np.bincount(user, minlength=n_users)
    a = np.divide(per_user, n_per_user, out=np.zeros(n_users), where=n_per_user > 0)
    sensitivity = 2.0 * bound / n_users
    value = np.array([a.sum() / n_users])
    release, event = mechanisms.gaussian_mechanism(
        value, sensitivity=sensitivity, noise_multiplier=noise_multiplier, rng=rng
    )
    # Post-processing: the mean of values in [-bound, bound] lies in that range.
    return float(np.clip(release[0], -bound, bound)), event, sensitivity


def _dp_item_counts(user, item, n_users, n_items, *, cap, noise_multiplier, rng):
    """DP item counts from at most ``cap`` items per user (App. B, D.1).

    Each user keeps ``min(cap, n^j)`` of their distinct items, chosen uniformly
    at random, and contributes the indicator vector ``c_j`` of the kept items.
    Under replace-one-user, ``||c_j - c_j'||_2^2 = |S_j symdiff S_j'| <=
    |S_j| + |S_j'| <= 2 cap``: the L2 sensitivity is ``sqrt(2 cap)``.
    """
    rank = _rank_within_user(user, n_users, (_entry_uniforms(rng, user, item, n_items),))
    kept = rank < cap
    counts = np.bincount(item[kept], minlength=n_items).astype(np.float64)
    sensitivity = float(np.sqrt(2.0 * cap))
    release, event = mechanisms.noisy_counts(
        counts, sensitivity=sensitivity, noise_multiplier=noise_multiplier, rng=rng
    )
    return np.asarray(release, dtype=np.float64), event, sensitivity


# --------------------------------------------------------------------------- #
# Task-user weights (Sec. 4, eq. (11)-(12); App. D baselines)
# --------------------------------------------------------------------------- #
def _adaptive_item_weights(counts, *, mu, budget, n_users):
    """Public per-item weights omega_i of eq. (11) with exponent ``mu`` (Sec. 5).

    ``omega_i = n_i^-mu / sqrt(sum_i' n_i'^(1 - 2 mu) / (n beta))`` with the
    noisy counts floored at 1 (post-processing), so that a user whose items are
    drawn in proportion to the counts spends ``beta`` in expectation.
    """
    return np.exp(_log_adaptive_item_weights(counts, mu=mu, budget=budget, n_users=n_users))


def _log_adaptive_item_weights(counts, *, mu, budget, n_users):
    """``log(omega_i)`` of :func:`_adaptive_item_weights` (finite, never underflows)."""
    n_hat = np.maximum(np.asarray(counts, dtype=np.float64), 1.0)
    log_n = np.log(n_hat)
    # sum_i n_i^(1 - 2 mu) computed stably in log space.
    log_terms = (1.0 - 2.0 * mu) * log_n
    log_sum = np.logaddexp.reduce(log_terms)
    return -mu * log_n + 0.5 * (np.log(n_users * budget) - log_sum)


def _task_weights(user, item, n_users, n_items, *, weighting, counts, mu, budget,
                  normalization, rng):
    """Per-entry weights ``w_ij`` with ``sum_{i in user j} w_ij^2 <= beta``.

    ``"adaptive"``: ``w_ij = omega_i * min(1, sqrt(beta / B_j))`` (eq. (12),
    ``normalization="clip"``) or ``omega_i * sqrt(beta / B_j)``
    (``normalization="budget"``: every user spends exactly ``beta``, App. C),
    with ``B_j = sum_{i in user j} omega_i^2``.
    ``"uniform"``: weight 1 on ``floor(beta)`` items per user sampled uniformly.
    ``"tail"``: weight 1 on each user's ``floor(beta)`` items with the smallest
    noisy counts (Chien et al. 2021), ties broken at random.

    Returns
    -------
    w : ndarray of shape (n_entries,)
    omega : ndarray of shape (n_items,) or None
        The public per-item weights (adaptive only).
    """
    if weighting == "adaptive":
        log_omega = _log_adaptive_item_weights(counts, mu=mu, budget=budget,
                                               n_users=n_users)
        omega = np.exp(log_omega)
        # Work relative to each user's largest omega_i (a function of that user's
        # items and the public omega): rel_ij = omega_i / top_j lies in (0, 1] and
        # B_j / top_j^2 = sum_i rel_ij^2 lies in [1, n^j], so neither can underflow.
        # Computing B_j = sum_i omega_i^2 directly underflows for large mu (B_j
        # denormal or 0, then beta / B_j = inf: infinite weights, budget broken).
        log_om = log_omega[item]
        top = np.full(n_users, -np.inf)
        np.maximum.at(top, user, log_om)
        rel = np.exp(log_om - top[user])
        B_rel = np.bincount(user, weights=rel**2, minlength=n_users)  # B_j / top_j^2
        scale = np.sqrt(np.divide(budget, B_rel, out=np.zeros(n_users), where=B_rel > 0))
        if normalization == "clip":
            # eq. (12): omega_i min(1, sqrt(beta / B_j)) = rel_ij min(top_j, scale_j)
            factor = np.minimum(np.exp(top), scale)
        else:
            factor = scale  # omega_i sqrt(beta / B_j) = rel_ij sqrt(beta / (B_j / top_j^2))
        return rel * factor[user] * _SAFETY, omega
    k = int(np.floor(budget))
    tie_break = _entry_uniforms(rng, user, item, n_items)
    if weighting == "uniform":
        rank = _rank_within_user(user, n_users, (tie_break,))
    else:  # "tail": least frequent items first (by noisy count), ties at random
        rank = _rank_within_user(user, n_users, (tie_break, np.asarray(counts)[item]))
    return (rank < k).astype(np.float64), None


# --------------------------------------------------------------------------- #
# Alternating minimisation (Alg. 3): user step and private item step
# --------------------------------------------------------------------------- #
def _triu(k):
    return np.triu_indices(k)


def _unflatten_sym(flat, k):
    """(n, k (k + 1) / 2) upper triangles -> (n, k, k) symmetric matrices."""
    iu, ju = _triu(k)
    out = np.empty((flat.shape[0], k, k))
    out[:, iu, ju] = flat
    out[:, ju, iu] = flat
    return out


def _solve_users(V, R, reg, *, bias=False):
    """Exact ridge least squares of every user given item embeddings (Alg. 3, line 4).

    ``u_j = (sum_{i in user j} v_i v_i^T + reg I)^-1 sum_i r_ij v_i``, for all
    users at once: per-user Gram matrices are ``R_ones @ P`` with ``P`` the
    item-wise upper-triangular outer products (a sparse-dense product indexed
    by item), solved in batches of ``k x k`` systems.

    Parameters
    ----------
    V : ndarray of shape (n_items, k)
    R : csr_matrix of shape (n_users, n_items)
        Ratings (explicit entries, including explicit zeros).
    reg : float > 0
    bias : bool, default=False
        If True, every item embedding is extended by a constant 1 so that each
        user also gets a personal bias (ridge-penalised like the embedding).

    Returns
    -------
    U : ndarray of shape (n_users, k)
    b : ndarray of shape (n_users,)
        The personal biases (zeros if ``bias=False``).
    """
    n_users = R.shape[0]
    if bias:
        V = np.hstack([V, np.ones((V.shape[0], 1))])
    k = V.shape[1]
    iu, ju = _triu(k)
    P = V[:, iu] * V[:, ju]
    ones = R.copy()
    ones.data = np.ones_like(ones.data)
    rhs = np.asarray(R @ V)
    U = np.empty((n_users, k))
    eye = reg * np.eye(k)
    for start in range(0, n_users, _USER_BLOCK):  # memory blocks, not users
        stop = min(n_users, start + _USER_BLOCK)
        G = _unflatten_sym(np.asarray(ones[start:stop] @ P), k) + eye
        try:
            with threadpool_limits(limits=1, user_api="blas"):  # many tiny solves
                U[start:stop] = np.linalg.solve(G, rhs[start:stop, :, None])[..., 0]
        except np.linalg.LinAlgError:  # numerically singular (huge embeddings)
            U[start:stop] = (np.linalg.pinv(G) @ rhs[start:stop, :, None])[..., 0]
    if bias:
        return U[:, :-1].copy(), U[:, -1].copy()
    return U, np.zeros(n_users)


def _item_statistics(U, W, WR):
    """Weighted per-item sufficient statistics (Alg. 1, lines 5-6, before noise).

    ``A_i = sum_j w_ij u_j u_j^T`` and ``b_i = sum_j w_ij r_ij u_j``, computed as
    ``W^T @ Q`` (``Q`` the user-wise upper-triangular outer products) and
    ``WR^T @ U``, accumulated over blocks of users.

    Parameters
    ----------
    U : ndarray of shape (n_users, k)
    W, WR : csr_matrix of shape (n_users, n_items)
        Weights ``w_ij`` and weighted ratings ``w_ij r_ij``.

    Returns
    -------
    A : ndarray of shape (n_items, k, k)
    b : ndarray of shape (n_items, k)
    """
    n_users, n_items = W.shape
    k = U.shape[1]
    iu, ju = _triu(k)
    A_flat = np.zeros((n_items, iu.shape[0]))
    for start in range(0, n_users, _USER_BLOCK):  # memory blocks, not users
        stop = min(n_users, start + _USER_BLOCK)
        Ub = U[start:stop]
        A_flat += np.asarray(W[start:stop].T @ (Ub[:, iu] * Ub[:, ju]))
    b = np.asarray(WR.T @ U)
    return _unflatten_sym(A_flat, k), b


def _rowwise_dot(U, V, user, item):
    """``<u_user[e], v_item[e]>`` for every entry, in chunks of entries."""
    out = np.empty(user.shape[0])
    for start in range(0, user.shape[0], _ENTRY_CHUNK):  # memory chunks
        stop = min(user.shape[0], start + _ENTRY_CHUNK)
        out[start:stop] = np.einsum(
            "ek,ek->e", U[user[start:stop]], V[item[start:stop]]
        )
    return out


def _item_gradient(U, V, user, item, rating, w, *, n_users, grad_clip):
    """Weighted, per-entry clipped gradient of the item loss (Alg. 2, line 5).

    ``g_i = sum_j w_ij clip((<v_i, u_j> - r_ij) u_j, grad_clip)``. The clip of
    a vector ``e u`` only rescales the scalar ``e``, so it is applied to the
    residuals and the sum is one sparse product ``C^T @ U``.
    """
    n_items = V.shape[0]
    resid = _rowwise_dot(U, V, user, item) - rating
    norm = np.abs(resid) * np.linalg.norm(U, axis=1)[user]
    scale = np.minimum(1.0, grad_clip / np.maximum(norm, np.finfo(np.float64).tiny))
    coef = w * resid * scale
    C = _csr(user, item, coef, n_users, n_items)
    return np.asarray(C.T @ U)


def _init_item_embeddings(rng, n_items, n_components):
    """Data-independent initialisation ``v_i ~ N(0, I_k / k)`` (no privacy cost)."""
    # Algorithmic randomness (initialisation), not privacy noise.
    return rng.standard_normal((n_items, n_components)) / np.sqrt(n_components)


# --------------------------------------------------------------------------- #
# Estimator
# --------------------------------------------------------------------------- #
class AdaptiveWeightMF(PersonalizedRegressorMixin, BasePersonalizedEstimator):
    """User-level DP matrix factorisation with adaptive per-item budget allocation.

    Alternating minimisation for private matrix completion (Krichene et al.
    2023, Alg. 3): every iteration solves each user's embedding exactly from
    the current item embeddings (locally, no privacy cost), then updates all
    item embeddings under user-level DP with **task-weighted** sufficient
    statistics perturbation (``solver="als"``, Alg. 1, "AdaDPALS") or noisy
    gradient descent (``solver="sgd"``, Alg. 2, "AdaDPSGD"). Each user's
    weights ``w_ij`` over the items they rated satisfy
    ``sum_i w_ij^2 <= user_budget`` (the paper's ``beta``); the adaptive
    weights ``omega_i ~ n_i^-mu`` (eq. (11)) computed from DP item counts give
    rare items a larger share of every user's budget, which improves the
    long tail (and usually the overall error) when item frequencies are
    skewed. The uniform-sampling and tail-sampling baselines of Chien et al.
    (2021) are available with ``weighting="uniform"`` / ``"tail"``.

    Released under DP: the item embeddings, the noisy item counts (when
    needed) and the DP global mean. Personal (billboard model): each user's
    embedding and bias, solved by ridge least squares from the released items
    and the user's own ratings (App. D, Remark D.1).

    Read more in the :ref:`User Guide <adaptive_mf>`.

    Parameters
    ----------
    n_components : int, default=10
        Embedding dimension ``k`` (the paper's ``d``).
    epsilon : float, default=1.0
        Privacy budget, in ``(0, inf]``. ``np.inf`` runs the same algorithm
        without noise (clipping still applied when ``clip_norm`` and
        ``rating_clip`` are given): the non-private baseline.
    delta : float, default=1e-6
        Privacy parameter delta, in ``[0, 1)``; use ``delta << 1 / n_users``.
    weighting : {"adaptive", "uniform", "tail"}, default="adaptive"
        Budget allocation across a user's items. ``"adaptive"``:
        ``omega_i ~ n_hat_i^-mu`` from DP counts (eq. (11), Sec. 5), then each
        user's weights are rescaled to the budget (``weight_normalization``).
        ``"uniform"``: weight 1 on ``floor(user_budget)`` items sampled
        uniformly per user (DPALS). ``"tail"``: weight 1 on each user's
        ``floor(user_budget)`` items with the smallest DP counts (Chien et al.
        2021).
    mu : float, default=0.25
        Exponent of the adaptive weights, ``>= 0``. ``mu=0`` is uniform
        weighting; the paper finds ``mu`` in ``[1/4, 1/2]`` best (``1/4`` is
        eq. (11) with ``gamma=0``, ``1/2`` with ``gamma=1``).
    user_budget : float, default=20.0
        The per-user weight budget ``beta > 0``: every user satisfies
        ``sum_i w_ij^2 <= beta``; the noise is calibrated to it. For
        ``"uniform"`` / ``"tail"`` it is the number of items kept per user
        (must be ``>= 1``). Only its ratio to ``reg`` matters for
        ``"adaptive"``.
    weight_normalization : {"budget", "clip"}, default="budget"
        ``"clip"``: eq. (12), ``w_ij = omega_i min(1, sqrt(beta / B_j))`` with
        ``B_j = sum_i omega_i^2`` over the user's items and ``omega`` scaled as
        in eq. (11) (with ``c(n) = 1``). ``"budget"``: ``w_ij = omega_i
        sqrt(beta / B_j)``, every user spends exactly ``beta`` (the per-user
        normalisation of the paper's App. C). Both satisfy the budget exactly.
    solver : {"als", "sgd"}, default="als"
        Private item update: sufficient statistics perturbation (Alg. 1) or
        noisy full-batch gradient descent (Alg. 2).
    n_iter : int, default=5
        Number of alternations ``T`` (Alg. 3). Every iteration costs budget.
        On the paper's synthetic data (6 seeds) 5 iterations were best or
        within 10 % of best at epsilon in {1, 10}; with 2-3 iterations some
        random initialisations had not converged (RMSE up to 2.5x worse),
        with 8 the extra noise costs 5-15 %.
    reg : float, default=1.0
        Ridge ``lambda > 0`` of the user solves and of the item solves.
    noise_ridge : float, default=1.0
        Extra item-side ridge in units of ``sigma_A sqrt(k)``, the spectral
        scale of the Gram-matrix noise of the ``"items"`` phase (a public
        quantity; 0 gives the paper's plain ridge). Stabilises the solve of
        items whose noisy statistics are dominated by noise.
    clip_norm : float or None, default=0.1
        ``C_u`` (the paper's ``Gamma_x``): every user embedding is scaled to
        norm at most ``C_u`` before it enters the item statistics. ``None``
        (no clipping) only with ``epsilon=np.inf``. The embeddings' scale is a
        free gauge, so a small ``C_u`` costs little: most users sit on the
        clipping sphere, where the stated sensitivity is tight.
    rating_clip : float or None, default=1.0
        ``C_r``: centred ratings (and the item-step targets, rating minus mean
        minus personal bias) are clipped to ``[-C_r, C_r]``; predictions of
        the factor part are clipped to the same range. ``None`` only with
        ``epsilon=np.inf``. For 5-star ratings use about 2.
    center : bool, default=True
        Release a DP global mean (phase ``"mean"``) and factorise the centred
        ratings. If False the mean is 0.
    user_bias : bool, default=True
        Give every user a personal bias, solved jointly with their embedding
        (item embeddings extended by a constant 1). Personal, so free in
        privacy; the item step then fits the rating minus the user's bias.
    mean_clip : float, default=5.0
        Public bound on ``|y|`` for the DP mean: each user's ratings are
        clipped to ``[-mean_clip, mean_clip]`` before averaging.
    count_cap : int, default=50
        Items per user counted in the DP item counts (sampled uniformly when a
        user has more).
    mean_share : float, default=0.02
        Share of the zCDP budget of the ``"mean"`` phase (if ``center``).
    count_share : float, default=0.1
        Share of the zCDP budget of the ``"counts"`` phase (if counts are
        needed: ``weighting`` in {"adaptive", "tail"} or ``solver="sgd"``).
        The paper spends 12-20 % on counts.
    gd_steps : int, default=5
        Noisy gradient steps per alternation (``solver="sgd"`` only).
    learning_rate : float, default=1.0
        Base step of the noisy GD; item ``i`` uses ``learning_rate / (C_u^2
        omega_i n_hat_i + ridge)``, a public estimate of its curvature
        (``solver="sgd"`` only).
    grad_clip : float or None, default=None
        ``Gamma`` of Alg. 2: each per-rating gradient ``(<v_i, u_j> - r_ij)
        u_j`` is clipped to this norm. ``None`` uses ``C_u * C_r``.
    items : array-like of shape (n_items,) or (n_items, n_features), default=None
        Public item catalogue. ``None`` uses the distinct items of ``X``
        (the paper's ``m`` items are public): the catalogue is then released
        as is and is **not covered** by the guarantee (an item rated by a
        single user appears or disappears with that user; the privacy report
        says so). Ratings of items outside ``items`` are ignored (with a
        warning).
    verbose : int, default=0
        Print progress per iteration when > 0.
    random_state : int, RandomState instance or None, default=None
        Seeds the initialisation, the sampling and the privacy noise.

    Attributes
    ----------
    item_embeddings_ : ndarray of shape (n_items, n_components)
        Item embeddings (released under DP), rows aligned with ``item_ids_``.
    item_counts_ : ndarray of shape (n_items,) or None
        Noisy item counts (released; ``None`` if no counts were needed).
        Counts from at most ``count_cap`` items per user, so heavy users
        count partially; may be negative.
    mean_ : float
        DP global mean (0.0 if ``center=False``).
    item_ids_ : ndarray of shape (n_items,) or (n_items, n_features)
        The item catalogue, sorted (not covered by the guarantee when
        inferred from ``X``, i.e. ``items=None``).
    user_embeddings_ : ndarray of shape (n_users, n_components)
        Personal user embeddings, aligned with ``user_ids_`` (not clipped).
    user_biases_ : ndarray of shape (n_users,)
        Personal user biases (zeros if ``user_bias=False``).
    user_ids_ : ndarray of shape (n_users,)
        Sorted user ids seen in ``fit`` / ``personalize``.
    n_users_ : int
        Number of users in ``fit``.
    n_items_ : int
        Size of the catalogue.
    n_iter_ : int
        Number of alternations run.
    privacy_report_ : PrivacyReport
        Budget plan, noise multipliers, sensitivities and the spent epsilon.
    n_features_in_ : int
        Number of columns of ``X``.

    See Also
    --------
    skdpp.datasets.make_skewed_ratings : The paper's synthetic skewed data.
    skdpp.datasets.load_movielens : MovieLens loader.
    skdpp.metrics.recall_at_k : Recall@k of :meth:`recommend` (App. D.1).

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)`` user-level DP for the released
    ``item_embeddings_``, ``item_counts_`` and ``mean_`` under the
    replace-one-user relation (the number of users is public, and so is the
    item catalogue when given by ``items``; inferred from ``X`` it is released
    as is and NOT covered, as the report notes). User embeddings and biases
    are functions of the releases and the user's own ratings only, hence
    jointly DP (billboard model). Float
    noise is not hardened against floating-point side channels.

    **Sensitivities (replace one user's data, L2).** Duplicate (user, item)
    rows are first merged (mean rating), so a user contributes once per item.
    Each user's contribution below depends only on that user's ratings, the
    released quantities and the public catalogue.

    - ``"mean"``: each user contributes the mean of their ratings clipped to
      ``mean_clip``; the release is the sum over users divided by the public
      ``n_users``: sensitivity ``2 mean_clip / n_users``.
    - ``"counts"``: user ``j`` contributes the 0/1 indicator ``c_j`` of at
      most ``count_cap`` of their items; ``||c_j - c_j'||^2 = |S_j symdiff
      S_j'| <= 2 count_cap``: sensitivity ``sqrt(2 count_cap)``.
    - ``"items"``, ALS, Gram stack ``(A_i)_i``, ``A_i = sum_j w_ij u_j
      u_j^T``: user ``j``'s part has squared Frobenius norm ``sum_i w_ij^2
      ||u_j||^4 <= beta C_u^4`` (weights budget, ``||u_j|| <= C_u``), so
      replacing the user moves the stack by at most ``2 sqrt(beta) C_u^2``.
      The noise is symmetric (iid on the upper triangle, mirrored); the
      upper-triangle vector moves by at most the Frobenius distance, so this
      is exactly a Gaussian mechanism with that sensitivity.
    - ``"items"``, ALS, ``(b_i)_i``, ``b_i = sum_j w_ij t_ij u_j`` with
      targets ``|t_ij| <= C_r``: sensitivity ``2 sqrt(beta) C_u C_r``.
    - ``"items"``, SGD, gradient stack ``g_i = sum_j w_ij clip(e_ij u_j,
      Gamma)``: sensitivity ``2 sqrt(beta) Gamma``.

    This is why the weight budget exists: without the per-user clip of
    eq. (12) a user with many rare items would have unbounded influence.

    **Budget plan** (``privacy_report_.phases``). Shares of the zCDP budget,
    normalised; all releases are Gaussian, composed exactly (GDP) and
    calibrated jointly to ``(epsilon, delta)``:

    - ``"mean"`` (if ``center``): ``mean_share``, 1 release;
    - ``"counts"`` (if counts are needed): ``count_share``, 1 release;
    - ``"items"``: the rest, ``2 n_iter`` releases (ALS: ``A`` and ``b`` per
      iteration) or ``n_iter * gd_steps`` (SGD).

    **Deviations from the paper, and why.**

    - Ridge: Alg. 1 puts ``lambda I`` inside the weighted sum (``sum_j w_ij
      (x x^T + lambda I)``), a data-dependent term its sensitivity proof
      omits; here a data-independent ridge ``reg + noise_ridge sigma_A
      sqrt(k)`` is added after the noise (post-processing). The noisy Gram
      matrices are projected on the PSD cone first (the paper's
      ``A^dagger``).
    - Eq. (11) uses ``c(n) = 1`` (``beta_bar = beta``); privacy never relies
      on it because eq. (12) (or the budget normalisation) enforces the
      budget per user. Noisy counts are floored at 1 (App. B uses
      ``n_hat + s``). Counts use at most ``count_cap`` items per user.
    - ``weight_normalization="budget"`` is the default: on the paper's
      synthetic data (App. C) it was as good as or better than eq. (12) at
      every measured setting; ``"clip"`` is eq. (12) exactly.
    - Neighbouring relation: replace-one-user (the paper: add/remove), hence
      the factor 2 in every sensitivity.
    - Centering releases the mean of users' mean ratings (a per-user
      contribution with bounded sensitivity) rather than the mean rating.
      Personal user biases are an addition (free in privacy).
    - Alg. 2 clips each per-rating gradient (the paper assumes Lipschitz
      losses) and uses per-item steps from public quantities; no projection
      on a domain ``C``.
    - The initial item embeddings are ``N(0, I / k)`` (data-independent).
    - Predicted residuals are clipped to ``[-C_r, C_r]`` (post-processing).

    **Cold start.** Unseen users get ``mean_``; known users rating an item
    outside the catalogue get ``mean_`` plus their bias.

    **Scale.** Per-user Gram matrices are sparse-dense products of the
    rating matrix with the items' upper-triangular outer products, per-item
    statistics the transposed products, solved as stacks of ``k x k``
    systems; memory is ``O((n_users + n_items) k^2)`` in blocks of 8192
    users. See ``benchmarks/bench_adaptive_mf.py``.

    References
    ----------
    .. [1] W. Krichene, P. Jain, S. Song, M. Sundararajan, A. Thakurta,
       L. Zhang. "Multi-Task Differential Privacy Under Distribution Skew".
       ICML 2023. arXiv:2302.07975. Alg. 1-3, eq. (11)-(12), App. B-D.
    .. [2] S. Chien, P. Jain, W. Krichene, S. Rendle, S. Song, A. Thakurta,
       L. Zhang. "Private Alternating Least Squares: Practical Private Matrix
       Completion with Tighter Rates". ICML 2021.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.datasets import make_skewed_ratings
    >>> from skdpp import AdaptiveWeightMF
    >>> X, y, groups, info = make_skewed_ratings(n_users=2000, power=0.5,
    ...                                          random_state=0)
    >>> mf = AdaptiveWeightMF(n_components=5, epsilon=5.0, mu=0.5, center=False,
    ...                       user_bias=False, items=np.arange(100), random_state=0)
    >>> mf = mf.fit(X, y, groups)
    >>> mf.item_embeddings_.shape
    (100, 5)
    >>> [phase.name for phase in mf.privacy_report_.phases]
    ['counts', 'items']
    >>> pred = mf.predict(info.X_test, groups=info.groups_test)
    >>> bool(abs(pred - info.y_test).mean() < abs(info.y_test).mean())
    True
    """

    _parameter_constraints = {
        **BasePersonalizedEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "weighting": [StrOptions({"adaptive", "uniform", "tail"})],
        "mu": [Interval(Real, 0, None, closed="left")],
        "user_budget": [Interval(Real, 0, None, closed="neither")],
        "weight_normalization": [StrOptions({"clip", "budget"})],
        "solver": [StrOptions({"als", "sgd"})],
        "n_iter": [Interval(Integral, 1, None, closed="left")],
        "reg": [Interval(Real, 0, None, closed="neither")],
        "clip_norm": [Interval(Real, 0, None, closed="neither"), None],
        "rating_clip": [Interval(Real, 0, None, closed="neither"), None],
        "center": ["boolean"],
        "user_bias": ["boolean"],
        "mean_clip": [Interval(Real, 0, None, closed="neither")],
        "count_cap": [Interval(Integral, 1, None, closed="left")],
        "mean_share": [Interval(Real, 0, 1, closed="neither")],
        "count_share": [Interval(Real, 0, 1, closed="neither")],
        "gd_steps": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "grad_clip": [Interval(Real, 0, None, closed="neither"), None],
        "noise_ridge": [Interval(Real, 0, None, closed="left")],
        "items": ["array-like", None],
        "verbose": ["verbose"],
    }
    _personal_attributes = ("user_embeddings_", "user_biases_")

    def __init__(
        self,
        *,
        n_components=10,
        epsilon=1.0,
        delta=1e-6,
        weighting="adaptive",
        mu=0.25,
        user_budget=20.0,
        weight_normalization="budget",
        solver="als",
        n_iter=5,
        reg=1.0,
        noise_ridge=1.0,
        clip_norm=0.1,
        rating_clip=1.0,
        center=True,
        user_bias=True,
        mean_clip=5.0,
        count_cap=50,
        mean_share=0.02,
        count_share=0.1,
        gd_steps=5,
        learning_rate=1.0,
        grad_clip=None,
        items=None,
        verbose=0,
        random_state=None,
    ):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.weighting = weighting
        self.mu = mu
        self.user_budget = user_budget
        self.weight_normalization = weight_normalization
        self.solver = solver
        self.n_iter = n_iter
        self.reg = reg
        self.noise_ridge = noise_ridge
        self.clip_norm = clip_norm
        self.rating_clip = rating_clip
        self.center = center
        self.user_bias = user_bias
        self.mean_clip = mean_clip
        self.count_cap = count_cap
        self.mean_share = mean_share
        self.count_share = count_share
        self.gd_steps = gd_steps
        self.learning_rate = learning_rate
        self.grad_clip = grad_clip
        self.items = items
        self.verbose = verbose
        self.random_state = random_state

    # ------------------------------------------------------------------ #
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Generic checks pass no groups: every row is its own user and every
        # distinct row its own item, so predictions fall back to the DP mean.
        tags.regressor_tags.poor_score = True
        return tags

    def _validate_extra_params(self):
        if self.epsilon != np.inf and self.rating_clip is None:
            raise ValueError(
                f"rating_clip=None (no clipping of ratings) gives unbounded sensitivity "
                f"and is only allowed with epsilon=np.inf; got epsilon={self.epsilon!r}. "
                "Pass a positive rating_clip (the largest |rating - mean| to keep)."
            )
        if self.weighting in ("uniform", "tail") and self.user_budget < 1:
            raise ValueError(
                f"weighting={self.weighting!r} keeps floor(user_budget) items per user "
                f"with weight 1, so user_budget must be >= 1; got {self.user_budget!r}. "
                "Pass user_budget=k to sample k items per user."
            )
        shares = (self.mean_share if self.center else 0.0) + (
            self.count_share if self._needs_counts() else 0.0
        )
        if shares >= 1.0:
            raise ValueError(
                f"mean_share + count_share must leave a positive share of the budget for "
                f"the item updates; got mean_share={self.mean_share!r} and "
                f"count_share={self.count_share!r} (sum {shares!r} >= 1). Lower them."
            )

    def _needs_counts(self):
        return self.weighting in ("adaptive", "tail") or self.solver == "sgd"

    def _check_X(self, X, *, reset):
        """Validated X (item ids) for fit (reset=True) or predict (reset=False)."""
        return validate_data(self, X, reset=reset, dtype=None)

    def _keys_from_X(self, X):
        if X.dtype.kind == "O" and X.shape[1] > 1:
            X = X.astype(np.float64)  # TypeError for non-numeric multi-column ids
        if X.dtype.kind not in "biufO":
            if X.shape[1] > 1:
                raise ValueError(
                    f"A multi-column X must be numeric (each distinct row is an item); "
                    f"got dtype {X.dtype}. Pass one column of item ids instead."
                )
        return _item_keys(X)

    def _item_codes(self, X):
        """Item code (0..n_items-1) of each row of validated X, -1 if unseen."""
        # The catalogue keys are sorted and unique, so the index keeps their order.
        catalogue = UserIndex.from_groups(self._catalogue_keys, self.n_items_)
        return catalogue.lookup(self._keys_from_X(X))

    def _plan(self):
        """The budget plan: named phases, shares of the zCDP budget, release counts."""
        phases = []
        rest = 1.0
        if self.center:
            phases.append(Phase("mean", share=self.mean_share, mechanism="gaussian"))
            rest -= self.mean_share
        if self._needs_counts():
            phases.append(Phase("counts", share=self.count_share, mechanism="gaussian"))
            rest -= self.count_share
        n_releases = 2 * self.n_iter if self.solver == "als" else self.n_iter * self.gd_steps
        phases.append(Phase("items", share=rest, mechanism="gaussian", count=n_releases))
        return phases

    def _entries(self, X, y, index):
        """Aggregated (user, item, rating) entries of the rows in the catalogue."""
        item = self._item_codes(X)
        known = item >= 0
        if not known.all() and self.items is not None:
            warnings.warn(
                f"{int((~known).sum())} rows have item ids outside `items` (the public "
                "catalogue) and are ignored.",
                UserWarning,
                stacklevel=3,
            )
        return _aggregate_entries(
            index.codes[known], item[known], np.asarray(y, dtype=np.float64)[known],
            self.n_items_,
        )

    # Steps that the privacy tests replace by broken variants.
    def _weights(self, user, item, n_users, counts, rng):
        """Per-entry task weights (eq. (11)-(12) or a sampling baseline)."""
        return _task_weights(
            user, item, n_users, self.n_items_, weighting=self.weighting, counts=counts,
            mu=self.mu, budget=float(self.user_budget),
            normalization=self.weight_normalization, rng=rng,
        )

    def _clip_users(self, U):
        """Clip every user embedding to ``clip_norm`` (Alg. 1, line 2)."""
        return mechanisms.clip_by_norm(U, self.clip_norm)

    # ------------------------------------------------------------------ #
    def fit(self, X, y, groups=None):
        """Fit item embeddings under user-level DP and every user's embedding.

        Parameters
        ----------
        X : array-like of shape (n_samples, 1) or (n_samples, n_features)
            Item id of each rating (one column of ints or strings); with several
            columns each distinct row is an item.
        y : array-like of shape (n_samples,)
            Ratings.
        groups : array-like of shape (n_samples,), default=None
            User id of each rating (the privacy unit). ``None``: every row is
            its own user.

        Returns
        -------
        self : AdaptiveWeightMF
            Fitted estimator.
        """
        t_start = time.perf_counter()
        X, y, index = self._validate_fit_input(X, y, groups, dtype=None, y_numeric=True)
        self._validate_extra_params()
        rng = check_random_state(self.random_state)
        k = self.n_components

        # Item catalogue (public: given by `items`, or the distinct ids in X).
        if self.items is not None:
            catalogue = np.asarray(self.items)
            catalogue = catalogue.reshape(catalogue.shape[0], -1)
            if catalogue.shape[1] != X.shape[1]:
                raise ValueError(
                    f"`items` must have one id per item with {X.shape[1]} column(s) like "
                    f"X; got shape {np.asarray(self.items).shape}."
                )
            cat_keys = self._keys_from_X(catalogue)
        else:
            cat_keys = self._keys_from_X(X)
        catalogue = UserIndex.from_groups(cat_keys, cat_keys.shape[0])
        self._catalogue_keys = np.asarray(catalogue.users).copy()
        self.n_items_ = int(catalogue.n_users)
        self.item_ids_ = _keys_to_ids(self._catalogue_keys, X.shape[1])
        id_dtype = (np.asarray(self.items) if self.items is not None else X).dtype
        if X.shape[1] == 1 and id_dtype.kind in "biu":
            self.item_ids_ = self.item_ids_.astype(id_dtype)  # integer ids stay ints
        n_users, n_items = index.n_users, self.n_items_

        # Data-independent initialisation, drawn first (Alg. 3, line 1).
        V = _init_item_embeddings(rng, n_items, k)

        phases = self._plan()
        z = calibrate(phases, epsilon=self.epsilon, delta=self.delta)
        # Sensitivities of the item step (checked before any release).
        sqrt_beta = np.sqrt(np.float64(self.user_budget))
        cu = np.float64(np.inf if self.clip_norm is None else self.clip_norm)
        cr = np.float64(np.inf if self.rating_clip is None else self.rating_clip)
        with np.errstate(over="ignore"):  # overflow to inf is handled below
            sens_A = 2.0 * sqrt_beta * cu**2
            sens_b = 2.0 * sqrt_beta * cu * cr
            # Gradient clip: default C_u * C_r, the bound of |r_ij| ||u_j|| (the
            # per-entry gradient at v_i = 0).
            grad_clip = cu * cr if self.grad_clip is None else np.float64(self.grad_clip)
            sens_g = 2.0 * sqrt_beta * grad_clip
        if not np.isfinite(sens_A + sens_b + sens_g):
            if z["items"] > 0:
                # A zeroed sensitivity would release the statistics without noise
                # while the report states epsilon.
                raise ValueError(
                    f"The item-step sensitivities (2 sqrt(user_budget) clip_norm^2, "
                    f"2 sqrt(user_budget) clip_norm rating_clip) overflow with "
                    f"clip_norm={self.clip_norm!r}, rating_clip={self.rating_clip!r}, "
                    f"user_budget={self.user_budget!r}, grad_clip={self.grad_clip!r}; "
                    "pass smaller values (or epsilon=np.inf)."
                )
            # epsilon=inf without clipping: nothing is noised (noise multiplier
            # 0), the releases are non-private.
            sens_A = sens_b = sens_g = 0.0
        sens_A, sens_b, sens_g, grad_clip = (float(sens_A), float(sens_b), float(sens_g),
                                             float(grad_clip))
        accountant = self._new_accountant()
        user, item, rating = self._entries(X, y, index)

        # Alg. 3, line 2: pre-processing (DP mean, DP counts).
        if self.center:
            self.mean_, event, sens = _dp_mean(
                user, rating, n_users, bound=self.mean_clip,
                noise_multiplier=z["mean"], rng=rng,
            )
            accountant.compose(event, phase="mean", mechanism="gaussian",
                               sensitivity=sens, clip_norm=self.mean_clip)
        else:
            self.mean_ = 0.0
        resid = rating - self.mean_
        if self.rating_clip is not None:
            resid = np.clip(resid, -self.rating_clip, self.rating_clip)

        if self._needs_counts():
            counts, event, sens = _dp_item_counts(
                user, item, n_users, n_items, cap=self.count_cap,
                noise_multiplier=z["counts"], rng=rng,
            )
            accountant.compose(event, phase="counts", mechanism="gaussian",
                               sensitivity=sens, clip_norm=float(np.sqrt(self.count_cap)))
            self.item_counts_ = counts
        else:
            counts = None
            self.item_counts_ = None

        w, omega = self._weights(user, item, n_users, counts, rng)
        R = _csr(user, item, resid, n_users, n_items)
        keep = w > 0
        u_kept, i_kept, w_kept = user[keep], item[keep], w[keep]
        W = _csr(u_kept, i_kept, w_kept, n_users, n_items)

        # Item-side ridge: `reg` plus `noise_ridge` times sigma_A sqrt(k), the
        # spectral scale of the symmetric noise of a Gram release with this
        # phase's noise multiplier (public: post-processing).
        item_ridge = float(self.reg)
        if z["items"] > 0:
            item_ridge += self.noise_ridge * z["items"] * sens_A * np.sqrt(k)
        if self.solver == "sgd":
            # Per-item step sizes from public quantities only: an estimate of the
            # curvature sum_j w_ij ||u_j||^2 <= C_u^2 * omega_i * n_i.
            scale = np.ones(n_items) if omega is None else omega
            c2 = 1.0 if self.clip_norm is None else cu**2
            with np.errstate(over="ignore"):  # absurd clip norms: step -> 0
                step = self.learning_rate / (c2 * scale * np.maximum(counts, 1.0) + item_ridge)

        if self.verbose:
            # Public sizes only (the number of ratings is private, never printed).
            print(f"[AdaptiveWeightMF] {n_users} users, {n_items} items; "
                  f"set-up {time.perf_counter() - t_start:.1f} s")
        for t in range(self.n_iter):
            # Alg. 3, line 4: exact user least squares (local), then each u_j is
            # clipped to C_u before it enters the item statistics.
            U, bias = _solve_users(V, R, self.reg, bias=self.user_bias)
            U = self._clip_users(U)
            # Item-step targets: residual minus the personal bias, clipped to C_r.
            target = resid[keep] - bias[u_kept]
            if self.rating_clip is not None:
                target = np.clip(target, -cr, cr)
            if self.solver == "als":
                # Alg. 1, lines 5-6: weighted sufficient statistics + Gaussian noise.
                WR = _csr(u_kept, i_kept, w_kept * target, n_users, n_items)
                A, b = _item_statistics(U, W, WR)
                A_hat, event = mechanisms.gaussian_mechanism(
                    A, sensitivity=sens_A, noise_multiplier=z["items"], rng=rng,
                    symmetric=True,
                )
                accountant.compose(event, phase="items", mechanism="gaussian",
                                   sensitivity=sens_A, clip_norm=self.clip_norm)
                b_hat, event = mechanisms.gaussian_mechanism(
                    b, sensitivity=sens_b, noise_multiplier=z["items"], rng=rng,
                )
                accountant.compose(event, phase="items", mechanism="gaussian",
                                   sensitivity=sens_b, clip_norm=self.clip_norm)
                # Alg. 1, line 7: PSD projection, data-independent ridge.
                V = psd_ridge_solve(A_hat, b_hat, item_ridge)
            else:
                for _ in range(self.gd_steps):
                    # Alg. 2, line 5: weighted, per-entry clipped gradient sum.
                    g = _item_gradient(U, V, u_kept, i_kept, target, w_kept,
                                       n_users=n_users, grad_clip=grad_clip)
                    g_hat, event = mechanisms.gaussian_mechanism(
                        g, sensitivity=sens_g, noise_multiplier=z["items"], rng=rng,
                    )
                    accountant.compose(event, phase="items", mechanism="gaussian",
                                       sensitivity=sens_g, clip_norm=grad_clip)
                    # Alg. 2, line 6 (the ridge gradient is data-independent).
                    V = V - step[:, None] * (g_hat + item_ridge * V)
            if self.verbose:
                print(f"[AdaptiveWeightMF] iteration {t + 1}/{self.n_iter} done "
                      f"({self.solver}, {self.weighting} weights, "
                      f"{time.perf_counter() - t_start:.1f} s)")

        self.item_embeddings_ = V
        self.n_iter_ = self.n_iter
        # Personal part (billboard model): exact least squares from released items.
        self.user_embeddings_, self.user_biases_ = _solve_users(
            V, R, self.reg, bias=self.user_bias
        )
        self._seen = R.copy()
        self._seen.data = np.ones_like(self._seen.data)
        released = ["item_embeddings_"]
        if self.center:
            released.append("mean_")
        if self.item_counts_ is not None:
            released.append("item_counts_")
        notes = [
            "The item catalogue item_ids_ is public (given by `items`)."
            if self.items is not None else
            "NOT COVERED: the item catalogue item_ids_ (which items have a row in "
            "item_embeddings_ and item_counts_) was inferred from X and is released "
            "as is (an item rated by a single user appears or disappears with that "
            "user). Pass `items=` a public catalogue to make it public and covered "
            "by the guarantee.",
            "The number of users is public.",
            f"Every user's task weights satisfy sum_i w_ij^2 <= user_budget="
            f"{float(self.user_budget):g} ({self.weighting} weights).",
        ]
        if self.solver == "als":
            notes.append("Phase 'items' alternates two releases per iteration: the "
                         "per-item Gram matrices (sensitivity 2 sqrt(beta) C_u^2) and "
                         "right-hand sides (2 sqrt(beta) C_u C_r).")
        self.privacy_report_ = self._build_report(
            accountant, n_users=n_users, released=tuple(released),
            local=("user_embeddings_", "user_biases_"),
            shares={phase.name: phase.share for phase in phases}, notes=tuple(notes),
        )
        return self

    # ------------------------------------------------------------------ #
    def _fit_personal(self, X, y, index):
        """User embeddings from the released items and each user's own ratings."""
        user, item, rating = self._entries(X, y, index)
        resid = rating - self.mean_
        if self.rating_clip is not None:
            resid = np.clip(resid, -self.rating_clip, self.rating_clip)
        R = _csr(user, item, resid, index.n_users, self.n_items_)
        self._pending_seen = R
        U, bias = _solve_users(self.item_embeddings_, R, self.reg, bias=self.user_bias)
        return {"user_embeddings_": U, "user_biases_": bias}

    def _validate_personal_input(self, X, y):
        return validate_data(self, X, y, reset=False, dtype=None, y_numeric=True)

    def _merge_personal(self, new_ids, personal):
        old_ids = self.user_ids_
        old_seen = self._seen.tocoo()
        new_seen = self._pending_seen.tocoo()
        super()._merge_personal(new_ids, personal)
        all_ids = self.user_ids_
        pos_old = np.searchsorted(all_ids, old_ids)
        pos_new = np.searchsorted(all_ids, new_ids)
        replaced = np.isin(old_ids, new_ids)
        keep = ~replaced[old_seen.row]
        rows = np.concatenate([pos_old[old_seen.row[keep]], pos_new[new_seen.row]])
        cols = np.concatenate([old_seen.col[keep], new_seen.col])
        self._seen = sp.csr_matrix(
            (np.ones(rows.shape[0]), (rows, cols)), shape=(all_ids.shape[0], self.n_items_)
        )
        del self._pending_seen

    # ------------------------------------------------------------------ #
    def predict(self, X, groups=None):
        """Predict ratings: ``mean_ + <u_user, v_item>`` (DP mean when unseen).

        Parameters
        ----------
        X : array-like of shape (n_samples, 1) or (n_samples, n_features)
            Item ids, as in :meth:`fit`.
        groups : array-like of shape (n_samples,), default=None
            User id of each row. Unseen users and items unseen in the catalogue
            get the DP mean ``mean_``.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = self._check_X(X, reset=False)
        users = self._user_codes(groups, X.shape[0])
        items = self._item_codes(X)
        pred = np.full(X.shape[0], self.mean_, dtype=np.float64)
        known = (users >= 0) & (items >= 0)
        if known.any():
            score = _rowwise_dot(self.user_embeddings_, self.item_embeddings_,
                                 users[known], items[known])
            score += self.user_biases_[users[known]]
            if self.rating_clip is not None:
                score = np.clip(score, -self.rating_clip, self.rating_clip)
            pred[known] = self.mean_ + score
        # Known users, items outside the catalogue: mean plus personal bias.
        user_only = (users >= 0) & (items < 0)
        if user_only.any():
            score = self.user_biases_[users[user_only]]
            if self.rating_clip is not None:
                score = np.clip(score, -self.rating_clip, self.rating_clip)
            pred[user_only] = self.mean_ + score
        return pred

    def recommend(self, groups, n_items=10, exclude_seen=True):
        """Top-``n_items`` item ids for each given user.

        Parameters
        ----------
        groups : array-like of shape (n_users_query,)
            User ids (one per user to recommend for).
        n_items : int, default=10
            Number of items per user (at most the catalogue size).
        exclude_seen : bool, default=True
            Skip the items each user rated in ``fit`` / ``personalize`` (the
            estimator keeps each user's rated items with their personal part;
            like ``user_embeddings_`` they are personal data, not a release).

        Returns
        -------
        item_ids : ndarray of shape (n_users_query, n_items[, n_features])
            Recommended item ids, best first. Unseen users are ranked by the
            noisy item counts (popularity), or by catalogue order if no counts
            were released.
        """
        check_is_fitted(self)
        groups = np.asarray(groups)
        if groups.ndim != 1:
            raise ValueError(
                f"groups must be a 1-D array of user ids; got shape {groups.shape}."
            )
        if not isinstance(n_items, Integral) or isinstance(n_items, bool) or n_items < 1:
            raise ValueError(f"n_items must be a positive integer; got {n_items!r}.")
        n_top = min(int(n_items), self.n_items_)
        codes = self._user_codes(groups, groups.shape[0])
        known = codes >= 0
        if self.item_counts_ is not None:
            cold = np.asarray(self.item_counts_, dtype=np.float64)
        else:
            cold = -np.arange(self.n_items_, dtype=np.float64)
        out = np.empty((groups.shape[0], n_top), dtype=np.int64)
        block = max(1, (2**24) // max(1, self.n_items_))
        for start in range(0, groups.shape[0], block):  # memory blocks
            stop = min(groups.shape[0], start + block)
            c = codes[start:stop]
            kn = known[start:stop]
            scores = np.tile(cold, (stop - start, 1))
            if kn.any():
                scores[kn] = self.user_embeddings_[c[kn]] @ self.item_embeddings_.T
                if exclude_seen:
                    seen = self._seen[c[kn]].toarray() > 0
                    sub = scores[kn]
                    sub[seen] = -np.inf
                    scores[kn] = sub
            top = np.argpartition(-scores, n_top - 1, axis=1)[:, :n_top]
            order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1,
                               kind="stable")
            out[start:stop] = np.take_along_axis(top, order, axis=1)
        return self.item_ids_[out]

"""Priv-AltMin (Jain, Rush, Smith, Song & Thakurta 2021, Alg. 1 with Alg. 2 and Alg. 3).

The algorithm as block functions over blocks of whole users:

* :func:`~skdpp.linear_model._representation.prepare_split` and
  :func:`prepare_altmin` (once): each user's ``S^0`` / ``S^1`` split and the
  rows for the heads and the statistics (keyed randomness);
* :func:`altmin_round` (one per round): each active user's exact head (Alg. 1,
  line 5) and its clipped per-user-mean contributions to the Gram matrix and
  the moment vector of Alg. 2, line 1; the block returns their partial sums;
* :func:`private_altmin` (the driver): releases the two sums through the fit's
  :class:`~skdpp.privacy.Releaser` (Alg. 2, line 2), solves (line 3) and
  orthonormalises (line 4).

:class:`PrivAltMinRegressor` is the estimator.
"""

from dataclasses import dataclass
from numbers import Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from ..base import BasePersonalizedEstimator, PersonalizedRegressorMixin
from ..privacy._clipping import clip_values, clipped_magnitudes, unit_rows
from ._heads import psd_floor_solve
from ._auto import auto_bound, rms_per_user
from ._representation import (
    _clip_constraint,
    _common_constraints,
    _RepresentationMixin,
    fit_heads,
    s0_rows,
    take_rows,
)

__all__ = ["PrivAltMinRegressor"]

# Bytes of the per-chunk temporaries of the Kronecker Gram blocks.
_CHUNK_BYTES = 16 * 2**20


# --------------------------------------------------------------------------- #
# Alg. 1-2 as block functions
# --------------------------------------------------------------------------- #
@dataclass(frozen=True, eq=False)
class _Round:
    """The broadcast of one round: the current ``U`` and the public configuration."""

    U: np.ndarray
    t: int
    key: np.ndarray
    n_rounds: int
    schedule: str
    clip_norm: object
    label_clip: object


def user_rounds(block, key, n_rounds):
    """The round of each of the block's users with ``schedule="disjoint"`` (Alg. 1, lines 2, 4).

    ``floor(T u_i)`` with the keyed uniform ``u_i = hash(key, "altmin_round",
    user id)``: every user takes part in exactly one round, chosen from its
    own id only (not from a permutation of all users, which would move other
    users between rounds when one user is replaced).
    """
    u = block.user_uniforms(key, "altmin_round")
    return np.minimum((u * n_rounds).astype(np.int64), n_rounds - 1)


def prepare_altmin(block, state, config):
    """Block function (once): rows for the heads and for the ``U`` statistics.

    ``batch_mode="same"``: both are ``S^0``. ``"disjoint"``: each user's
    ``S^0`` rows are cut in two keyed random halves, ``ceil(m/2)`` rows for
    the heads and the rest for the statistics (Jain et al.'s rows
    ``[1, m/4]`` and ``[m/4 + 1, m/2]``).
    """
    key, batch_mode = config
    local = state.local
    if batch_mode == "same":
        state.extra["halves"] = (local, local)
    else:
        first = local.split_users_rows(0.5, local.row_uniforms(key, "altmin_halves"))
        state.extra["halves"] = (local.select(first), local.select(~first))
    return None, state


def _user_weights(block):
    """Per-row weight ``1 / m_i``: each user contributes the mean over its rows."""
    return block.expand(1.0 / np.maximum(block.counts, 1))


def _kron_blocks(Xu, Vr, w):
    """``sum_r w_r v_{r,a} v_{r,b} x_r x_r^T`` for ``a <= b``: shape ``(d, d, k(k+1)/2)``.

    With column-major ``vec``, ``vec(x v^T) = v ⊗ x`` and
    ``vec(x v^T) vec(x v^T)^T = (v v^T) ⊗ (x x^T)``: block ``(a, b)`` of the
    ``dk × dk`` Gram is ``sum_r w_r v_{r,a} v_{r,b} x_r x_r^T``; all blocks come
    from one chunked ``X^T diag(.) X`` product, without per-row ``dk`` vectors.
    """
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
    """A block's partial sums of Alg. 2, line 1 (per-user means of clipped rows).

    Each row gives ``W_r = clip(vec(x_r v_i^T); η)`` and ``ỹ_r = clip(y_r; ζ)``,
    formed as ``min(||x|| ||v||, η) vec(x̂ v̂^T)`` from the unit vectors ``x̂``,
    ``v̂`` so that ``||W_r|| <= η`` holds for any magnitudes. Each user
    contributes the *mean* over its rows of ``W_r W_r^T`` (trace ``<= η^2``)
    and of ``ỹ_r W_r`` (norm ``<= ζ η``), whatever its number of rows.

    Parameters
    ----------
    stats : UserBlock
        The rows of the statistics (a selection of the block's ``S^0`` rows).
    X0, y0 : ndarray
        The block's ``S^0`` rows of ``X`` and ``y`` (sources of ``stats``).
    V : ndarray of shape (n_users, k)
        The users' heads.
    clip_norm, label_clip : float or None
        ``η`` and ``ζ``.

    Returns
    -------
    gram_blocks : ndarray of shape (d, d, k(k+1)/2)
        Kronecker blocks of ``sum_i mean_r W_r W_r^T`` (:func:`_assemble_gram`).
    moments : ndarray of shape (d, k)
        ``unvec(sum_i mean_r ỹ_r W_r)``.
    """
    xu, xn = unit_rows(take_rows(stats, X0))
    vu, vn = unit_rows(V)
    Vr, vnr = stats.expand(vu), stats.expand(vn)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.where((xn > 0) & (vnr > 0), xn * vnr, 0.0)
    mag, _ = clipped_magnitudes(norms, clip_norm)  # ||W_r|| = min(||x|| ||v||, eta)
    yt = clip_values(take_rows(stats, y0), label_clip)
    w = _user_weights(stats)
    with np.errstate(over="ignore", invalid="ignore"):
        gram = _kron_blocks(xu, Vr, w * mag**2)
        moments = xu.T @ ((w * mag * yt)[:, None] * Vr)
    return gram, moments


def _round_heads(block, state, rnd, all_users=False):
    """The round's rows (``S^0``, centred), its statistics rows and heads (Alg. 1, l. 4-5).

    ``all_users`` (the ``"auto"`` ``η`` pass at ``U_0``): the heads of all
    users are kept in the block state, and round 0 of ``schedule="full"`` (the
    same users, rows and ``U``) uses them instead of solving them again.
    """
    heads, stats = state.extra["halves"]
    cached = state.extra.pop("altmin_heads", None)
    if rnd.schedule == "disjoint" and not all_users:  # line 4: only the users of round t
        active = user_rounds(state.local, rnd.key, rnd.n_rounds) == rnd.t
        heads = heads.select(heads.expand(active))
        stats = stats.select(stats.expand(active))
    X0 = s0_rows(block, state)
    if cached is not None and not all_users and rnd.schedule != "disjoint" \
            and cached[0].t == rnd.t and np.array_equal(cached[0].U, rnd.U):
        return X0, stats, cached[1]
    with np.errstate(over="ignore", invalid="ignore"):
        P = X0 @ rnd.U
    V = fit_heads(heads, take_rows(heads, P), take_rows(heads, state.y0))  # line 5
    if all_users:
        state.extra["altmin_heads"] = (rnd, V)
    return X0, stats, V


def altmin_round(block, state, rnd):
    """Block function of one round: heads (Alg. 1, line 5), then Alg. 2, line 1."""
    X0, stats, V = _round_heads(block, state, rnd)
    partial = altmin_statistics(stats, X0, state.y0, V, rnd.clip_norm, rnd.label_clip)
    return partial, state


def row_norm_statistic(block, state, rnd):
    """Block function: each user's root mean square of ``||x_r|| ||v_i||`` over its
    statistics rows at ``U_0`` (the per-user statistic of an ``"auto"`` ``η``)."""
    X0, stats, V = _round_heads(block, state, rnd, all_users=True)
    xn = unit_rows(take_rows(stats, X0))[1]
    with np.errstate(over="ignore", invalid="ignore"):
        norms = xn * stats.expand(unit_rows(V)[1])
    return rms_per_user(stats, norms), state


def label_statistic(block, state, rnd):
    """Block function: each user's root mean square of its (centred) targets on its
    statistics rows (the per-user statistic of an ``"auto"`` ``ζ``)."""
    stats = state.extra["halves"][1]
    return rms_per_user(stats, take_rows(stats, state.y0)), state


def private_altmin(executor, release, U0, *, key, n_rounds, schedule, clip_norm,
                   label_clip, psd_floor, n_users=None, clip_quantile=0.5, verbose=0):
    """Alg. 1 (lines 1-6) with Alg. 2 as the private ``U`` step; returns ``(U^priv, η, ζ)``.

    Parameters
    ----------
    executor : LocalExecutor
        Blocks prepared by :func:`prepare_split` and :func:`prepare_altmin`.
    release : Releaser
        Releases the Gram (sensitivity ``sqrt(2) η^2``, symmetric noise) and the
        moments (``2 ζ η``) of every round in phase ``"iterations"``.
    U0 : ndarray of shape (d, k)
    key : ndarray
        The fit key (keyed rounds of ``schedule="disjoint"``).
    n_rounds : int
        ``T``.
    schedule : {"full", "disjoint"}
        ``"disjoint"``: every user takes part in one round only (Alg. 1); by
        parallel composition only the first round's two releases are charged.
        ``"full"``: all users every round.
    clip_norm, label_clip : float, "auto" or None
        ``η`` and ``ζ``. ``"auto"``: the ``clip_quantile`` of a per-user
        statistic at ``U_0`` (:func:`row_norm_statistic`,
        :func:`label_statistic`), released in phase ``"clip"``.
    psd_floor : float
        Eigenvalues of the noisy Gram are raised to at least
        ``psd_floor * σ * sqrt(dk)`` (``σ`` its noise std) before the solve.
    n_users : int
        The public number of users (for ``"auto"`` bounds).
    clip_quantile : float, default=0.5
    verbose : int, default=0

    Returns
    -------
    U : ndarray of shape (d, k)
    clip_norm, label_clip : float or None
        The bounds used.
    """
    d, k = U0.shape
    U = np.array(U0, dtype=np.float64, copy=True)  # Alg. 1, line 1
    if n_rounds == 0:
        return U, None, None
    rnd0 = _Round(U, 0, key, n_rounds, schedule, None, None)
    if clip_norm == "auto":
        clip_norm = auto_bound(executor, release, row_norm_statistic, rnd0,
                               quantile=clip_quantile, n_users=n_users)
    if label_clip == "auto":
        label_clip = auto_bound(executor, release, label_statistic, rnd0,
                                quantile=clip_quantile, n_users=n_users)
    sens_G = None if clip_norm is None else np.sqrt(2.0) * clip_norm**2
    sens_b = None if clip_norm is None or label_clip is None else 2.0 * label_clip * clip_norm
    floor = psd_floor * release.noise_std("iterations", sens_G) * np.sqrt(d * k)
    # Parallel composition (schedule="disjoint"): every user's data enter one round
    # only (keyed by its id), so the loop costs one round: branch 0 is charged, the
    # later rounds repeat its releases on disjoint users (see the Notes).
    for t in range(n_rounds):  # line 3
        grams, moments = executor.map(altmin_round, _Round(
            U, t, key, n_rounds, schedule, clip_norm, label_clip))  # lines 4-5, Alg. 2 l. 1
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
        if verbose:
            # Public quantities only: the number of rows, of users with rows and of
            # clipped rows are statistics of the private data and are never printed.
            users = "all users" if schedule == "full" else f"the users of round {t + 1}"
            print(f"[PrivAltMin] round {t + 1}/{n_rounds}: {users}; released the Gram "
                  f"and moment statistics (noise multiplier "
                  f"{release.noise_multiplier('iterations'):.3g})")
    return U, clip_norm, label_clip


# --------------------------------------------------------------------------- #
# The estimator
# --------------------------------------------------------------------------- #
class PrivAltMinRegressor(_RepresentationMixin, PersonalizedRegressorMixin,
                          BasePersonalizedEstimator):
    """Priv-AltMin: private alternating minimisation for a shared linear embedding.

    Learns ``y ≈ b_i + <x, U v_i>`` with a shared embedding ``U``
    (``n_features × n_components``, orthonormal columns) released under
    user-level (ε, δ)-DP and a personal head ``v_i`` and intercept ``b_i``
    computed from the released values and each user's rows only (billboard
    model). Implements Jain, Rush, Smith, Song & Thakurta (2021): Alg. 1
    (alternating minimisation) with Alg. 2 (the ``U`` step by perturbing the
    least-squares sufficient statistics) and, optionally, Alg. 3 (private
    initialisation). The defaults add per-user intercepts, personal parts on
    all of a user's rows shrunk towards a released cold-start part, and
    scale-free clip bounds chosen privately (``"auto"``; see Notes).

    Parameters
    ----------
    n_components : int, default=2
        Dimension ``k`` of the shared representation; ``1 <= k <= n_features``.
    init : {"private_spectral", "private_pairwise", "random"} or array-like of \
            shape (n_features, n_components), default="private_spectral"
        Initial embedding. ``"private_spectral"``: Snedeker et al. (2025),
        Alg. 2 (as in their comparison with Priv-AltMin; uses
        ``init_clip_norm``). ``"private_pairwise"``: Jain et al.'s Alg. 3
        (normalised products of row pairs, labels clipped to ``label_clip``).
        ``"random"``: random orthonormal (free). An array: a *public* warm start.
    max_iter : int, default=1
        Number of rounds ``T`` of Alg. 1 (epochs with ``schedule="full"``).
        One full-batch epoch was best on the papers' setting for ``ε <= 8``
        (the paper's experiment picks the number of epochs in {1, 2, 5, 10}).
    schedule : {"full", "disjoint"}, default="full"
        ``"full"``: every user takes part in every round (full-batch epochs, as
        in the paper's experiment); the ``2T`` releases compose.
        ``"disjoint"``: every user is assigned to one of ``T`` rounds by a
        keyed hash of its id and round ``t`` uses its users only (Alg. 1,
        lines 2-4); by parallel composition the whole loop costs one round's
        two releases.
    fit_intercept : bool, default=True
        Per-user intercepts ``b_i``: every contribution is computed on the
        user's rows centred on the user's own means (the intercept profiled
        out), and unseen users get a released cold-start intercept (a private
        location, see Notes). ``False``: the paper's model ``<x, U v_i>``.
    personal_rows : {"all", "holdout"}, default="all"
        Rows of the personal parts: all of a user's rows (post-processing), or
        ``"holdout"``: the paper's final heads on ``S^1`` only.
    personal_ridge : float, default=10.0
        ``κ``: each user's head (and mean level) is shrunk towards the released
        cold-start part as if the prior contributed ``κ k`` pseudo-rows, scaled
        by the share of the user's target variance its own fit leaves
        unexplained. Scale-free. ``0``: least squares.
    clip_norm : float, "auto" or None, default="auto"
        ``η``: each row's ``vec(x v^T)`` is clipped to this norm (Alg. 2, line 1).
        ``"auto"``: the ``clip_quantile`` of the users' root mean square
        ``||x_r|| ||v_i||`` at ``U_0`` (a private quantile, phase ``"clip"``).
        ``None`` only with ``epsilon=np.inf``.
    label_clip : float, "auto" or None, default="auto"
        ``ζ``: each (centred) label is clipped to ``[-ζ, ζ]`` (Alg. 2 and
        Alg. 3). ``"auto"``: the ``clip_quantile`` of the users' root mean
        square (centred) targets (phase ``"clip"``).
    psd_floor : float, default=32.0
        Before the solve of Alg. 2, line 3, the eigenvalues of the noisy Gram
        ``W_priv`` are raised to at least ``psd_floor * σ * sqrt(dk)``, where
        ``σ`` is its noise std (``2 σ sqrt(dk)`` is about the spectral norm of
        the noise). Post-processing: no privacy cost. ``2`` only makes the
        problem convex; larger values shrink towards ``U ∝ QR(unvec(b_priv))``,
        which is much more accurate at ``ε <= 8`` on the papers' setting (see
        Notes). No effect with ``epsilon=np.inf``.
    init_clip_norm : float, "auto" or None, default="auto"
        ``ψ_init`` of Snedeker et al.'s Alg. 2 (``init="private_spectral"``).
        ``"auto"``: the ``clip_quantile / 2`` quantile of the users'
        ``||Z_i||_F`` (phase ``"clip"``).
    head_clip_norm : float, "auto" or None, default="auto"
        Clip of each head in the DP mean that gives the cold-start head.
        ``"auto"``: the ``clip_quantile`` of the users' head norms.
    clip_quantile : float in (0, 1], default=0.5
        Quantile of the per-user statistic an ``"auto"`` bound is set to, and
        the radius quantile of the cold-start intercept.
    clip_share : float in (0, 1) or "auto", default="auto"
        Fraction of the budget for phase ``"clip"`` (the ``"auto"`` bounds'
        private quantiles and the cold-start intercept's searches; unused when
        there are none). ``"auto"``: the smallest of 0.05, 0.1, 0.2, 0.3, 0.5
        whose count noise std is at most ``n_users / 8`` (a public rule of ε,
        δ, the plan and the number of users: 0.05 for 20 000 users at ε = 1,
        0.5 for 300 users), so that a private quantile is not pure noise.
    init_share : float, default=0.1
        Fraction of the zCDP budget for the private initialisation.
    cold_start_share : float, default=0.02
        Fraction of the budget for the cold-start head and intercept (``0``: no
        release, unseen users get the zero head and intercept).
    batch_mode : {"same", "disjoint"}, default="same"
        ``"same"``: heads and ``U`` statistics on the same ``S^0`` rows.
        ``"disjoint"``: on two halves of ``S^0`` (as written in Alg. 1; the
        halves are keyed random, fixed for the fit).
    epsilon : float, default=1.0
        Privacy budget ε in (0, inf]; ``np.inf`` runs the same algorithm without
        noise (clipping still applies).
    delta : float, default=1e-6
        Privacy parameter δ in [0, 1).
    random_state : int, RandomState instance or None, default=None
        Seeds the fit's randomness: the privacy noise, the random
        initialisation and the secret key of the per-user randomness (the
        ``S^0`` / ``S^1`` split, the halves of ``S^0`` and the rounds of
        ``schedule="disjoint"``). ``None``: fresh OS entropy.
    verbose : int, default=0
        Print one line per round when positive (public quantities only:
        statistics of the private data, such as row counts or the share of
        clipped rows, are never printed).

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_components)
        The released embedding ``U^priv`` (orthonormal columns).
    heads_ : ndarray of shape (n_users_, n_components)
        Personal heads, aligned with ``user_ids_`` (local, not released).
    intercepts_ : ndarray of shape (n_users_,)
        Personal intercepts (local; zeros with ``fit_intercept=False``).
    cold_start_head_ : ndarray of shape (n_components,)
        Released DP mean head for users unseen in ``fit``.
    cold_start_intercept_ : float
        Released cold-start intercept (0 with ``fit_intercept=False``).
    clip_norm_, label_clip_, init_clip_norm_, head_clip_norm_ : float or None
        The bounds used (released when ``"auto"``; None when unused).
    intercept_clip_ : float or None
        Released radius of the cold-start intercept's clipped mean.
    feature_scales_ : ndarray of shape (n_features_in_,) or None
        Released per-feature scales (``inf``: a dropped column); the fitted
        parts apply to ``X / feature_scales_``. None when not released.
    label_range_ : tuple of float or None
        Released range predictions are clamped to (None: not released).
    local_only_ : bool
        Whether the plan predicted a useless fit (public rule, see Notes):
        known users then get their own ridge fit towards zero weights and
        their own mean (not clamped), cold-start rows the clamped cold-start
        part.
    user_ids_ : ndarray of shape (n_users_,)
        Sorted user ids seen in ``fit`` (and ``personalize``).
    n_users_ : int
        Number of users in ``fit``.
    n_iter_ : int
        Number of rounds run.
    privacy_report_ : PrivacyReport
        Budget plan, sensitivities, noise multipliers and spent (ε, δ).
    n_features_in_ : int
        Number of features seen during ``fit``.

    See Also
    --------
    PrivateFedRepRegressor : Snedeker et al. (2025), private federated gradient
        steps on ``U``.

    Notes
    -----
    **Guarantee.** User-level (ε, δ)-DP for ``components_``,
    ``cold_start_head_``, ``cold_start_intercept_`` and the ``"auto"`` bounds
    (``*_clip_norm_``, ``label_clip_``, ``intercept_clip_``) under
    replace-one-user (public number of users); heads and intercepts are
    local, so the output is jointly DP (billboard model).

    **The U step (Alg. 2).** Each row gives ``W_r = clip(vec(x_r v_i^T); η)``
    and ``ỹ_r = clip(y_r; ζ)``. Each user contributes the *mean* over its rows
    of ``W_r W_r^T`` (a ``dk × dk`` PSD matrix of trace ``<= η^2``) and of
    ``ỹ_r W_r`` (norm ``<= ζ η``); the sums over users are released as
    ``W_priv`` (symmetric Gaussian noise) and ``b_priv``, then
    ``u = argmin u^T W_priv u - 2 u^T b_priv`` and ``U = QR(unvec(u))``.
    The ``dk × dk`` statistic is built from Kronecker blocks
    ``sum_r w_r v_a v_b x_r x_r^T`` without per-row ``dk`` vectors. Clipped
    rows are formed as ``min(||x|| ||v||, η) vec(x̂ v̂^T)`` from the unit
    vectors ``x̂ = x/||x||``, ``v̂ = v/||v||``, so the norm bound holds in
    floating point for any magnitudes of ``x`` and ``v``.

    **Sensitivities** (replace one user, Frobenius / L2):

    * ``W_priv``: ``sqrt(2) η^2``. A user's contribution ``A`` is PSD with
      ``||A||_F <= tr(A) <= η^2``; for PSD ``A, A'``,
      ``||A - A'||_F^2 = ||A||_F^2 + ||A'||_F^2 - 2 <A, A'> <= 2 η^4``.
    * ``b_priv``: ``2 ζ η``.
    * ``init`` (``"private_spectral"``): ``2 ψ_init``; (``"private_pairwise"``):
      ``2 ζ^2`` (each user's mean pair matrix has norm ``<= ζ^2``).
    * ``cold_start``: ``2 C_head`` (the sum of the users' clipped heads); with
      ``fit_intercept``, ``2 R`` for the clipped mean of the users' offsets
      ``ȳ_i - <p̄_i, v_cold>`` around a private median
      (:func:`~skdpp.privacy._quantile.private_location`).
    * ``clip``: each ``"auto"`` bound is a noisy binary search over a public
      log grid (:func:`~skdpp.privacy._quantile.private_quantile`: 6 Gaussian
      counts of users, sensitivity 1 each) of a per-user statistic:
      ``clip_norm``, the root mean square ``||x_r|| ||v_i||`` at ``U_0``;
      ``label_clip``, the root mean square centred target; ``init_clip_norm``,
      ``||Z_i||_F``; ``head_clip_norm``, the head norm. The cold-start
      intercept's median and radius searches (29 counts) are in this phase.

    **Budget plan.** A :class:`~skdpp.privacy.BudgetPlan` with the phases
    ``clip`` (share ``clip_share``: 6 releases per ``"auto"`` bound, 29 for
    the cold-start intercept), ``init`` (share ``init_share``, private
    initialisations only),
    ``iterations`` (``2T`` Gaussian releases with ``schedule="full"``; 2 with
    ``"disjoint"``; the rest of the budget) and ``cold_start`` (share
    ``cold_start_share``: the head and the intercept's mean), calibrated
    jointly on the exact (μ-GDP)
    composition; the paper's ``Δ_{ε,δ} = sqrt(8 log(1/δ)) / ε`` is not used.
    With ``schedule="disjoint"`` only round 1's two releases are charged:
    every user's data enter exactly one round, chosen by a keyed hash of the
    user's own id, so by parallel (adaptive) composition the loop is as
    private as one round; later rounds draw noise with the same multiplier
    from the same stream and are recorded in the ledger as parallel branches
    at no cost (``Releaser.gaussian(..., branch=t)``). This also holds when
    the replacing user has another id and lands in another round: the two
    rounds then each see one user added or removed, with sensitivities
    ``η^2`` and ``ζ η``, whose μ-GDP composition is no larger than one
    round's ``sqrt(2) η^2`` and ``2 ζ η``. The report's notes say so.

    **Personal parts.** After the releases, each user's head and intercept
    minimise its squared error on its rows plus ``personal_ridge`` pseudo-rows
    of the released cold-start part (a public prior); ``personalize`` and the
    end of ``fit`` use the same block functions. With the default
    ``personal_rows="all"`` the final heads use all of a user's rows: post-
    processing (privacy unchanged), but the utility analysis (Theorem 4.2:
    final heads on ``S^1``, independent of ``U^priv`` given ``S^0``) no longer
    applies to them (measured effect on real data:
    ``benchmarks/results/real_data_linear_ablation.md``).
    ``personal_rows="holdout"``, ``personal_ridge=0``, ``fit_intercept=False``
    and numeric bounds give the paper's algorithm.

    **Randomness.** The ``S^0`` / ``S^1`` split (``ceil(m_i / 2)`` rows in
    ``S^0``), the halves of ``S^0`` and the round of each user are keyed
    hashes of the fit's secret 128-bit key, the user id and the position of a
    row within the user (rows ordered by their content), not draws from a
    stream in row order: a fit is a function of the *set* of records
    (permuting the rows gives the same ``components_``, heads and cold-start
    head), and one user's split and round do not depend on the other users.

    **Deviations from the paper.**

    * Per-user weighting: Jain et al. sum ``m/4`` rows per user and calibrate
      the noise to ``m``; with users holding different numbers of rows that
      sensitivity is unbounded (a user with 10 000 rows), so each user
      contributes the mean over its rows. With equal row counts this is the
      paper's statistic divided by a constant, and the solve of line 3 is
      invariant to a common scaling of ``W_priv`` and ``b_priv``.
    * Line 3 minimises ``u^T W_priv u - 2 u^T b_priv``, which is not convex
      when noise makes ``W_priv`` indefinite. Eigenvalues of ``W_priv`` are
      raised to ``psd_floor * σ sqrt(dk)`` (``σ`` the noise std; ``2 σ
      sqrt(dk)`` is about the spectral norm of the noise), a post-processing.
      The default ``psd_floor=32`` was tuned on the papers' setting (n=20 000,
      d=50, k=2, m=10; ``benchmarks/bench_representation.py``): there it
      raises every eigenvalue for ``ε <= 8``, so the step becomes
      ``U = QR(unvec(b_priv))``, and the test MSE at ε = 1, 2, 4, 8 drops from
      0.07, 0.17, 0.08, 0.02 (``psd_floor=2``, non-monotone in ε) to 0.028,
      0.007, 0.003, 0.002. The noisy Gram is the weak point of Alg. 2: its
      per-user sensitivity ``η^2`` is spread over ``dk`` directions. With
      isotropic features the Gram is close to ``(sum_i v_i v_i^T) ⊗ I``, so
      dropping it mostly loses the ``(sum v v^T)^{-1}`` column mixing, which
      the QR absorbs. For much larger ε the floor falls below the spectrum and
      the exact solve of Alg. 2 is recovered (``epsilon=np.inf``: no floor).
    * ``batch_mode="same"`` (default) uses the same ``S^0`` rows for heads and
      statistics (the authors' experiments ran full-batch epochs); as written
      (``"disjoint"``), each gets half of ``S^0``, i.e. 2-3 rows per user at
      ``m = 10``, too few for the heads. Privacy is unaffected; the utility
      analysis assumes independent halves.
    * Initialisation and iterations use ``S^0`` (half of each user's rows) and
      the final heads ``S^1`` (Theorem 4.2); a user without ``S^1`` rows uses
      its ``S^0`` row. Alg. 3's ``sym`` is ``(M + M^T)/2`` (not the
      replication of the upper triangle, which can increase the norm).
    * ``schedule="disjoint"``: Alg. 1 permutes the users and cuts them into
      ``T`` chunks of equal size; here each user's round is a keyed hash of
      its id, so the rounds hold about ``n / T`` users each (binomial sizes).
    * The cold-start head and intercept, the per-user intercepts (rows
      centred on each user's means over all its rows: a per-user function,
      bounds unchanged), the shrinkage of the personal parts and the
      ``"auto"`` bounds are not in the paper; the private quantiles and the
      cold-start part have their own phases.
    * Floating point: heads are solved on per-user rescaled rows; a head that
      still overflows (values near the float maximum) is set to zero. This
      depends on that user's rows only, so the bounds above hold, ``fit``
      succeeds and no warning is emitted for any finite input.

    **Input domain** (README, "Privacy model"). ``X``: finite floats; ``y``:
    finite numbers; ``groups``: user ids (numbers or strings). A non-finite
    value is rejected by ``validate_data`` with a ``ValueError`` before any
    computation: a documented rule, not a numeric accident. Every finite
    value is accepted, however large or small, and handled without a warning
    or an exception that depends on it, whatever the caller's
    ``np.errstate`` or warnings filters (every entry point runs under
    :func:`skdpp.base.quiet_numerics`). ``predict`` and ``score`` on finite
    ``X`` give finite values (an intermediate that overflows is re-evaluated
    on the row divided by its largest entry) or ``predict`` raises a
    ``ValueError`` naming the rows whose prediction exceeds the float64 range.

    **Per-feature scales and label range** (all clip bounds ``"auto"``; see
    :mod:`skdpp.linear_model._auto`). Phase ``"clip"`` also releases a label
    range: low/high quantiles of the users' minimum and maximum labels (two
    noisy bisections, ``LABEL_RANGE_STEPS`` counts of L2 sensitivity 1 under
    replace-one-user: one user moves each count by at most 1), widened; every
    prediction is clamped to ``label_range_`` (post-processing). When the
    plan's count noise with them stays at most ``SCALE_GATE_NOISE * n_users``
    (a public rule: ε, δ, the plan's release counts, ``n_users``), it also
    releases one scale per feature, the ``FEATURE_SCALE_QUANTILE`` of the
    users' within-user ranges of that column (one noisy bisection per column,
    ``FEATURE_SCALE_STEPS`` counts of sensitivity 1 each); the algorithm then
    runs on ``X / feature_scales_`` (fitted parts are in those units;
    ``predict`` and ``personalize`` divide by the same public constants), and
    the personal refit's penalty gives every coordinate at least
    ``VARIANCE_FLOOR`` of variance in those units, so a column nearly constant
    within a user (a session's timestamp) cannot extrapolate on the user's
    later rows. A column whose scale falls on the lower edge of the public
    grid (constant within most users) is dropped (scale ``inf``); an
    ``"auto"`` bound on the lower edge of its grid is treated as no
    information (post-processing; said in the report). The released
    cold-start head is shrunk towards 0 by the positive-part factor
    ``max(0, 1 - k sigma^2 / ||v||^2)``, ``sigma`` its public noise std per
    coordinate (post-processing): a head dominated by its noise leaves the
    cold start to the released intercept. A
    :class:`~skdpp.exceptions.UselessFitWarning` computed from public values only says when the plan predicts a useless
    fit (count noise of phase ``"clip"`` above ``USELESS_CLIP_NOISE *
    n_users``); such a fit gives every known user its own ridge fit, shrunk towards
    zero weights and its own mean (local data, ``local_only_``), rather than
    towards a noisy shared part.

    References
    ----------
    .. [1] Jain, P., Rush, J., Smith, A., Song, S. and Thakurta, A. G. (2021).
           Differentially Private Model Personalization. Advances in Neural
           Information Processing Systems 34 (NeurIPS 2021), 29723-29735.
    .. [2] Snedeker, C., Zhou, X. and Bassily, R. (2025). Private Model
           Personalization Revisited. ICML. arXiv:2506.19220.

    Examples
    --------
    >>> from skdpp.datasets import make_shared_representation_regression
    >>> from skdpp.linear_model import PrivAltMinRegressor
    >>> X, y, groups, truth = make_shared_representation_regression(
    ...     n_users=2000, n_features=10, n_components=2, random_state=0)
    >>> est = PrivAltMinRegressor(epsilon=4.0, random_state=0).fit(X, y, groups=groups)
    >>> est.components_.shape, est.heads_.shape
    ((10, 2), (2000, 2))
    >>> [(p.name, p.count) for p in est.privacy_report_.phases]
    [('clip', 129), ('init', 1), ('iterations', 2), ('cold_start', 2)]
    """

    _parameter_constraints = {
        **_common_constraints(),
        "schedule": [StrOptions({"full", "disjoint"})],
        "label_clip": _clip_constraint(),
        "psd_floor": [Interval(Real, 0, None, closed="left")],
    }
    _clip_param_names = ("clip_norm", "label_clip", "init_clip_norm", "head_clip_norm")

    def __init__(self, *, n_components=2, init="private_spectral", max_iter=1,
                 schedule="full", fit_intercept=True, personal_rows="all",
                 personal_ridge=10.0, clip_norm="auto", label_clip="auto", psd_floor=32.0,
                 init_clip_norm="auto", head_clip_norm="auto", clip_quantile=0.5,
                 clip_share="auto", init_share=0.1, cold_start_share=0.02,
                 batch_mode="same", epsilon=1.0, delta=1e-6, random_state=None, verbose=0):
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.schedule = schedule
        self.fit_intercept = fit_intercept
        self.personal_rows = personal_rows
        self.personal_ridge = personal_ridge
        self.clip_norm = clip_norm
        self.label_clip = label_clip
        self.psd_floor = psd_floor
        self.init_clip_norm = init_clip_norm
        self.head_clip_norm = head_clip_norm
        self.clip_quantile = clip_quantile
        self.clip_share = clip_share
        self.init_share = init_share
        self.cold_start_share = cold_start_share
        self.batch_mode = batch_mode
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state
        self.verbose = verbose

    def _n_iteration_releases(self):
        rounds = self.max_iter if self.schedule == "full" else min(self.max_iter, 1)
        return 2 * int(rounds)

    # ------------------------------------------------- hooks of the fit template
    _pairwise_label_clip = "label_clip"  # ζ of Alg. 3 (init="private_pairwise")

    def _prepare(self, executor, key):
        executor.map(prepare_altmin, (key, self.batch_mode))  # heads / statistics rows

    def _iteration_auto_params(self):
        return ("clip_norm", "label_clip") if self.max_iter > 0 else ()

    def _iterate(self, executor, release, U0, key, meta, bounds):
        label_clip = bounds.get("label_clip", self.label_clip)  # pairwise init's ζ
        U, clip_norm, label_clip = private_altmin(
            executor, release, U0, key=key, n_rounds=int(self.max_iter),
            schedule=self.schedule, clip_norm=self.clip_norm, label_clip=label_clip,
            psd_floor=float(self.psd_floor), n_users=meta["n_users"],
            clip_quantile=float(self.clip_quantile), verbose=self.verbose)
        return U, {"clip_norm": clip_norm, "label_clip": label_clip}

    def _notes(self):
        notes = ("Each round releases the per-user-mean Gram (sensitivity "
                 "sqrt(2)*clip_norm**2, symmetric noise) and moment vector (sensitivity "
                 "2*label_clip*clip_norm).",)
        if self.schedule == "disjoint" and self.max_iter > 1:
            notes += (
                f"schedule='disjoint': every user takes part in one of {self.max_iter} "
                "rounds (a keyed hash of its id); by parallel composition only one round's "
                "two releases are charged.",)
        return notes

"""Priv-AltMin (Jain, Rush, Smith, Song & Thakurta 2021, Alg. 1 with Alg. 2 and Alg. 3)."""

from numbers import Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from ..base import BasePersonalizedEstimator, PersonalizedRegressorMixin
from ..privacy import calibrate, mechanisms
from ._heads import psd_floor_solve
from ._representation import (
    _CHUNK_BYTES,
    _child_rngs,
    _clip_scale,  # noqa: F401  (patched by the broken-variant tests)
    _clip_values,
    _clipped_magnitudes,
    _common_constraints,
    _nonprivate,
    _RepresentationMixin,
    _row_norms,
    _split_blocks,
    _unit_rows,
    _weighted_gram,
    fit_heads,
)

__all__ = ["PrivAltMinRegressor"]


def _kron_gram(X, rows, V_rows, weights, unit_rows=False):
    """``sum_r w_r vec(x_r v_r^T) vec(x_r v_r^T)^T`` (``dk × dk``) without per-row ``dk`` vectors.

    With column-major ``vec``, ``vec(x v^T) = v ⊗ x`` and
    ``vec(x v^T) vec(x v^T)^T = (v v^T) ⊗ (x x^T)``: block ``(a, b)`` (rows
    ``a d .. a d + d``) is ``sum_r w_r v_{r,a} v_{r,b} x_r x_r^T``, computed for
    ``a <= b`` with one chunked ``X^T diag(.) X`` product for all blocks.
    """
    d, k = X.shape[1], V_rows.shape[1]
    pairs = [(a, b) for a in range(k) for b in range(a, k)]
    W = np.stack([weights * V_rows[:, a] * V_rows[:, b] for a, b in pairs], axis=1)
    blocks = _weighted_gram(X, rows, W, unit_rows=unit_rows)
    G = np.empty((d * k, d * k))
    for idx, (a, b) in enumerate(pairs):  # k(k+1)/2 blocks
        G[a * d:(a + 1) * d, b * d:(b + 1) * d] = blocks[:, :, idx]
        G[b * d:(b + 1) * d, a * d:(a + 1) * d] = blocks[:, :, idx].T
    return (G + G.T) / 2.0  # exactly symmetric


def _weighted_cross(X, rows, W, unit_rows=False):
    """``sum_r x_{rows[r]} w_r^T`` (``d × q``), chunked; ``x / ||x||`` if ``unit_rows``."""
    d = X.shape[1]
    out = np.zeros((d, W.shape[1]))
    chunk = max(1, _CHUNK_BYTES // (8 * max(1, d)))
    for lo in range(0, rows.shape[0], chunk):  # memory chunks
        Xc = X[rows[lo:lo + chunk]]
        if unit_rows:
            Xc = _unit_rows(Xc)[0]
        out += Xc.T @ W[lo:lo + chunk]
    return out


def _user_chunks(n_users, n_rounds, rng):
    """Alg. 1, lines 2 and 4: random permutation of users cut into ``T`` contiguous chunks."""
    perm = rng.permutation(n_users)
    chunk = np.empty(n_users, dtype=np.int64)
    chunk[perm] = (np.arange(n_users) * n_rounds) // max(n_users, 1)
    return chunk


def _user_weights(blocks):
    """Per-row weight ``1 / m_i``: each user contributes the mean over its rows."""
    return 1.0 / np.maximum(blocks.counts, 1)[blocks.codes]


def _privaltmin(X, y, head_blocks, stat_blocks, U0, *, n_rounds, schedule, clip_norm,
                label_clip, noise_multiplier, rng, schedule_rng=None, psd_floor=2.0,
                accountant=None, verbose=0):
    """Alg. 1 (lines 1-6) with Alg. 2 as the private ``U`` step; returns ``U^priv``.

    Parameters
    ----------
    X, y : ndarray
    head_blocks, stat_blocks : _RowBlocks
        Rows for the heads (Alg. 1, line 5) and for the ``U`` statistics
        (Alg. 2, line 1).
    U0 : ndarray of shape (d, k)
    n_rounds : int
        ``T``.
    schedule : {"full", "disjoint"}
        ``"disjoint"``: users are permuted and cut into ``T`` chunks, round ``t``
        uses chunk ``t`` only (Alg. 1). ``"full"``: all users every round.
    clip_norm : float or None
        ``η``: per-row clip of ``vec(x v^T)``.
    label_clip : float or None
        ``ζ``: per-row clip of ``y``.
    noise_multiplier : float
    rng : numpy.random.RandomState
        Generator of the privacy noise.
    schedule_rng : numpy.random.RandomState or None
        Generator of the user permutation (``rng`` if None).
    psd_floor : float
        Eigenvalues of the noisy Gram are raised to at least
        ``psd_floor * σ * sqrt(dk)`` (``σ`` its noise std) before the solve.
    accountant : PrivacyAccountant or None

    Returns
    -------
    U : ndarray of shape (d, k)
    """
    n_users = stat_blocks.n_users
    d, k = U0.shape
    U = np.array(U0, dtype=np.float64, copy=True)  # Alg. 1, line 1
    xnorm = _row_norms(X)
    private = clip_norm is not None and label_clip is not None
    sens_G = np.sqrt(2.0) * clip_norm**2 if private else None
    sens_b = 2.0 * label_clip * clip_norm if private else None
    schedule_rng = rng if schedule_rng is None else schedule_rng
    chunk = _user_chunks(n_users, n_rounds, schedule_rng) if schedule == "disjoint" else None
    for t in range(n_rounds):  # line 3
        if chunk is not None:  # line 4: the users of round t
            active = chunk == t
            hb = head_blocks.take(active[head_blocks.codes])
            sb = stat_blocks.take(active[stat_blocks.codes])
        else:
            hb, sb = head_blocks, stat_blocks
        V, _ = fit_heads(X, y, U, hb, P_all=X @ U)  # line 5: exact local heads
        # Alg. 2, line 1: W_r = clip(vec(x_r v^T); eta), y_r = clip(y_r; zeta); each user
        # contributes the MEAN over its rows, so its contribution to the Gram has trace
        # <= eta^2 and to b norm <= zeta * eta whatever its number of rows.
        # W_r = min(||x|| ||v||, eta) vec(unit(x) unit(v)^T), formed from unit vectors so
        # that ||W_r|| <= eta holds for any magnitudes (no inexact norm in a division).
        rows, codes = sb.rows, sb.codes
        v_unit, v_norm = _unit_rows(V)
        Vr = v_unit[codes]
        with np.errstate(over="ignore", invalid="ignore"):
            norms = xnorm[rows] * v_norm[codes]
            norms = np.where((xnorm[rows] > 0) & (v_norm[codes] > 0), norms, 0.0)
        mag, c = _clipped_magnitudes(norms, clip_norm)
        yt = _clip_values(y[rows], label_clip)
        w = _user_weights(sb)
        G = _kron_gram(X, rows, Vr, w * mag**2, unit_rows=True)
        bvec = _weighted_cross(X, rows, (w * mag * yt)[:, None] * Vr,
                               unit_rows=True).T.ravel()  # vec(B)
        # Alg. 2, line 2: symmetric noise on the Gram, Gaussian noise on b.
        if private:
            G_rel, ev_G = mechanisms.gaussian_mechanism(
                G, sensitivity=sens_G, noise_multiplier=noise_multiplier, rng=rng,
                symmetric=True)
            b_rel, ev_b = mechanisms.gaussian_mechanism(
                bvec, sensitivity=sens_b, noise_multiplier=noise_multiplier, rng=rng)
        else:
            (G_rel, ev_G), (b_rel, ev_b) = _nonprivate(G), _nonprivate(bvec)
        # Parallel composition: with schedule="disjoint" each user is in one round
        # only, so one round's pair of releases is charged (see Notes).
        if accountant is not None and (chunk is None or t == 0):
            accountant.compose(ev_G, phase="iterations", mechanism="gaussian",
                               sensitivity=sens_G, clip_norm=clip_norm)
            accountant.compose(ev_b, phase="iterations", mechanism="gaussian",
                               sensitivity=sens_b, clip_norm=clip_norm)
        # Alg. 2, line 3: the (regularised) least-squares solve, then line 4: QR.
        floor = psd_floor * noise_multiplier * sens_G * np.sqrt(d * k) if private else 0.0
        u = psd_floor_solve(G_rel, b_rel, floor)
        Z = u.reshape(k, d).T  # un-vec (columns consecutive)
        if np.linalg.matrix_rank(Z) == k:  # else (e.g. a round without users) keep U
            U, _ = np.linalg.qr(Z)
        if verbose:
            # Public quantities only: the number of rows, of users with rows and of
            # clipped rows are statistics of the private data and are never printed.
            n_active = n_users if chunk is None else int(np.sum(chunk == t))
            print(f"[PrivAltMin] round {t + 1}/{n_rounds}: {n_active} scheduled users, "
                  f"released the Gram and moment statistics (noise multiplier "
                  f"{noise_multiplier:.3g})")
    return U


def _altmin_blocks(s0, batch_mode):
    """Rows for the heads and for the ``U`` statistics.

    ``"same"``: both are ``S^0``. ``"disjoint"``: each user's ``S^0`` rows are cut
    in two fixed halves, the first ``ceil(m/2)`` for the heads and the rest for
    the statistics (Jain et al.'s rows ``[1, m/4]`` and ``[m/4 + 1, m/2]``).
    """
    if batch_mode == "same":
        return s0, s0
    rank = s0.ranks()
    first = rank < (s0.counts[s0.codes] + 1) // 2
    return s0.take(first), s0.take(~first)


class PrivAltMinRegressor(_RepresentationMixin, PersonalizedRegressorMixin,
                          BasePersonalizedEstimator):
    """Priv-AltMin: private alternating minimisation for a shared linear embedding.

    Learns ``y ≈ <x, U v_i>`` with a shared embedding ``U`` (``n_features ×
    n_components``, orthonormal columns) released under user-level (ε, δ)-DP and
    personal heads ``v_i`` fitted on each user's rows only (billboard model).
    Implements Jain, Rush, Smith, Song & Thakurta (2021): Alg. 1 (alternating
    minimisation) with Alg. 2 (the ``U`` step by perturbing the least-squares
    sufficient statistics) and, optionally, Alg. 3 (private initialisation).

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
        ``"disjoint"``: users are randomly cut into ``T`` disjoint chunks and
        round ``t`` uses chunk ``t`` (Alg. 1, lines 2-4); by parallel
        composition the whole loop costs one round's two releases.
    clip_norm : float or None, default=5.0
        ``η``: each row's ``vec(x v^T)`` is clipped to this norm (Alg. 2, line 1).
        ``None`` only with ``epsilon=np.inf``.
    label_clip : float or None, default=1.0
        ``ζ``: each label is clipped to ``[-ζ, ζ]`` (Alg. 2 and Alg. 3).
    psd_floor : float, default=32.0
        Before the solve of Alg. 2, line 3, the eigenvalues of the noisy Gram
        ``W_priv`` are raised to at least ``psd_floor * σ * sqrt(dk)``, where
        ``σ`` is its noise std (``2 σ sqrt(dk)`` is about the spectral norm of
        the noise). Post-processing: no privacy cost. ``2`` only makes the
        problem convex; larger values shrink towards ``U ∝ QR(unvec(b_priv))``,
        which is much more accurate at ``ε <= 8`` on the papers' setting (see
        Notes). No effect with ``epsilon=np.inf``.
    init_clip_norm : float or None, default=5.0
        ``ψ_init`` of Snedeker et al.'s Alg. 2 (``init="private_spectral"``).
    head_clip_norm : float or None, default=1.0
        Clip of each head in the DP mean that gives the cold-start head.
    init_share : float, default=0.1
        Fraction of the zCDP budget for the private initialisation.
    cold_start_share : float, default=0.02
        Fraction of the budget for the cold-start head (``0``: no release, unseen
        users get the zero head).
    batch_mode : {"same", "disjoint"}, default="same"
        ``"same"``: heads and ``U`` statistics on the same ``S^0`` rows.
        ``"disjoint"``: on two fixed halves of ``S^0`` (as written in Alg. 1).
    epsilon : float, default=1.0
        Privacy budget ε in (0, inf]; ``np.inf`` runs the same algorithm without
        noise (clipping still applies).
    delta : float, default=1e-6
        Privacy parameter δ in [0, 1).
    random_state : int, RandomState instance or None, default=None
        Seeds the data split, the user permutation, the random initialisation
        and the privacy noise.
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
    cold_start_head_ : ndarray of shape (n_components,)
        Released DP mean head for users unseen in ``fit``.
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
    **Guarantee.** User-level (ε, δ)-DP for ``components_`` and
    ``cold_start_head_`` under replace-one-user (public number of users); heads
    are local, so the output is jointly DP (billboard model).

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
    * ``cold_start``: ``2 C_head``.

    **Budget plan.** Phases ``init``, ``iterations`` (``2T`` Gaussian releases
    with ``schedule="full"``; 2 with ``"disjoint"``) and ``cold_start``,
    calibrated jointly with :func:`skdpp.privacy.calibrate` on the exact
    (μ-GDP) composition; the paper's ``Δ_{ε,δ} = sqrt(8 log(1/δ)) / ε`` is
    not used. With ``schedule="disjoint"`` only round 1's two releases are
    composed into the accountant: every user's data enters exactly one round
    (the chunks are chosen from a data-independent permutation), so by
    parallel (adaptive) composition the loop is as private as one round; the
    report's notes say so.

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
    * The cold-start head is not in the paper; it has its own budget share.
    * Floating point: heads are solved on per-user rescaled rows; a head or
      gradient that still overflows (values near the float maximum) is set to
      zero. This depends on that user's rows only, so the bounds above hold for
      any finite input.

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
    >>> from skdpp.linear_model._altmin import PrivAltMinRegressor
    >>> X, y, groups, truth = make_shared_representation_regression(
    ...     n_users=2000, n_features=10, n_components=2, random_state=0)
    >>> est = PrivAltMinRegressor(epsilon=4.0, random_state=0).fit(X, y, groups=groups)
    >>> est.components_.shape
    (10, 2)
    >>> est.privacy_report_.epsilon_spent <= 4.0
    True
    """

    _parameter_constraints = {
        **_common_constraints(),
        "schedule": [StrOptions({"full", "disjoint"})],
        "label_clip": [Interval(Real, 0, None, closed="neither"), None],
        "psd_floor": [Interval(Real, 0, None, closed="left")],
    }
    _clip_param_names = ("clip_norm", "label_clip", "init_clip_norm", "head_clip_norm")

    def __init__(self, *, n_components=2, init="private_spectral", max_iter=1,
                 schedule="full", clip_norm=5.0, label_clip=1.0, psd_floor=32.0,
                 init_clip_norm=5.0,
                 head_clip_norm=1.0, init_share=0.1, cold_start_share=0.02,
                 batch_mode="same", epsilon=1.0, delta=1e-6, random_state=None, verbose=0):
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.schedule = schedule
        self.clip_norm = clip_norm
        self.label_clip = label_clip
        self.psd_floor = psd_floor
        self.init_clip_norm = init_clip_norm
        self.head_clip_norm = head_clip_norm
        self.init_share = init_share
        self.cold_start_share = cold_start_share
        self.batch_mode = batch_mode
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X, y, groups=None):
        """Fit the private embedding and the users' heads.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,)
            Targets.
        groups : array-like of shape (n_samples,), default=None
            User id of each row (the privacy unit). ``None``: every row is its
            own user.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        X, y, index = self._validate_fit_input(X, y, groups, y_numeric=True)
        y = np.asarray(y, dtype=np.float64)
        self._check_params_for_data(X.shape[1])
        rngs = _child_rngs(self.random_state)
        n_users = index.n_users
        s0, s1 = _split_blocks(index, rngs["split"])
        n_releases = 2 * (self.max_iter if self.schedule == "full" else min(self.max_iter, 1))
        phases = self._phases(n_releases)
        params = calibrate(phases, epsilon=self.epsilon, delta=self.delta)
        accountant = self._new_accountant()
        U0 = self._initial_components(X, y, s0, rngs, params, accountant,
                                      label_clip=self.label_clip)
        head_blocks, stat_blocks = _altmin_blocks(s0, self.batch_mode)
        U = _privaltmin(
            X, y, head_blocks, stat_blocks, U0, n_rounds=self.max_iter,
            schedule=self.schedule, clip_norm=self.clip_norm, label_clip=self.label_clip,
            noise_multiplier=params.get("iterations", 0.0), rng=rngs["noise"],
            schedule_rng=rngs["batches"], psd_floor=float(self.psd_floor),
            accountant=accountant, verbose=self.verbose)
        V, head = self._finish(X, y, U, s0, s1, rngs, params, accountant, n_users)
        self.components_ = U
        self.heads_ = V
        self.cold_start_head_ = head
        self.n_iter_ = int(self.max_iter)
        notes = ["Each round releases the per-user-mean Gram (sensitivity sqrt(2)*clip_norm**2, "
                 "symmetric noise) and moment vector (sensitivity 2*label_clip*clip_norm)."]
        if self.schedule == "disjoint" and self.max_iter > 1:
            notes.append(
                f"schedule='disjoint': users are split into {self.max_iter} disjoint chunks, "
                "one per round; by parallel composition only one round's two releases are "
                "charged.")
        self.privacy_report_ = self._build_report(
            accountant, n_users=n_users,
            released=("components_", "cold_start_head_"), local=("heads_",),
            shares={p.name: p.share for p in phases}, notes=tuple(notes))
        return self

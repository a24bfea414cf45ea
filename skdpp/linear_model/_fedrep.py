"""Private FedRep (Snedeker, Zhou & Bassily 2025, Alg. 1 with the Alg. 2 initialisation)."""

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval

from ..base import BasePersonalizedEstimator, PersonalizedRegressorMixin
from ..privacy import calibrate, mechanisms
from ._representation import (
    _child_rngs,
    _clip_scale,  # noqa: F401  (patched by the broken-variant tests)
    _clipped_magnitudes,
    _common_constraints,
    _RepresentationMixin,
    _row_norms,
    _RowBlocks,
    _split_blocks,
    _unit_rows,
    fit_heads,
)

__all__ = ["PrivateFedRepRegressor"]

# Gradient and head norms in this range are clipped with one scalar factor per user
# (see _clipped_gradient_sum); others through unit vectors.
_SAFE_LOW, _SAFE_HIGH = 1e-100, 1e100

# Rows per chunk of users in the iterations (a chunk of X stays in cache).
_ITER_CHUNK_ROWS = 32768
# The S^0 rows are copied once (contiguous) up to this size, else gathered per chunk.
_COPY_MAX_BYTES = 64 * 2**20


def _fedrep_batches(s0, batch_mode, batch_size, rng):
    """The two batches of one round (Alg. 1, line 5): ``(head_blocks, grad_blocks)``.

    ``"same"``: both are ``S^0`` (``batch_size=None``) or one random batch of
    ``min(batch_size, |S^0_i|)`` rows per user. ``"disjoint"``: a fresh random
    permutation of each user's ``S^0`` rows; ``B`` = its first ``b_i`` rows and
    ``B'`` the next ``b_i``, with ``b_i = floor(|S^0_i| / 2)`` (``batch_size=None``)
    or ``min(batch_size, floor(|S^0_i| / 2))``.
    """
    if batch_mode == "same":
        if batch_size is None:
            return s0, s0
        rank = s0.ranks(rng.random_sample(len(s0)))
        blocks = s0.take(rank < batch_size)
        return blocks, blocks
    rank = s0.ranks(rng.random_sample(len(s0)))
    half = s0.counts // 2
    b = half if batch_size is None else np.minimum(batch_size, half)
    b_row = b[s0.codes]
    return s0.take(rank < b_row), s0.take((rank >= b_row) & (rank < 2 * b_row))


def _clipped_gradient_sum(X, y, P_all, V, grad_blocks, clip_norm):
    """``sum_i clip(∇_{i,t}, ψ)`` (Alg. 1, lines 7 and 10) without per-user ``d × k`` arrays.

    ``∇_U (1/b) sum_{B'} (y - <x, U v>)^2 = -(2/b) sum (y - <x, U v>) x v^T = g_i v_i^T``
    is rank one, and ``||g_i v_i^T||_F = ||g_i|| ||v_i||``, so the clipped sum is
    ``(c ⊙ g)^T V`` with ``c_i = min(1, ψ / (||g_i|| ||v_i||))``.

    Returns
    -------
    total : ndarray of shape (d, k)
    c : ndarray of shape (n_users,)
        The clipping factors.
    """
    resid = grad_blocks.gather(y) - np.einsum("ij,ij->i", grad_blocks.gather(P_all),
                                              grad_blocks.expand(V))
    b = np.maximum(grad_blocks.counts, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        g = grad_blocks.weighted_row_sum(-2.0 * resid / grad_blocks.expand(b), X)
    # A gradient that is not a number (inf - inf for magnitudes near the float maximum)
    # contributes zero: a function of that user's rows and the public U only.
    g[np.isnan(g).any(axis=1)] = 0.0
    g_norm, v_norm = _row_norms(g), _row_norms(V)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.where((g_norm > 0) & (v_norm > 0), g_norm * v_norm, 0.0)
    mag, c = _clipped_magnitudes(norms, clip_norm)
    # clip(g v^T) = min(||g|| ||v||, psi) * unit(g) unit(v)^T. For norms in
    # [_SAFE_LOW, _SAFE_HIGH] (all practical data) this is (mag / (||g|| ||v||)) g v^T,
    # formed without n x d temporaries: ||g|| ||v|| in [1e-200, 1e200] is computed to
    # relative rounding and no product below over- or underflows, so each term has norm
    # mag up to rounding. Other users (subnormal or huge norms) go through unit vectors.
    safe = ((g_norm >= _SAFE_LOW) & (g_norm <= _SAFE_HIGH)
            & (v_norm >= _SAFE_LOW) & (v_norm <= _SAFE_HIGH))
    coef = np.zeros_like(norms)
    coef[safe] = mag[safe] / norms[safe]
    total = g.T @ (V * coef[:, None])
    other = ~safe & (norms > 0)
    if other.any():
        g_unit, _ = _unit_rows(g[other])
        v_unit, _ = _unit_rows(V[other])
        total += (g_unit * mag[other][:, None]).T @ v_unit
    return total, c


def _private_fedrep(X, y, s0, U0, *, n_iter, learning_rate, clip_norm, noise_multiplier,
                    batch_mode, batch_size, rng, batch_rng=None, accountant=None, verbose=0):
    """Alg. 1, lines 1-12: the private iterations on ``S^0``; returns ``U^priv``.

    Parameters
    ----------
    X : ndarray of shape (n_samples, d)
    y : ndarray of shape (n_samples,)
    s0 : _RowBlocks
        ``S^0`` rows grouped by user.
    U0 : ndarray of shape (d, k)
        Orthonormal initial embedding.
    n_iter : int
        ``T``.
    learning_rate : float
        ``η``.
    clip_norm : float or None
        ``ψ``: each user's gradient ``∇_{i,t}`` (a ``d × k`` matrix) is clipped
        to this Frobenius norm.
    noise_multiplier : float
        ``z``: the released sum gets ``N(0, (2 ψ z)^2)`` noise per entry.
    batch_mode, batch_size : see :class:`PrivateFedRepRegressor`.
    rng : numpy.random.RandomState
        Generator of the privacy noise.
    batch_rng : numpy.random.RandomState or None
        Generator of the batches (``rng`` if None).
    accountant : PrivacyAccountant or None
        Every release is composed into it (phase ``"iterations"``).

    Returns
    -------
    U : ndarray of shape (d, k)
    """
    n_users = s0.n_users
    # Every round reads only the S^0 rows, chunk by chunk: a contiguous copy of them when
    # small; otherwise each chunk is gathered into one reused buffer (a large copy costs
    # more in fresh memory than the gathers, and adds half of X to the peak memory).
    rows0 = s0.rows
    y = y[rows0]
    s0 = _RowBlocks(np.arange(len(s0)), s0.codes, n_users)
    chunks = s0.user_chunks(_ITER_CHUNK_ROWS)
    if rows0.size * X.shape[1] * 8 <= _COPY_MAX_BYTES:
        X, rows0, buf = X[rows0], None, None
    else:
        longest = max((s0.indptr[b] - s0.indptr[a] for a, b in chunks), default=0)
        buf = np.empty((longest, X.shape[1]), dtype=X.dtype)
    batch_rng = rng if batch_rng is None else batch_rng
    # One seed per round, so that the number of rows drawn in one round (data
    # dependent) never shifts the batches of the next rounds.
    round_seeds = batch_rng.randint(0, np.iinfo(np.int32).max, size=n_iter)
    U = np.array(U0, dtype=np.float64, copy=True)  # Alg. 1, line 1
    sensitivity = None if clip_norm is None else 2.0 * clip_norm
    for t in range(n_iter):  # line 2
        head_blocks, grad_blocks = _fedrep_batches(  # line 5
            s0, batch_mode, batch_size, np.random.RandomState(int(round_seeds[t])))
        # Lines 6-10 by chunks of consecutive users (~_ITER_CHUNK_ROWS rows): the heads and
        # gradients of a user depend on its rows only, so this is the same sum; the chunk of
        # X stays in cache between the two products and the per-row temporaries are small.
        total = np.zeros_like(U)
        for u0, u1 in chunks:
            r0, r1 = s0.indptr[u0], s0.indptr[u1]
            if buf is None:
                Xc = X[r0:r1]
            else:
                Xc = np.take(X, rows0[r0:r1], axis=0, out=buf[:r1 - r0])
            yc = y[r0:r1]
            hb = head_blocks.user_range(u0, u1, r0)
            gb = hb if grad_blocks is head_blocks else grad_blocks.user_range(u0, u1, r0)
            P_all = Xc @ U
            V, _ = fit_heads(Xc, yc, U, hb, P_all=P_all)  # line 6
            part, _ = _clipped_gradient_sum(Xc, yc, P_all, V, gb, clip_norm)  # lines 7-10
            total += part
        if sensitivity is None:  # epsilon=inf without clipping: nothing to protect
            from ._representation import _nonprivate

            release, event = _nonprivate(total)
        else:
            release, event = mechanisms.gaussian_mechanism(
                total, sensitivity=sensitivity, noise_multiplier=noise_multiplier, rng=rng)
        if accountant is not None:
            accountant.compose(event, phase="iterations", mechanism="gaussian",
                               sensitivity=sensitivity, clip_norm=clip_norm)
        # Line 10: U_hat = U - eta (1/n sum clip + xi); the division by the public n
        # is post-processing of the release.
        U_hat = U - learning_rate * (release / n_users)
        U, _ = np.linalg.qr(U_hat)
        if verbose:
            # Public quantities only: the share of clipped users, the number of rows
            # etc. are statistics of the private data and are never printed.
            std = 0.0 if sensitivity is None else noise_multiplier * sensitivity
            print(f"[PrivateFedRep] iteration {t + 1}/{n_iter}: released the clipped "
                  f"gradient sum (noise std {std:.3g})")
    return U


class PrivateFedRepRegressor(_RepresentationMixin, PersonalizedRegressorMixin,
                             BasePersonalizedEstimator):
    """Private FedRep: a shared linear embedding under user-level DP, personal heads.

    Learns ``y ≈ <x, U v_i>`` where the embedding ``U`` (``n_features ×
    n_components``, orthonormal columns) is shared by all users and released
    under user-level (ε, δ)-differential privacy, and each user's head ``v_i``
    is fitted on that user's rows only (billboard model). Implements Algorithm 1
    of Snedeker, Zhou & Bassily (2025) with their private initialisation
    (Algorithm 2).

    Parameters
    ----------
    n_components : int, default=2
        Dimension ``k`` of the shared representation; ``1 <= k <= n_features``.
    init : {"private_spectral", "private_pairwise", "random"} or array-like of \
            shape (n_features, n_components), default="private_spectral"
        Initial embedding ``U_0``. ``"private_spectral"``: Snedeker et al.'s
        Alg. 2 (clipped per-user U-statistic, Gaussian noise, top-``k``
        eigenvectors), costing the ``init`` share of the budget.
        ``"private_pairwise"``: Jain et al. (2021), Alg. 3 (uses
        ``init_clip_norm`` as the label clip ``ζ``). ``"random"``: a random
        orthonormal matrix (free). An array is a *public* warm start (free; it
        must not be computed from the private data), orthonormalised by QR.
    max_iter : int, default=5
        Number of iterations ``T`` of Alg. 1 (each one private release).
    learning_rate : float, default=1.0
        Step size ``η`` of the gradient step on ``U`` (Alg. 1, line 10).
    clip_norm : float or None, default=1.0
        ``ψ``: each user's gradient ``∇_{i,t}`` (``d × k``) is clipped to this
        Frobenius norm. ``None`` (no clipping) only with ``epsilon=np.inf``.
    init_clip_norm : float or None, default=5.0
        ``ψ_init`` of Alg. 2 (Frobenius clip of each user's ``Z_i``); the label
        clip ``ζ`` when ``init="private_pairwise"``.
    head_clip_norm : float or None, default=1.0
        Clip of each user's head in the DP mean that gives the cold-start head.
    init_share : float, default=0.1
        Fraction of the zCDP budget spent on the private initialisation (unused
        when the initialisation is not private).
    cold_start_share : float, default=0.02
        Fraction of the budget spent on the cold-start head. ``0`` disables the
        release: unseen users then get the zero head (prediction ``0``).
    batch_mode : {"same", "disjoint"}, default="same"
        ``"same"``: each round fits the local head and the gradient on the same
        ``S^0`` rows (the authors' code). ``"disjoint"``: two disjoint batches
        ``B_{i,t}``, ``B'_{i,t}`` per user and round, as written in Alg. 1
        (line 5). See Notes.
    batch_size : int or None, default=None
        ``b``: rows per batch and user. ``None``: all ``S^0`` rows (``"same"``)
        or ``floor(|S^0_i| / 2)`` rows per batch (``"disjoint"``).
    epsilon : float, default=1.0
        Privacy budget ε in (0, inf]; ``np.inf`` runs the same algorithm
        without noise (the non-private baseline; clipping still applies).
    delta : float, default=1e-6
        Privacy parameter δ in [0, 1); choose δ << 1 / n_users.
    random_state : int, RandomState instance or None, default=None
        Seeds the data split, the batches, the random initialisation and the
        privacy noise (all drawn from one generator per fit).
    verbose : int, default=0
        Print one line per iteration when positive (public quantities only:
        statistics of the private data, such as the share of clipped users, are
        never printed).

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_components)
        The released embedding ``U^priv`` (orthonormal columns).
    heads_ : ndarray of shape (n_users_, n_components)
        Personal heads ``v_i^priv``, aligned with ``user_ids_`` (local, not
        released).
    cold_start_head_ : ndarray of shape (n_components,)
        The released DP mean head used for users unseen in ``fit``.
    user_ids_ : ndarray of shape (n_users_,)
        Sorted user ids seen in ``fit`` (and ``personalize``).
    n_users_ : int
        Number of users in ``fit``.
    n_iter_ : int
        Number of iterations run (``max_iter``).
    privacy_report_ : PrivacyReport
        Budget plan, sensitivities, noise multipliers and the spent (ε, δ).
    n_features_in_ : int
        Number of features seen during ``fit``.

    See Also
    --------
    PrivAltMinRegressor : Jain et al. (2021), exact alternating minimisation
        with sufficient-statistics perturbation.

    Notes
    -----
    **Guarantee.** User-level (ε, δ)-DP for ``components_`` and
    ``cold_start_head_`` under *replace one user's entire data* (the number of
    users is public); the heads are computed by each user from the released
    ``U`` and their own rows, so the whole output is jointly DP (billboard
    model). ``groups=None`` makes each row a user (row-level DP).

    **Releases and sensitivities** (replace-one-user, L2 / Frobenius):

    * ``init`` (Alg. 2, line 6): ``sum_i clip(Z_i, ψ_init)``, ``d × d``,
      sensitivity ``2 ψ_init``, symmetric Gaussian noise; ``Z_i`` is the user's
      U-statistic ``1/(m_i(m_i-1)) sum_{j≠j'} y_j y_j' x_j x_j'^T`` on its
      ``S^0`` rows (zero for a one-row user). Each user's clipping factor is
      computed from the norm of the matrix actually added to the sum when
      ``Z_i`` cancels (a small difference of huge terms: thin-QR route), and
      otherwise from an ``m_i × m_i`` Gram formula that is accurate to ~1e-12
      relative for such users (see ``spectral_statistic``), so the bound holds
      in floating point up to rounding. With
      ``init="private_pairwise"``: the sum of per-user mean pair matrices,
      sensitivity ``2 ζ^2`` with ``ζ = init_clip_norm``.
    * ``iterations`` (Alg. 1, line 10), one per round: ``sum_i clip(∇_{i,t}, ψ)``,
      ``d × k``, sensitivity ``2 ψ``. The average over users divides by the
      public ``n``, which is post-processing. The gradient is rank one,
      ``g_i v_i^T``; its clipped value is formed as ``min(||g_i|| ||v_i||, ψ)
      ĝ_i v̂_i^T`` from unit vectors, so the bound holds in floating point
      for any magnitudes.
    * ``cold_start``: ``sum_i clip(v_i, C_head)``, sensitivity ``2 C_head``.

    **Budget plan.** The phases ``init`` (share ``init_share``), ``iterations``
    (``T`` Gaussian releases sharing the rest) and ``cold_start`` (share
    ``cold_start_share``) are calibrated jointly with
    :func:`skdpp.privacy.calibrate` so that the exact composition (μ-GDP) of
    all releases meets (ε, δ); the ``privacy_report_`` shows each phase's noise
    multiplier. The paper's closed-form ``σ̂ = C ψ sqrt(T log(1/δ)) / (n ε)``
    is not used: it is a loose upper bound.

    **Deviations from the paper.**

    * ``batch_mode="same"`` (default) fits the head and the gradient on the
      same ``S^0`` rows every round, as the authors' experiment code does. With
      10 rows per user (5 in ``S^0``) and ``T = 5``, Alg. 1's disjoint batches
      hold 1–2 rows, a head fitted on 2 rows in ``k = 2`` dimensions
      interpolates the noise, and the iteration does not converge. *Privacy is
      unaffected* (each round is one Gaussian release of a sum of per-user
      clipped contributions, whatever rows each user uses); the utility
      analysis (Lemma 7, Lemma 9) assumes the head and gradient batches are
      independent, which no longer holds.
    * ``batch_mode="disjoint"`` follows line 5, but rows are *resampled every
      round*: a fresh random permutation of each user's ``S^0`` rows gives
      ``B`` (first ``b_i`` rows) and ``B'`` (next ``b_i``). The paper's
      ``b <= floor(m / 2T)`` makes all batches of all rounds disjoint, which
      needs ``|S^0_i| >= 2 T b``; with fewer rows (the paper's own setting)
      this is impossible for ``b >= 1``, so rows are reused across rounds.
      Users with fewer than 2 ``S^0`` rows contribute a zero gradient.
    * Final heads (line 14) are fitted on ``S^1``; a user whose ``S^1`` is
      empty (a one-row user) uses its ``S^0`` row.
    * Head solves add a tiny relative ridge (``1e-10 tr(A)/k``; ``1e-6 tr(A)/k``
      for users with fewer rows than ``k``, close to the minimum-norm head).
    * Alg. 2's "rank-k SVD" of the symmetric noisy statistic takes the
      eigenvectors of the ``k`` largest (algebraic) eigenvalues: the
      population statistic is positive semi-definite.
    * The cold-start head (a DP mean of clipped heads) is not in the paper; it
      has its own budget share.
    * Floating point: heads are solved on per-user rescaled rows; a head or
      gradient that still overflows (values near the float maximum) is set to
      zero. This depends on that user's rows only, so the bounds above hold for
      any finite input.

    The per-user gradient clipping is the paper's; its clipping *level*
    ``ψ`` must not be chosen from the private data (tune it on public or
    synthetic data, and remember that tuning on private data costs privacy).
    Floating-point noise is not hardened against side-channel attacks.

    References
    ----------
    .. [1] Snedeker, C., Zhou, X. and Bassily, R. (2025). Private Model
           Personalization Revisited. Proceedings of the 42nd International
           Conference on Machine Learning (ICML). arXiv:2506.19220.
    .. [2] Collins, L., Hassani, H., Mokhtari, A. and Shakkottai, S. (2021).
           Exploiting Shared Representations for Personalized Federated
           Learning. ICML. arXiv:2102.07078.

    Examples
    --------
    >>> from skdpp.datasets import make_shared_representation_regression
    >>> from skdpp.linear_model._fedrep import PrivateFedRepRegressor
    >>> X, y, groups, truth = make_shared_representation_regression(
    ...     n_users=2000, n_features=10, n_components=2, random_state=0)
    >>> est = PrivateFedRepRegressor(epsilon=4.0, random_state=0).fit(X, y, groups=groups)
    >>> est.components_.shape
    (10, 2)
    >>> round(est.privacy_report_.epsilon_spent, 6) <= 4.0
    True
    """

    _parameter_constraints = {
        **_common_constraints(),
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
    }
    _clip_param_names = ("clip_norm", "init_clip_norm", "head_clip_norm")

    def __init__(self, *, n_components=2, init="private_spectral", max_iter=5,
                 learning_rate=1.0, clip_norm=1.0, init_clip_norm=5.0, head_clip_norm=1.0,
                 init_share=0.1, cold_start_share=0.02, batch_mode="same", batch_size=None,
                 epsilon=1.0, delta=1e-6, random_state=None, verbose=0):
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.clip_norm = clip_norm
        self.init_clip_norm = init_clip_norm
        self.head_clip_norm = head_clip_norm
        self.init_share = init_share
        self.cold_start_share = cold_start_share
        self.batch_mode = batch_mode
        self.batch_size = batch_size
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
        s0, s1 = _split_blocks(index, rngs["split"])  # S^0, S^1 (Alg. 1, preamble)
        phases = self._phases(self.max_iter)
        params = calibrate(phases, epsilon=self.epsilon, delta=self.delta)
        accountant = self._new_accountant()
        label_clip = self.init_clip_norm
        U0 = self._initial_components(X, y, s0, rngs, params, accountant,
                                      label_clip=label_clip)
        U = _private_fedrep(
            X, y, s0, U0, n_iter=self.max_iter, learning_rate=float(self.learning_rate),
            clip_norm=self.clip_norm, noise_multiplier=params.get("iterations", 0.0),
            batch_mode=self.batch_mode, batch_size=self.batch_size, rng=rngs["noise"],
            batch_rng=rngs["batches"], accountant=accountant, verbose=self.verbose)
        V, head = self._finish(X, y, U, s0, s1, rngs, params, accountant, n_users)
        self.components_ = U
        self.heads_ = V
        self.cold_start_head_ = head
        self.n_iter_ = int(self.max_iter)
        self.privacy_report_ = self._build_report(
            accountant, n_users=n_users,
            released=("components_", "cold_start_head_"), local=("heads_",),
            shares={p.name: p.share for p in phases},
            notes=(
                f"batch_mode={self.batch_mode!r}: each round releases one Gaussian sum of "
                "per-user gradients clipped to clip_norm (sensitivity 2*clip_norm).",
            ),
        )
        return self

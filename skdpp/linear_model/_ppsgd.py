"""Personalized-private SGD (PPSGD) for additive personalization.

The model of Bietti, Wei, Dudík, Langford and Wu (2022) predicts the target of
a row ``x`` of user ``i`` as ``<x, w + theta_i>`` (plus ``b + b_i`` with
intercepts): a global weight vector ``w`` shared by all users and released
under user-level differential privacy, and a personal offset ``theta_i`` that
never leaves user ``i``. Each round, every participating user takes a local
SGD step on ``theta_i`` and sends its clipped gradient with respect to ``w`` to
the server, which adds Gaussian noise to the sum and steps ``w``. The ratio
``alpha`` of the global to the local step size moves the model from local-only
learning (``alpha=0``: perfectly private) to global-only DP-SGD
(``alpha=np.inf``).

The module pairs the estimator :class:`PPSGDRegressor` with the private pure
function :func:`_ppsgd` that follows Algorithms 1-3 of the paper line by line,
and with :class:`_CyclicBatchSampler`, the vectorised per-user minibatch
sampler (several passes over each user's rows, a fresh random order per pass).
"""

# Authors: skdpp developers
# License: BSD 3 clause

from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import BasePersonalizedEstimator, PersonalizedRegressorMixin
from ..privacy import PoissonSampledEvent, PrivacyReport, mechanisms
from ..privacy.calibration import Phase, calibrate
from ..privacy.events import NoOpEvent

__all__ = ["PPSGDRegressor"]

_PHASE = "iterations"


# ---------------------------------------------------------------------------
# Vectorised per-user minibatch sampling
# ---------------------------------------------------------------------------
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x):
    """SplitMix64 finaliser, vectorised over a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX2
    return x ^ (x >> np.uint64(31))


def _ranges(starts, lengths):
    """Concatenation of ``arange(s, s + l)`` for each ``(s, l)``, without a loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


class _CyclicBatchSampler:
    """Per-user minibatches over several passes, a fresh random order per pass.

    User ``u`` reads its rows as an endless stream: pass ``p`` of the stream is
    a uniformly random permutation of the user's rows, and the user's ``k``-th
    participation takes the next ``m_u = min(batch_size, n_u)`` rows of the
    stream. A minibatch that crosses the end of a pass takes the last rows of
    pass ``p`` and the first rows of pass ``p + 1`` (so within one pass every
    row is used exactly once, and a row can appear at most twice in one
    minibatch, only at a pass boundary). ``batch_size=None`` uses all of the
    user's rows in every round (a user whose minibatch is all of its rows is
    never reshuffled: the order of the rows of a sum does not matter).

    The permutation of pass ``p`` of user ``u`` sorts the user's rows by the
    hash ``mix(salt, u, p, rank)`` of a per-fit random ``salt``; it is
    recomputed only for the users who start a new pass. Keying the order by a
    hash (instead of drawing from a shared random stream) makes each user's
    batches a function of the salt and of that user's own row count only: the
    batches of the other users do not depend on how many rows a user has,
    which keeps neighbouring fits coupled in the privacy tests.
    """

    def __init__(self, index, batch_size, salt):
        self.index = index
        counts = np.asarray(index.counts, dtype=np.int64)
        self.batch = counts.copy() if batch_size is None else np.minimum(counts, batch_size)
        self.salt = np.uint64(salt)
        self.rank = np.empty(index.n_samples, dtype=np.int64)  # rank in original order
        self.rank[index.order] = np.arange(index.n_samples) - np.repeat(
            index.offsets[:-1], counts)
        self.stream = np.empty(index.n_samples, dtype=np.int64)
        self.cursor = np.zeros(index.n_users, dtype=np.int64)
        self.n_pass = np.zeros(index.n_users, dtype=np.int64)
        self._shuffle(np.arange(index.n_users, dtype=np.int64))

    def _shuffle(self, users):
        """Write pass ``n_pass[users]`` of ``users`` into their stream blocks."""
        if users.size == 0:
            return
        counts = self.index.counts[users]
        pos = _ranges(self.index.offsets[users], counts)
        seg = np.repeat(np.arange(users.size), counts)
        r = (pos - np.repeat(self.index.offsets[users], counts)).astype(np.uint64)
        u = np.repeat(users, counts).astype(np.uint64)
        p = np.repeat(self.n_pass[users], counts).astype(np.uint64)
        keys = _mix64(_mix64(_mix64(self.salt ^ (u * _GOLDEN)) + p) + r)
        # Sort by (user, key): the segment in the high bits, 40 bits of key below.
        if users.size < 2**24:
            composite = (seg.astype(np.uint64) << np.uint64(40)) | (keys >> np.uint64(24))
            perm = np.argsort(composite)
        else:
            perm = np.lexsort((keys, seg))
        self.stream[pos] = self.index.order[pos[perm]]

    def draw(self, users):
        """Rows of the next minibatch of each of ``users`` (sorted codes).

        Returns
        -------
        rows : ndarray of shape (sum(m),)
            Row indices, grouped by user in the order of ``users``.
        m : ndarray of shape (len(users),)
            Minibatch size of each user.
        """
        off = self.index.offsets[users]
        n = self.index.counts[users]
        c = self.cursor[users]
        m = self.batch[users]
        k = _ranges(np.zeros_like(m), m)
        vpos = np.repeat(c, m) + k
        n_rep = np.repeat(n, m)
        off_rep = np.repeat(off, m)
        wrapped = vpos >= n_rep
        rows = self.stream[off_rep + np.where(wrapped, 0, vpos)]
        ends = c + m >= n
        if ends.any():
            # A user whose minibatch is all of its rows needs no new order (the
            # minibatch gradient is a sum over the rows).
            done = users[ends & (m < n)]
            self.n_pass[done] += 1
            self._shuffle(done)
            if wrapped.any():
                rows[wrapped] = self.stream[off_rep[wrapped] + vpos[wrapped] - n_rep[wrapped]]
        self.cursor[users] = np.where(ends, c + m - n, c + m)
        return rows, m


class _ArraySource:
    """Minibatches of a fitted data set: rows gathered by :class:`_CyclicBatchSampler`."""

    def __init__(self, X, y, index, batch_size, salt):
        self.X, self.y = X, y
        self.sampler = _CyclicBatchSampler(index, batch_size, salt)

    def draw(self, users):
        rows, m = self.sampler.draw(users)
        return self.X[rows], self.y[rows], m


# ---------------------------------------------------------------------------
# Pieces of one round (module-level so that tests can swap in broken variants)
# ---------------------------------------------------------------------------
def _user_gradients(Xb, yb, m, w, theta_users=None):
    """Per-user sums of the squared-loss row gradients ``x (<x, w + theta_i> - y)``.

    ``Xb`` rows are grouped by user (``m[j]`` rows for the ``j``-th user);
    ``theta_users`` (or None for zeros) holds the users' offsets. Returns an
    array of shape ``(len(m), n_features)``. When every user has the same
    minibatch size the rows are viewed as a ``(n_users, m, d)`` stack and the
    products are batched matrix products; otherwise segment sums
    (``np.add.reduceat``) over the ragged blocks.
    """
    n_users, d = m.shape[0], Xb.shape[1]
    if n_users == 0:
        return np.zeros((0, d))
    if np.all(m == m[0]):
        X3 = Xb.reshape(n_users, int(m[0]), d)
        # (A batched product is faster here than the matrix-vector Xb @ w.)
        coef = np.broadcast_to(w, (n_users, d)) if theta_users is None else theta_users + w
        residual = np.matmul(X3, coef[:, :, None])[:, :, 0] - yb.reshape(n_users, -1)
        return np.matmul(residual[:, None, :], X3)[:, 0, :]
    starts = np.zeros(n_users, dtype=np.int64)
    np.cumsum(m[:-1], out=starts[1:])
    residual = Xb @ w - yb
    if theta_users is not None:
        residual += np.einsum("ij,ij->i", Xb, np.repeat(theta_users, m, axis=0))
    return np.add.reduceat(Xb * residual[:, None], starts, axis=0)


def _release_gradient_sum(contributions, *, clip_norm, noise_multiplier, rng):
    """Clip each user's contribution to ``clip_norm``, sum, add Gaussian noise.

    The sum has L2 sensitivity ``2 * clip_norm`` under replace-one-user; the
    noise has standard deviation ``noise_multiplier * 2 * clip_norm``.
    """
    return mechanisms.gaussian_sum(
        contributions, clip_norm=clip_norm, noise_multiplier=noise_multiplier, rng=rng)


def _ppsgd(source, n_users, n_features, *, n_rounds, sample_rate, lr_global, lr_local,
           weighting, batch_size, clip_norm, noise_multiplier, average, rng,
           w_init=None, callback=None, verbose=0):
    """Run PPSGD (Bietti et al. 2022, Alg. 1; Alg. 2 and 3 with client sampling).

    Parameters
    ----------
    source : object with ``draw(users) -> (Xb, yb, m)``
        Minibatches of the participating ``users`` (sorted codes), rows grouped
        by user, ``m`` the size of each user's minibatch.
    n_users, n_features : int
        Number of users (public) and of columns of ``Xb``.
    n_rounds : int
        Number of rounds ``T``.
    sample_rate : float
        Poisson rate ``q`` of user participation per round.
    lr_global, lr_local : float
        Step size of ``w`` (applied to the noisy average contribution) and of
        ``theta_i`` (applied to the user's own gradient).
    weighting : {"user", "sample"}
        ``"user"``: minibatch means (Alg. 3, average-user objective);
        ``"sample"``: minibatch sums divided by the public ``batch_size``
        (Alg. 2, per-sample objective).
    batch_size : int or None
        Public per-user minibatch cap (normaliser of ``"sample"``).
    clip_norm, noise_multiplier : float
        Per-user clip norm of the released contributions and noise multiplier
        (noise std = ``noise_multiplier * 2 * clip_norm``).
    average : bool
        Return the average of the iterates of rounds ``1..T``.
    rng : numpy.random.RandomState
        Draws the participants and (through the mechanisms) the noise.
    w_init : ndarray of shape (n_features,), default=None
        Initial global weights (zeros: Alg. 1, line 2).
    callback : callable, default=None
        ``callback(t, w, theta)`` after each round (current iterates).

    Returns
    -------
    w : ndarray of shape (n_features,)
    theta : ndarray of shape (n_users, n_features)
    events : list of DpEvent
        The event of each round's release (empty when ``lr_global == 0``).
    """
    w = np.zeros(n_features) if w_init is None else np.array(w_init, dtype=float)
    theta = np.zeros((n_users, n_features))  # Alg. 1, line 2
    release = lr_global > 0
    update_local = lr_local > 0
    all_users = np.arange(n_users, dtype=np.int64)
    # Alg. 2/3, line 13: the sum is normalised by the public expected number of
    # participants q*N ("user") or of samples q*N*batch_size ("sample": the
    # contributions are already divided by batch_size).
    normaliser = sample_rate * n_users
    if average:
        w_sum = np.zeros(n_features)
        theta_sum = np.zeros((n_users, n_features))
        last = np.zeros(n_users, dtype=np.int64)  # last round accounted in theta_sum
    events = []
    report_every = max(1, n_rounds // 10)
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(1, n_rounds + 1):  # Alg. 1, line 3
            # Alg. 2, line 4: b_{i,t} ~ Ber(q) (every user when q = 1).
            if sample_rate < 1.0:
                users = np.flatnonzero(rng.random_sample(n_users) < sample_rate)
            else:
                users = all_users
            # Alg. 1, line 5 / Alg. 2, line 6: each participant's minibatch.
            Xb, yb, m = source.draw(users)
            # Alg. 1, line 6: gradients at (w_{t-1}, theta_{i,t-1}); for the
            # additive model the gradient in w equals the gradient in theta_i.
            grad = _user_gradients(Xb, yb, m, w, theta[users] if update_local else None)
            if weighting == "user":  # Alg. 3, line 7: minibatch means
                grad /= m[:, None]
            else:  # Alg. 2, line 7: minibatch sums (in units of batch_size rows)
                grad /= batch_size
            # A user whose local model diverged contributes zero (a point of the
            # clipping ball, so the sensitivity is unchanged) and keeps theta.
            finite = np.isfinite(grad).all(axis=1)
            if not finite.all():
                grad[~finite] = 0.0
            if update_local:
                if average:
                    gap = (t - 1 - last[users])[:, None]
                    theta_sum[users] += gap * theta[users]
                # Alg. 1, line 7 / Alg. 2, line 8: local step on theta_i.
                if users.size == n_users:
                    theta -= lr_local * grad
                else:
                    theta[users] -= lr_local * grad
                if average:
                    theta_sum[users] += theta[users]
                    last[users] = t
            if release:
                # Alg. 1, lines 8-11: clip per user, send, sum, add noise.
                noisy_sum, event = _release_gradient_sum(
                    grad, clip_norm=clip_norm, noise_multiplier=noise_multiplier, rng=rng)
                events.append(event)
                # Alg. 1, line 12 / Alg. 2, line 13: global step.
                w = w - lr_global * np.asarray(noisy_sum, dtype=float) / normaliser
            if average:
                w_sum += w
            if callback is not None:
                callback(t, w, theta)
            if verbose and (t % report_every == 0 or t == n_rounds):
                # Only public values and releases: the realised number of
                # participants would reveal the sampling that the accountant's
                # amplification by subsampling assumes secret.
                print(f"[PPSGD] round {t}/{n_rounds}: |w| = {np.linalg.norm(w):.4g}")
    if average:
        w = w_sum / n_rounds
        if update_local:
            theta_sum += (n_rounds - last)[:, None] * theta
            theta = theta_sum / n_rounds
    return w, theta, events


# ---------------------------------------------------------------------------
# Estimator
# ---------------------------------------------------------------------------
class PPSGDRegressor(PersonalizedRegressorMixin, BasePersonalizedEstimator):
    """Personalized-private SGD for the additive model ``y ≈ <x, w + theta_i>``.

    A global weight vector ``w`` is learned with user-level differentially
    private SGD (per-user clipped gradients, Gaussian noise on their sum) while
    every user learns a personal offset ``theta_i`` from its own rows only
    (Bietti et al. 2022, Algorithms 1-3). ``alpha``, the ratio of the global to
    the local step size, sets the level of personalization: ``alpha=0`` is
    local-only learning (``w`` stays 0, nothing is released, no privacy is
    spent) and ``alpha=np.inf`` is global-only DP-SGD (``theta_i`` stays 0).

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget ε in (0, inf]; ``np.inf`` runs the same algorithm
        without noise (clipping still applied when ``clip_norm`` is given).
        Ignored when ``noise_multiplier`` is given.
    delta : float, default=1e-6
        Privacy parameter δ in [0, 1); use ``delta`` much smaller than
        ``1 / n_users``.
    clip_norm : float or None, default=1.0
        Bound ``C`` on the L2 norm of each user's gradient contribution per
        round (one clip per user and round, not per row). ``None`` (no
        clipping) only with ``epsilon=np.inf``.
    alpha : float, default=1.0
        Global/local step-size ratio in [0, inf] (the paper's ``αQ``, see
        Notes). The global step is ``learning_rate * min(1, alpha)`` and the
        local step ``learning_rate * min(1, 1 / alpha)``: ``alpha=0`` is
        local-only learning, ``alpha=np.inf`` global-only DP-SGD with global
        step ``learning_rate``.
    learning_rate : float, default=0.1
        The larger of the two step sizes (``η`` of the paper's experiments).
    n_rounds : int, default=200
        Number of communication rounds ``T`` (each one a DP release of the
        gradient sum unless ``alpha=0``).
    batch_size : int or None, default=10
        Per-user minibatch size ``m``; a user with fewer rows uses all of them
        (``m_i = min(batch_size, n_i)``). ``None`` uses all of each user's rows
        every round (requires ``weighting="user"``).
    sample_rate : float, default=1.0
        Poisson probability ``q`` in (0, 1] that a user participates in a
        round (``1.0``: every user every round, Alg. 1; ``< 1``: client
        sampling, Alg. 2/3, with privacy amplification).
    weighting : {"user", "sample"}, default="user"
        Objective optimised (paper §5). ``"user"``: the average of the users'
        risks, each user's gradient is its minibatch mean (Alg. 3).
        ``"sample"``: the risk weighted by minibatch size, each user's
        gradient is its minibatch sum divided by ``batch_size`` (Alg. 2); a
        user with fewer than ``batch_size`` rows then weighs less.
    average : bool, default=False
        Return the average of the iterates of rounds ``1..T`` (for ``w`` and
        every ``theta_i``) instead of the last iterate (the paper's theorems
        bound the averaged iterate).
    fit_intercept : bool, default=True
        Learn a global intercept (released with ``w``) and personal intercepts
        (local), as a constant feature equal to 1 in both parts.
    noise_multiplier : float or None, default=None
        If given, overrides the calibration from ``epsilon``: each round adds
        Gaussian noise of standard deviation ``noise_multiplier * 2 *
        clip_norm`` to the gradient sum, and ``privacy_report_`` states the
        resulting ε at ``delta`` (``0`` gives ε = inf). For experiments that,
        like the paper, are parameterised by the noise level.
    verbose : int, default=0
        Print progress every tenth of the rounds when > 0: the round and the
        norm of the released ``w`` only (never the realised participants,
        which client sampling keeps secret).
    random_state : int, RandomState instance or None, default=None
        Seeds the privacy noise, the client sampling and the minibatch orders.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Global weights ``w`` (released under DP).
    intercept_ : float
        Global intercept (released; 0.0 when ``fit_intercept=False``).
    offsets_ : ndarray of shape (n_users, n_features)
        Personal offsets ``theta_i`` (local), aligned with ``user_ids_``.
    intercept_offsets_ : ndarray of shape (n_users,)
        Personal intercepts (local; zeros when ``fit_intercept=False``).
    user_ids_ : ndarray of shape (n_users,)
        Sorted ids of the users seen in ``fit`` or ``personalize``.
    n_users_ : int
        Number of users seen in ``fit``.
    n_iter_ : int
        Number of rounds run.
    noise_multiplier_ : float
        Noise multiplier used (std / (2 * clip_norm)); 0.0 without noise.
    privacy_report_ : PrivacyReport
        The privacy guarantee: ε, δ, the per-round Gaussian releases (count,
        sampling rate, noise multiplier, sensitivity, clip norm).
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen during ``fit`` (only when ``X`` has string
        column names).

    See Also
    --------
    sklearn.linear_model.SGDRegressor : Non-private, non-personalized SGD.

    Notes
    -----
    **Algorithm.** Each round ``t = 1..T`` (Alg. 1/2/3): every user joins with
    probability ``q``; a participant ``i`` draws a minibatch of ``m_i`` rows,
    computes its squared-loss gradient ``g_i`` at ``(w, theta_i)`` (minibatch
    mean for ``weighting="user"``; minibatch sum divided by ``batch_size`` for
    ``"sample"``), steps ``theta_i -= η_loc g_i``, and sends ``g_i`` clipped
    to norm ``C``; the server releases ``s_t = Σ_i clip(g_i) + N(0, σ² I)``
    and steps ``w -= η_glob s_t / (q N)``. With ``η_glob = η min(1, alpha)``
    and ``η_loc = η min(1, 1/alpha)``. Users' minibatches come from an
    endless stream of random permutations of their rows (a fresh permutation
    per pass), so ``T m_i > n_i`` makes several passes over the user's rows.

    **Step sizes.** Alg. 1 steps ``theta_i`` by ``η/N`` times the user's
    gradient and ``w`` by ``αη`` times the average gradient; the ratio of the
    effective step sizes is ``αN`` (``αqN = αQ`` with client sampling), the
    quantity ``αQ`` the paper's experiments vary. ``alpha`` here is that
    ratio, and ``learning_rate`` the larger of the two effective steps (the
    convention of the authors' code), so both limits are exact and finite:
    ``alpha=0`` never touches ``w``; ``alpha=np.inf`` never touches
    ``theta_i`` and steps ``w`` by ``learning_rate``.

    **Privacy guarantee.** (ε, δ) user-level joint DP (billboard model):
    the sequence of global iterates is (ε, δ)-DP and each ``theta_i`` is a
    function of it and of user ``i``'s rows only. Neighbouring data sets
    replace one user's rows; the number of users is public. Each round
    releases one Gaussian sum of per-user contributions clipped to ``C``:
    L2 sensitivity ``2C``, noise std ``σ = z · 2C`` (z =
    ``noise_multiplier_``). Every other input of the global step is public:
    ``N``, ``q``, ``batch_size`` and the step sizes; the normaliser ``q N``
    (not the realised number of participants or of rows) keeps the release
    a post-processing of the noisy sum. Data-dependent quantities (``m_i``,
    ``n_i``, a diverged local model, whose contribution is set to 0) only
    change the user's own contribution, which is clipped.

    **Accounting and budget plan.** One phase, ``"iterations"``: ``T``
    Gaussian releases, all with the same noise multiplier, calibrated so that
    their composition meets (ε, δ) exactly. With ``sample_rate=1`` the
    composition is exactly μ-GDP with ``μ = sqrt(T) / z`` (analytic Gaussian
    conversion, accountant method ``"exact-gdp"``). With ``sample_rate < 1``
    each round is the event ``PoissonSampledEvent(q, GaussianEvent(z))``. The
    sampled-Gaussian RDP bound of Mironov, Talwar & Zhang (2019) is an
    add/remove analysis, and it does not cover replace-one by itself; the
    accountant (method ``"rdp-zero-out"``) therefore charges it through a
    *zero-out* neighbour: ``D`` and ``D'`` (user ``i`` replaced) are both
    neighbours of ``D0``, in which user ``i`` contributes zero to every
    sampled sum. Against ``D0`` the sum has sensitivity ``C``, so each round
    is the add/remove sampled Gaussian with noise multiplier ``2z``; the ``T``
    rounds compose in RDP to ``(ε0, δ0)`` against ``D0``, hence ``(2 ε0,
    (1 + e^ε0) δ0)`` under replace-one (group privacy of size 2). This is the
    conservative route: it is sound whatever the data of user ``i`` and of
    its replacement, and it never credits more amplification than the
    add/remove analysis. Users are sampled independently of the data, with
    the public rate ``q``; the minibatch order of a user depends only on a
    per-fit random salt and on that user's own row count.

    ``alpha=0``: ``w`` is never updated; nothing is released and no privacy is
    spent (``privacy_report_`` says so, ε spent = 0). ``epsilon=np.inf``:
    noise multiplier 0 and the report says the releases are non-private.

    **Deviations from the paper.** (i) ``alpha`` is the paper's ``αQ`` and
    the step sizes follow the authors' code (see *Step sizes*), which makes
    ``alpha=np.inf`` well defined. (ii) ``weighting="sample"`` clips the
    minibatch sum divided by the public ``batch_size`` (Alg. 2 with clipping
    parameter ``batch_size * C``), and normalises by ``q N batch_size``
    instead of ``q M`` with ``M = Σ m_i``, because ``M`` depends on the
    users' row counts and is not public; the two coincide when every user has
    at least ``batch_size`` rows. (iii) Users are Poisson-sampled (Alg. 2),
    not a fixed number ``Q`` without replacement as in §6. (iv) The averaged
    iterate is the mean of rounds ``1..T`` (the paper averages ``0..T-1``).
    (v) The noise is calibrated with a tight accountant instead of
    Theorem 4.1/5.1's constants.

    **Cold start and personalize.** A user unseen in ``fit`` is predicted
    with ``<x, w> + b``. :meth:`personalize` fits ``theta_i`` (and ``b_i``)
    for the given users by the same local SGD as in ``fit`` with ``w`` fixed:
    ``max(1, round(q T))`` local steps (a user's expected number of
    participations) from ``theta_i = 0`` with step ``η_loc``, the same
    minibatch sampling, ``weighting`` and averaging. It uses only the
    released ``w`` and the users' own rows, so ``privacy_report_`` is
    unchanged. With ``alpha=np.inf`` the offsets stay 0.

    Floating-point noise is not hardened against floating-point side channels.

    References
    ----------
    .. [1] Bietti, A., Wei, C.-Y., Dudík, M., Langford, J. and Wu, Z. S.
           (2022). Personalization Improves Privacy-Accuracy Tradeoffs in
           Federated Learning. ICML 2022. arXiv:2202.05318.
    .. [2] Mironov, I., Talwar, K. and Zhang, L. (2019). Rényi Differential
           Privacy of the Sampled Gaussian Mechanism. arXiv:1908.10530.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp import PPSGDRegressor
    >>> rng = np.random.default_rng(0)
    >>> n_users, n_rows, d = 500, 20, 5
    >>> groups = np.repeat(np.arange(n_users), n_rows)
    >>> X = rng.normal(size=(n_users * n_rows, d))
    >>> w_true = np.array([1.0, -2.0, 0.5, 0.0, 0.0])
    >>> theta_true = np.zeros((n_users, d))
    >>> theta_true[:, -1] = rng.normal(size=n_users)
    >>> y = np.einsum("ij,ij->i", X, w_true + theta_true[groups])
    >>> est = PPSGDRegressor(epsilon=2.0, delta=1e-5, alpha=1.0, n_rounds=100,
    ...                      random_state=0).fit(X, y, groups=groups)
    >>> round(est.score(X, y, groups=groups), 2) > 0.9
    True
    >>> est.privacy_report_.epsilon_spent <= 2.0
    True
    """

    _parameter_constraints: dict = {
        **BasePersonalizedEstimator._parameter_constraints,
        "clip_norm": [Interval(Real, 0, None, closed="neither"), None],
        "alpha": [Interval(Real, 0, np.inf, closed="both")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "n_rounds": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "sample_rate": [Interval(Real, 0, 1, closed="right")],
        "weighting": [StrOptions({"user", "sample"})],
        "average": ["boolean"],
        "fit_intercept": ["boolean"],
        "noise_multiplier": [Interval(Real, 0, None, closed="left"), None],
        "verbose": ["verbose"],
    }
    _personal_attributes = ("offsets_", "intercept_offsets_")

    def __init__(
        self,
        *,
        epsilon=1.0,
        delta=1e-6,
        clip_norm=1.0,
        alpha=1.0,
        learning_rate=0.1,
        n_rounds=200,
        batch_size=10,
        sample_rate=1.0,
        weighting="user",
        average=False,
        fit_intercept=True,
        noise_multiplier=None,
        verbose=0,
        random_state=None,
    ):
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.alpha = alpha
        self.learning_rate = learning_rate
        self.n_rounds = n_rounds
        self.batch_size = batch_size
        self.sample_rate = sample_rate
        self.weighting = weighting
        self.average = average
        self.fit_intercept = fit_intercept
        self.noise_multiplier = noise_multiplier
        self.verbose = verbose
        self.random_state = random_state

    # ------------------------------------------------------------------ #
    def _step_sizes(self):
        """(global, local) step sizes from ``learning_rate`` and ``alpha``."""
        alpha = float(self.alpha)
        lr = float(self.learning_rate)
        lr_global = lr * min(1.0, alpha)
        lr_local = 0.0 if alpha == np.inf else lr * min(1.0, 1.0 / alpha) if alpha > 0 else lr
        return lr_global, lr_local

    def _check_params(self):
        for name in ("alpha", "learning_rate", "sample_rate", "noise_multiplier"):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)):
                raise ValueError(
                    f"The '{name}' parameter must be a number, got the boolean {value!r}.")
        if not np.isfinite(self.learning_rate):
            raise ValueError(
                f"learning_rate must be a finite positive float, got {self.learning_rate!r}. "
                "Pass e.g. learning_rate=0.1.")
        if self.weighting == "sample" and self.batch_size is None:
            raise ValueError(
                "weighting='sample' needs an integer batch_size: the minibatch sums are "
                "normalised by the public batch_size (the total number of rows is not "
                "public); got batch_size=None. Pass batch_size=10, or weighting='user'.")
        if self.noise_multiplier is not None and self.noise_multiplier > 0 \
                and self.clip_norm is None:
            raise ValueError(
                f"noise_multiplier={self.noise_multiplier!r} needs a clip_norm (the noise "
                "std is noise_multiplier * 2 * clip_norm); got clip_norm=None. Pass a "
                "positive clip_norm.")

    def _augment(self, X):
        if self.fit_intercept:
            return np.hstack([X, np.ones((X.shape[0], 1), dtype=X.dtype)])
        return X

    def _plan(self, lr_global):
        """Budget plan: the noise multiplier of each round (one phase, T releases)."""
        if lr_global == 0:
            return 0.0
        if self.noise_multiplier is not None:
            return float(self.noise_multiplier)
        if self.epsilon == np.inf:
            return 0.0
        phases = [Phase(_PHASE, share=1.0, mechanism="gaussian", count=int(self.n_rounds),
                        sampling_rate=float(self.sample_rate))]
        return float(calibrate(phases, epsilon=self.epsilon, delta=self.delta)[_PHASE])

    def fit(self, X, y, groups=None):
        """Fit the global weights under DP and every user's personal offset.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,)
            Targets.
        groups : array-like of shape (n_samples,), default=None
            User id of each row (the privacy unit). ``None``: every row is its
            own user (row-level DP).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        X, y, index = self._validate_fit_input(X, y, groups, y_numeric=True)
        self._check_params()
        y = np.asarray(y, dtype=float)
        rng = check_random_state(self.random_state)
        salt = int(rng.randint(0, 2**31 - 1)) * (2**31) + int(rng.randint(0, 2**31 - 1))
        lr_global, lr_local = self._step_sizes()
        z = self._plan(lr_global)
        Xa = self._augment(X)
        source = _ArraySource(Xa, y, index, self.batch_size, salt)
        w, theta, events = _ppsgd(
            source, index.n_users, Xa.shape[1], n_rounds=int(self.n_rounds),
            sample_rate=float(self.sample_rate), lr_global=lr_global, lr_local=lr_local,
            weighting=self.weighting, batch_size=self.batch_size, clip_norm=self.clip_norm,
            noise_multiplier=z, average=bool(self.average), rng=rng, verbose=self.verbose)
        accountant = self._account(events)
        self._set_coef(w, theta)
        self.n_iter_ = int(self.n_rounds)
        self.noise_multiplier_ = z
        self.privacy_report_ = self._report(accountant, index.n_users, z)
        return self

    def _account(self, events):
        """Compose the rounds' releases into a fresh accountant."""
        accountant = self._new_accountant()
        if not events:  # alpha = 0: nothing released
            accountant.compose(NoOpEvent(), phase=_PHASE, mechanism="none",
                               sensitivity=0.0, clip_norm=self.clip_norm)
            return accountant
        q = float(self.sample_rate)
        sensitivity = None if self.clip_norm is None else 2.0 * float(self.clip_norm)
        # All rounds release the same event; compose them as one entry of count T.
        groups_of_events = [events[0]] if all(e == events[0] for e in events) else events
        count = len(events) if len(groups_of_events) == 1 else 1
        for event in groups_of_events:
            if q < 1.0:
                event = PoissonSampledEvent(q, event)
            accountant.compose(event, count=count, phase=_PHASE, mechanism="gaussian",
                               sensitivity=sensitivity, clip_norm=self.clip_norm)
        return accountant

    def _report(self, accountant, n_users, z):
        notes = []
        released = ("coef_", "intercept_")
        if float(self.alpha) == 0:
            notes.append("alpha=0: local-only learning; the global weights are never "
                         "updated, nothing is released and no privacy is spent.")
            released = ()
        else:
            notes.append(
                f"{self.n_rounds} rounds, each releasing the Gaussian sum of per-user "
                f"gradients clipped to clip_norm={self.clip_norm} (L2 sensitivity "
                f"2*clip_norm under replace-one-user), sample_rate q={self.sample_rate}, "
                f"noise multiplier {z:.6g} (noise std = multiplier * 2 * clip_norm).")
            if self.sample_rate < 1:
                notes.append(
                    "Client sampling: each round is charged as a Poisson-subsampled "
                    "Gaussian through a zero-out neighbour (sensitivity clip_norm, noise "
                    "multiplier 2z, add/remove RDP) and group privacy of size 2 for "
                    "replace-one-user.")
            if float(self.alpha) == np.inf:
                notes.append("alpha=inf: global-only DP-SGD; personal offsets stay 0.")
        if self.noise_multiplier is not None:
            notes.append(
                f"noise_multiplier={self.noise_multiplier} was fixed by the user; epsilon "
                "is the value spent at delta (the epsilon parameter is not used).")
            spent = accountant.get_epsilon(float(self.delta))
            # The report's "requested" epsilon is the spent one (nothing spent:
            # the epsilon parameter, which then bounds 0 trivially).
            epsilon = spent if spent > 0 else float(self.epsilon)
            return PrivacyReport.from_accountant(
                accountant, epsilon=float(epsilon), delta=float(self.delta),
                n_users=int(n_users), released=released,
                local=("offsets_", "intercept_offsets_"), shares={_PHASE: 1.0},
                notes=tuple(notes))
        return self._build_report(accountant, n_users=n_users, released=released,
                                  local=("offsets_", "intercept_offsets_"),
                                  shares={_PHASE: 1.0}, notes=notes)

    def _set_coef(self, w, theta):
        if self.fit_intercept:
            self.coef_, self.intercept_ = w[:-1].copy(), float(w[-1])
            self.offsets_ = np.ascontiguousarray(theta[:, :-1])
            self.intercept_offsets_ = theta[:, -1].copy()
        else:
            self.coef_, self.intercept_ = w.copy(), 0.0
            self.offsets_ = theta
            self.intercept_offsets_ = np.zeros(theta.shape[0])

    # ------------------------------------------------------------------ #
    def _fit_personal(self, X, y, index):
        """Local SGD on ``theta_i`` with ``w`` fixed (see Notes); no release."""
        _, lr_local = self._step_sizes()
        rng = check_random_state(self.random_state)
        salt = int(rng.randint(0, 2**31 - 1)) * (2**31) + int(rng.randint(0, 2**31 - 1))
        Xa = self._augment(np.asarray(X, dtype=float))
        w = np.append(self.coef_, self.intercept_) if self.fit_intercept else self.coef_
        n_steps = max(1, int(round(float(self.sample_rate) * int(self.n_rounds))))
        source = _ArraySource(Xa, np.asarray(y, dtype=float), index, self.batch_size, salt)
        _, theta, events = _ppsgd(
            source, index.n_users, Xa.shape[1], n_rounds=n_steps, sample_rate=1.0,
            lr_global=0.0, lr_local=lr_local, weighting=self.weighting,
            batch_size=self.batch_size, clip_norm=self.clip_norm, noise_multiplier=0.0,
            average=bool(self.average), rng=rng, w_init=w)
        assert not events  # personalize never releases anything
        if self.fit_intercept:
            return {"offsets_": np.ascontiguousarray(theta[:, :-1]),
                    "intercept_offsets_": theta[:, -1].copy()}
        return {"offsets_": theta, "intercept_offsets_": np.zeros(theta.shape[0])}

    def _validate_personal_input(self, X, y):
        return validate_data(self, X, y, reset=False, y_numeric=True)

    def predict(self, X, groups=None):
        """Predict with each user's personal model; unseen users get ``<x, w> + b``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to predict.
        groups : array-like of shape (n_samples,), default=None
            User id of each row. Rows of users seen in ``fit`` or
            ``personalize`` use ``<x, w + theta_i> + b + b_i``; other rows
            (and all rows when ``groups=None``) the cold-start ``<x, w> + b``.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Predictions.
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        codes = self._user_codes(groups, X.shape[0])
        pred = X @ self.coef_ + self.intercept_
        known = codes >= 0
        if known.any():
            c = codes[known]
            pred[known] += np.einsum("ij,ij->i", X[known], self.offsets_[c])
            pred[known] += self.intercept_offsets_[c]
        return pred

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # A noisy fit of a few rounds on the checks' tiny data sets cannot meet
        # their score thresholds.
        tags.regressor_tags.poor_score = True
        return tags

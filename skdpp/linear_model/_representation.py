"""What :class:`PrivateFedRepRegressor` and :class:`PrivAltMinRegressor` share.

The model is ``y ≈ <x, U v_i>``: a shared embedding ``U`` (``d × k``,
orthonormal columns, released under user-level DP) and a personal head ``v_i``
(``k``) per user, computed from ``U`` and that user's rows only. Both
algorithms work on blocks of whole users (:class:`~skdpp.utils._grouped.UserBlock`)
and share:

* :func:`prepare_split` -- the block function that splits each user's rows into
  ``S^0`` (initialisation and iterations) and ``S^1`` (final heads) with keyed
  randomness and keeps the block's ``S^0`` arrays in its :class:`BlockState`;
* :func:`take_rows`, :func:`s0_rows`, :func:`source_row_sum` -- gathers and
  per-user sums over a block's rows;
* :func:`fit_heads` -- exact per-user least-squares heads on a block;
* :func:`final_heads` -- the driver of the final heads (Snedeker et al. 2025,
  Alg. 1, line 14) and the DP cold-start head;
* :func:`subspace_distance` -- the principal-angle distance;
* :class:`_RepresentationMixin` -- validation, budget plan, the fit's core
  around the algorithm's iterations, ``personalize`` and ``predict``.
"""

from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import BasePersonalizedEstimator, FitResult
from ..privacy import BudgetPlan
from ..privacy._clipping import clip_by_norm
from ..utils._executor import LocalExecutor
from ..utils._grouped import UserBlock, make_blocks
from ._heads import solve_heads
from ._scratch import release_scratch, scratch
from ._spectral_init import initial_components

__all__ = ["BlockState", "final_heads", "fit_heads", "prepare_split", "subspace_distance",
           "take_rows"]

_INIT_OPTIONS = ("private_spectral", "private_pairwise", "random")

# A block keeps a contiguous copy of its S^0 rows of X (read every round) when the
# source X takes at most this much memory (S^0 is about half of it); otherwise
# each round gathers them into a reused per-thread buffer: a copy of half of a
# large X costs more in fresh memory (page faults) than the gathers, and adds
# half of X to the peak memory.
_CACHE_SOURCE_BYTES = 128 * 2**20


def take_rows(block, A, scratch_name=None):
    """The block's rows of the source-aligned array ``A`` (canonical order).

    Like :meth:`UserBlock.take`, but gathers with ``np.take(..., mode="clip")``
    (the block's rows are valid indices): numpy buffers the output of the
    default ``mode="raise"`` when ``out`` is given, and fancy indexing is
    slower (measured 2.7 ms and 2.0 ms vs 0.56 ms for 16384 rows of 50
    columns). ``scratch_name``: gather into that reused buffer of this thread
    (valid until the next gather into it).
    """
    rows = block.rows
    if rows is None:
        return A
    if isinstance(rows, slice):
        return A[rows]
    if scratch_name is None:
        return np.take(A, rows, axis=0, mode="clip")
    out = scratch(scratch_name, rows.shape[0], A.shape[1], A.dtype)
    return np.take(A, rows, axis=0, out=out, mode="clip")


# --------------------------------------------------------------------------- #
# Block state: the S^0 / S^1 split
# --------------------------------------------------------------------------- #
@dataclass
class BlockState:
    """What a block keeps between the rounds of a fit (its users only).

    Attributes
    ----------
    s0 : UserBlock
        The block's ``S^0`` rows (over the fit's ``X``, ``y``).
    local : UserBlock
        The same users and row counts over the block's own ``S^0`` arrays
        (rows ``0 .. n0 - 1``; sources ``X0`` and ``y0``, or ``y0`` alone when
        ``X0`` is not cached): batches of a round are selections of it, so
        their ``source_rows`` index ``X0``, ``y0`` and ``X0 @ U``.
    y0 : ndarray of shape (n0,)
        Targets of the ``S^0`` rows.
    X0 : ndarray of shape (n0, d) or None
        A contiguous copy of the ``S^0`` rows of ``X`` (small data), or None:
        they are gathered every round (:func:`s0_rows`).
    final : UserBlock
        Rows of the final heads: ``S^1``, or ``S^0`` for a user without ``S^1``.
    heads : ndarray of shape (n_users, k) or None
        The users' final heads, once computed.
    extra : dict
        Algorithm-specific per-user state.
    """

    s0: UserBlock
    local: UserBlock
    y0: np.ndarray
    X0: object
    final: UserBlock
    heads: object = None
    extra: dict = field(default_factory=dict)

    def s0_data(self):
        """The ``S^0`` rows as a block over arrays holding them: the cached copy
        when there is one (contiguous reads), else the fit's ``X``, ``y``."""
        return self.s0 if self.X0 is None else self.local


def split_mask(block, key):
    """``True`` for the block's ``S^0`` rows (Snedeker et al. 2025, Alg. 1, preamble).

    Each user puts ``ceil(m / 2)`` of its ``m`` rows (clipped to ``[1, m - 1]``;
    a one-row user keeps its row) in ``S^0``: those with the smallest keyed
    uniforms ``hash(key, "split", user id, rank of the row)``, so the split
    of a user depends only on the fit key and that user's own rows.
    """
    return block.split_users_rows(0.5, block.row_uniforms(key, "split"))


def prepare_split(block, state, key):
    """Block function: split the block's users into ``S^0`` / ``S^1``; returns its state."""
    # A throw-away view of the block: the per-row arrays it caches while splitting
    # (row users, ranks: 16 bytes a row) are freed on return.
    block = block.user_range(0, block.n_users)
    s0_mask = split_mask(block, key)
    s0 = block.select(s0_mask)
    no_s1 = (block.counts - s0.counts) == 0
    final = block.select(~s0_mask | block.expand(no_s1))  # Alg. 1, line 14 (S^1)
    y0 = np.asarray(take_rows(s0, block.y), dtype=np.float64)
    X0 = None
    if block.X.nbytes <= _CACHE_SOURCE_BYTES:
        X0 = np.take(block.X, s0.source_rows(), axis=0, mode="clip")
    # the S^0 rows over the block's own S^0 arrays (X0 when cached; its X is only
    # read through s0_rows otherwise)
    local = UserBlock(y0 if X0 is None else X0, y0, None, s0.users, s0.user_hash,
                      s0.counts, s0.first_user)
    return None, BlockState(s0=s0, local=local, y0=y0, X0=X0, final=final)


def s0_rows(block, state):
    """The block's ``S^0`` rows of ``X``: the cached copy, or a gather into scratch."""
    if state.X0 is not None:
        return state.X0
    return take_rows(state.s0, block.X, "s0_rows")


# --------------------------------------------------------------------------- #
# Heads
# --------------------------------------------------------------------------- #
def fit_heads(block, P, y):
    """Exact per-user least-squares heads ``argmin_v sum_r (y_r - <p_r, v>)^2``.

    Parameters
    ----------
    block : UserBlock
        The rows to fit on, grouped by user.
    P : ndarray of shape (block.n_rows, k)
        ``X @ U`` for the block's rows (canonical order).
    y : ndarray of shape (block.n_rows,)
        Their targets.

    Returns
    -------
    V : ndarray of shape (block.n_users, k)
        Zero for users without rows, for users whose projections ``P`` are not
        finite (``X U`` overflows for values near the float maximum) and for
        users whose head is not finite: a function of that user's rows only.

    Notes
    -----
    Each user's system is solved for ``P / max|P|`` and ``y / max|y|`` (no
    overflow in the ``k × k`` Grams for any finite values; the relative ridge
    of :func:`~skdpp.linear_model._heads.solve_heads` is scale invariant),
    then ``v = v' max|y| / max|P|``.
    """
    k = P.shape[1]
    n_users = block.n_users
    if n_users == 0:
        return np.zeros((0, k))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mp = block.segment_max(np.abs(P), initial=0.0) if k else np.zeros(n_users)
        my = block.segment_max(np.abs(y), initial=0.0)
        sp_ = np.where(mp > 0, mp, 1.0)
        sy_ = np.where(my > 0, my, 1.0)
        # users whose projections overflowed (inf, or NaN from inf - inf in X U)
        bad = ~np.isfinite(mp)
        Ps = P / block.expand(sp_)[:, None]
        if bad.any():
            Ps[block.expand(bad)] = 0.0
        A = block.gram(Ps)
        r = block.segment_sum(Ps * (y / block.expand(sy_))[:, None])
        V = solve_heads(A, r, block.counts) * (sy_ / sp_)[:, None]
    V[bad | ~np.all(np.isfinite(V), axis=1)] = 0.0
    return V


def heads_on(block, U):
    """Heads of the block's users from all its rows (:func:`fit_heads` of ``X U``)."""
    Xb = take_rows(block, block.X)
    with np.errstate(over="ignore", invalid="ignore"):
        P = Xb @ U
    return fit_heads(block, P, np.asarray(take_rows(block, block.y), dtype=np.float64))


def source_row_sum(block, weights, A):
    """``out[u] = sum_{r in u} w_r A[row_r]`` over the block's rows of ``A`` (one sparse product).

    ``A`` is the block's *source* (e.g. the ``S^0`` array of a :class:`BlockState`):
    the rows are not gathered.
    """
    W = sp.csr_matrix((np.asarray(weights, dtype=np.float64), block.source_rows(),
                       block.offsets), shape=(block.n_users, A.shape[0]))
    return np.asarray(W @ A)


def _final_heads_block(block, state, config):
    """Final heads of the block's users (line 14) and their clipped sum (cold start)."""
    U, head_clip_norm = config
    fin = state.final
    Xf = take_rows(fin, block.X, "final_rows")
    with np.errstate(over="ignore", invalid="ignore"):
        P = Xf @ U
    state.heads = fit_heads(fin, P, np.asarray(take_rows(fin, block.y), dtype=np.float64))
    # Each user's head clipped to C_head: one bounded contribution per user.
    return clip_by_norm(state.heads, head_clip_norm).sum(axis=0), state


def _collect_heads(block, state, _):
    return state.heads


def final_heads(executor, release, U, *, head_clip_norm, cold_start, n_users):
    """Final heads (Alg. 1, line 14) and the DP cold-start head.

    Each user fits its head on ``S^1`` (``S^0`` when ``S^1`` is empty) with
    ``U`` fixed. The cold-start head is the released ``sum_i clip(v_i,
    C_head)`` (Gaussian, sensitivity ``2 C_head`` under replace-one-user)
    divided by the public number of users; ``cold_start=False``: no release,
    the zero head.

    Returns
    -------
    heads : ndarray of shape (n_users, k)
    cold_start_head : ndarray of shape (k,)
    """
    total = executor.map(_final_heads_block, (U, head_clip_norm))
    heads = executor.collect(_collect_heads)
    if not cold_start:
        return heads, np.zeros(U.shape[1])
    sensitivity = None if head_clip_norm is None else 2.0 * head_clip_norm
    noisy = release.gaussian("cold_start", total, sensitivity=sensitivity,
                             clip_norm=head_clip_norm)
    return heads, noisy / max(n_users, 1)  # division by the public n: post-processing


# --------------------------------------------------------------------------- #
# Evaluation
# --------------------------------------------------------------------------- #
def subspace_distance(U1, U2):
    """Principal-angle distance between column spaces (Snedeker et al. 2025, Def. 2).

    ``dist(U1, U2) = ||(I - Q1 Q1^T) Q2||_2`` where ``Q1``, ``Q2`` are orthonormal
    bases of the column spaces: the sine of the largest principal angle, in
    ``[0, 1]``.

    Parameters
    ----------
    U1, U2 : array-like of shape (d, k)

    Returns
    -------
    dist : float

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.linear_model._representation import subspace_distance
    >>> round(subspace_distance(np.eye(3)[:, :1], np.eye(3)[:, 1:2]), 6)
    1.0
    """
    Q1, _ = np.linalg.qr(np.asarray(U1, dtype=np.float64))
    Q2, _ = np.linalg.qr(np.asarray(U2, dtype=np.float64))
    R = Q2 - Q1 @ (Q1.T @ Q2)
    return float(min(1.0, np.linalg.norm(R, 2)))


# --------------------------------------------------------------------------- #
# The estimators' shared plumbing
# --------------------------------------------------------------------------- #
def _common_constraints():
    positive_or_none = [Interval(Real, 0, None, closed="neither"), None]
    return {
        **BasePersonalizedEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions(set(_INIT_OPTIONS)), "array-like"],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "clip_norm": positive_or_none,
        "init_clip_norm": positive_or_none,
        "head_clip_norm": positive_or_none,
        "init_share": [Interval(Real, 0, 1, closed="left")],
        "cold_start_share": [Interval(Real, 0, 1, closed="left")],
        "batch_mode": [StrOptions({"same", "disjoint"})],
        "verbose": ["verbose"],
    }


class _RepresentationMixin:
    """Plumbing shared by the two shared-representation regressors (not public).

    Subclasses implement ``_iterate`` (the private iterations), ``_notes`` and
    ``_n_iteration_releases``; this mixin validates the representation
    parameters, plans the budget (``init``, ``iterations``, ``cold_start``),
    runs the rest of the core (split, initialisation, final heads, cold start)
    and provides ``predict`` and the ``personalize`` hook.
    """

    _personal_attributes = ("heads_",)

    # ----------------------------------------------------------- validation
    def _validate_fit_data(self, X, y, groups):
        # scikit-learn's finiteness check sums X first (overflow ignored, but
        # inf + -inf warns "invalid value"): a warning that would depend on one
        # user's near-maximal values. The element-wise check that follows still
        # rejects NaN and inf.
        with np.errstate(over="ignore", invalid="ignore"):
            data = super()._validate_fit_data(X, y, groups)
        data.y = np.asarray(data.y, dtype=np.float64)
        self._check_params_for_data(data.meta["n_features"])
        return data

    def _check_params_for_data(self, n_features):
        k = self.n_components
        if k > n_features:
            raise ValueError(
                f"n_components={k} must be <= n_features={n_features} (the shared "
                f"embedding U is n_features x n_components with orthonormal columns). "
                f"Pass n_components <= {n_features}."
            )
        if self.epsilon != np.inf:
            for name in self._clip_param_names:
                if getattr(self, name) is None:
                    raise ValueError(
                        f"{name}=None (no clipping) gives unbounded sensitivity and is "
                        f"only allowed with epsilon=np.inf; got epsilon={self.epsilon!r}. "
                        f"Pass a positive {name}."
                    )
        if not isinstance(self.init, str):
            U0 = np.asarray(self.init, dtype=np.float64)
            if U0.shape != (n_features, k) or not np.all(np.isfinite(U0)):
                raise ValueError(
                    f"init as an array must be a finite public warm start of shape "
                    f"(n_features, n_components) = ({n_features}, {k}); got shape "
                    f"{U0.shape}. Pass an array of that shape or one of {_INIT_OPTIONS}."
                )
            if np.linalg.matrix_rank(U0) < k:
                raise ValueError(
                    f"init as an array must have rank n_components={k}; the given "
                    f"matrix is rank deficient. Pass a full-rank warm start."
                )

    def _private_init(self):
        return isinstance(self.init, str) and self.init.startswith("private")

    # ---------------------------------------------------------- budget plan
    def _budget_plan(self, meta):
        """Phases ``init`` (``init_share``, private inits only), ``iterations``
        (the rest, ``_n_iteration_releases()`` Gaussian releases) and
        ``cold_start`` (``cold_start_share``)."""
        plan = BudgetPlan(self.epsilon, self.delta)
        if self._private_init():
            if self.init_share == 0:
                raise ValueError(
                    f"init={self.init!r} releases a private statistic and needs a positive "
                    f"init_share; got init_share=0. Pass init_share > 0, or init='random' "
                    f"/ an array."
                )
            plan.add("init", share=self.init_share, param="init_share")
        plan.add_rest("iterations", count=self._n_iteration_releases())
        plan.add("cold_start", share=self.cold_start_share, param="cold_start_share")
        return plan

    # ------------------------------------------------------------- the core
    def _fit_core(self, executor, release, randomness, meta):
        """Split, initialise, iterate (subclass), final heads and cold start.

        Subclasses provide ``_iterate(executor, release, U0, key, meta) -> U``,
        ``_notes()``, optionally ``_prepare(executor, key)`` (more per-block
        state), and ``_pairwise_label_clip`` (the parameter used as ``ζ`` by
        ``init="private_pairwise"``).
        """
        key = randomness.key
        try:
            executor.map(prepare_split, key)  # S^0 / S^1
            self._prepare(executor, key)
            U0 = initial_components(
                executor, release, init=self.init, n_components=self.n_components,
                n_features=meta["n_features"], clip_norm=self.init_clip_norm,
                label_clip=getattr(self, self._pairwise_label_clip),
                rng=randomness.public)
            release_scratch()  # each phase gathers into its own buffers: free them
            U = self._iterate(executor, release, U0, key, meta)
            release_scratch()
            heads, head = final_heads(
                executor, release, U, head_clip_norm=self.head_clip_norm,
                cold_start=self.cold_start_share > 0, n_users=meta["n_users"])
        finally:
            release_scratch()
        return FitResult(
            {"components_": U, "heads_": heads, "cold_start_head_": head,
             "n_iter_": int(self.max_iter)},
            released=("components_", "cold_start_head_"), local=("heads_",),
            notes=self._notes())

    def _prepare(self, executor, key):
        """More per-block state after the split (none by default)."""

    # ------------------------------------------------------------ personal
    def _fit_personal(self, X, y, index):
        """Heads of the users of ``index`` from their own rows and the released ``U``."""
        y = np.asarray(y, dtype=np.float64)
        executor = LocalExecutor(make_blocks(X, y, index))
        return {"heads_": executor.collect(_personal_heads_block, self.components_)}

    # -------------------------------------------------------------- predict
    def predict(self, X, groups=None):
        """Predict with each known user's head, the cold-start head for unseen users.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to predict.
        groups : array-like of shape (n_samples,), default=None
            User id of each row. Rows of users seen in ``fit`` (or added by
            ``personalize``) use ``x^T U v_i``; other rows (and all rows when
            ``groups=None``) use the cold-start head ``x^T U v_cold``.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        codes = self._user_codes(groups, X.shape[0])
        known = codes >= 0
        H = np.empty((X.shape[0], self.components_.shape[1]))
        H[known] = self.heads_[codes[known]]
        H[~known] = self.cold_start_head_
        return np.einsum("ij,ij->i", X @ self.components_, H)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True
        return tags


def _personal_heads_block(block, state, U):
    return heads_on(block, U)

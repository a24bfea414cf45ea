"""Differentially private matrix factorisation with adaptive per-item budget allocation.

The estimator :class:`AdaptiveWeightMF` (Krichene, Jain, Song, Sundararajan,
Thakurta and Zhang 2023, "Multi-Task Differential Privacy Under Distribution
Skew", arXiv:2302.07975). This module holds the parameters, the validation of
the data (the item catalogue, duplicate ratings), the budget plan and the
prediction methods; the algorithm is in :mod:`._private_als` (Alg. 1-3 as block
functions and a driver) and :mod:`._task_weights` (eq. (11)-(12), the uniform
and tail-sampling baselines).
"""

import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import BasePersonalizedEstimator, FitData, FitResult, PersonalizedRegressorMixin
from ..privacy import MIN_CLIP, BudgetPlan
from ..utils._executor import LocalExecutor
from ..utils._grouped import UserIndex
from ._private_als import (
    MFConfig,
    aggregate_entries,
    entry_blocks,
    fit_private_mf,
    personal_parts,
    prepare_residuals,
)

__all__ = ["AdaptiveWeightMF"]

# Ratings per chunk in the row-wise dot products of ``predict``.
_PREDICT_CHUNK = 2**17


# --------------------------------------------------------------------------- #
# The item catalogue: one column of ids, or whole rows of a multi-column X
# --------------------------------------------------------------------------- #
def _item_keys(X):
    """1-D keys identifying the item of each row of ``X`` (validated, 2-D).

    One column: the column itself (numbers as float64, strings/objects as is).
    Several columns: each distinct row is an item; rows are viewed as opaque
    fixed-size records (float64, ``-0.0`` normalised to ``0.0``) so that numpy
    can sort and search them.
    """
    if X.dtype.kind == "O" and X.shape[1] > 1:
        X = X.astype(np.float64)  # TypeError for non-numeric multi-column ids
    if X.dtype.kind not in "biufO" and X.shape[1] > 1:
        raise ValueError(
            f"A multi-column X must be numeric (each distinct row is an item); got "
            f"dtype {X.dtype}. Pass one column of item ids instead."
        )
    if X.shape[1] == 1:
        col = X[:, 0]
        return col.astype(np.float64) if col.dtype.kind in "biuf" else col
    Xf = np.ascontiguousarray(np.asarray(X, dtype=np.float64) + 0.0)
    return Xf.view(np.dtype((np.void, Xf.dtype.itemsize * Xf.shape[1]))).ravel()


def _keys_to_ids(keys, n_features):
    """Inverse of :func:`_item_keys` for the catalogue (item ids shown to users)."""
    if keys.dtype.kind == "V":
        return keys.view(np.float64).reshape(-1, n_features).copy()
    return np.asarray(keys).copy()


def _lookup_items(catalogue_keys, X):
    """Item code (0..n_items-1) of each row of validated ``X``, -1 outside the catalogue."""
    # The catalogue keys are sorted and unique, so the index keeps their order.
    catalogue = UserIndex.from_groups(catalogue_keys, catalogue_keys.shape[0])
    return catalogue.lookup(_item_keys(X))


def _catalogue_entries(catalogue_keys, X, y, user_codes):
    """(user, item, rating) entries of the rows whose item is in the catalogue.

    Rows of other items are ignored, silently: whether a user has such rows
    is private (documented, no warning). Duplicate (user, item) rows are
    merged (:func:`~._private_als.aggregate_entries`).
    """
    item = _lookup_items(catalogue_keys, X)
    known = item >= 0
    return aggregate_entries(np.asarray(user_codes)[known], item[known],
                             np.asarray(y, dtype=np.float64)[known],
                             catalogue_keys.shape[0])


def _seen_matrix(user, item, n_users, n_items):
    """(n_users, n_items) 0/1 CSR of the items each user rated (personal data)."""
    return sp.csr_matrix((np.ones(user.shape[0]), (user, item)), shape=(n_users, n_items))


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

    Data: ``fit(X, y, groups)`` with ``X`` one column of item ids (ints or
    strings), ``y`` the ratings and ``groups`` the user ids (the privacy
    unit). A multi-column ``X`` is keyed by whole rows (each distinct row is
    an item, so generic scikit-learn checks run); given together with
    ``groups`` it warns, since ``X = [user, item]`` is a common mistake.

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
        says so). Ratings of items outside ``items`` are ignored, without a
        warning (whether a user has such ratings is private).
    verbose : int, default=0
        Print progress per iteration when > 0 (public sizes and the iteration
        number only: no timings, no statistics of the data).
    random_state : int, RandomState instance or None, default=None
        Seeds the initialisation, the keyed per-entry sampling and the privacy
        noise (see :class:`~skdpp.utils._random.FitRandomness`; ``None``:
        fresh entropy from the operating system).

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
    - The initial item embeddings are ``N(0, I / k)`` (data-independent,
      from the fit's public random stream).
    - Randomness: the ``count_cap`` items a user counts and the items of the
      ``"uniform"`` / ``"tail"`` baselines (and their tie-breaks) are chosen
      by keyed hashes of (fit key, user id, position of the item among the
      user's items in item order), not by draws from a random stream: a
      user's choices depend on that user's ratings only, and a fit is a
      function of the *set* of ratings (permuting the rows gives the same
      model bit for bit).
    - A user whose exact ridge solve is not finite (only possible for
      astronomically large item embeddings) gets a zero embedding.
    - Predicted residuals are clipped to ``[-C_r, C_r]`` (post-processing).

    **Cold start.** Unseen users get ``mean_``; known users rating an item
    outside the catalogue get ``mean_`` plus their bias.

    **Scale.** The ratings are processed in blocks of whole users of up to
    2^20 (user, item) entries (:mod:`skdpp.decomposition._private_als`):
    each block computes its users' exact ridge solves (sparse-dense products
    of its rating matrix with the items' upper-triangular outer products,
    stacks of ``k x k`` systems, 8192 users at a time) and its partial item
    statistics (an ``n_items x k (k + 1) / 2`` Gram partial, 42 MB for 10^4
    items at ``k = 32``; the fixed-order sum of the partials holds about
    ``log2(n_blocks)`` of them). Noise is added once per release to the
    sum. See ``benchmarks/bench_adaptive_mf.py``.

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

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Generic checks pass no groups: every row is its own user and every
        # distinct row its own item, so predictions fall back to the DP mean.
        tags.regressor_tags.poor_score = True
        return tags

    # ------------------------------------------------------------------ #
    # Validation: parameters, the item catalogue, the rating entries
    # ------------------------------------------------------------------ #
    def _validate_privacy_params(self):
        super()._validate_privacy_params()
        if self.epsilon != np.inf and self.rating_clip is None:
            raise ValueError(
                f"rating_clip=None (no clipping of ratings) gives unbounded sensitivity "
                f"and is only allowed with epsilon=np.inf; got epsilon={self.epsilon!r}. "
                "Pass a positive rating_clip (the largest |rating - mean| to keep)."
            )
        if not MIN_CLIP <= self.user_budget < np.inf:
            # Like the clip bounds: with a subnormal budget the rounding of the
            # per-user rescaling let one user's sum of w^2 reach 1.4 x the budget
            # that the sensitivities assume.
            raise ValueError(
                f"The 'user_budget' parameter must be a finite budget >= {MIN_CLIP:g}, "
                f"got {self.user_budget!r}: at smaller scales floating-point rounding "
                "can exceed the stated sensitivity. Only its ratio to `reg` matters "
                "for adaptive weights: rescale both instead."
            )
        if self.weighting in ("uniform", "tail") and self.user_budget < 1:
            raise ValueError(
                f"weighting={self.weighting!r} keeps floor(user_budget) items per user "
                f"with weight 1, so user_budget must be >= 1; got {self.user_budget!r}. "
                "Pass user_budget=k to sample k items per user."
            )

    def _validate_data_kwargs(self):
        return {"dtype": None, "y_numeric": True}

    def _catalogue(self, X):
        """The sorted item catalogue: public ``items``, or the distinct items of ``X``.

        Returns
        -------
        keys : ndarray of shape (n_items,)
            Sorted unique keys (:func:`_item_keys`), for lookups.
        item_ids : ndarray of shape (n_items,) or (n_items, n_features)
            The ids shown to users (``item_ids_``).
        """
        if self.items is not None:
            catalogue = np.asarray(self.items)
            if catalogue.ndim == 1:
                catalogue = catalogue[:, None]
            if catalogue.ndim != 2 or catalogue.shape[0] == 0 \
                    or catalogue.shape[1] != X.shape[1]:
                raise ValueError(
                    f"`items` must hold at least one id, each with {X.shape[1]} "
                    f"column(s) like X; got shape {np.asarray(self.items).shape}."
                )
            keys = _item_keys(catalogue)
        else:
            keys = _item_keys(X)
        keys = np.asarray(UserIndex.from_groups(keys, keys.shape[0]).users).copy()
        item_ids = _keys_to_ids(keys, X.shape[1])
        id_dtype = (np.asarray(self.items) if self.items is not None else X).dtype
        if X.shape[1] == 1 and id_dtype.kind in "biu":
            item_ids = item_ids.astype(id_dtype)  # integer ids stay ints
        return keys, item_ids

    def _validate_fit_data(self, X, y, groups):
        # scikit-learn's finiteness check sums the ratings first: finite ratings
        # near the float maximum overflow there and numpy would warn (inf - inf),
        # a warning that depends on one user's data.
        with np.errstate(over="ignore", invalid="ignore"):
            data = super()._validate_fit_data(X, y, groups)
        X, index = data.X, data.index
        if groups is not None and X.shape[1] > 1:
            # Depends only on public shapes (issue 13, item 4).
            warnings.warn(
                f"AdaptiveWeightMF got X with {X.shape[1]} columns: X must be one "
                "column of item ids, with the user ids in groups= (e.g. "
                "fit(df[['item']], df['rating'], groups=df['user'])). With several "
                "columns every distinct row of X is treated as one item.",
                UserWarning,
                stacklevel=3,
            )
        keys, item_ids = self._catalogue(X)
        n_items = int(keys.shape[0])
        user, item, rating = _catalogue_entries(keys, X, data.y, index.codes)
        return FitData(
            X=item[:, None], y=rating, index=UserIndex(index.users, user),
            meta={**data.meta, "n_items": n_items},
            attributes={**data.attributes, "item_ids_": item_ids, "n_items_": n_items,
                        "_catalogue_keys": keys,
                        "_seen": _seen_matrix(user, item, index.n_users, n_items)},
        )

    def _make_blocks(self, data, randomness):
        # Entries of whole users, each user's entries sorted by item code.
        return entry_blocks(data.index.codes, data.X[:, 0], data.y, data.index.users,
                            data.meta["n_items"])

    # ------------------------------------------------------------------ #
    # Plan and core
    # ------------------------------------------------------------------ #
    def _budget_plan(self, meta):
        """Phases ``"mean"`` (if ``center``), ``"counts"`` (if needed), ``"items"`` (the rest)."""
        plan = BudgetPlan(self.epsilon, self.delta)
        if self.center:
            plan.add("mean", share=self.mean_share, param="mean_share")
        if self._config(meta["n_items"]).needs_counts:
            plan.add("counts", share=self.count_share, param="count_share")
        # ALS: the Gram stack and the right-hand sides every iteration; GD: one
        # gradient release per step.
        n_releases = 2 * self.n_iter if self.solver == "als" else self.n_iter * self.gd_steps
        plan.add_rest("items", count=n_releases)
        return plan

    def _config(self, n_items):
        """The public configuration of the algorithm (:class:`MFConfig`)."""
        def opt(value):
            return None if value is None else float(value)

        return MFConfig(
            n_items=int(n_items), n_components=int(self.n_components), reg=float(self.reg),
            user_bias=bool(self.user_bias), clip_norm=opt(self.clip_norm),
            rating_clip=opt(self.rating_clip), center=bool(self.center),
            mean_clip=float(self.mean_clip), count_cap=int(self.count_cap),
            weighting=self.weighting, mu=float(self.mu),
            user_budget=float(self.user_budget),
            weight_normalization=self.weight_normalization, solver=self.solver,
            n_iter=int(self.n_iter), gd_steps=int(self.gd_steps),
            learning_rate=float(self.learning_rate), grad_clip=opt(self.grad_clip),
            noise_ridge=float(self.noise_ridge),
        )

    def _fit_core(self, executor, release, randomness, meta):
        cfg = self._config(meta["n_items"])
        log = None
        if self.verbose:
            def log(message):
                print(f"[AdaptiveWeightMF] {message}")
            # Public sizes only (the number of ratings is private, never printed).
            log(f"{meta['n_users']} users, {cfg.n_items} items; {cfg.solver} solver, "
                f"{cfg.weighting} weights")
        out = fit_private_mf(executor, release, randomness, meta, cfg, log=log)
        released = ["item_embeddings_"]
        if self.center:
            released.append("mean_")
        if out["item_counts"] is not None:
            released.append("item_counts_")
        notes = [
            "The item catalogue item_ids_ is public (given by `items`)."
            if self.items is not None else
            "NOT COVERED: the item catalogue item_ids_ (which items have a row in "
            "item_embeddings_ and item_counts_) was inferred from X and is released "
            "as is (an item rated by a single user appears or disappears with that "
            "user). Pass `items=` a public catalogue to make it public and covered "
            "by the guarantee.",
            "The number of users is public. Ratings of items outside the catalogue "
            "are ignored.",
            f"Every user's task weights satisfy sum_i w_ij^2 <= user_budget="
            f"{float(self.user_budget):g} ({self.weighting} weights).",
        ]
        if self.solver == "als":
            notes.append("Phase 'items' alternates two releases per iteration: the "
                         "per-item Gram matrices (sensitivity 2 sqrt(beta) C_u^2) and "
                         "right-hand sides (2 sqrt(beta) C_u C_r).")
        return FitResult(
            attributes={"item_embeddings_": out["item_embeddings"],
                        "item_counts_": out["item_counts"], "mean_": out["mean"],
                        "user_embeddings_": out["user_embeddings"],
                        "user_biases_": out["user_biases"], "n_iter_": int(self.n_iter)},
            released=tuple(released), local=("user_embeddings_", "user_biases_"),
            notes=tuple(notes),
        )

    # ------------------------------------------------------------------ #
    # Personal parts
    # ------------------------------------------------------------------ #
    def _fit_personal(self, X, y, index):
        """User embeddings from the released items and each user's own ratings.

        The same block functions as the last user step of ``fit``.
        """
        user, item, rating = _catalogue_entries(self._catalogue_keys, X, y, index.codes)
        executor = LocalExecutor(entry_blocks(user, item, rating, index.users,
                                              self.n_items_))
        executor.map(prepare_residuals, (self.mean_, self.rating_clip, self.n_items_))
        U, bias = executor.collect(personal_parts,
                                   (self.item_embeddings_, self._config(self.n_items_)))
        self._pending_seen = _seen_matrix(user, item, index.n_users, self.n_items_)
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
    # Prediction
    # ------------------------------------------------------------------ #
    def _item_codes(self, X):
        """Item code (0..n_items-1) of each row of validated X, -1 if unseen."""
        return _lookup_items(self._catalogue_keys, X)

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
        X = validate_data(self, X, reset=False, dtype=None)
        users = self._user_codes(groups, X.shape[0])
        items = self._item_codes(X)
        pred = np.full(X.shape[0], self.mean_, dtype=np.float64)
        known = (users >= 0) & (items >= 0)
        if known.any():
            u, i = users[known], items[known]
            score = np.empty(u.shape[0])
            for start in range(0, u.shape[0], _PREDICT_CHUNK):  # memory chunks
                stop = min(u.shape[0], start + _PREDICT_CHUNK)
                score[start:stop] = np.einsum(
                    "ek,ek->e", self.user_embeddings_[u[start:stop]],
                    self.item_embeddings_[i[start:stop]])
            score += self.user_biases_[u]
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

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

from ..base import (
    BasePersonalizedEstimator,
    FitData,
    FitResult,
    PersonalizedRegressorMixin,
    _caller_stacklevel,
)
from ..exceptions import UselessFitWarning
from ..linear_model._auto import useless_fit_message
from ..privacy import MIN_CLIP, BudgetPlan
from ..privacy._plan import resolve_clip_share
from ..utils._executor import LocalExecutor
from ..utils._grouped import UserIndex
from ._private_als import (
    MFConfig,
    aggregate_entries,
    entry_blocks,
    fit_private_mf,
    own_mean_parts,
    personal_parts,
    prepare_residuals,
    select_items,
)

__all__ = ["AdaptiveWeightMF"]

# Ratings per chunk in the row-wise dot products of ``predict``.
_PREDICT_CHUNK = 2**17

# A private catalogue with fewer published items than this is "tiny": it
# cannot fill one top-10 list, and most predictions are the DP mean plus the
# user's bias. Compared with the released number of published items only.
_TINY_CATALOGUE = 10

# Weight of the log released popularity in recommend(ranking="blend"), per
# unit of the factor score <u, v> / rating_clip_. Chosen on MovieLens small, even user ids
# (benchmarks/bench_mf_recommend.py; reported on the odd ones): a public
# constant, no private data enters the choice.
_POPULARITY_WEIGHT = 1.0


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
    if catalogue_keys.shape[0] == 0:
        return np.full(X.shape[0], -1, dtype=np.int64)
    # The catalogue keys are sorted and unique, so the index keeps their order.
    catalogue = UserIndex.from_groups(catalogue_keys, catalogue_keys.shape[0])
    return np.asarray(catalogue.lookup(_item_keys(X)), dtype=np.int64)


def _encode_items(catalogue_keys, X):
    """Internal item codes of the rows of validated ``X``.

    Items of the catalogue (sorted unique keys) get their position
    ``0 .. m - 1``; every other item gets a code ``m + j`` (``j`` its rank
    among the other distinct items of ``X``), so that duplicate ratings of
    one item can be merged and a user's ratings outside the catalogue still
    inform that user's bias.

    Returns
    -------
    codes : ndarray of shape (n_samples,), int
    other_keys : ndarray
        Sorted unique keys of the items outside the catalogue.
    """
    keys = _item_keys(X)
    codes = _lookup_items(catalogue_keys, X)
    outside = codes < 0
    other_keys, other_codes = _factorise_keys(keys[outside])
    codes[outside] = catalogue_keys.shape[0] + other_codes
    return codes, other_keys


def _factorise_keys(keys):
    """Sorted unique ``keys`` and the position of each key among them.

    The order is a function of the set of keys only, so the keys of several
    sets of rows, factorised again together, are those of all the rows (the
    distributed fit merges its partitions' items this way).
    """
    if keys.dtype.kind in "US" or (keys.dtype.kind == "f" and not np.isnan(keys).any()):
        # Numbers without NaN and strings: the factorisation of
        # UserIndex.from_groups without its row order (one sort, not two).
        uniq, codes = np.unique(keys, return_inverse=True)
        return uniq, codes.reshape(-1)
    index = UserIndex.from_groups(keys, keys.shape[0])
    return np.asarray(index.users), index.codes


def _entries(codes, y, user_codes, n_codes):
    """(user, item, rating) entries; duplicate (user, item) rows merged."""
    return aggregate_entries(np.asarray(user_codes), codes, np.asarray(y, dtype=np.float64),
                             n_codes)


def _seen_matrix(user, item, n_users, n_items):
    """(n_users, n_items) 0/1 CSR of the items each user rated (personal data)."""
    return sp.csr_matrix((np.ones(user.shape[0]), (user, item)), shape=(n_users, n_items))


# Default count_cap (items counted per user, and the item-bias weight budget)
# when the plan adds noise; measured on MovieLens (even user ids) and App. C.
_DEFAULT_COUNT_CAP = 50
# clip_share="auto": the public rule of every estimator
# (skdpp.privacy._plan.resolve_clip_share), which replaced 0.15 per "auto" bound
# (0.3 with the defaults). Measured (median of 3 seeds' RMSE, 0.3 -> rule):
# MovieLens small (even / odd / all users, eps 1 and 4): equal to 1e-4; ratings
# shifted by 10^4 at eps 1 and 4: 0 misses in 40 fits either way (305 and 610
# users); the paper's skewed ratings (App. C, rank 5): 10 000 users 0.447 ->
# 0.367 at eps 1 and 0.308 -> 0.170 at eps 4, 2 000 users 0.461 -> 0.461 and
# 0.456 -> 0.410 (the rule's 0.05 leaves the item factors 0.3 instead of 0.05).
# count_share="auto": counts that select the catalogue need more budget than
# counts that only set the adaptive weights (the paper spends 12-20 %).
_COUNT_SHARE = {False: 0.1, True: 0.3}
# Share of delta reserved for the threshold of the private catalogue selection.
_THRESHOLD_DELTA_FRACTION = 0.25


def _catalogue_size_note(n_published, epsilon):
    """Report note on the size of a private catalogue (a released number)."""
    note = f"{n_published} item(s) published."
    if n_published < _TINY_CATALOGUE and epsilon != np.inf:
        note += (f" The catalogue is {'empty' if n_published == 0 else 'tiny'} (fewer "
                 f"than {_TINY_CATALOGUE} items): most predictions are the DP mean plus "
                 "each user's bias, and recommend() cannot fill a top-10 list.")
    return note


def _warn_tiny_catalogue(n_published, n_users, epsilon):
    """Warn when the private catalogue published fewer than ``_TINY_CATALOGUE`` items.

    A function of the released number of published items (and the public
    ``n_users`` and ``epsilon``) only: post-processing of the ``"counts"``
    release, so the warning reveals nothing beyond the release.
    """
    if n_published >= _TINY_CATALOGUE:
        return
    what = "no item" if n_published == 0 else f"only {n_published} item(s)"
    warnings.warn(
        f"The private item catalogue published {what} ({n_users} users at "
        f"epsilon={epsilon:g}): an item is published only if enough users rated it "
        "to clear the noise. Predictions are then mostly the DP mean plus each user's "
        "bias, and recommend() has little or nothing to offer. Pass a public catalogue "
        "items=[...] (e.g. the ids of a public movie list), raise epsilon, or fit on "
        "more users.",
        UserWarning,
        stacklevel=_caller_stacklevel(),
    )


class AdaptiveWeightMF(PersonalizedRegressorMixin, BasePersonalizedEstimator):
    """User-level DP matrix factorisation with biases and adaptive per-item budget allocation.

    Alternating minimisation for private matrix completion (Krichene et al.
    2023, Alg. 3): every iteration solves each user's embedding and bias
    exactly from the current item embeddings (locally, no privacy cost), then
    updates all item embeddings under user-level DP with **task-weighted**
    sufficient statistics perturbation (``solver="als"``, Alg. 1, "AdaDPALS")
    or noisy gradient descent (``solver="sgd"``, Alg. 2, "AdaDPSGD"). Each
    user's weights ``w_ij`` over the items they rated satisfy ``sum_i w_ij^2
    <= user_budget`` (the paper's ``beta``); the adaptive weights ``omega_i ~
    n_i^-mu`` (eq. (11)) computed from DP item counts give rare items a larger
    share of every user's budget. The uniform-sampling and tail-sampling
    baselines of Chien et al. (2021) are available with
    ``weighting="uniform"`` / ``"tail"``.

    The model is ``rating = mean_ + item_biases_[i] + user_biases_[j] +
    <user_embeddings_[j], item_embeddings_[i]>``: a DP global mean, DP item
    biases (their own phase) and personal user biases, so that raw ratings on
    any scale work with the defaults. With the defaults the item catalogue is
    itself chosen under DP (an item is published only if enough users rated
    it), every clip bound that depends on the ratings' scale is a private
    quantile, and every released value is covered by the guarantee.

    Data: ``fit(X, y, groups)`` with ``X`` one column of item ids (ints or
    strings), ``y`` the ratings and ``groups`` the user ids (the privacy
    unit). A multi-column ``X`` is keyed by whole rows (each distinct row is
    an item, so generic scikit-learn checks run); given together with
    ``groups`` it warns, since ``X = [user, item]`` is a common mistake.

    Released under DP: the published catalogue ``item_ids_`` (unless given),
    the item embeddings and biases, the noisy item counts, the DP global mean
    and the ``"auto"`` clip bounds. Personal (billboard model): each user's
    embedding and bias, solved by ridge least squares from the released values
    and *all* the user's own ratings (App. D, Remark D.1).

    Read more in the :ref:`User Guide <adaptive_mf>`.

    Parameters
    ----------
    n_components : int, default=10
        Embedding dimension ``k`` (the paper's ``d``).
    epsilon : float, default=1.0
        Privacy budget, in ``(0, inf]``. ``np.inf`` runs the same algorithm
        without noise: the non-private baseline (the ``"auto"`` bounds are
        then the exact quantiles, and the ``"auto"`` ``count_cap`` caps
        nothing: see ``count_cap``).
    delta : float, default=1e-6
        Privacy parameter delta, in ``[0, 1)``; use ``delta << 1 / n_users``.
        Must be > 0 when the catalogue is selected privately (``items=None``):
        a quarter of it is the probability bound of the selection's threshold.
    weighting : {"adaptive", "uniform", "tail"}, default="adaptive"
        Budget allocation of the item step across a user's items.
        ``"adaptive"``: ``omega_i ~ n_hat_i^-mu`` from DP counts (eq. (11),
        Sec. 5), then each user's weights are rescaled to the budget
        (``weight_normalization``). ``"uniform"``: weight 1 on
        ``floor(user_budget)`` items sampled uniformly per user (DPALS).
        ``"tail"``: weight 1 on each user's ``floor(user_budget)`` items with
        the smallest DP counts (Chien et al. 2021).
    mu : float, default=0.25
        Exponent of the adaptive weights, ``>= 0``. ``mu=0`` is uniform
        weighting; the paper finds ``mu`` in ``[1/4, 1/2]`` best (``1/4`` is
        eq. (11) with ``gamma=0``, ``1/2`` with ``gamma=1``).
    user_budget : float, default=20.0
        The per-user weight budget ``beta > 0`` of the item step: every user
        satisfies ``sum_i w_ij^2 <= beta``; the noise is calibrated to it. For
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
        Ridge ``lambda > 0`` of the item solves (Alg. 1, line 7), in the
        units fixed by ``clip_norm`` (the item problem's features are the
        user embeddings clipped to ``C_u``; ``reg = 100 C_u^2`` is 100
        pseudo-users at the clip norm).
    noise_ridge : float, default=1.0
        Extra item-side ridge in units of ``sigma_A sqrt(k)``, the spectral
        scale of the Gram-matrix noise of the ``"items"`` phase (a public
        quantity; 0 gives the paper's plain ridge). Stabilises the solve of
        items whose noisy statistics are dominated by noise.
    personal_ridge : float, default=5.0
        Shrinkage of every user's personal part toward the cold start (no
        bias, zero embedding), in pseudo-ratings: the user solve adds
        ``personal_ridge`` to its bias coordinate and ``personal_ridge *
        mean_i ||v_i||^2 / k`` (an average published item) to its embedding
        coordinates, so a user with 2 ratings is not fitted on noise.
        Scale-free (it rescales with the ratings and with the embeddings'
        gauge).
    clip_norm : float or None, default=0.1
        ``C_u`` (the paper's ``Gamma_x``): every user embedding is scaled to
        norm at most ``C_u`` before it enters the item statistics. ``None``
        (no clipping) only with ``epsilon=np.inf``. Scale-free: the
        embeddings' scale is a free gauge (item embeddings scale as
        ``1 / C_u``, the user embeddings sit around ``C_u``), so it does not
        depend on the ratings' units; most users sit on the clipping sphere,
        where the stated sensitivity is tight.
    rating_clip : float, "auto" or None, default="auto"
        ``C_r``: the targets of the item releases (rating minus mean minus the
        user's bias, and item bias) are clipped to ``[-C_r, C_r]``; so are
        the released item biases and the predicted factor part. ``"auto"``:
        the private ``clip_quantile``-quantile of twice each user's
        root-mean-square deviation from the DP mean (phase ``"clip"``: a
        noisy binary search on a public log grid, then on 16 equal steps of
        the selected cell), about 1.8 for 5-star ratings. ``None`` only with
        ``epsilon=np.inf``. The resolved value is ``rating_clip_``.
    center : bool, default=True
        Release a DP global mean (phase ``"mean"``) and factorise the centred
        ratings. If False the mean is 0.
    user_bias : bool, default=True
        Give every user a personal bias, solved jointly with their embedding
        (item embeddings extended by a constant 1) from all their ratings.
        Personal, so free in privacy.
    item_bias : bool, default=True
        Release DP item biases (phase ``"item_bias"``): task-weighted SSP of
        Alg. 1 with ``d = 1`` on per-user-centred ratings, ``bias_iter``
        passes, shrunk toward 0 by ``bias_ridge`` pseudo-ratings and by their
        noise level. The factor part fits what the biases leave.
    mean_clip : float or "auto", default="auto"
        Bound for the DP mean. A number ``b``: each rating is clipped to
        ``[-b, b]`` and the mean of the users' means is released (absolute
        units). ``"auto"`` (scale- and shift-free): a private median ``c`` of
        the users' mean ratings and a private radius ``R`` (the median of
        their distances to ``c``), both by noisy binary search in phase
        ``"clip"``, then ``c`` plus the noisy mean of the users' means
        clipped to ``[c - R, c + R]``
        (:func:`~skdpp.privacy._quantile.private_location`). The resolved
        bound (``b`` or ``R``) is ``mean_clip_``.
    count_cap : int or "auto", default="auto"
        Per-user contribution bound of the counts and the item biases: a user
        counts at most ``count_cap`` items (sampled uniformly when they have
        more), and the item-bias weights are ``min(1, sqrt(count_cap /
        n_j))`` on the user's ``n_j`` published items. ``"auto"``: 50 when
        the plan adds noise; at ``epsilon=np.inf`` (no noise, so no
        sensitivity to bound) no cap, every rating counts with weight 1. The
        resolved value is ``count_cap_``.
    clip_quantile : float, default=0.5
        Quantile of the per-user statistic of ``rating_clip="auto"``, in
        ``(0, 1]``.
    clip_share : float or "auto", default="auto"
        Share of the budget of the ``"clip"`` phase (if any bound is
        ``"auto"``). ``"auto"``: the public rule of every skdpp estimator
        (:func:`~skdpp.privacy._plan.resolve_clip_share`): the smallest of
        0.05, 0.1, 0.2, 0.3 (0.5 if the other shares leave room) at which the
        noise std of the searches' counts is at most ``n_users / 8`` -- a
        function of ``epsilon``, ``delta``, the plan and the number of users
        only (e.g. 0.3 for 300 users at ``epsilon=1``, 0.05 from about 1 000
        users, or 300 users at ``epsilon=4``).
    mean_share : float, default=0.05
        Share of the zCDP budget of the ``"mean"`` phase (if ``center``).
    count_share : float, default=0.2
        Share of the zCDP budget of the ``"counts"`` phase (if counts are
        needed: a private catalogue, ``weighting`` in {"adaptive", "tail"} or
        ``solver="sgd"``). The paper spends 12-20 % on counts.
    bias_share : float, default=0.25
        Share of the zCDP budget of the ``"item_bias"`` phase (if
        ``item_bias``).
    bias_ridge : float, default=3.0
        Pseudo-ratings of shrinkage of the item biases toward 0 (see
        ``item_bias``).
    bias_iter : int, default=2
        Passes of the item-bias release: each pass re-centres every user with
        the previous pass's biases (one release each).
    gd_steps : int, default=5
        Noisy gradient steps per alternation (``solver="sgd"`` only).
    learning_rate : float, default=1.0
        Base step of the noisy GD; item ``i`` uses ``learning_rate / (C_u^2
        omega_i n_hat_i + ridge)``, a public estimate of its curvature
        (``solver="sgd"`` only).
    grad_clip : float or None, default=None
        ``Gamma`` of Alg. 2: each per-rating gradient ``(<v_i, u_j> - r_ij)
        u_j`` is clipped to this norm. ``None`` uses ``C_u * C_r``.
    items : None, "observed" or array-like of shape (n_items,) or \
(n_items, n_features), default=None
        The item catalogue. ``None``: chosen under DP from the data (private
        partition selection on the ``"counts"`` release: an item is published
        iff its noisy count clears a threshold set so that an item rated by
        one user only is published with probability at most ``delta / 4``).
        An array: a public catalogue (free; items without ratings are kept).
        ``"observed"``: every item present in ``X``, released as is and NOT
        covered by the guarantee (the report's headline says so). Ratings of
        items outside the published catalogue only inform their user's
        personal bias (predictions for them are ``mean_`` plus the user's
        bias), without a warning (whether a user has such ratings is private).
    verbose : int, default=0
        Print progress per iteration when > 0 (public sizes, the number of
        published items and the iteration number only: no timings, no
        statistics of the data).
    random_state : int, RandomState instance or None, default=None
        Seeds the initialisation, the keyed per-entry sampling and the privacy
        noise (see :class:`~skdpp.utils._random.FitRandomness`; ``None``:
        fresh entropy from the operating system).

    Attributes
    ----------
    item_embeddings_ : ndarray of shape (n_items, n_components)
        Item embeddings (released under DP), rows aligned with ``item_ids_``.
    item_biases_ : ndarray of shape (n_items,)
        DP item biases (zeros if ``item_bias=False``).
    item_counts_ : ndarray of shape (n_items,) or None
        Noisy item counts (released; ``None`` if no counts were needed).
        Counts from at most ``count_cap_`` items per user, so heavy users
        count partially; may be negative.
    item_weighted_counts_ : ndarray of shape (n_items,) or None
        The noisy weighted counts ``W_i = sum_j min(1, sqrt(count_cap_ /
        n_j))`` of the ``"item_bias"`` phase (released; ``None`` if
        ``item_bias=False``). With ``item_counts_`` they make the popularity
        estimate of :meth:`recommend`.
    mean_ : float
        DP global mean (0.0 if ``center=False``).
    mean_clip_, rating_clip_ : float or None
        The resolved clip bounds (private quantiles when ``"auto"``).
    count_cap_ : int or None
        The resolved ``count_cap`` (``None``: no cap, ``epsilon=inf``).
    item_ids_ : ndarray of shape (n_items,) or (n_items, n_features)
        The published item catalogue, sorted.
    user_embeddings_ : ndarray of shape (n_users, n_components)
        Personal user embeddings, aligned with ``user_ids_`` (not clipped).
    user_biases_ : ndarray of shape (n_users,)
        Personal user biases (zeros if ``user_bias=False``); each user's own
        mean rating when ``local_only_``.
    local_only_ : bool
        True when the plan predicted a useless fit (a public rule: the count
        noise of phase ``"clip"`` above half the number of users; a
        :class:`~skdpp.exceptions.UselessFitWarning` says so): the releases
        are made as planned but not used to predict -- a known user predicts
        its own mean rating, a new user the prior 0.
    user_ids_ : ndarray of shape (n_users,)
        Sorted user ids seen in ``fit`` / ``personalize``.
    n_users_ : int
        Number of users in ``fit``.
    n_items_ : int
        Size of the published catalogue.
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
    **Privacy guarantee.** ``(epsilon, delta)`` user-level DP for every
    released value -- ``item_ids_`` (when chosen from the data),
    ``item_embeddings_``, ``item_biases_``, ``item_counts_``, ``mean_`` and
    the ``"auto"`` bounds -- under the replace-one-user relation (the number
    of users is public, and so is ``items`` when given). With
    ``items="observed"`` the catalogue is released as is: the report lists
    ``item_ids_`` as not covered, its headline reads "NOT FULLY PRIVATE" and
    ``is_private`` is False. User embeddings and biases are functions of the
    releases and the user's own ratings only, hence jointly DP (billboard
    model). Float noise is not hardened against floating-point side
    channels.

    **Sensitivities (replace one user's data).** Duplicate (user, item) rows
    are first merged (mean rating), so a user contributes once per item.
    Each user's contribution below depends only on that user's ratings, the
    released quantities and the public catalogue.

    - ``"clip"`` (Gaussian noisy binary search over public grids,
      :mod:`skdpp.privacy._quantile`): each step releases ``#{j : a_j <=
      c}`` for one candidate ``c``, with ``a_j`` one value per user -- the
      user's mean rating or its distance to the released median
      (``mean_clip="auto"``), twice the user's root-mean-square deviation
      from the DP mean (``rating_clip="auto"``): sensitivity 1 per step.
    - ``"mean"``: ``mean_clip="auto"``: the sum over users of their mean
      rating minus the released median ``c``, clipped to ``[-R, R]``:
      sensitivity ``2 R``; a number ``b``: the mean of the users' means of
      ratings clipped to ``[-b, b]``, divided by the public ``n_users``:
      ``2 b / n_users``.
    - ``"counts"``: user ``j`` contributes the 0/1 indicator ``c_j`` of at
      most ``count_cap`` of their items; ``||c_j - c_j'||^2 = |S_j symdiff
      S_j'| <= 2 count_cap``: sensitivity ``sqrt(2 count_cap)``. With
      ``items=None`` the same noisy counts select the catalogue. The
      candidates are the items some user counted (the union of the users'
      capped selections): an item a user rated beyond its ``count_cap`` is
      not a candidate unless another user counted it, so one user creates
      at most ``count_cap`` candidates however many items it rated. A
      candidate is published iff its noisy count exceeds ``1 + sigma
      Phi^-1(1 - delta_t / count_cap)``, ``delta_t = delta / 4``; an item
      that only the replaced user rated has count at most 1, so each of its
      (at most ``count_cap``) candidates passes with probability at most
      ``delta_t / count_cap`` (a ``ThresholdEvent`` of ``delta_t``; the
      other phases are calibrated to the rest of delta).
    - ``"item_bias"``: weighted counts ``W_i = sum_j w_ij`` with ``w_ij =
      min(1, sqrt(count_cap / n_j))``: user ``j``'s vector is non-negative
      with norm at most ``sqrt(count_cap)``, so ``||a - a'||^2 <= ||a||^2 +
      ||a'||^2 <= 2 count_cap``: sensitivity ``sqrt(2 count_cap)``; per pass,
      ``S_i = sum_j w_ij t_ij`` with ``|t_ij| <= C_r``: ``2 sqrt(count_cap)
      C_r``.
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

    This is why the weight budgets exist: without the per-user clip of
    eq. (12) a user with many rare items would have unbounded influence.

    **Budget plan** (``privacy_report_.phases``). Shares of the zCDP budget,
    normalised; calibrated jointly to ``(epsilon, delta)``:

    - ``"clip"`` (if a bound is ``"auto"``): ``clip_share``; 29 search steps
      for ``mean_clip="auto"`` (``LOCATION_SEARCH_STEPS``: coarse median on
      a signed log grid, two linear refinements, radius) and 10 for
      ``rating_clip="auto"`` (log grid, then a linear refinement);
    - ``"mean"`` (if ``center``): ``mean_share``, 1 release;
    - ``"counts"`` (if counts are needed): ``count_share``, 1 release (and
      the selection threshold's ``delta / 4`` when ``items=None``);
    - ``"item_bias"`` (if ``item_bias``): ``bias_share``, ``1 + bias_iter``
      releases;
    - ``"items"``: the rest, ``2 n_iter`` releases (ALS: ``A`` and ``b`` per
      iteration) or ``n_iter * gd_steps`` (SGD);
    - ``"ridge"`` (if ``embedding_ridge="auto"``): ``ridge_share``, 1 release.

    With the defaults (``clip_share="auto"`` at 0.3, e.g. 300 users at
    ``epsilon=1``): clip 0.3, mean 0.05, counts 0.3, item_bias 0.25, ridge
    0.05, items 0.05; a smaller resolved clip share goes to ``"items"``. All releases are Gaussian (exact mu-GDP accounting) and
    the selection threshold reserves ``delta / 4``.

    **Personal parts.** Every user's embedding and bias are solved from all
    of the user's ratings (the paper's Remark D.1; there is no held-out half
    here, so the API's ``personal_rows`` has no counterpart), including
    ratings of unpublished items, which only move the bias (their item has no
    embedding and no bias): with a small catalogue the model is the DP mean
    plus each user's shrunk mean offset, the best a predictor without item
    information can do. ``personal_ridge`` shrinks small users toward the
    cold start.

    **Deviations from the paper, and why.**

    - Biases: a DP mean, DP item biases and personal user biases are added
      (App. D centres the data; without biases the factor model loses to a
      bias-only predictor on real ratings). The factor part fits the rating
      minus the mean and both biases.
    - Catalogue: the paper's ``m`` items are public. Here they are selected
      under DP by default (Gopi et al. 2020); ratings of unpublished items
      only inform personal biases.
    - Clip bounds: ``rating_clip`` and ``mean_clip`` are private quantiles
      by default instead of fixed constants (scale-free); ``clip_norm`` is a
      gauge and stays fixed.
    - ``count_cap="auto"`` lifts the cap at ``epsilon=inf``: the cap exists
      only to bound the sensitivity, so the non-private baseline uses every
      rating.
    - Ridge: Alg. 1 puts ``lambda I`` inside the weighted sum (``sum_j w_ij
      (x x^T + lambda I)``), a data-dependent term its sensitivity proof
      omits; here a data-independent ridge ``reg + noise_ridge sigma_A
      sqrt(k)`` is added after the noise (post-processing). The noisy Gram
      matrices are projected on the PSD cone first (the paper's
      ``A^dagger``). The user solve's ridge is ``personal_ridge``
      pseudo-ratings (scale-free) instead of ``lambda``.
    - Eq. (11) uses ``c(n) = 1`` (``beta_bar = beta``); privacy never relies
      on it because eq. (12) (or the budget normalisation) enforces the
      budget per user. Noisy counts are floored at 1 (App. B uses
      ``n_hat + s``). Counts use at most ``count_cap`` items per user.
    - ``weight_normalization="budget"`` is the default: on the paper's
      synthetic data (App. C) it was as good as or better than eq. (12) at
      every measured setting; ``"clip"`` is eq. (12) exactly.
    - Neighbouring relation: replace-one-user (the paper: add/remove), hence
      the factor 2 in most sensitivities.
    - Centering releases a robust mean of users' mean ratings (a per-user
      contribution with bounded sensitivity; with ``mean_clip="auto"`` the
      means are clipped at the median distance around their private median)
      rather than the mean rating; it only offsets the personal user biases
      and is the cold-start prediction.
    - Alg. 2 clips each per-rating gradient (the paper assumes Lipschitz
      losses) and uses per-item steps from public quantities; no projection
      on a domain ``C``.
    - The initial item embeddings are ``N(0, I / k)`` for the published
      items (data-independent given the released catalogue size, from the
      fit's public random stream).
    - Randomness: the ``count_cap`` items a user counts and the items of the
      ``"uniform"`` / ``"tail"`` baselines (and their tie-breaks) are chosen
      by keyed hashes of (fit key, user id, position of the item among the
      user's eligible items in item order), not by draws from a random
      stream: a user's choices depend on that user's ratings only, and a fit
      is a function of the *set* of ratings (permuting the rows gives the
      same model bit for bit).
    - A user whose exact ridge solve is not finite (only possible for
      astronomically large ratings or item embeddings) gets a zero
      embedding and bias.
    - Predicted factor parts are clipped to ``[-C_r, C_r]``
      (post-processing).

    **Small data: the private catalogue.** An item is published only if
    enough users rated it to clear the count noise. On MovieLens small (610
    users) the defaults publish no item at ``epsilon <= 2``, about 5 at
    ``epsilon = 4`` and about 30 at ``epsilon = 8`` (none with 100 users at any
    ``epsilon <= 8``); the model is then the DP mean plus each user's bias.
    ``fit`` says so: a report note gives the number of published items and a
    ``UserWarning`` fires when fewer than 10 are published at a finite
    ``epsilon`` -- computed from that released number (and the public
    ``n_users`` and ``epsilon``) only, post-processing. Below a few thousand
    users pass a public catalogue (``items=``, e.g. the ids of a public movie
    list: free in privacy).

    **Recommendations.** :meth:`recommend` ranks by default by a blend of the
    user's factor score and the log of the released popularity (the noisy
    counts and the item-bias phase's weighted counts, combined by inverse
    variance: post-processing) (``ranking="blend"``): on MovieLens the
    predicted rating alone recommends obscure items
    (``benchmarks/bench_mf_recommend.py``).

    **Cold start.** Unseen users get ``mean_`` plus the item's bias; known
    users rating an item outside the catalogue get ``mean_`` plus their bias.

    **Scale.** The ratings are processed in blocks of whole users of up to
    2^20 (user, item) entries (:mod:`skdpp.decomposition._private_als`):
    each block computes its users' exact ridge solves and its partial item
    statistics as batched BLAS products on gathered embedding rows: users
    (for the Gram matrices ``X_j^T X_j``) and items (for ``sum_j w_ij u_j
    u_j^T``) are grouped by their number of entries (exact up to 32, then a
    fixed ladder with at most 12.5% zero padding: a small public number of
    groups). Users with fewer entries than ``k + 1`` (at most 32) are solved
    in the dual (one ``n x n`` system, the push-through identity), the
    others as stacks of ``k x k`` systems (8192 at a time, LU with a
    pseudo-inverse fallback); the embedding-ridge grid reuses each user's
    Gram matrix. The item partial is an ``n_items x k x k`` stack (82 MB for
    10^4 items at ``k = 32``; the fixed-order sum of the partials holds
    about ``log2(n_blocks)`` of them). Noise is added once per release to
    the sum. See ``benchmarks/bench_adaptive_mf.py``.

    **Input domain** (README, "Privacy model"). ``X``: item ids, hashable
    numbers or strings (a non-finite number is rejected by ``validate_data``
    with a ``ValueError`` before any computation); items outside a public
    catalogue are handled (they inform the user's bias only). ``y``: finite
    ratings (non-finite ones are rejected the same way); every finite
    rating is handled without a warning or an exception that depends on it
    (entry points run under :func:`skdpp.base.quiet_numerics`).
    ``predict`` raises a ``ValueError`` naming the rows if a prediction is
    not finite.

    References
    ----------
    .. [1] W. Krichene, P. Jain, S. Song, M. Sundararajan, A. Thakurta,
       L. Zhang. "Multi-Task Differential Privacy Under Distribution Skew".
       ICML 2023. arXiv:2302.07975. Alg. 1-3, eq. (11)-(12), App. B-D.
    .. [2] S. Chien, P. Jain, W. Krichene, S. Rendle, S. Song, A. Thakurta,
       L. Zhang. "Private Alternating Least Squares: Practical Private Matrix
       Completion with Tighter Rates". ICML 2021.
    .. [3] S. Gopi, P. Gulhane, J. Kulkarni, J. H. Shen, M. Shokouhi,
       S. Yekhanin. "Differentially Private Set Union". ICML 2020.
       arXiv:2002.09745.
    .. [4] A. Smith. "Privacy-preserving statistical estimation with optimal
       convergence rates". STOC 2011 (private quantiles).
    .. [5] V. Karwa, S. Vadhan. "Finite sample differentially private
       confidence intervals". ITCS 2018. arXiv:1711.03908 (noisy binary
       search).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.datasets import make_skewed_ratings
    >>> from skdpp import AdaptiveWeightMF
    >>> X, y, groups, info = make_skewed_ratings(n_users=2000, power=0.5,
    ...                                          random_state=0)
    >>> mf = AdaptiveWeightMF(n_components=5, epsilon=5.0, mu=0.5, center=False,
    ...                       user_bias=False, item_bias=False,
    ...                       items=np.arange(100), random_state=0)
    >>> mf = mf.fit(X, y, groups)
    >>> mf.item_embeddings_.shape
    (100, 5)
    >>> [phase.name for phase in mf.privacy_report_.phases]
    ['clip', 'counts', 'items', 'ridge']
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
        "rating_clip": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"}),
                        None],
        "center": ["boolean"],
        "user_bias": ["boolean"],
        "item_bias": ["boolean"],
        "mean_clip": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "count_cap": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "clip_quantile": [Interval(Real, 0, 1, closed="right")],
        "clip_share": [Interval(Real, 0, 1, closed="neither"), StrOptions({"auto"})],
        "mean_share": [Interval(Real, 0, 1, closed="neither")],
        "count_share": [Interval(Real, 0, 1, closed="neither"), StrOptions({"auto"})],
        "bias_share": [Interval(Real, 0, 1, closed="neither")],
        "ridge_share": [Interval(Real, 0, 1, closed="neither")],
        "personal_ridge": [Interval(Real, 0, None, closed="neither")],
        "embedding_ridge": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "bias_ridge": [Interval(Real, 0, None, closed="left")],
        "bias_iter": [Interval(Integral, 1, None, closed="left")],
        "gd_steps": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "grad_clip": [Interval(Real, 0, None, closed="neither"), None],
        "noise_ridge": [Interval(Real, 0, None, closed="left")],
        "items": ["array-like", StrOptions({"observed"}), None],
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
        personal_ridge=5.0,
        embedding_ridge="auto",
        clip_norm=0.1,
        rating_clip="auto",
        center=True,
        user_bias=True,
        item_bias=True,
        mean_clip="auto",
        count_cap="auto",
        clip_quantile=0.5,
        clip_share="auto",
        mean_share=0.05,
        count_share="auto",
        bias_share=0.25,
        ridge_share=0.05,
        bias_ridge=3.0,
        bias_iter=2,
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
        self.personal_ridge = personal_ridge
        self.embedding_ridge = embedding_ridge
        self.clip_norm = clip_norm
        self.rating_clip = rating_clip
        self.center = center
        self.user_bias = user_bias
        self.item_bias = item_bias
        self.mean_clip = mean_clip
        self.count_cap = count_cap
        self.clip_quantile = clip_quantile
        self.clip_share = clip_share
        self.mean_share = mean_share
        self.count_share = count_share
        self.bias_share = bias_share
        self.ridge_share = ridge_share
        self.bias_ridge = bias_ridge
        self.bias_iter = bias_iter
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
                "Pass a positive rating_clip (the largest |rating - mean| to keep) or "
                "'auto'."
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
        if self.items is None and self.epsilon != np.inf and self.delta <= 0:
            raise ValueError(
                f"items=None selects the item catalogue privately, which needs delta > "
                f"0 (an item rated by one user is published with probability at most "
                f"delta / 4); got delta={self.delta!r}. Pass delta > 0, or a public "
                f"catalogue items=[...]."
            )

    def _validate_data_kwargs(self):
        return {"dtype": None, "y_numeric": True}

    def _public_catalogue_keys(self, X):
        """Sorted unique keys and ids of the public ``items`` (``None`` if not public)."""
        if self.items is None or (isinstance(self.items, str) and self.items == "observed"):
            return None, None
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
        keys = np.asarray(UserIndex.from_groups(keys, keys.shape[0]).users).copy()
        return keys, self._ids(keys, X, np.asarray(self.items).dtype)

    @staticmethod
    def _ids(keys, X, id_dtype):
        """The ids shown to users for sorted item keys (integer ids stay ints)."""
        item_ids = _keys_to_ids(keys, X.shape[1])
        if X.shape[1] == 1 and np.dtype(id_dtype).kind in "biu":
            item_ids = item_ids.astype(id_dtype)
        return item_ids

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
        # Internal item codes: the public catalogue first (0 .. m - 1), then
        # every other item present. Internal only: what is released is the
        # published catalogue (public, or selected under DP in the fit).
        public_keys, public_ids = self._public_catalogue_keys(X)
        codes, other_keys = _encode_items(
            public_keys if public_keys is not None else _item_keys(X)[:0], X)
        code_keys = other_keys if public_keys is None else np.concatenate(
            [public_keys, other_keys])
        n_codes = int(code_keys.shape[0])
        user, item, rating = _entries(codes, data.y, index.codes, n_codes)
        n_public = None if public_keys is None else int(public_keys.shape[0])
        if isinstance(self.items, str):  # "observed": every item, released as is
            n_public = n_codes
        return FitData(
            X=item[:, None], y=rating, index=UserIndex(index.users, user),
            meta={**data.meta, "n_items": n_public, "n_item_codes": n_codes},
            attributes={**data.attributes,
                        "_code_keys": code_keys,
                        "_code_ids": self._ids(code_keys, X, X.dtype),
                        "_seen": _seen_matrix(user, item, index.n_users, n_codes)},
        )

    # The distributed fit (skdpp.distributed) validates each partition of users
    # separately; these three make its internal item codes those of validating
    # all rows at once (public catalogue first, then the union of the other
    # items present, sorted), whatever the partitioning.
    _per_user_data_attributes = ("_seen",)

    def _partition_vocabulary(self, data):
        """Sorted keys of the items outside the public catalogue in ``data`` (private)."""
        n_public = data.meta["n_items"] if self._catalogue_kind() == "public" else 0
        return data.attributes["_code_keys"][n_public:]

    def _merge_vocabularies(self, vocabularies):
        """The vocabulary of all rows, from those of disjoint sets of users."""
        return _factorise_keys(np.concatenate(vocabularies))[0]

    def _apply_vocabulary(self, data, vocabulary):
        """``data`` recoded with the internal item codes of the merged ``vocabulary``."""
        n_public = data.meta["n_items"] if self._catalogue_kind() == "public" else 0
        code_keys = data.attributes["_code_keys"]
        merged = UserIndex.from_groups(vocabulary, vocabulary.shape[0])
        position = np.empty(vocabulary.shape[0], dtype=np.int64)
        position[merged.codes] = np.arange(vocabulary.shape[0])
        remap = np.concatenate([np.arange(n_public, dtype=np.int64),
                                n_public + position[merged.lookup(code_keys[n_public:])]])
        n_codes = n_public + int(vocabulary.shape[0])
        users = data.index.users
        user, item, rating = aggregate_entries(data.index.codes, remap[data.X[:, 0]],
                                               data.y, n_codes)
        code_keys = np.concatenate([code_keys[:n_public], vocabulary])
        n_items = n_codes if self._catalogue_kind() == "observed" else data.meta["n_items"]
        return FitData(
            X=item[:, None], y=rating, index=UserIndex(users, user),
            meta={**data.meta, "n_items": n_items, "n_item_codes": n_codes},
            attributes={**data.attributes, "_code_keys": code_keys,
                        "_code_ids": self._ids(code_keys, np.empty((0, data.meta["n_features"])),
                                               data.attributes["_code_ids"].dtype),
                        "_seen": _seen_matrix(user, item, users.shape[0], n_codes)},
        )

    def _make_blocks(self, data, randomness):
        # Entries of whole users, each user's entries sorted by item code.
        return entry_blocks(data.index.codes, data.X[:, 0], data.y, data.index.users,
                            data.meta["n_item_codes"])

    def _set_fitted_attributes(self, attributes):
        # Keep only the published items: their ids, lookup keys and the seen
        # matrix's columns (the internal codes of other items are dropped).
        attributes = dict(attributes)
        published = attributes.pop("_published")
        code_keys = attributes.pop("_code_keys")
        code_ids = attributes.pop("_code_ids")
        attributes["_catalogue_keys"] = code_keys[published]
        attributes["item_ids_"] = code_ids[published]
        attributes["n_items_"] = int(published.shape[0])
        attributes["_seen"] = attributes["_seen"].tocsc()[:, published].tocsr()
        super()._set_fitted_attributes(attributes)

    # ------------------------------------------------------------------ #
    # Plan and core
    # ------------------------------------------------------------------ #
    def _catalogue_kind(self):
        if self.items is None:
            return "private"
        if isinstance(self.items, str):
            return "observed"
        return "public"

    def _config(self):
        """The public configuration of the algorithm (:class:`MFConfig`)."""
        def opt(value):
            return value if value is None or isinstance(value, str) else float(value)

        cap = self.count_cap
        if isinstance(cap, str):  # "auto": no sensitivity to bound without noise
            cap = None if self.epsilon == np.inf else _DEFAULT_COUNT_CAP
        return MFConfig(
            n_components=int(self.n_components), reg=float(self.reg),
            user_bias=bool(self.user_bias), item_bias=bool(self.item_bias),
            clip_norm=opt(self.clip_norm), rating_clip=opt(self.rating_clip),
            center=bool(self.center), mean_clip=opt(self.mean_clip),
            count_cap=None if cap is None else int(cap),
            weighting=self.weighting, mu=float(self.mu),
            user_budget=float(self.user_budget),
            weight_normalization=self.weight_normalization, solver=self.solver,
            n_iter=int(self.n_iter), gd_steps=int(self.gd_steps),
            learning_rate=float(self.learning_rate), grad_clip=opt(self.grad_clip),
            noise_ridge=float(self.noise_ridge),
            personal_ridge=float(self.personal_ridge),
            embedding_ridge=opt(self.embedding_ridge), bias_ridge=float(self.bias_ridge),
            bias_iter=int(self.bias_iter), clip_quantile=float(self.clip_quantile),
            catalogue=self._catalogue_kind(),
        )

    def _budget_plan(self, meta):
        """Phases ``"clip"``, ``"mean"``, ``"counts"``, ``"item_bias"`` (each if needed), ``"items"``.

        ``clip_share="auto"``: :func:`~skdpp.privacy._plan.resolve_clip_share`
        (the rule of every estimator; public values only)."""
        cfg = self._config()
        if not cfg.clip_releases:
            return self._plan_with_clip_share(cfg, None)
        share = resolve_clip_share(self.clip_share,
                                   lambda s: self._plan_with_clip_share(cfg, s),
                                   meta["n_users"])
        return self._plan_with_clip_share(cfg, share)

    def _plan_with_clip_share(self, cfg, clip_share):
        plan = BudgetPlan(self.epsilon, self.delta)
        if cfg.clip_releases:
            plan.add("clip", share=clip_share, count=cfg.clip_releases, param="clip_share")
        if cfg.center:
            plan.add("mean", share=self.mean_share, param="mean_share")
        if cfg.needs_counts:
            threshold_delta = 0.0
            if cfg.catalogue == "private" and self.epsilon != np.inf:
                threshold_delta = _THRESHOLD_DELTA_FRACTION * self.delta
            share = self.count_share
            if share == "auto":
                share = _COUNT_SHARE[cfg.catalogue == "private"]
            plan.add("counts", share=share, param="count_share",
                     threshold_delta=threshold_delta)
        if cfg.item_bias:
            plan.add("item_bias", share=self.bias_share, param="bias_share",
                     count=1 + cfg.bias_iter)
        if cfg.embedding_ridge == "auto":
            plan.add("ridge", share=self.ridge_share, param="ridge_share")
        # ALS: the Gram stack and the right-hand sides every iteration; GD: one
        # gradient release per step.
        n_releases = 2 * self.n_iter if self.solver == "als" else self.n_iter * self.gd_steps
        plan.add_rest("items", count=n_releases)
        return plan

    def _fit_core(self, executor, release, randomness, meta):
        cfg = self._config()
        log = None
        if self.verbose:
            def log(message):
                print(f"[AdaptiveWeightMF] {message}")
            # Public sizes only (the number of ratings and of items present are
            # private, never printed).
            log(f"{meta['n_users']} users; {cfg.solver} solver, {cfg.weighting} weights, "
                f"{cfg.catalogue} catalogue")
        # The public useless-fit rule of every estimator (count noise of the
        # bounds' searches against n_users): the bisections would turn at
        # random, so mean_ and the bounds could be anything (seen: 3e3 .. 4e6).
        clip_noise = release.noise_multiplier("clip") if "clip" in release.plan else None
        message = useless_fit_message(
            clip_noise, meta["n_users"], type(self).__name__,
            fallback="each known user predicts its own mean rating (local data) and a new "
                     "user the prior 0")
        if message is not None:
            warnings.warn(message, UselessFitWarning, stacklevel=_caller_stacklevel())
        local_only = message is not None
        out = fit_private_mf(executor, release, randomness, meta, cfg, log=log,
                             local_only=local_only)
        released = ["item_embeddings_"]
        if cfg.item_bias:
            released.append("item_biases_")
        if cfg.center:
            released.append("mean_")
        if out["item_counts"] is not None:
            released.append("item_counts_")
        if out["item_weights"] is not None:
            released.append("item_weighted_counts_")
        released += [f"{name}_" for name in cfg.auto_bounds]
        if cfg.embedding_ridge == "auto":
            released.append("embedding_ridge_")
        not_covered = ()
        if cfg.catalogue == "private":
            released.append("item_ids_")
            catalogue_note = (
                "The item catalogue item_ids_ was selected under DP: an item is "
                "published iff its noisy count (phase 'counts') clears a threshold; "
                "an item rated by one user only is published with probability at "
                "most delta/4.")
        elif cfg.catalogue == "public":
            catalogue_note = "The item catalogue item_ids_ is public (given by `items`)."
        else:
            not_covered = ("item_ids_",)
            catalogue_note = (
                "NOT COVERED: items='observed' releases the item catalogue item_ids_ "
                "(every item present in X) as is: an item rated by a single user "
                "appears or disappears with that user. Use items=None (selected "
                "under DP) or a public catalogue items=[...].")
        if cfg.catalogue == "private":
            catalogue_note += " " + _catalogue_size_note(int(out["published"].shape[0]),
                                                         self.epsilon)
        notes = [
            catalogue_note,
            "The number of users is public. Ratings of items outside the published "
            "catalogue only inform their user's personal bias.",
            f"Every user's task weights satisfy sum_i w_ij^2 <= user_budget="
            f"{float(self.user_budget):g} ({self.weighting} weights).",
        ]
        if self.solver == "als":
            notes.append("Phase 'items' alternates two releases per iteration: the "
                         "per-item Gram matrices (sensitivity 2 sqrt(beta) C_u^2) and "
                         "right-hand sides (2 sqrt(beta) C_u C_r).")
        if cfg.item_bias:
            notes.append("Phase 'item_bias' releases the weighted counts (sensitivity "
                         "sqrt(2 count_cap)) and, per pass, the weighted sums of "
                         "user-centred ratings (2 sqrt(count_cap) C_r).")
        if local_only:
            notes.append(
                "Predicted useless (public rule: count noise of phase 'clip' above "
                "0.5 * n_users): the released mean_, bounds and item parts are mostly "
                "noise and are not used to predict: every known user predicts its own "
                "mean rating (user_biases_, local data only) and a new user the prior 0 "
                "(local_only_ = True). Use more users or a larger epsilon.")
        if cfg.catalogue == "private" and self.epsilon != np.inf:  # no noise: the data's size
            _warn_tiny_catalogue(int(out["published"].shape[0]), meta["n_users"],
                                 self.epsilon)
        return FitResult(
            attributes={"item_embeddings_": out["item_embeddings"],
                        "item_biases_": out["item_biases"],
                        "item_counts_": out["item_counts"],
                        "item_weighted_counts_": out["item_weights"],
                        "_popularity_noise": out["popularity_noise"], "mean_": out["mean"],
                        "mean_clip_": None if not cfg.center else float(out["mean_clip"]),
                        "rating_clip_": out["rating_clip"], "count_cap_": cfg.count_cap,
                        "embedding_ridge_": float(out["embedding_ridge"]),
                        "user_embeddings_": out["user_embeddings"],
                        "user_biases_": out["user_biases"], "n_iter_": int(self.n_iter),
                        "local_only_": bool(local_only),
                        "_published": out["published"]},
            released=tuple(released), local=("user_embeddings_", "user_biases_"),
            notes=tuple(notes), not_covered=not_covered,
        )

    # ------------------------------------------------------------------ #
    # Personal parts
    # ------------------------------------------------------------------ #
    def _fit_personal(self, X, y, index):
        """User embeddings and biases from the released values and each user's own ratings.

        The same block functions as the last user step of ``fit``; ratings of
        items outside the published catalogue inform the bias only.
        """
        m = self.n_items_
        codes, other = _encode_items(self._catalogue_keys, X)
        n_codes = m + int(other.shape[0])
        user, item, rating = _entries(codes, y, index.codes, n_codes)
        executor = LocalExecutor(entry_blocks(user, item, rating, index.users, n_codes))
        remap = np.minimum(np.arange(n_codes), m)
        executor.map(select_items, (remap, m))
        biases = np.concatenate([self.item_biases_, [0.0]])
        executor.map(prepare_residuals, (self.mean_, biases))
        if getattr(self, "local_only_", False):
            U, bias = executor.collect(own_mean_parts, self.item_embeddings_.shape[1])
        else:
            U, bias = executor.collect(personal_parts, (self.item_embeddings_,
                                                        self._config(), self.embedding_ridge_))
        published = item < m
        self._pending_seen = _seen_matrix(user[published], item[published],
                                          index.n_users, m)
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
        """Item code (0..n_items-1) of each row of validated X, -1 if unpublished."""
        return _lookup_items(self._catalogue_keys, X)

    def predict(self, X, groups=None):
        """Predict ratings: ``mean_ + b_item + b_user + <u_user, v_item>``.

        Parameters
        ----------
        X : array-like of shape (n_samples, 1) or (n_samples, n_features)
            Item ids, as in :meth:`fit`.
        groups : array-like of shape (n_samples,), default=None
            User id of each row. Unseen users get ``mean_`` plus the item's
            bias; items outside the published catalogue get no item term.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)

        Raises
        ------
        ValueError
            If a prediction is not finite (it would exceed the float64 range);
            the error names the rows.
        """
        return self._predict_unchecked(X, groups)

    def _predict_unchecked(self, X, groups=None):
        """:meth:`predict` without the floating-point guard and the finiteness check."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=None)
        users = self._user_codes(groups, X.shape[0])
        items = self._item_codes(X)
        if getattr(self, "local_only_", False):  # useless: own means, 0 for new users
            pred = np.zeros(X.shape[0])
            known = users >= 0
            pred[known] = self.user_biases_[users[known]]
            return pred
        pred = np.full(X.shape[0], self.mean_, dtype=np.float64)
        published = items >= 0
        pred[published] += self.item_biases_[items[published]]
        known = users >= 0
        pred[known] += self.user_biases_[users[known]]
        both = known & published
        if both.any():
            u, i = users[both], items[both]
            score = np.empty(u.shape[0])
            for start in range(0, u.shape[0], _PREDICT_CHUNK):  # memory chunks
                stop = min(u.shape[0], start + _PREDICT_CHUNK)
                score[start:stop] = np.einsum(
                    "ek,ek->e", self.user_embeddings_[u[start:stop]],
                    self.item_embeddings_[i[start:stop]])
            if self.rating_clip_ is not None:
                score = np.clip(score, -self.rating_clip_, self.rating_clip_)
            pred[both] += score
        return pred

    def _item_popularity(self):
        """Popularity of the published items from released values only, or None.

        The inverse-variance combination of two noisy estimates of how many
        users rated each item: ``item_counts_`` (noise std ``s_c``) and
        ``item_weighted_counts_ / r`` (noise std ``s_W / r``), with ``r =
        sum W / sum n`` the ratio of their totals (heavy users weigh more in
        ``W``). The noise levels are public (the plan); ``r`` is a function of
        the releases: post-processing.
        """
        counts, weighted = self.item_counts_, self.item_weighted_counts_
        if counts is None:
            return None
        counts = np.asarray(counts, dtype=np.float64)
        s_c, s_w = self._popularity_noise
        if weighted is None or not s_c > 0 or not s_w > 0:
            return counts
        total_c, total_w = float(np.sum(counts)), float(np.sum(weighted))
        ratio = total_w / total_c if total_c > 0 and total_w > 0 else 1.0
        ratio = min(max(ratio, 1.0), np.sqrt(self.count_cap_ or 1.0))
        prec_c, prec_w = 1.0 / s_c**2, ratio**2 / s_w**2
        return (prec_c * counts + prec_w * np.asarray(weighted) / ratio) / (prec_c + prec_w)

    def recommend(self, groups, n_items=10, exclude_seen=True, ranking="blend",
                  popularity_weight=_POPULARITY_WEIGHT):
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
        ranking : {"blend", "rating", "popularity"}, default="blend"
            Score of item ``i`` for user ``j``, with ``s_ij = b_i + <u_j, v_i>``
            (the predicted rating minus the user's constant part):

            - ``"blend"``: ``<u_j, v_i> / rating_clip_ + popularity_weight *
              log(max(n_i, 1))``: the user's affinity to the item (the factor
              part of the predicted rating) plus the log of ``n_i``, the
              released popularity. The item bias (the item's average rating)
              is left out: it favours highly rated niche items, which users
              rate less often (on MovieLens small, even user ids, it cost up
              to 0.02 recall@10). ``n_i`` is the
              inverse-variance combination of the noisy counts
              ``item_counts_`` and the weighted counts
              ``item_weighted_counts_`` (two releases of the fit, combined by
              post-processing; on MovieLens small at epsilon = 4 this doubles
              the recall of a popularity ranking over ``item_counts_``
              alone). Which items a user rates next depends on how
              popular they are as much as on how much the user would like
              them; on MovieLens the rating alone recommends obscure items
              (recall@10 below the popularity baseline, and falling as epsilon
              grows and the catalogue gains rare items).
            - ``"rating"``: ``s_ij``, the predicted rating (the model's own
              order).
            - ``"popularity"``: ``n_i``, the most popular unseen items.

            Unseen users (no embedding) get ``n_i`` with ``"blend"`` and
            ``"popularity"``, and ``item_counts_`` with ``"rating"``
            (catalogue order if no counts were released). Without released counts
            (``item_counts_ is None``: a public catalogue, ``"uniform"``
            weights and ALS) ``"blend"`` is ``"rating"`` and ``"popularity"``
            raises.
        popularity_weight : float, default=1.0
            Weight of the log popularity in ``"blend"``, per unit of
            ``<u_j, v_i> / rating_clip_`` (scale-free: ``rating_clip_`` is the
            released clip of the factor part, about 2 for 5-star ratings; 1.0
            if ``rating_clip_`` is None). ``0`` ranks by the affinity alone;
            large values approach ``"popularity"``. The default was chosen on MovieLens
            small (even user ids; ``benchmarks/bench_mf_recommend.py``).

        Returns
        -------
        item_ids : ndarray of shape (n_users_query, n_items[, n_features])
            Recommended item ids, best first.

        Notes
        -----
        Post-processing: a user's list is a function of the released values
        (``item_embeddings_``, ``item_biases_``, ``item_counts_``,
        ``item_weighted_counts_``, ``rating_clip_`` and the plan's noise
        levels) and that user's own personal part and rated items,
        so recommendations are jointly DP (billboard model).
        """
        check_is_fitted(self)
        groups = np.asarray(groups)
        if groups.ndim != 1:
            raise ValueError(
                f"groups must be a 1-D array of user ids; got shape {groups.shape}."
            )
        if not isinstance(n_items, Integral) or isinstance(n_items, bool) or n_items < 1:
            raise ValueError(f"n_items must be a positive integer; got {n_items!r}.")
        if ranking not in ("blend", "rating", "popularity"):
            raise ValueError(
                "ranking must be one of 'blend', 'rating', 'popularity'; "
                f"got {ranking!r}."
            )
        if isinstance(popularity_weight, bool) or not isinstance(popularity_weight, Real) \
                or not 0 <= popularity_weight < np.inf:
            raise ValueError(
                f"popularity_weight must be a finite number >= 0; got {popularity_weight!r}."
            )
        if ranking == "popularity" and self.item_counts_ is None:
            raise ValueError(
                "ranking='popularity' needs the released item counts, and this fit "
                "released none (a public catalogue with weighting='uniform' and "
                "solver='als'). Use ranking='rating'."
            )
        if self.n_items_ == 0:
            raise ValueError(
                "The published item catalogue is empty (no item cleared the private "
                "selection threshold): there is nothing to recommend. Use a larger "
                "epsilon or pass a public catalogue items=[...]."
            )
        n_top = min(int(n_items), self.n_items_)
        codes = self._user_codes(groups, groups.shape[0])
        known = codes >= 0
        popularity = self._item_popularity()
        if ranking == "rating" or popularity is None:
            ranking = "rating"  # "blend" without released counts
            # Cold users: the noisy counts (catalogue order without counts).
            cold = (-np.arange(self.n_items_, dtype=np.float64)
                    if self.item_counts_ is None
                    else np.asarray(self.item_counts_, dtype=np.float64))
        elif ranking == "popularity":
            cold = popularity
        else:  # blend; cold users (no embedding): popularity alone
            unit = 1.0 if self.rating_clip_ is None else float(self.rating_clip_)
            cold = popularity_weight * np.log(np.maximum(popularity, 1.0))
        out = np.empty((groups.shape[0], n_top), dtype=np.int64)
        block = max(1, (2**24) // max(1, self.n_items_))
        for start in range(0, groups.shape[0], block):  # memory blocks
            stop = min(groups.shape[0], start + block)
            c = codes[start:stop]
            kn = known[start:stop]
            scores = np.tile(cold, (stop - start, 1))
            if kn.any():
                if ranking == "popularity":
                    sub = np.tile(cold, (int(kn.sum()), 1))
                elif ranking == "rating":
                    sub = (self.user_embeddings_[c[kn]] @ self.item_embeddings_.T
                           + self.item_biases_)
                else:
                    sub = (self.user_embeddings_[c[kn]] @ self.item_embeddings_.T) / unit
                    sub += cold
                if exclude_seen:
                    seen = self._seen[c[kn]].toarray() > 0
                    sub[seen] = -np.inf
                scores[kn] = sub
            top = np.argpartition(-scores, n_top - 1, axis=1)[:, :n_top]
            order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1,
                               kind="stable")
            out[start:stop] = np.take_along_axis(top, order, axis=1)
        return self.item_ids_[out]

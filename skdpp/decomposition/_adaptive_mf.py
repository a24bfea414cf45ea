"""The estimator :class:`AdaptiveWeightMF`: parameters, data validation (item catalogue,
duplicate ratings) and prediction; the algorithm is :mod:`._algorithms.adaptive_mf`."""

import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import BasePersonalizedEstimator, FitData, PersonalizedRegressorMixin
from ..privacy import MIN_CLIP
from ..privacy._plan import phase_shares
from ..utils._grouped import UserIndex
from ._algorithms import adaptive_mf
from ._algorithms._als_kernels import aggregate_entries, entry_blocks, paired_dots

__all__ = ["AdaptiveWeightMF"]

# Weight of the log popularity in recommend(ranking="blend") (User Guide); public.
_POPULARITY_WEIGHT = 1.0
_POSITIVE = Interval(Real, 0, None, closed="neither")


def _item_keys(X):
    """1-D item keys of the rows of validated ``X``: the column (numbers as float64),
    or for several columns each row as an opaque float64 record (``-0.0 -> 0.0``)."""
    if X.dtype.kind == "O" and X.shape[1] > 1:
        X = X.astype(np.float64)  # TypeError for non-numeric multi-column ids
    if X.dtype.kind not in "biufO" and X.shape[1] > 1:
        raise ValueError(f"A multi-column X must be numeric (each distinct row is an item); "
                         f"got dtype {X.dtype}. Pass one column of item ids instead.")
    if X.shape[1] == 1:
        col = X[:, 0]
        return col.astype(np.float64) if col.dtype.kind in "biuf" else col
    Xf = np.ascontiguousarray(np.asarray(X, dtype=np.float64) + 0.0)
    return Xf.view(np.dtype((np.void, Xf.dtype.itemsize * Xf.shape[1]))).ravel()


def _lookup_items(catalogue_keys, X):
    """Item code (0..n_items-1) of each row of validated ``X``, -1 outside the catalogue."""
    if catalogue_keys.shape[0] == 0:
        return np.full(X.shape[0], -1, dtype=np.int64)
    # The catalogue keys are sorted and unique, so the index keeps their order.
    catalogue = UserIndex.from_groups(catalogue_keys, catalogue_keys.shape[0])
    return np.asarray(catalogue.lookup(_item_keys(X)), dtype=np.int64)


def _encode_items(catalogue_keys, X):
    """``(codes, code_keys)``: catalogue items get ``0 .. m - 1``, the others ``m + j``
    (``j`` their rank among the sorted other keys, appended to the catalogue's in
    ``code_keys``), so duplicates merge and ratings outside the catalogue still inform
    their user's bias."""
    codes = _lookup_items(catalogue_keys, X)
    outside = codes < 0
    other_keys, other_codes = _factorise_keys(_item_keys(X)[outside])
    codes[outside] = catalogue_keys.shape[0] + other_codes
    if catalogue_keys.shape[0] == 0:
        return codes, other_keys
    return codes, np.concatenate([catalogue_keys, other_keys])


def _factorise_keys(keys):
    """Sorted unique ``keys`` and each key's position (a function of the set of keys:
    the distributed fit merges its partitions' items this way)."""
    index = UserIndex.from_groups(keys, keys.shape[0])
    return np.asarray(index.users), index.codes


def _seen_matrix(user, item, n_users, n_items):
    """(n_users, n_items) 0/1 CSR of the items each user rated (personal data)."""
    return sp.csr_matrix((np.ones(user.shape[0]), (user, item)), shape=(n_users, n_items))


class AdaptiveWeightMF(PersonalizedRegressorMixin, BasePersonalizedEstimator):
    """User-level DP matrix factorisation with biases and adaptive per-item budget allocation.

    Alternating minimisation (Krichene et al. 2023, Alg. 3): users' embeddings and biases
    are solved locally, item embeddings updated under user-level DP by task-weighted
    sufficient statistics perturbation (Alg. 1) or noisy gradient descent (Alg. 2), with
    adaptive weights ``omega_i ~ n_i^-mu`` from DP item counts. ``fit(X, y, groups)``:
    ``X`` one column of item ids, ``y`` ratings, ``groups`` user ids (the privacy unit).

    Read more in the :ref:`User Guide <adaptive_mf>`.

    Parameters
    ----------
    n_components : int, default=10
        Embedding dimension ``k`` (the paper's ``d``).
    epsilon : float, default=1.0
        Privacy budget in (0, inf]; ``np.inf`` runs the same algorithm without noise.
    delta : float, default=1e-6
        In [0, 1), ``<< 1 / n_users``; positive with ``items=None``.
    weighting : {"adaptive", "uniform", "tail"}, default="adaptive"
        Weights ``omega_i ~ n_hat_i^-mu`` (eq. (11)); or weight 1 on ``floor(user_budget)``
        sampled items, or on those with the smallest DP counts (Chien et al. 2021).
    mu : float, default=0.25
        Exponent ``>= 0`` of the adaptive weights (0: uniform).
    user_budget : float, default=20.0
        Per-user weight budget ``beta > 0``, ``sum_i w_ij^2 <= beta``; items kept per
        user with ``"uniform"`` / ``"tail"``.
    weight_normalization : {"budget", "clip"}, default="budget"
        ``"clip"``: eq. (12), ``w_ij = omega_i min(1, sqrt(beta / B_j))``; ``"budget"``:
        ``w_ij = omega_i sqrt(beta / B_j)`` (App. C), ``B_j = sum_i omega_i^2``.
    solver : {"als", "sgd"}, default="als"
        Item update: sufficient statistics perturbation (Alg. 1) or noisy GD (Alg. 2).
    n_iter : int, default=5
        Alternations ``T`` (Alg. 3), each costing budget.
    reg : float, default=1.0
        Ridge ``lambda > 0`` of the item solves (Alg. 1, line 7), in units of ``C_u^2``.
    personal_ridge : float, default=5.0
        Shrinkage of every user's personal part toward the cold start, in pseudo-ratings.
    embedding_ridge : float or "auto", default="auto"
        Ridge of the user embeddings in pseudo-ratings. ``"auto"``: chosen on held-out
        ratings (phase ``"ridge"``).
    clip_norm : float or None, default=0.1
        ``C_u``: clip of the user embeddings in the item statistics (``None``: ε = inf only).
    rating_clip : float, "auto" or None, default="auto"
        ``C_r``: clip of the ratings in the item releases. ``"auto"``: a private median
        (phase ``"clip"``). ``None`` only with ``epsilon=np.inf``.
    center : bool, default=True
        Release a DP global mean (phase ``"mean"``); if False it is 0.
    user_bias : bool, default=True
        Give every user a personal bias, solved jointly with its embedding (free).
    item_bias : bool, default=True
        Release DP item biases (phase ``"item_bias"``).
    mean_clip : float or "auto", default="auto"
        A number ``b`` clips the users' mean ratings to ``[-b, b]`` in the DP mean;
        ``"auto"``: to a private radius around a private median (phase ``"clip"``).
    count_cap : int or "auto", default="auto"
        Items counted per user (sampled when more). ``"auto"``: 50 (none at ε = inf).
    budget_shares : dict or None, default=None
        Shares of phases ``"clip"``, ``"mean"``, ``"counts"``, ``"item_bias"``, ``"ridge"``
        (defaults: :ref:`User Guide <adaptive_mf>`); ``"items"`` takes the rest.
    items : None, "observed" or array-like of shape (n_items,) or \
(n_items, n_features), default=None
        The item catalogue. ``None``: chosen under DP from the counts. An array: public
        (free). ``"observed"``: every item in ``X``, NOT covered by the guarantee.
    verbose : int, default=0
        Print progress (public values only) when positive.
    random_state : int, RandomState instance or None, default=None
        Seeds the init, the keyed sampling and the noise; ``None``: OS entropy.

    Attributes
    ----------
    item_embeddings_ : ndarray of shape (n_items, n_components)
        Item embeddings (released), rows aligned with ``item_ids_``.
    item_biases_ : ndarray of shape (n_items,)
        DP item biases (zeros if ``item_bias=False``).
    item_counts_, item_weighted_counts_ : ndarray of shape (n_items,) or None
        Noisy item counts (phase ``"counts"``) and weighted counts (phase
        ``"item_bias"``); None if not released.
    mean_ : float
        DP global mean (0.0 if ``center=False``).
    mean_clip_, rating_clip_, embedding_ridge_, count_cap_ : float, int or None
        The resolved values (``mean_clip_``: ``b`` or ``R``; ``count_cap_=None``: no cap).
    item_ids_ : ndarray of shape (n_items,) or (n_items, n_features)
        The published item catalogue, sorted.
    user_embeddings_, user_biases_ : ndarray of shape (n_users_, n_components), (n_users_,)
        Personal user embeddings and biases (local), aligned with ``user_ids_``.
    local_only_ : bool
        True when the plan predicted a useless fit (:ref:`User Guide <adaptive_mf>`).
    user_ids_ : ndarray of shape (n_users_,)
        Sorted user ids seen in ``fit`` / ``personalize``.
    n_users_, n_items_, n_iter_, n_features_in_ : int
        Users in ``fit``, published items, alternations run, columns of ``X``.
    privacy_report_ : PrivacyReport
        Budget plan, noise multipliers, sensitivities and the spent epsilon.

    See Also
    --------
    skdpp.datasets.make_skewed_ratings : The paper's synthetic skewed data.
    skdpp.datasets.load_movielens : MovieLens loader.
    skdpp.metrics.recall_at_k : Recall@k of :meth:`recommend` (App. D.1).

    Notes
    -----
    **Guarantee.** User-level (ε, δ)-DP, replace-one-user (public number of users), for
    every released value (``item_ids_`` unless ``items`` is given; ``"observed"`` is
    reported as not covered); user embeddings and biases are local (joint DP).

    **Budget plan** (Gaussian, calibrated jointly; sensitivities in the
    :ref:`User Guide <adaptive_mf>`): ``clip`` (binary searches of the ``"auto"``
    bounds), ``mean``, ``counts``, ``item_bias``, ``items`` (``2T`` releases with ALS,
    ``5T`` with SGD), ``ridge``.

    **Deviations from the paper**: ridge added after the noise; per-user budget
    normalisation by default; replace-one-user; added biases, private catalogue and
    ``"auto"`` bounds; per-rating gradient clipping in Alg. 2.

    References
    ----------
    .. [1] W. Krichene, P. Jain, S. Song, M. Sundararajan, A. Thakurta, L. Zhang.
       "Multi-Task Differential Privacy Under Distribution Skew". ICML 2023.
       arXiv:2302.07975. Alg. 1-3, eq. (11)-(12), App. B-D.
    .. [2] S. Chien, P. Jain, W. Krichene, S. Rendle, S. Song, A. Thakurta, L. Zhang.
       "Private Alternating Least Squares: Practical Private Matrix Completion with
       Tighter Rates". ICML 2021.
    .. [3] S. Gopi, P. Gulhane, J. Kulkarni, J. H. Shen, M. Shokouhi, S. Yekhanin.
       "Differentially Private Set Union". ICML 2020.

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

    _algorithm = adaptive_mf
    _parameter_constraints = {
        **BasePersonalizedEstimator._parameter_constraints,
        **{name: [_POSITIVE] for name in ("user_budget", "reg", "personal_ridge")},
        **{name: ["boolean"] for name in ("center", "user_bias", "item_bias")},
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "n_iter": [Interval(Integral, 1, None, closed="left")],
        "weighting": [StrOptions({"adaptive", "uniform", "tail"})],
        "weight_normalization": [StrOptions({"clip", "budget"})],
        "solver": [StrOptions({"als", "sgd"})],
        "mu": [Interval(Real, 0, None, closed="left")],
        "embedding_ridge": [_POSITIVE, StrOptions({"auto"})],
        "clip_norm": [_POSITIVE, None],
        "rating_clip": [_POSITIVE, StrOptions({"auto"}), None],
        "mean_clip": [_POSITIVE, StrOptions({"auto"})],
        "count_cap": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "budget_shares": [dict, None],
        "items": ["array-like", StrOptions({"observed"}), None],
        "verbose": ["verbose"],
    }
    _personal_attributes = ("user_embeddings_", "user_biases_")
    _clip_bounds = ("clip_norm", "rating_clip")

    def __init__(self, *, n_components=10, epsilon=1.0, delta=1e-6, weighting="adaptive",
                 mu=0.25, user_budget=20.0, weight_normalization="budget", solver="als",
                 n_iter=5, reg=1.0, personal_ridge=5.0, embedding_ridge="auto",
                 clip_norm=0.1, rating_clip="auto", center=True, user_bias=True,
                 item_bias=True, mean_clip="auto", count_cap="auto", budget_shares=None,
                 items=None, verbose=0, random_state=None):
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
        self.personal_ridge = personal_ridge
        self.embedding_ridge = embedding_ridge
        self.clip_norm = clip_norm
        self.rating_clip = rating_clip
        self.center = center
        self.user_bias = user_bias
        self.item_bias = item_bias
        self.mean_clip = mean_clip
        self.count_cap = count_cap
        self.budget_shares = budget_shares
        self.items = items
        self.verbose = verbose
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Generic checks pass no groups: every row is its own user and every
        # distinct row its own item, so predictions fall back to the DP mean.
        tags.regressor_tags.poor_score = True
        return tags

    # Validation: parameters, the item catalogue, the rating entries
    def _validate_privacy_params(self):
        super()._validate_privacy_params()  # clip_norm=None, rating_clip=None: epsilon=inf
        if not MIN_CLIP <= self.user_budget < np.inf:
            # a subnormal budget let rounding push one user's sum of w^2 to 1.4 x beta
            raise ValueError(
                f"user_budget must be finite and >= {MIN_CLIP:g} (below, rounding can exceed "
                f"the stated sensitivity); got {self.user_budget!r}. Only its ratio to `reg` "
                "matters for adaptive weights: rescale both.")
        if self.weighting in ("uniform", "tail") and self.user_budget < 1:
            raise ValueError(
                f"weighting={self.weighting!r} keeps floor(user_budget) items per user, so "
                f"user_budget must be >= 1; got {self.user_budget!r}. Pass user_budget=k.")
        if self.items is None and self.epsilon != np.inf and self.delta <= 0:
            raise ValueError(
                f"items=None selects the item catalogue privately and needs delta > 0; got "
                f"delta={self.delta!r}. Pass delta > 0, or a public catalogue items=[...].")

    def _validate_data_kwargs(self):
        return {"dtype": None, "y_numeric": True}

    def _public_catalogue_keys(self, X):
        """Sorted unique keys of the public ``items`` (none if not public)."""
        if self._catalogue_kind() != "public":
            return _item_keys(X)[:0]
        catalogue = np.asarray(self.items)
        if catalogue.ndim == 1:
            catalogue = catalogue[:, None]
        if catalogue.ndim != 2 or catalogue.shape[0] == 0 or catalogue.shape[1] != X.shape[1]:
            raise ValueError(f"`items` must hold at least one id, each with {X.shape[1]} "
                             f"column(s) like X; got shape {np.asarray(self.items).shape}.")
        return _factorise_keys(_item_keys(catalogue))[0].copy()

    def _entry_data(self, data, codes, code_keys, n_public, id_dtype):
        """``data`` as merged (user, item, rating) entries of the item ``codes`` (keys
        ``code_keys``, the ``n_public`` public ones first), with the ids shown to users."""
        n_codes = int(code_keys.shape[0])
        user, item, rating = aggregate_entries(data.index.codes, codes, data.y, n_codes)
        if code_keys.dtype.kind == "V":  # multi-column rows (see _item_keys)
            ids = code_keys.view(np.float64).reshape(-1, data.meta["n_features"]).copy()
        else:  # integer ids stay ints
            ids = np.asarray(code_keys).copy()
            ids = ids.astype(id_dtype) if np.dtype(id_dtype).kind in "biu" else ids
        kind = self._catalogue_kind()
        n_items = {"private": None, "public": n_public, "observed": n_codes}[kind]
        return FitData(
            X=item[:, None], y=rating, index=UserIndex(data.index.users, user),
            meta={**data.meta, "n_items": n_items, "n_item_codes": n_codes},
            attributes={**data.attributes, "_code_keys": code_keys, "_code_ids": ids,
                        "_seen": _seen_matrix(user, item, data.index.n_users, n_codes)})

    def _validate_fit_data(self, X, y, groups):
        # sklearn's finiteness check sums y: an overflow warning would leak (DESIGN 7)
        with np.errstate(over="ignore", invalid="ignore"):
            data = super()._validate_fit_data(X, y, groups)
        X = data.X
        if groups is not None and X.shape[1] > 1:  # public shapes only (issue 13, item 4)
            warnings.warn(
                f"AdaptiveWeightMF got X with {X.shape[1]} columns: X must be one column of "
                "item ids, with the user ids in groups= (e.g. fit(df[['item']], df['rating'], "
                "groups=df['user'])). With several columns every distinct row of X is "
                "treated as one item.", UserWarning, stacklevel=3)
        # Internal codes (public catalogue first); only the published catalogue is released.
        public_keys = self._public_catalogue_keys(X)
        codes, code_keys = _encode_items(public_keys, X)
        return self._entry_data(data, codes, code_keys, int(public_keys.shape[0]), X.dtype)

    # skdpp.distributed validates each partition separately; these three make its
    # item codes those of validating all rows at once, whatever the partitioning.
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
        return self._entry_data(data, remap[data.X[:, 0]],
                                np.concatenate([code_keys[:n_public], vocabulary]), n_public,
                                data.attributes["_code_ids"].dtype)

    def _make_blocks(self, data, randomness):
        # Entries of whole users, each user's entries sorted by item code.
        return entry_blocks(data.index.codes, data.X[:, 0], data.y, data.index.users,
                            data.meta["n_item_codes"])

    def _set_fitted_attributes(self, attributes):
        # Keep only the published items (ids, lookup keys, seen-matrix columns).
        attributes = dict(attributes)
        published = attributes.pop("_published")
        attributes["_catalogue_keys"] = attributes.pop("_code_keys")[published]
        attributes["item_ids_"] = attributes.pop("_code_ids")[published]
        attributes["n_items_"] = int(published.shape[0])
        attributes["_seen"] = attributes["_seen"].tocsc()[:, published].tocsr()
        super()._set_fitted_attributes(attributes)

    # The algorithm configuration and the personal fit
    def _catalogue_kind(self):
        if self.items is None:
            return "private"
        return "observed" if isinstance(self.items, str) else "public"

    def _fit_config(self, meta):
        """The algorithm's :class:`~._algorithms.adaptive_mf.MFConfig` (parameters only)."""
        def opt(value):
            return value if value is None or isinstance(value, str) else float(value)

        catalogue = self._catalogue_kind()
        cap = self.count_cap
        if isinstance(cap, str):  # "auto": no sensitivity to bound without noise
            cap = None if self.epsilon == np.inf else adaptive_mf.DEFAULT_COUNT_CAP
        defaults = dict(adaptive_mf.DEFAULT_SHARES)
        if catalogue == "private":
            defaults["counts"] = adaptive_mf.PRIVATE_CATALOGUE_COUNT_SHARE
        return adaptive_mf.MFConfig(
            epsilon=float(self.epsilon), delta=float(self.delta),
            n_components=int(self.n_components), reg=float(self.reg),
            user_bias=bool(self.user_bias), item_bias=bool(self.item_bias),
            clip_norm=opt(self.clip_norm), rating_clip=opt(self.rating_clip),
            center=bool(self.center), mean_clip=opt(self.mean_clip),
            count_cap=None if cap is None else int(cap), weighting=self.weighting,
            mu=float(self.mu), user_budget=float(self.user_budget),
            weight_normalization=self.weight_normalization, solver=self.solver,
            n_iter=int(self.n_iter), personal_ridge=float(self.personal_ridge),
            embedding_ridge=opt(self.embedding_ridge), catalogue=catalogue,
            shares=phase_shares(self.budget_shares, defaults, owner="AdaptiveWeightMF"),
            verbose=int(self.verbose))

    def _fit_personal(self, X, y, index):
        """User embeddings and biases from the released values and each user's ratings."""
        codes, code_keys = _encode_items(self._catalogue_keys, X)
        n_codes = int(code_keys.shape[0])
        user, item, rating = aggregate_entries(index.codes, codes, y, n_codes)
        published = item < self.n_items_
        self._pending_seen = _seen_matrix(user[published], item[published], index.n_users,
                                          self.n_items_)
        U, bias = adaptive_mf.fit_personal(
            entry_blocks(user, item, rating, index.users, n_codes), n_codes, self,
            self._fit_config(None))
        return {"user_embeddings_": U, "user_biases_": bias}

    def _merge_personal(self, new_ids, personal):
        # the seen rows of the kept old users and of the new ones, in user_ids_ order
        old_ids, keep = self.user_ids_, ~np.isin(self.user_ids_, new_ids)
        super()._merge_personal(new_ids, personal)
        position = np.searchsorted(self.user_ids_, np.concatenate([old_ids[keep], new_ids]))
        seen = sp.vstack([self._seen[keep], self._pending_seen], format="csr")
        self._seen = seen[np.argsort(position)]
        del self._pending_seen

    # Prediction
    def predict(self, X, groups=None):
        """Predict ratings: ``mean_ + b_item + b_user + <u_user, v_item>``.

        Parameters
        ----------
        X : array-like of shape (n_samples, 1) or (n_samples, n_features)
            Item ids, as in :meth:`fit`.
        groups : array-like of shape (n_samples,), default=None
            User id of each row. Unseen users get ``mean_`` plus the item's bias; items
            outside the published catalogue get no item term.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)

        Raises
        ------
        ValueError
            If a prediction is not finite (beyond the float64 range); names the rows.
        """
        return self._predict_unchecked(X, groups)

    def _predict_unchecked(self, X, groups=None):
        """:meth:`predict` without the floating-point guard and the finiteness check."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=None)
        users = self._user_codes(groups, X.shape[0])
        items = _lookup_items(self._catalogue_keys, X)  # -1: not published
        pred = np.full(X.shape[0], self.mean_, dtype=np.float64)
        known = users >= 0
        if getattr(self, "local_only_", False):  # useless: own means; new users mean_
            pred[known] = self.user_biases_[users[known]]
            return pred
        published = items >= 0
        pred[published] += self.item_biases_[items[published]]
        pred[known] += self.user_biases_[users[known]]
        both = known & published
        if both.any():
            score = paired_dots(self.user_embeddings_, users[both], self.item_embeddings_,
                                items[both])
            if self.rating_clip_ is not None:
                score = np.clip(score, -self.rating_clip_, self.rating_clip_)
            pred[both] += score
        return pred

    def _item_popularity(self):
        """Popularity of the published items (or None): the inverse-variance combination of
        ``item_counts_`` and ``item_weighted_counts_ / r``, ``r = sum W / sum n``
        (post-processing of releases and public noise levels)."""
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
            Skip the items each user rated in ``fit`` / ``personalize`` (kept with the
            personal parts: personal data, not a release).
        ranking : {"blend", "rating", "popularity"}, default="blend"
            Score of item ``i`` for user ``j``: ``"blend"``, ``<u_j, v_i> / rating_clip_ +
            popularity_weight * log(max(n_i, 1))`` with ``n_i`` the released popularity
            (:ref:`User Guide <adaptive_mf>`); ``"rating"``, the predicted ``b_i + <u_j, v_i>``;
            ``"popularity"``, ``n_i``. Unseen users get ``n_i`` (``"rating"``:
            ``item_counts_``, or catalogue order). Without released counts ``"blend"`` is
            ``"rating"`` and ``"popularity"`` raises.
        popularity_weight : float, default=1.0
            Weight ``>= 0`` of the log popularity in ``"blend"`` (``0``: the affinity alone).

        Returns
        -------
        item_ids : ndarray of shape (n_users_query, n_items[, n_features])
            Recommended item ids, best first.

        Notes
        -----
        Post-processing: a user's list depends on the released values, the plan's noise
        levels and that user's own personal part and rated items only (billboard model).
        """
        check_is_fitted(self)
        groups = np.asarray(groups)
        if groups.ndim != 1:
            raise ValueError(f"groups must be a 1-D array of user ids; got shape {groups.shape}.")
        if not isinstance(n_items, Integral) or isinstance(n_items, bool) or n_items < 1:
            raise ValueError(f"n_items must be a positive integer; got {n_items!r}.")
        if ranking not in ("blend", "rating", "popularity"):
            raise ValueError(f"ranking must be one of 'blend', 'rating', 'popularity'; got "
                             f"{ranking!r}.")
        if isinstance(popularity_weight, bool) or not isinstance(popularity_weight, Real) \
                or not 0 <= popularity_weight < np.inf:
            raise ValueError(f"popularity_weight must be a finite number >= 0; got "
                             f"{popularity_weight!r}.")
        if ranking == "popularity" and self.item_counts_ is None:
            raise ValueError("ranking='popularity' needs the released item counts; this fit "
                             "released none (public catalogue, weighting='uniform', "
                             "solver='als'). Use ranking='rating'.")
        if self.n_items_ == 0:
            raise ValueError("The published item catalogue is empty: nothing to recommend. "
                             "Use a larger epsilon or a public catalogue items=[...].")
        n_top = min(int(n_items), self.n_items_)
        codes = self._user_codes(groups, groups.shape[0])
        popularity = self._item_popularity()
        if ranking == "rating" or popularity is None:
            ranking = "rating"  # "blend" without released counts
            # Cold users: the noisy counts (catalogue order without counts).
            cold = (-np.arange(self.n_items_, dtype=np.float64) if self.item_counts_ is None
                    else np.asarray(self.item_counts_, dtype=np.float64))
        elif ranking == "popularity":
            cold = popularity
        else:  # blend; cold users (no embedding): popularity alone
            unit = 1.0 if self.rating_clip_ is None else float(self.rating_clip_)
            cold = popularity_weight * np.log(np.maximum(popularity, 1.0))
        out = np.empty((groups.shape[0], n_top), dtype=np.int64)
        block = max(1, (2**24) // max(1, self.n_items_))
        for start in range(0, groups.shape[0], block):  # memory blocks
            c = codes[start:start + block]
            kn = c >= 0
            scores = np.tile(cold, (c.shape[0], 1))
            if kn.any():
                sub = scores[kn]  # "popularity": the cold scores
                if ranking == "rating":
                    sub = (self.user_embeddings_[c[kn]] @ self.item_embeddings_.T
                           + self.item_biases_)
                elif ranking == "blend":
                    sub = (self.user_embeddings_[c[kn]] @ self.item_embeddings_.T) / unit
                    sub += cold
                if exclude_seen:
                    sub[self._seen[c[kn]].toarray() > 0] = -np.inf
                scores[kn] = sub
            top = np.argpartition(-scores, n_top - 1, axis=1)[:, :n_top]
            order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
            out[start:start + block] = np.take_along_axis(top, order, axis=1)
        return self.item_ids_[out]

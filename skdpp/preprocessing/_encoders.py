"""PrivateOneHotEncoder: categories selected under user-level DP."""

import itertools
import math
from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_feature_names_in, check_is_fitted, validate_data

from ..linear_model._labels import label_codes, label_counts_block, labels_sensitivity
from ..privacy import BudgetPlan
from ..privacy._release import THRESHOLD_DELTA_FRACTION
from ..utils._executor import LocalExecutor
from ..utils._grouped import UserIndex, make_blocks
from ._base import BasePrivateTransformer

__all__ = ["PrivateOneHotEncoder"]

#: The phase of the category selection.
SELECT_PHASE = "categories"
#: Suffix of the column of unknown categories (``"infrequent_if_exist"``).
INFREQUENT = "infrequent_sklearn"


class PrivateOneHotEncoder(BasePrivateTransformer):
    """Encode categorical columns as one-hot columns; categories selected under user-level DP.

    The user-level private :class:`sklearn.preprocessing.OneHotEncoder`: each column's
    categories are chosen by private partition selection, never publishing a rare
    category of one user. Read more in the :ref:`User Guide <preprocessing>`.

    Parameters
    ----------
    categories : "auto" or list of array-like, default="auto"
        ``"auto"``: selected privately per column. A list (one array per
        column): public categories (free; nothing released).
    max_categories_per_user : int, default=4
        Categories one user contributes to per column (its most frequent,
        ties by category order); a larger cap raises the sensitivity.
    separator : str, default=None
        Multi-label string columns: with ``separator="|"`` a cell
        ``"Comedy|Drama"`` is encoded multi-hot; ``None``: one category per cell.
    handle_unknown : {"ignore", "infrequent_if_exist", "error"}, default="ignore"
        A value outside ``categories_`` in ``transform``: all-zero columns;
        a 1 in an extra column ``<feature>_infrequent_sklearn``; or a
        ``ValueError`` (not the default: a ``fit_transform`` raising on one
        user's unselected rare category would reveal it).
    sparse_output : bool, default=True
        Return a CSR matrix (scikit-learn's default) or a dense array.
    dtype : number type, default=np.float64
        Desired dtype of the output.
    epsilon : float, default=1.0
        Privacy budget ε in ``(0, inf]``; ``np.inf`` keeps every present
        category (no noise, no threshold).
    delta : float, default=1e-6
        Privacy parameter δ in ``[0, 1)``; ``0.25 delta`` is the threshold's
        δ, the Gaussian counts are calibrated to the rest.
    random_state : int, RandomState instance or None, default=None
        Seeds the privacy noise (``None``: fresh OS entropy).

    Attributes
    ----------
    categories_ : list of ndarray
        The published categories of each column, sorted (the output order).
    n_users_ : int
    privacy_report_ : PrivacyReport
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when ``X`` has feature names that are all strings.

    See Also
    --------
    sklearn.preprocessing.OneHotEncoder : the non-private transformer.

    Notes
    -----
    Guarantee: :class:`~skdpp.preprocessing._base.BasePrivateTransformer`. One partition
    selection over the (column, category) candidates of every ``"auto"`` column
    (:meth:`skdpp.privacy.Releaser.select_partitions`): a user creates at most ``L =
    max_categories_per_user * n_columns`` candidates, so the count vector has L2
    sensitivity ``sqrt(2 L)``; a count with noise ``sigma = z sqrt(2 L)`` is kept iff
    above ``1 + sigma Phi^-1(1 - delta_t / L)``, so a category of the replaced user only
    is published with probability at most ``delta_t = 0.25 delta``.

    A column's kind follows its dtype: numeric categories must be finite,
    others are compared as strings. Not supported: ``drop``,
    ``min_frequency``, ``max_categories`` (the selection plays their role).

    References
    ----------
    .. [1] Gopi, S., Gulhane, P., Kulkarni, J., Shen, J. H., Shokouhi, M. and
           Yekhanin, S. (2020). Differentially Private Set Union. ICML.
    .. [2] Desfontaines, D., Voss, J., Gipson, B. and Mandayam, C. (2022).
           Differentially private partition selection. PoPETs.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.preprocessing import PrivateOneHotEncoder
    >>> rng = np.random.default_rng(0)
    >>> groups = np.arange(3000)
    >>> genres = rng.choice(["Comedy", "Drama", "Comedy|Drama", "Horror"], size=3000)
    >>> genres[0] = "Secret"            # one user's rare category
    >>> enc = PrivateOneHotEncoder(separator="|", random_state=0)
    >>> enc = enc.fit(genres.reshape(-1, 1), groups=groups)
    >>> enc.categories_
    [array(['Comedy', 'Drama', 'Horror'], dtype='<U6')]
    >>> enc.transform([["Drama|Comedy"], ["Secret"]]).toarray()
    array([[1., 1., 0.],
           [0., 0., 0.]])
    """

    _parameter_constraints: dict = {
        **BasePrivateTransformer._parameter_constraints,
        "categories": [StrOptions({"auto"}), list],
        "max_categories_per_user": [Interval(Integral, 1, None, closed="left")],
        "separator": [str, None],
        "handle_unknown": [StrOptions({"ignore", "infrequent_if_exist", "error"})],
        "sparse_output": ["boolean"],
        "dtype": "no_validation",
    }

    def __init__(self, *, categories="auto", max_categories_per_user=4, separator=None,
                 handle_unknown="ignore", sparse_output=True, dtype=np.float64,
                 epsilon=1.0, delta=1e-6, random_state=None):
        self.categories = categories
        self.max_categories_per_user = max_categories_per_user
        self.separator = separator
        self.handle_unknown = handle_unknown
        self.sparse_output = sparse_output
        self.dtype = dtype
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state

    def _columns(self, X, reset):
        """The validated columns of ``X`` (a list of 1-D arrays) and its row count."""
        frame = hasattr(X, "iloc") and hasattr(X, "dtypes")
        Xv = validate_data(self, X, dtype=None, ensure_all_finite=False, reset=reset)
        dtypes = X.dtypes if frame else [Xv.dtype] * Xv.shape[1]
        kinds = ["number" if dt.kind in "biuf" else "str" for dt in dtypes]
        if reset:
            self._kinds = kinds
        elif not frame:  # an ndarray after a fit on a frame: the fitted kinds rule
            kinds = self._kinds
        columns = []
        for j, kind in enumerate(kinds):
            col = np.asarray(X.iloc[:, j].to_numpy() if frame else Xv[:, j])
            if kind == "number":
                if col.dtype.kind not in "biuf":
                    col = col.astype(np.float64)
                if col.dtype.kind == "f" and not np.isfinite(col).all():
                    raise ValueError(
                        f"Input X contains NaN or infinity in the numeric column {j}: "
                        f"numeric categories must be finite (the input domain of "
                        f"{type(self).__name__}). Impute first, or pass the column as "
                        f"strings (then 'nan' is a category).")
            else:
                col = col.astype(str)
            columns.append(col)
        return columns, Xv.shape[0]

    def _tokens(self, col):
        """``(rows, tokens)``: the categories of each cell (several with ``separator``)."""
        if self.separator is None or col.dtype.kind != "U":
            return np.arange(col.shape[0]), col
        parts = np.char.split(col, self.separator)
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=parts.shape[0])
        tokens = np.array(list(itertools.chain.from_iterable(parts)), dtype=str)
        return np.repeat(np.arange(col.shape[0]), lengths), tokens

    def _public_categories(self, n_columns):
        if isinstance(self.categories, str):
            return None
        if len(self.categories) != n_columns:
            raise ValueError(
                f"`categories` must hold one array of categories per column of X: got "
                f"{len(self.categories)} arrays for {n_columns} columns. Pass one per "
                f"column, or categories='auto' (selected privately).")
        return [np.sort(np.unique(np.asarray(c))) for c in self.categories]

    def _validate_fit_input(self, X):
        columns, n_rows = self._columns(X, reset=True)
        return columns, n_rows, len(columns)

    def _budget_plan(self, meta):
        plan = BudgetPlan(self.epsilon, self.delta)
        n_columns = meta["n_features"]
        if self._public_categories(n_columns) is None and n_columns:
            t_delta = THRESHOLD_DELTA_FRACTION * self.delta if self.epsilon != np.inf else 0.0
            plan.add(SELECT_PHASE, share=0.5, threshold_delta=t_delta)
        return plan

    def _fit_core(self, columns, index, release, n_users):
        public = self._public_categories(len(columns))
        if public is not None:
            return ({"categories_": public}, (),
                    ("categories given: public, nothing is released for them.",))
        labels, counts = zip(*[self._capped_counts(col, index) for col in columns])
        L = int(self.max_categories_per_user) * max(len(columns), 1)  # candidates per user
        keep, _ = release.select_partitions(
            SELECT_PHASE, np.concatenate(counts), sensitivity=labels_sensitivity(L),
            max_contribution=1.0, max_partitions=L, clip_norm=math.sqrt(L))
        keep = keep & (np.concatenate(counts) > 0)
        cuts = np.cumsum([0] + [lab.shape[0] for lab in labels])
        cats = [labels[j][keep[cuts[j]:cuts[j + 1]]] for j in range(len(columns))]
        notes = (
            f"Categories selected by private partition selection: each user counts once for "
            f"each of at most max_categories_per_user={self.max_categories_per_user} of its "
            f"categories per column (L = {L} candidates per user over all columns; "
            f"sensitivity sqrt(2 L)); a candidate held by the replaced user only is "
            f"published with probability at most the threshold delta.",)
        return {"categories_": cats}, ("categories_",), notes

    def _capped_counts(self, col, index):
        """``(labels, counts)`` of one column's categories (user counts, capped)."""
        rows, tokens = self._tokens(col)
        if rows.shape[0] == 0:
            return col[:0], np.empty(0)
        pairs = UserIndex.from_groups(index.codes[rows], rows.shape[0])
        blocks = make_blocks(np.empty((rows.shape[0], 0)), tokens, pairs,
                             row_keys=np.zeros(rows.shape[0], dtype=np.uint64))
        cap = int(self.max_categories_per_user)
        found = LocalExecutor(blocks).map(label_counts_block, cap)
        return found.labels, found.counts

    def transform(self, X):
        """One-hot (multi-hot with ``separator``) encoding with the published categories.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        X_out : {ndarray, sparse matrix} of shape (n_samples, n_encoded_features)
        """
        check_is_fitted(self)
        columns, n = self._columns(X, reset=False)
        extra = self.handle_unknown == "infrequent_if_exist"
        rows_all, cols_all, offset = [], [], 0  # validate_data: at least one column
        for j, col in enumerate(columns):
            cats = self.categories_[j]
            rows, tokens = self._tokens(col)
            codes = label_codes(tokens, cats) if cats.shape[0] else \
                np.full(tokens.shape[0], -1, dtype=np.int64)
            unknown = codes < 0
            if unknown.any() and self.handle_unknown == "error":
                shown = ", ".join(map(repr, np.unique(tokens[unknown])[:5].tolist()))
                raise ValueError(
                    f"Found unknown categories [{shown}] in column {j} during transform "
                    f"(not in categories_[{j}]). Pass handle_unknown='ignore' (all-zero "
                    f"columns) or 'infrequent_if_exist' (an extra column for them).")
            if extra:
                codes = np.where(unknown, cats.shape[0], codes)
                unknown = np.zeros_like(unknown)
            rows_all.append(rows[~unknown])
            cols_all.append(codes[~unknown] + offset)
            offset += cats.shape[0] + int(extra)
        rows, cols = np.concatenate(rows_all), np.concatenate(cols_all)
        out = sp.csr_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(n, offset))
        out.sum_duplicates()
        out.data[:] = 1  # a category repeated in one cell is still one hot
        out = out.astype(self.dtype)
        return out if self.sparse_output else out.toarray()

    def get_feature_names_out(self, input_features=None):
        """Output feature names: ``<feature>_<category>`` (and ``<feature>_infrequent_sklearn``).

        Parameters
        ----------
        input_features : array-like of str or None, default=None

        Returns
        -------
        feature_names_out : ndarray of str objects
        """
        check_is_fitted(self)
        names = _check_feature_names_in(self, input_features)
        out = []
        for name, cats in zip(names, self.categories_):
            out.extend(f"{name}_{c}" for c in cats.tolist())
            if self.handle_unknown == "infrequent_if_exist":
                out.append(f"{name}_{INFREQUENT}")
        return np.asarray(out, dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        tags.transformer_tags.preserves_dtype = []
        return tags

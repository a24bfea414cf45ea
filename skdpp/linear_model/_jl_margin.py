"""The estimator :class:`JLMarginClassifier` (Snedeker, Zhou & Bassily 2025, Alg. 3);
the algorithm is :mod:`skdpp.linear_model._algorithms.jl_margin`."""

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import (BasePersonalizedEstimator, PersonalizedClassifierMixin,
                    _check_finite_output, _reject_booleans, linear_predictions,
                    scaled_linear_scores)
from ..privacy._plan import phase_shares
from ._algorithms import jl_margin
from ._labels import check_label_domain

__all__ = ["JLMarginClassifier"]


class JLMarginClassifier(PersonalizedClassifierMixin, BasePersonalizedEstimator):
    """Personalized linear classifier with a DP shared embedding learned by
    the exponential mechanism in a Johnson-Lindenstrauss space.

    Algorithm 3 of Snedeker, Zhou & Bassily (2025): rows are projected by a
    random sign matrix ``M``, a frame ``U~`` is selected by the exponential
    mechanism with a margin score, ``U_priv = M^T U~`` is released, and each
    user fits its head ``v_i`` and bias ``b_i`` on its own rows (decision
    function ``<x, U_priv v_i> + b_i``). Label set, clip radius and cold start
    are chosen privately: raw data work with only ``epsilon`` set.

    Read more in the :ref:`User Guide <jl_margin>`.

    Parameters
    ----------
    n_components : int, default=3
        Dimension ``k >= 1`` of the shared embedding.
    jl_dim : int or "auto", default="auto"
        Dimension ``k' >= n_components`` of the JL space. ``"auto"``: Alg. 3's
        rule, capped at ``min(n_features, 256)`` (the cap with ``margin="auto"``).
    margin : "auto" or float, default="auto"
        ``"auto"``: the limit ``rho -> 0+`` (the 0-1 loss, scale-free). A float
        ``> 0``: the margin relative to the clip radius ``r``.
    clip_norm : "auto", float or None, default="auto"
        Row-norm bound ``r > 0``. ``"auto"``: a private quantile of the users'
        RMS row norms. ``None`` only with ``epsilon=np.inf``.
    clip_quantile : float in (0, 1], default=0.5
        Quantile released by ``clip_norm="auto"``.
    n_candidates : int, default=256
        Number ``>= 1`` of candidates of the exponential mechanism.
    candidates : {"subspace", "random"}, default="subspace"
        Frames around the top eigenvectors of a released second-moment matrix,
        or data-independent Haar-random frames.
    n_directions : int, default=64
        Public unit directions (``>= 2``) of the inner minimum over heads
        (``n_components=1``: always 2).
    fit_intercept : bool, default=True
        Per-user bias ``b_i`` (kept if it lowers the user's logistic loss by
        more than 2 nats) and a DP cold-start bias; ``False``: a cold-start head.
    personal_rows : {"all", "holdout"}, default="all"
        Releases and heads on all rows, or on ``S^0`` and ``S^1`` (Alg. 3).
    personal_ridge : float >= 0, default=1.0
        Shrinkage of each head toward the cold start, in pseudo-rows.
    multiclass : {"ovr", "raise"}, default="ovr"
        More than two classes: one binary problem per class, or ``ValueError``.
    classes : array-like, None or "observed", default=None
        The label set. ``None``: selected privately (phase ``"labels"``). An
        array: public, free. ``"observed"``: the labels in ``y``, NOT covered.
    max_classes_per_user : int, default=2
        Labels (``>= 1``) a user contributes to the label selection.
    budget_shares : dict or None, default=None
        Shares of phases ``"labels"`` (0.05), ``"clip"`` (``"auto"``),
        ``"subspace"`` (0.7), ``"cold_start"`` (0.05); ``"selection"`` the rest.
    epsilon : float, default=1.0
        Privacy budget in (0, inf]; ``np.inf``: no noise (the exponential
        mechanism becomes the argmax).
    delta : float, default=1e-6
        Privacy parameter in [0, 1); positive when a phase is Gaussian (all
        but ``selection`` by default; pure ε-DP set-up: :ref:`User Guide <jl_margin>`).
    random_state : int, RandomState instance or None, default=None
        Seeds the public ``M``, directions and candidates, the key of the split
        and the noise; ``None``: OS entropy.
    verbose : int, default=0
        Print each phase's progress (public values only) when positive.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The label set (selected privately by default).
    clip_norm_ : float or None
        The clip radius ``r`` used.
    jl_dim_ : int
        The JL dimension ``k'`` used.
    jl_matrix_ : ndarray of shape (jl_dim_, n_features_in_)
        The JL matrix ``M`` (public randomness).
    embeddings_ : ndarray of shape (n_problems, n_features_in_, n_components)
        The released ``U_priv`` per binary problem (1 for two classes).
    cold_start_heads_, cold_start_intercepts_ : ndarray of shape \
            (n_problems, n_components), (n_problems,)
        Released cold-start heads (0 with ``fit_intercept``) and biases (0 without).
    heads_, intercepts_ : ndarray of shape (n_users_, n_problems, n_components), \
            (n_users_, n_problems)
        Personal heads ``v_i`` and biases ``b_i`` (local), aligned with ``user_ids_``.
    user_ids_, n_users_, n_features_in_, privacy_report_
        As for :class:`~skdpp.linear_model.PrivateFedRepRegressor`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Feature names, when ``X`` has string column names.

    See Also
    --------
    PrivateFedRepRegressor : private shared-representation regression (Alg. 1).

    Notes
    -----
    **Guarantee.** User-level (ε, δ)-DP under replace-one-user (public number
    of users) for every value that depends on more than one user; heads and
    biases are local (joint DP). ``classes="observed"`` is outside the
    guarantee (said in the report).

    **Budget plan** (``P`` binary problems, one release of all of them per
    phase; calibrated once; replace-one-user sensitivities, :ref:`User Guide <jl_margin>`):

    * ``labels``: distinct-user counts per label, ``sqrt(2 L)``,
      ``L = max_classes_per_user``, threshold ``delta / 4``;
    * ``clip``: counts of users, 1 (:ref:`auto_rules`);
    * ``subspace``: ``sum_i u_i u_i^T`` of unit vectors, ``sqrt(2 P)`` (Frobenius);
    * ``selection`` (Alg. 3, line 4): exponential mechanism, score
      sensitivity ``P / n`` for every margin;
    * ``cold_start``: Gaussian class fractions, 1 (``P = 1``) or ``sqrt(2)``;
      without ``fit_intercept`` an exponential mechanism, ``P / n``.

    **Deviations from the paper** (a finite candidate set, the inner minimum
    over public directions, ``rho -> 0+``, logistic heads, ``personal_rows``;
    none changes a sensitivity) and the input domain: :ref:`User Guide <jl_margin>`.

    References
    ----------
    .. [1] Snedeker, C., Zhou, X. and Bassily, R. (2025). Private Model
       Personalization Revisited. ICML 2025. arXiv:2506.19220.
    .. [2] McSherry, F. and Talwar, K. (2007). Mechanism Design via
       Differential Privacy. FOCS 2007.
    .. [3] Gopi, S. et al. (2020). Differentially Private Set Union. ICML 2020.
       arXiv:2002.09745.
    .. [4] Desfontaines, D., Voss, J., Gipson, B. and Mandayam, C. (2022).
       Differentially private partition selection. PoPETs. arXiv:2006.03684.

    Examples
    --------
    >>> from skdpp.datasets import make_personalized_margin_classification
    >>> from skdpp import JLMarginClassifier
    >>> X, y, groups, info = make_personalized_margin_classification(
    ...     n_users=2000, n_features=20, n_components=1, margin=0.1,
    ...     n_test_samples_per_user=10, random_state=0)
    >>> clf = JLMarginClassifier(n_components=1, jl_dim=16, epsilon=2.0,
    ...                          n_candidates=64, random_state=0)
    >>> clf.fit(X, y, groups=groups).embeddings_.shape
    (1, 20, 1)
    >>> acc = clf.score(info.X_test, info.y_test, groups=info.groups_test)
    >>> bool(acc > 0.8)
    True
    >>> clf.privacy_report_.is_private
    True
    """

    _parameter_constraints: dict = {
        **BasePersonalizedEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "jl_dim": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "margin": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "clip_norm": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"}), None],
        "clip_quantile": [Interval(Real, 0, 1, closed="right")],
        "n_candidates": [Interval(Integral, 1, None, closed="left")],
        "candidates": [StrOptions({"subspace", "random"})],
        "n_directions": [Interval(Integral, 2, None, closed="left")],
        "fit_intercept": ["boolean"],
        "personal_rows": [StrOptions({"all", "holdout"})],
        "personal_ridge": [Interval(Real, 0, None, closed="left")],
        "multiclass": [StrOptions({"ovr", "raise"})],
        "classes": ["array-like", StrOptions({"observed"}), None],
        "max_classes_per_user": [Interval(Integral, 1, None, closed="left")],
        "budget_shares": [dict, None],
        "verbose": ["verbose"],
    }

    _personal_attributes = ("heads_", "intercepts_")
    _algorithm = jl_margin

    def __init__(self, *, n_components=3, jl_dim="auto", margin="auto", clip_norm="auto",
                 clip_quantile=0.5, n_candidates=256, candidates="subspace", n_directions=64,
                 fit_intercept=True, personal_rows="all", personal_ridge=1.0, multiclass="ovr",
                 classes=None, max_classes_per_user=2, budget_shares=None, epsilon=1.0,
                 delta=1e-6, random_state=None, verbose=0):
        self.n_components = n_components
        self.jl_dim = jl_dim
        self.margin = margin
        self.clip_norm = clip_norm
        self.clip_quantile = clip_quantile
        self.n_candidates = n_candidates
        self.candidates = candidates
        self.n_directions = n_directions
        self.fit_intercept = fit_intercept
        self.personal_rows = personal_rows
        self.personal_ridge = personal_ridge
        self.multiclass = multiclass
        self.classes = classes
        self.max_classes_per_user = max_classes_per_user
        self.budget_shares = budget_shares
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state
        self.verbose = verbose

    def _validate_data_kwargs(self):
        return {}  # labels may be strings

    def _public_classes(self):
        """The label set given by ``classes`` (sorted, unique), or None / "observed"."""
        if self.classes is None or isinstance(self.classes, str):  # None or "observed"
            return self.classes
        return np.unique(np.asarray(self.classes))

    def _validate_fit_data(self, X, y, groups):
        # sklearn's finiteness check sums X: an overflow warning would leak (DESIGN 7)
        with np.errstate(over="ignore", invalid="ignore"):
            data = super()._validate_fit_data(X, y, groups)
        _reject_booleans(self, ("margin", "clip_quantile", "personal_ridge"))
        classes = self._public_classes()
        if isinstance(classes, np.ndarray):
            if classes.ndim != 1 or classes.shape[0] < 2:
                raise ValueError(
                    f"`classes` must list at least 2 distinct labels, got {self.classes!r}.")
            if classes.shape[0] > 2 and self.multiclass == "raise":
                raise ValueError(
                    f"multiclass='raise' but `classes` has {classes.shape[0]} labels. Pass "
                    f"2 labels or multiclass='ovr'.")
        # The labels' input domain (User Guide), before any computation.
        check_label_domain(data.y, classes, estimator=type(self).__name__)
        if self.jl_dim != "auto" and int(self.jl_dim) < self.n_components:
            raise ValueError(
                f"jl_dim={self.jl_dim} is smaller than n_components={self.n_components}: "
                f"the JL space must hold a rank-{self.n_components} frame. Pass "
                f"jl_dim >= n_components or jl_dim='auto'.")
        return data

    def _fit_config(self, meta=None):
        """The frozen ``JLConfig``; rejects zero shares and ``delta=0`` with a Gaussian release."""
        shares = phase_shares(self.budget_shares, jl_margin.DEFAULT_SHARES,
                              owner=type(self).__name__)
        for name, share in shares.items():
            if share == 0:
                raise ValueError(
                    f"budget_shares[{name!r}] must be in (0, 1), got 0: the phase is part "
                    f"of the algorithm. Pass a positive share or leave the key out.")
        gaussian = [
            ("candidates='subspace'", self.candidates == "subspace", "candidates='random'"),
            ("fit_intercept=True", self.fit_intercept,
             "fit_intercept=False with candidates='random'"),
            ("classes=None (the private label selection)", self.classes is None,
             "the label set as `classes`"),
            ("clip_norm='auto' (a private quantile)", self.clip_norm == "auto",
             "a number as clip_norm")]
        for what, used, remedy in gaussian:
            if used and self.epsilon != np.inf and self.delta == 0:
                raise ValueError(
                    f"{what} uses the Gaussian mechanism and needs delta > 0; got delta=0. "
                    f"Pass delta > 0 (e.g. 1e-6) or {remedy} for a pure epsilon-DP fit.")
        return jl_margin.JLConfig(
            epsilon=float(self.epsilon), delta=float(self.delta),
            n_components=int(self.n_components), jl_dim=self.jl_dim,
            margin="auto" if isinstance(self.margin, str) else float(self.margin),
            clip_norm=self.clip_norm if self.clip_norm in (None, "auto")
            else float(self.clip_norm),
            clip_quantile=float(self.clip_quantile), n_candidates=int(self.n_candidates),
            candidates=self.candidates, n_directions=int(self.n_directions),
            holdout=self.personal_rows == "holdout", fit_intercept=bool(self.fit_intercept),
            personal_ridge=float(self.personal_ridge), classes=self._public_classes(),
            max_classes_per_user=int(self.max_classes_per_user),
            multiclass=self.multiclass, shares=tuple(sorted(shares.items())),
            verbose=int(self.verbose))

    def _make_blocks(self, data, randomness):
        return jl_margin.make_jl_blocks(data.X, data.y, data.index)

    def _validate_personal_input(self, X, y):
        X, y = validate_data(self, X, y, reset=False)
        # Labels are compared to the fitted classes_ by equality.
        check_label_domain(y, np.asarray(self.classes_), estimator=type(self).__name__)
        return X, y

    def _fit_personal(self, X, y, index):
        return jl_margin.fit_personal(X, y, index, self._fit_config(), self)

    def decision_function(self, X, groups=None):
        """Personalized decision values ``<x, U_priv v_i> + b_i``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to score.
        groups : array-like of shape (n_samples,), default=None
            User id of each row; unseen users (all with ``None``) use the
            cold-start head.

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            For two classes, positive values predict ``classes_[1]``; for
            more, one column per class (one-vs-rest).

        Raises
        ------
        ValueError
            If a decision value exceeds the float64 range (naming the rows).
        """
        X, scores, linear_parts = self._scores(X, groups)
        scores = linear_predictions(X, scores, linear_parts)
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def _scores(self, X, groups):
        """Validated ``X``, its plain decision values ``(n, n_problems)`` and their affine maps."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        codes = self._user_codes(groups, X.shape[0])
        known = codes >= 0
        V = np.tile(self.cold_start_heads_, (X.shape[0], 1, 1))
        V[known] = self.heads_[codes[known]]
        b = np.tile(self.cold_start_intercepts_, (X.shape[0], 1))
        b[known] = self.intercepts_[codes[known]]
        XU = np.einsum("nd,pdk->npk", X, self.embeddings_)
        scores = np.einsum("npk,npk->np", XU, V) + b

        def linear_parts(rows):  # row r, problem p: <x, U_p v_rp> + b_rp
            return np.einsum("pdk,rpk->rpd", self.embeddings_, V[rows]), b[rows]

        return X, scores, linear_parts

    def _label_scores(self, X, groups):
        """Decision values with the exact ones' signs and argmax (rows that overflow:
        :func:`skdpp.base.scaled_linear_scores`)."""
        X, scores, linear_parts = self._scores(X, groups)
        rows, scaled, _ = scaled_linear_scores(X, scores, linear_parts)
        if rows is not None:
            scores[rows] = scaled
        return scores

    def _labels(self, scores):
        if scores.shape[1] == 1:
            return self.classes_[(scores[:, 0] > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]

    def _predict_unchecked(self, X, groups=None):
        """:meth:`predict` without the guard and the finiteness check."""
        return self._labels(self._label_scores(X, groups))

    def predict(self, X, groups=None):
        """Predict class labels with each user's personal head.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to classify.
        groups : array-like of shape (n_samples,), default=None
            User id of each row (unseen users get the cold-start prediction).

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Predicted labels (exact for every finite row).

        Raises
        ------
        ValueError
            If a row's scaled decision values are still not finite (naming the rows).
        """
        scores = self._label_scores(X, groups)
        _check_finite_output(self, "predict", scores)
        return self._labels(scores)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.poor_score = True
        return tags

"""Margin-based personalized classification with a JL projection and the
exponential mechanism (Snedeker, Zhou & Bassily 2025, Section 4, Algorithm 3).

The shared embedding ``U_priv = M^T U~`` (``n_features x n_components``) is
released under user-level differential privacy; every user's head ``v_i``
and intercept ``b_i`` are fitted locally from the releases and that user's
own rows (billboard model).

This module holds the estimator; the algorithm lives in
:mod:`~skdpp.linear_model._jl_algorithm` (the driver),
:mod:`~skdpp.linear_model._margin_scores` (block functions),
:mod:`~skdpp.linear_model._jl_candidates` (public randomness, candidates) and
:mod:`~skdpp.linear_model._labels` (the label set).
"""

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import BasePersonalizedEstimator, FitResult, PersonalizedClassifierMixin
from ..privacy import BudgetPlan
from ..utils._executor import LocalExecutor
from ..utils._grouped import make_blocks
from ..utils._random import hash_ids, row_hashes
from ._jl_algorithm import Alg3Config, fit_alg3
from ._margin_scores import Heads, heads_block

__all__ = ["JLMarginClassifier"]

# Share of ``delta`` reserved for the threshold of the private label selection.
_THRESHOLD_DELTA_FRACTION = 0.25


def _row_keys(X, y):
    """Keys of the canonical order of a user's rows: a hash of features and label."""
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        labels, inverse = np.unique(y, return_inverse=True)
        y = hash_ids(labels)[inverse.reshape(-1)]
    return row_hashes(X, y)


class JLMarginClassifier(PersonalizedClassifierMixin, BasePersonalizedEstimator):
    """DOCSTRING
    """

    _parameter_constraints: dict = {
        **BasePersonalizedEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "jl_dim": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "margin": [Interval(Real, 0, None, closed="neither")],
        "clip_norm": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"}), None],
        "clip_quantile": [Interval(Real, 0, 1, closed="right")],
        "clip_share": [Interval(Real, 0, 1, closed="neither")],
        "n_candidates": [Interval(Integral, 1, None, closed="left")],
        "candidates": [StrOptions({"subspace", "random"})],
        "subspace_share": [Interval(Real, 0, 1, closed="neither")],
        "cold_start_share": [Interval(Real, 0, 1, closed="neither")],
        "n_directions": [Interval(Integral, 2, None, closed="left")],
        "fit_intercept": ["boolean"],
        "personal_rows": [StrOptions({"all", "holdout"})],
        "personal_ridge": [Interval(Real, 0, None, closed="left")],
        "multiclass": [StrOptions({"ovr", "raise"})],
        "classes": ["array-like", StrOptions({"observed"}), None],
        "max_classes_per_user": [Interval(Integral, 1, None, closed="left")],
        "label_share": [Interval(Real, 0, 1, closed="neither")],
        "verbose": ["verbose"],
    }

    _personal_attributes = ("heads_", "intercepts_")

    def __init__(
        self,
        *,
        n_components=2,
        jl_dim="auto",
        margin=0.1,
        clip_norm="auto",
        clip_quantile=0.5,
        clip_share=0.05,
        n_candidates=256,
        candidates="subspace",
        subspace_share=0.7,
        cold_start_share=0.05,
        n_directions=64,
        fit_intercept=True,
        personal_rows="all",
        personal_ridge=1.0,
        multiclass="ovr",
        classes=None,
        max_classes_per_user=2,
        label_share=0.05,
        epsilon=1.0,
        delta=1e-6,
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.jl_dim = jl_dim
        self.margin = margin
        self.clip_norm = clip_norm
        self.clip_quantile = clip_quantile
        self.clip_share = clip_share
        self.n_candidates = n_candidates
        self.candidates = candidates
        self.subspace_share = subspace_share
        self.cold_start_share = cold_start_share
        self.n_directions = n_directions
        self.fit_intercept = fit_intercept
        self.personal_rows = personal_rows
        self.personal_ridge = personal_ridge
        self.multiclass = multiclass
        self.classes = classes
        self.max_classes_per_user = max_classes_per_user
        self.label_share = label_share
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------ validation
    def _validate_data_kwargs(self):
        return {}

    def _public_classes(self):
        """The label set given by ``classes`` (sorted, unique), or None / "observed"."""
        if self.classes is None or (isinstance(self.classes, str)
                                    and self.classes == "observed"):
            return self.classes
        return np.unique(np.asarray(self.classes))

    def _validate_fit_data(self, X, y, groups):
        # scikit-learn's finiteness check sums X: finite values near the
        # largest float overflow there and warn, which would depend on one
        # user's data (DESIGN section 7).
        with np.errstate(over="ignore", invalid="ignore"):
            data = super()._validate_fit_data(X, y, groups)
        for name in ("margin", "clip_quantile", "clip_share", "subspace_share",
                     "cold_start_share", "personal_ridge", "label_share"):
            if isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"The '{name}' parameter must be a float, got the "
                                 f"boolean {getattr(self, name)!r}.")
        check_classification_targets(data.y)
        classes = self._public_classes()
        if isinstance(classes, np.ndarray):
            if classes.ndim != 1 or classes.shape[0] < 2:
                raise ValueError(
                    f"`classes` must list at least 2 distinct labels, got {self.classes!r}.")
            if classes.shape[0] > 2 and self.multiclass == "raise":
                raise ValueError(
                    f"multiclass='raise' but `classes` has {classes.shape[0]} labels. Pass "
                    f"2 labels or multiclass='ovr'.")
        if self.jl_dim != "auto" and int(self.jl_dim) < self.n_components:
            raise ValueError(
                f"jl_dim={self.jl_dim} is smaller than n_components={self.n_components}: "
                f"the JL space must hold a rank-{self.n_components} frame. Pass "
                f"jl_dim >= n_components or jl_dim='auto'.")
        return data

    def _make_blocks(self, data, randomness):
        return make_blocks(data.X, data.y, data.index, row_keys=_row_keys(data.X, data.y))

    def _validate_personal_input(self, X, y):
        X, y = validate_data(self, X, y, reset=False)
        check_classification_targets(y)
        return X, y

    # ---------------------------------------------------------- plan and core
    def _budget_plan(self, meta):
        private = self.epsilon != np.inf
        if private and self.delta == 0 and self.candidates == "subspace":
            raise ValueError(
                "candidates='subspace' uses the Gaussian mechanism and needs "
                "delta > 0; got delta=0. Pass delta > 0 (e.g. 1e-6) or "
                "candidates='random' for a pure epsilon-DP fit.")
        if private and self.delta == 0 and self.fit_intercept:
            raise ValueError(
                "fit_intercept=True releases the cold-start intercepts with the Gaussian "
                "mechanism and needs delta > 0; got delta=0. Pass delta > 0 (e.g. 1e-6), "
                "or fit_intercept=False with candidates='random' for a pure epsilon-DP fit.")
        if private and self.delta == 0 and self.classes is None:
            raise ValueError(
                "classes=None selects the label set privately, which needs delta > 0; got "
                "delta=0. Pass delta > 0 (e.g. 1e-6) or the label set as `classes`.")
        plan = BudgetPlan(self.epsilon, self.delta)
        if self.classes is None:
            plan.add("labels", share=self.label_share, param="label_share",
                     threshold_delta=_THRESHOLD_DELTA_FRACTION * self.delta)
        if self.clip_norm == "auto":
            plan.add("clip", share=self.clip_share, mechanism="exponential",
                     param="clip_share")
        if self.candidates == "subspace":
            plan.add("subspace", share=self.subspace_share, param="subspace_share")
        plan.add_rest("selection", mechanism="exponential")
        plan.add("cold_start", share=self.cold_start_share, param="cold_start_share",
                 mechanism="gaussian" if self.fit_intercept else "exponential")
        return plan

    def _config(self):
        classes = self._public_classes()
        return Alg3Config(
            n_components=int(self.n_components), jl_dim=self.jl_dim,
            margin=float(self.margin),
            clip_norm=self.clip_norm if self.clip_norm in (None, "auto")
            else float(self.clip_norm),
            clip_quantile=float(self.clip_quantile), n_candidates=int(self.n_candidates),
            candidates=self.candidates, n_directions=int(self.n_directions),
            holdout=self.personal_rows == "holdout", fit_intercept=bool(self.fit_intercept),
            personal_ridge=float(self.personal_ridge), classes=classes,
            max_classes_per_user=int(self.max_classes_per_user),
            multiclass=self.multiclass, verbose=int(self.verbose))

    def _fit_core(self, executor, release, randomness, meta):
        fitted = fit_alg3(executor, release, randomness, meta, self._config())
        n_problems = fitted["embeddings"].shape[0]
        notes = [
            "Shared embedding U_priv = M^T U~ selected by the exponential mechanism "
            "over a finite candidate set (Snedeker et al. 2025, Alg. 3).",
            "Candidates: " + ("data-independent random orthonormal frames."
                              if self.candidates == "random" else
                              "around the top eigenvectors of the DP 'subspace' release."),
        ]
        not_covered = ()
        if self.classes is None:
            notes.append("The label set classes_ was selected privately (phase 'labels').")
        elif isinstance(self.classes, str):
            notes.append("NOT COVERED: the label set classes_ was inferred from y "
                         "(classes='observed') and is released as is (one user holding a "
                         "unique label changes it). Use classes=None (private selection) "
                         "or pass the label set.")
            not_covered = ("classes_",)
        else:
            notes.append("The label set classes_ is public (given by `classes`).")
        if n_problems > 1:
            notes.append(f"One-vs-rest over {n_problems} classes: each phase releases all "
                         f"{n_problems} binary problems at once.")
        released = ["classes_", "jl_matrix_ (public randomness)", "embeddings_",
                    "cold_start_intercepts_" if self.fit_intercept else "cold_start_heads_"]
        if self.clip_norm == "auto":
            released.insert(1, "clip_norm_")
        return FitResult(
            {"classes_": fitted["classes"], "jl_dim_": fitted["jl_dim"],
             "clip_norm_": fitted["clip_norm"], "jl_matrix_": fitted["jl_matrix"],
             "embeddings_": fitted["embeddings"],
             "cold_start_heads_": fitted["cold_start_heads"],
             "cold_start_intercepts_": fitted["cold_start_intercepts"],
             "heads_": fitted["heads"], "intercepts_": fitted["intercepts"]},
            released=tuple(released), local=("heads_", "intercepts_"), notes=tuple(notes),
            not_covered=not_covered)

    def _prior_bias(self):
        return self.cold_start_intercepts_ if self.fit_intercept \
            else np.zeros_like(self.cold_start_intercepts_)

    def _fit_personal(self, X, y, index):
        """Heads of the users of ``index`` from their rows and the released values."""
        y = np.asarray(y)
        executor = LocalExecutor(make_blocks(X, y, index, row_keys=_row_keys(X, y)))
        heads, intercepts = executor.collect(heads_block, Heads(
            self.embeddings_, self.classes_, self.cold_start_heads_,
            self.cold_start_intercepts_, self._prior_bias(), float(self.personal_ridge),
            bool(self.fit_intercept)))
        return {"heads_": heads, "intercepts_": intercepts}

    # --------------------------------------------------------------- predict
    def decision_function(self, X, groups=None):
        """Personalized decision values ``<x, U_priv v_i> + b_i``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to score.
        groups : array-like of shape (n_samples,), default=None
            User id of each row; rows of unseen users (and all rows when
            ``None``) use the DP cold-start head.

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            For two classes, positive values predict ``classes_[1]``; for
            more, one column per class (one-vs-rest).
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        codes = self._user_codes(groups, X.shape[0])
        known = codes >= 0
        V = np.broadcast_to(self.cold_start_heads_, (X.shape[0],) + self.cold_start_heads_.shape
                            ).copy()
        V[known] = self.heads_[codes[known]]
        b = np.broadcast_to(self.cold_start_intercepts_,
                            (X.shape[0],) + self.cold_start_intercepts_.shape).copy()
        b[known] = self.intercepts_[codes[known]]
        XU = np.einsum("nd,pdk->npk", X, self.embeddings_)
        scores = np.einsum("npk,npk->np", XU, V) + b
        return scores[:, 0] if scores.shape[1] == 1 else scores

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
            Predicted labels.
        """
        scores = self.decision_function(X, groups=groups)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.poor_score = True
        return tags

"""Margin-based personalized classification with a JL projection and the
exponential mechanism (Snedeker, Zhou & Bassily 2025, Section 4, Algorithm 3).

The shared embedding ``U_priv = M^T U~`` (``n_features x n_components``) is
released under user-level differential privacy; every user's head ``v_i``
(``||v_i|| <= head_bound``) is fitted locally from ``U_priv`` and that user's
own rows (billboard model).

This module holds the estimator and its label handling; the algorithm lives in
:mod:`~skdpp.linear_model._jl_algorithm` (the driver),
:mod:`~skdpp.linear_model._margin_scores` (block functions) and
:mod:`~skdpp.linear_model._jl_candidates` (public randomness, candidates).
"""

from numbers import Integral, Real

import numpy as np
from sklearn.preprocessing import LabelEncoder
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import BasePersonalizedEstimator, FitResult, PersonalizedClassifierMixin
from ..privacy import BudgetPlan, row_norms
from ..utils._executor import LocalExecutor
from ._jl_algorithm import Alg3Config, clipped_blocks, fit_alg3, problem_suffix
from ._jl_candidates import auto_jl_dim
from ._margin_scores import Heads, heads_block

__all__ = ["JLMarginClassifier"]


# --------------------------------------------------------------------------- #
# The label set: the one place where labels become binary problems
# --------------------------------------------------------------------------- #
def resolve_classes(y, classes, multiclass):
    """The label set of a fit and the labels' codes in it.

    ``classes=None`` infers the label set from ``y`` (treated as public, as in
    every scikit-learn classifier; the report says it is not covered);
    otherwise every label must be in ``classes``.

    Returns
    -------
    classes : ndarray of shape (n_classes,)
    codes : ndarray of shape (n_samples,)
        Position of each label in ``classes``.
    """
    check_classification_targets(y)
    if classes is None:
        encoder = LabelEncoder()
        codes = encoder.fit_transform(y)
        classes = encoder.classes_
    else:
        classes = np.unique(np.asarray(classes))
        known = np.isin(y, classes)
        if not known.all():
            raise ValueError(
                f"y contains labels not in `classes`={classes!r}: "
                f"{np.unique(y[~known])!r}. Add them to `classes` or drop those rows.")
        codes = np.searchsorted(classes, y)
    if classes.shape[0] < 2:
        raise ValueError(
            f"JLMarginClassifier needs samples of at least 2 classes; got only one "
            f"class: {classes[0]!r}. Pass data with both labels.")
    if classes.shape[0] > 2 and multiclass == "raise":
        raise ValueError(
            f"multiclass='raise' but y has {classes.shape[0]} classes (labels must be "
            f"binary). Pass binary labels or multiclass='ovr'.")
    return classes, codes


def binary_problems(codes, n_classes):
    """Labels in ``{-1, +1}``, one column per binary problem.

    Two classes: one problem (``+1`` for ``classes[1]``); more: one-vs-rest
    (column ``p`` is ``+1`` for class ``p``).

    Returns
    -------
    Y : ndarray of shape (n_samples, n_problems)
    """
    codes = np.asarray(codes)
    if n_classes == 2:
        return np.where(codes == 1, 1.0, -1.0)[:, None]
    return np.where(codes[:, None] == np.arange(n_classes)[None, :], 1.0, -1.0)


# --------------------------------------------------------------------------- #
# Estimator
# --------------------------------------------------------------------------- #
class JLMarginClassifier(PersonalizedClassifierMixin, BasePersonalizedEstimator):
    """Personalized linear classifier with a DP shared embedding learned by
    the exponential mechanism in a Johnson-Lindenstrauss space.

    Implements Algorithm 3 of Snedeker, Zhou & Bassily (2025): the features
    are projected by a random sign matrix ``M`` (``jl_dim x n_features``), a
    ``jl_dim x n_components`` matrix ``U~`` is selected by the exponential
    mechanism with the margin score ``f(U~) = -(1/n) sum_i min_{||v|| <= Gamma}
    L^_rho(U~, v; (S_i^0)_M)``, the shared embedding ``U_priv = M^T U~`` is
    released, and each user fits its head ``v_i`` (``||v_i|| <= Gamma``) on its
    own rows.  The decision function of user ``i`` is ``<x, U_priv v_i>``.

    Read more in the paper's Section 4 and Appendix C.

    Parameters
    ----------
    n_components : int, default=2
        Dimension ``k`` of the shared embedding.
    jl_dim : int or "auto", default="auto"
        Dimension ``k'`` of the JL space.  ``"auto"`` uses Alg. 3's requirement
        ``k' = ceil(r^2 Gamma^2 log(n / beta) / rho^2)`` with ``r = clip_norm``,
        ``Gamma = head_bound``, ``rho = margin``, ``n`` the number of users and
        ``beta = 0.05``, clipped to ``[n_components, min(n_features, 256)]``.
    margin : float, default=0.1
        Margin ``rho > 0`` of the margin loss ``1[y <x, U v> <= rho]`` in the score.
    head_bound : float, default=1.0
        Bound ``Gamma > 0`` on the norm of every head ``v_i``.
    clip_norm : float or None, default=1.0
        Row-norm bound ``r`` of the paper: every row ``x`` is scaled to norm
        at most ``r`` before fitting (this never changes the sign of
        ``<x, w>``, so the 0-1 loss is unchanged; it fixes the scale the
        margin ``rho`` refers to).  ``r`` also enters ``jl_dim="auto"``.  The
        sensitivities do not depend on it (every user's score term is in
        ``[0, 1]``).  ``None`` (no scaling; ``r`` = the largest row norm in
        the auto rule) is allowed only with ``epsilon=np.inf``.
        ``decision_function`` uses the unscaled rows.
    n_candidates : int, default=256
        Number of candidates of the exponential mechanism.
    candidates : {"subspace", "random"}, default="subspace"
        Candidate generator.  ``"random"``: data-independent Haar-random
        orthonormal frames (the paper's construction with a finite random
        subset of the cover; exponential mechanisms only, pure ``epsilon``-DP
        with ``delta=0``).  ``"subspace"``: first a
        Gaussian-mechanism release of a noisy ``k' x k'`` second-moment matrix
        of the users' label-weighted mean directions, whose top
        ``n_components`` eigenvectors seed the candidates (see Notes); the fit
        is then ``(epsilon, delta)``-DP.
    subspace_share : float, default=0.7
        Share of the budget spent on the subspace release (``"subspace"`` only).
        Most of the budget goes there: the selection needs little (the
        score gaps between good and poor candidates are large compared with
        the sensitivity ``1/n``), while the subspace estimate's noise scales
        with ``sqrt(k')``.
    cold_start_share : float, default=0.05
        Share of the budget spent on the cold-start (population) head.
    n_directions : int, default=64
        Number of public unit directions used for the inner minimum over heads,
        the local heads and the cold-start head (``n_components=1``: always 2).
    split : {"none", "half"}, default="none"
        ``"half"`` (Alg. 3 as written): each user's rows are split at random in
        ``S^0`` (subspace stage, score, cold start) and ``S^1`` (local heads).
        ``"none"``: all rows are used for both.  The privacy guarantee is the
        same (the heads are local; every user's score term is in ``[0, 1]``
        either way); only the paper's generalization argument uses the split.
        The default uses all rows because it is much more accurate with few
        rows per user (see Notes).
    multiclass : {"ovr", "raise"}, default="ovr"
        ``"ovr"``: one-vs-rest for more than two classes, the budget split
        equally across the binary problems.  ``"raise"``: more than two
        classes raise ``ValueError``.
    classes : array-like of shape (n_classes,) or None, default=None
        The public label set.  ``None`` infers it from ``y``; the label set
        (and hence the number of one-vs-rest problems) is then treated as
        public, as in every scikit-learn classifier.  Pass it when one user's
        labels could reveal a class.
    epsilon : float, default=1.0
        Privacy budget in ``(0, inf]``; ``np.inf`` runs the same algorithm
        without noise (the exponential mechanism becomes the argmax).
    delta : float, default=1e-6
        Privacy parameter ``delta`` in ``[0, 1)``; must be positive with
        ``candidates="subspace"`` and finite ``epsilon``.
    random_state : int, RandomState instance or None, default=None
        Seeds the fit's randomness (drawn once per fit): the public JL
        matrix, direction grid and candidate perturbations, the key of the
        per-row ``S^0 / S^1`` split and the privacy noise. ``None`` draws
        fresh entropy from the operating system.
    verbose : int, default=0
        Print the progress of each phase when positive (public values only:
        phase names, shapes and the plan's noise parameters).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    n_features_in_ : int
        Number of features seen in ``fit``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Feature names, when ``X`` has string column names.
    jl_dim_ : int
        The JL dimension ``k'`` used.
    jl_matrix_ : ndarray of shape (jl_dim_, n_features_in_)
        The JL matrix ``M`` (public randomness).
    embeddings_ : ndarray of shape (n_problems, n_features_in_, n_components)
        The released embeddings ``U_priv = M^T U~``, one per binary problem
        (``n_problems = 1`` for two classes, ``n_classes`` for one-vs-rest).
    heads_ : ndarray of shape (n_users_, n_problems, n_components)
        Personal heads ``v_i`` (kept by each user).
    cold_start_heads_ : ndarray of shape (n_problems, n_components)
        DP population heads used for unseen users.
    user_ids_ : ndarray of shape (n_users_,)
        Ids of the users with a personal head.
    n_users_ : int
        Number of users seen in ``fit``.
    privacy_report_ : PrivacyReport
        The budget plan and the spent ``(epsilon, delta)``.

    See Also
    --------
    PrivateFedRepRegressor : private shared-representation regression (Alg. 1).

    Notes
    -----
    **Privacy guarantee.** User-level DP under replace-one-user (the number
    of users is public); jointly DP in the billboard model: everything in
    ``fit`` that depends on more than one user is released through a DP
    mechanism; each head is a function of the releases and its user's rows.
    With ``candidates="random"`` only exponential mechanisms run: with
    ``delta=0`` the fit is pure ``epsilon``-DP (basic composition); with
    ``delta > 0`` the accountant may use the tighter ``(epsilon, delta)``
    bound (e.g. with many one-vs-rest problems), and the report states the
    ``delta`` spent.  With ``candidates="subspace"`` it is
    ``(epsilon, delta)``-DP (a Gaussian release composed with exponential
    mechanisms, accounted by the accountant).

    **Releases and sensitivities** (per binary problem):

    * ``subspace`` (only ``candidates="subspace"``): ``sum_i u_i u_i^T`` with
      ``u_i = a_i / ||a_i||`` the unit direction of ``a_i``, the sum of
      ``y M x`` over user ``i``'s scoring rows (all its rows by default,
      ``S^0`` with ``split="half"``; ``u_i = 0`` if ``a_i = 0``).
      Each contribution has Frobenius norm ``<= 1`` and, for unit vectors,
      ``||u u^T - w w^T||_F <= sqrt(2)``: Frobenius sensitivity ``sqrt(2)``
      under replace-one-user; symmetric Gaussian noise.  Post-processing:
      the top ``n_components`` eigenvectors ``P`` are mapped to
      ``P' = orth((M M^T + lambda I)^{-1} P)`` (so that ``M^T U~`` points along
      the estimated subspace rather than along ``M^T M`` times it;
      ``lambda = 0.03 max(d / k', 1)``) and the candidates are
      ``orth(P' + s_c G_c)``, ``G_c`` i.i.d. ``N(0, 1/k')``, ``s_c`` evenly
      spaced in ``[0, s_max]`` (``s_0 = 0``), ``s_max`` twice the
      Davis-Kahan bound ``2 sigma sqrt(k') / gap`` computed from the released
      eigengap, clipped to ``[0.1, 1]``.  Normalising ``a_i`` (instead of
      clipping it to ``r``) makes every user count equally and gives far
      less noise when ``||a_i|| << r``.
    * ``selection``: the exponential mechanism (Alg. 3, line 4) over the
      candidates with score ``f``; sensitivity ``1/n`` because every user's
      term lies in ``[0, 1]`` and depends only on that user's rows.
    * ``cold_start``: the exponential mechanism over the public direction
      grid with score ``-(1/n) sum_i L^_rho(U~, Gamma u; (S_i)_M)`` on the
      scoring rows; sensitivity ``1/n``.  Unseen users (and known users without rows in
      their head set) predict with ``cold_start_heads_``.

    **Budget plan** (a :class:`~skdpp.privacy.BudgetPlan`, calibrated once
    so that the composition of all releases meets ``(epsilon, delta)``;
    shares are of the zCDP budget). Per binary problem ``p`` of ``P``:
    ``subspace[p]`` (``subspace_share / P``; only ``candidates="subspace"``),
    ``selection[p]`` (the rest, split equally across the problems: 0.25 by
    default, 0.95 with ``candidates="random"``) and ``cold_start[p]``
    (``cold_start_share / P``). For two classes ``P = 1`` and the phases
    are named ``subspace``, ``selection`` and ``cold_start``; with
    one-vs-rest they are suffixed ``[p]``. ``privacy_report_`` lists them.

    **Randomness.** The JL matrix ``M``, the direction grid (random for
    ``n_components >= 3``) and the candidate perturbations ``G`` are public
    randomness, drawn from the fit's public stream before any
    data-dependent step (their number never depends on the data). The
    ``S^0 / S^1`` split is a keyed hash of (fit key, user id, position of
    the row within the user's rows in canonical order): a user's split
    depends only on the key and that user's rows, and a fit is a function
    of the *set* of records (permuting the rows gives bit-identical
    releases and heads).

    **Deviations from the paper, and why.**

    * The exponential mechanism runs over ``n_candidates`` candidates, not the
      exponentially large ``gamma``-cover ``N^gamma`` of the Frobenius ball of
      radius ``sqrt(2k)`` (``(sqrt(k)/gamma)^{k'k}`` elements: infeasible).  The
      random candidates are orthonormal frames (inside that ball); the
      ``"subspace"`` generator spends part of the budget to put candidates
      near the relevant subspace.  The guarantee of Lemma 16 holds only
      relative to the best candidate.
    * Inner minimum over ``v``: the margin loss is minimised at ``||v|| =
      Gamma``; the minimum over directions is taken over the public grid plus
      the user's own label-weighted mean direction (exact on the grid, an
      upper bound of the true minimum).  Each user's term stays in ``[0, 1]``
      and depends only on that user's rows, so the sensitivity is ``1/n``.
    * Local heads (Alg. 3, line 6) minimise the 0-1 loss over the same
      directions, ties broken by the margin and hinge losses.
    * ``jl_dim="auto"`` uses the number of users ``n`` instead of ``nm`` (the
      number of rows of a user is private) and is capped at 256.
    * Rows are scaled to norm ``<= r`` instead of assuming ``||x|| <= r``.
      Any finite values are accepted: over/underflow in a user's terms
      never raises or warns, and only changes that user's own 0/1 losses.
    * Cold start (a DP population head) is not in the paper.
    * Default ``split="none"``: the releases and the heads use all of a
      user's rows, not the halves ``S^0`` / ``S^1`` of Alg. 3 (available as
      ``split="half"``: ``ceil(m_i / 2)`` rows of each user, at most
      ``m_i - 1``, chosen by the keyed per-row hash above, in ``S^0``; a
      user with one row then has no ``S^1`` and predicts with the
      cold-start head).  Same privacy guarantee; only Theorem 17's
      generalization argument uses the split.  Measured on
      ``make_personalized_margin_classification(n_users=10000, n_features=50,
      n_components=2, margin=0.05)``, 10 rows per user, ``epsilon=1``,
      ``n_candidates=128``, seeds 0 and 1: test accuracy 0.945 / 0.940 with
      ``"none"`` vs 0.899 / 0.853 with ``"half"``.
    * ``jl_dim`` may exceed ``n_features`` (then the projection reduces
      nothing; the preconditioning above makes the score exact).

    **Data-dependent quantities.** Only public ones: the number of users,
    ``n_features`` and the classes (the label set is treated as public, as
    in all scikit-learn classifiers, unless given by ``classes``).  The JL
    matrix, direction grid and random candidates are public randomness; the
    candidate spread uses only the subspace release.

    Floating-point noise is not hardened against floating-point side channels.

    References
    ----------
    .. [1] Snedeker, C., Zhou, X. and Bassily, R. (2025). Private Model
       Personalization Revisited. ICML 2025. arXiv:2506.19220.
    .. [2] McSherry, F. and Talwar, K. (2007). Mechanism Design via
       Differential Privacy. FOCS 2007.

    Examples
    --------
    >>> from skdpp.datasets import make_personalized_margin_classification
    >>> from skdpp import JLMarginClassifier
    >>> X, y, groups, info = make_personalized_margin_classification(
    ...     n_users=2000, n_features=20, n_components=1, margin=0.1,
    ...     n_test_samples_per_user=10, random_state=0)
    >>> clf = JLMarginClassifier(n_components=1, jl_dim=16, margin=0.1, epsilon=2.0,
    ...                          n_candidates=64, random_state=0)
    >>> clf.fit(X, y, groups=groups).embeddings_.shape
    (1, 20, 1)
    >>> acc = clf.score(info.X_test, info.y_test, groups=info.groups_test)
    >>> bool(acc > 0.8)
    True
    >>> print(f"{clf.privacy_report_.epsilon_spent:.2f}")
    2.00
    """

    _parameter_constraints: dict = {
        **BasePersonalizedEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "jl_dim": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "margin": [Interval(Real, 0, None, closed="neither")],
        "head_bound": [Interval(Real, 0, None, closed="neither")],
        "clip_norm": [Interval(Real, 0, None, closed="neither"), None],
        "n_candidates": [Interval(Integral, 1, None, closed="left")],
        "candidates": [StrOptions({"subspace", "random"})],
        "subspace_share": [Interval(Real, 0, 1, closed="neither")],
        "cold_start_share": [Interval(Real, 0, 1, closed="neither")],
        "n_directions": [Interval(Integral, 2, None, closed="left")],
        "split": [StrOptions({"half", "none"})],
        "multiclass": [StrOptions({"ovr", "raise"})],
        "classes": ["array-like", None],
        "verbose": ["verbose"],
    }

    _personal_attributes = ("heads_",)

    def __init__(
        self,
        *,
        n_components=2,
        jl_dim="auto",
        margin=0.1,
        head_bound=1.0,
        clip_norm=1.0,
        n_candidates=256,
        candidates="subspace",
        subspace_share=0.7,
        cold_start_share=0.05,
        n_directions=64,
        split="none",
        multiclass="ovr",
        classes=None,
        epsilon=1.0,
        delta=1e-6,
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.jl_dim = jl_dim
        self.margin = margin
        self.head_bound = head_bound
        self.clip_norm = clip_norm
        self.n_candidates = n_candidates
        self.candidates = candidates
        self.subspace_share = subspace_share
        self.cold_start_share = cold_start_share
        self.n_directions = n_directions
        self.split = split
        self.multiclass = multiclass
        self.classes = classes
        self.epsilon = epsilon
        self.delta = delta
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------ validation
    def _validate_data_kwargs(self):
        return {}

    def _validate_fit_data(self, X, y, groups):
        # scikit-learn's finiteness check sums X: finite values near the
        # largest float overflow there and warn, which would depend on one
        # user's data (DESIGN section 7).
        with np.errstate(over="ignore", invalid="ignore"):
            data = super()._validate_fit_data(X, y, groups)
        for name in ("margin", "head_bound", "subspace_share", "cold_start_share"):
            if isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"The '{name}' parameter must be a float, got the "
                                 f"boolean {getattr(self, name)!r}.")
        classes, codes = resolve_classes(data.y, self.classes, self.multiclass)
        data.y = binary_problems(codes, classes.shape[0])
        if self.jl_dim == "auto":
            # r = clip_norm (public); without clipping (epsilon=inf only) the
            # largest row norm stands in for it.
            radius = self.clip_norm if self.clip_norm is not None else max(
                float(np.max(row_norms(data.X), initial=0.0)), 1e-12)
            jl_dim = auto_jl_dim(data.meta["n_users"], data.meta["n_features"],
                                 self.n_components, radius=radius,
                                 head_bound=self.head_bound, margin=self.margin)
        else:
            jl_dim = int(self.jl_dim)
            if jl_dim < self.n_components:
                raise ValueError(
                    f"jl_dim={jl_dim} is smaller than n_components={self.n_components}: "
                    f"the JL space must hold a rank-{self.n_components} frame. Pass "
                    f"jl_dim >= n_components or jl_dim='auto'.")
        data.meta.update(n_problems=int(data.y.shape[1]), jl_dim=jl_dim)
        data.attributes.update(classes_=classes, jl_dim_=jl_dim)
        return data

    def _validate_personal_input(self, X, y):
        X, y = validate_data(self, X, y, reset=False)
        check_classification_targets(y)
        return X, y

    # ---------------------------------------------------------- plan and core
    def _budget_plan(self, meta):
        if self.candidates == "subspace" and self.delta == 0 and self.epsilon != np.inf:
            raise ValueError(
                "candidates='subspace' uses the Gaussian mechanism and needs "
                "delta > 0; got delta=0. Pass delta > 0 (e.g. 1e-6) or "
                "candidates='random' for a pure epsilon-DP fit.")
        n_problems = meta["n_problems"]
        explicit = self.cold_start_share + (
            self.subspace_share if self.candidates == "subspace" else 0.0)
        if n_problems > 1 and explicit >= 1.0:
            # BudgetPlan checks that the explicit shares leave a positive rest,
            # but split over the problems their floating-point sum can round
            # below 1: 3 x (0.7/3 + 0.3/3) gives 0.9999999999999999.
            raise ValueError(
                f"subspace_share + cold_start_share must be < 1 so that the selection "
                f"phases get a positive share of the budget; got "
                f"{self.subspace_share!r} + {self.cold_start_share!r}. Lower them.")
        plan = BudgetPlan(self.epsilon, self.delta)
        for p in range(n_problems):
            sfx = problem_suffix(p, n_problems)
            if self.candidates == "subspace":
                plan.add(f"subspace{sfx}", share=self.subspace_share / n_problems,
                         param="subspace_share")
            plan.add_rest(f"selection{sfx}", mechanism="exponential")
            plan.add(f"cold_start{sfx}", share=self.cold_start_share / n_problems,
                     mechanism="exponential", param="cold_start_share")
        return plan

    def _make_blocks(self, data, randomness):
        return clipped_blocks(data.X, data.y, data.index, self.clip_norm)

    def _config(self, jl_dim):
        return Alg3Config(
            n_components=int(self.n_components), jl_dim=int(jl_dim),
            margin=float(self.margin), head_bound=float(self.head_bound),
            n_candidates=int(self.n_candidates), candidates=self.candidates,
            n_directions=int(self.n_directions), split=self.split,
            verbose=int(self.verbose))

    def _fit_core(self, executor, release, randomness, meta):
        fitted = fit_alg3(executor, release, randomness, meta, self._config(meta["jl_dim"]))
        n_problems = meta["n_problems"]
        notes = [
            "Shared embedding U_priv = M^T U~ selected by the exponential mechanism "
            "over a finite candidate set (Snedeker et al. 2025, Alg. 3).",
            "Candidates: " + ("data-independent random orthonormal frames "
                              "(exponential mechanisms only; pure DP with delta=0)."
                              if self.candidates == "random" else
                              "around the top eigenvectors of the DP 'subspace' release "
                              "(Gaussian mechanism: the fit is (epsilon, delta)-DP)."),
            "The label set classes_ is public (given by `classes`)."
            if self.classes is not None else
            "NOT COVERED: the label set classes_ was inferred from y and is "
            "released as is (one user holding a unique label changes it). "
            "Pass `classes` to make it public and covered by the guarantee.",
        ]
        if n_problems > 1:
            notes.append(f"One-vs-rest over {n_problems} classes: the budget is split "
                         f"equally across the {n_problems} binary problems.")
        return FitResult(
            {"jl_matrix_": fitted["jl_matrix"], "embeddings_": fitted["embeddings"],
             "cold_start_heads_": fitted["cold_start_heads"], "heads_": fitted["heads"],
             "_directions": fitted["directions"]},
            released=("jl_matrix_ (public randomness)", "embeddings_", "cold_start_heads_"),
            local=("heads_",), notes=tuple(notes))

    def _fit_personal(self, X, y, index):
        """Heads of the users of ``index`` from their rows and the released embeddings."""
        y = np.asarray(y)
        known = np.isin(y, self.classes_)
        if not known.all():
            raise ValueError(
                f"y contains labels not seen in fit: {np.unique(y[~known])!r}; the "
                f"classes are {self.classes_!r}.")
        Y = binary_problems(np.searchsorted(self.classes_, y), self.classes_.shape[0])
        executor = LocalExecutor(clipped_blocks(X, Y, index, self.clip_norm))
        heads = executor.collect(heads_block, Heads(
            self.embeddings_, self.cold_start_heads_, self._directions,
            float(self.head_bound), float(self.margin)))
        return {"heads_": heads}

    # --------------------------------------------------------------- predict
    def decision_function(self, X, groups=None):
        """Personalized decision values ``<x, U_priv v_i>``.

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
        XU = np.einsum("nd,pdk->npk", X, self.embeddings_)
        scores = np.einsum("npk,npk->np", XU, V)
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

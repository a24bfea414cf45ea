"""The driver of Algorithm 3 (Snedeker, Zhou & Bassily 2025, Section 4).

:func:`fit_alg3` runs the algorithm over blocks of whole users through an
executor (:mod:`skdpp.utils._executor`): it maps the block functions of
:mod:`skdpp.linear_model._margin_scores` to get partial sums, releases their
totals through the fit's :class:`~skdpp.privacy.Releaser` (noise added once,
here) and computes the next broadcast. The releases, in order (phase names of
the budget plan):

1. ``labels`` (``classes=None``): the label set, by private partition
   selection over the numbers of distinct users holding each label (Gaussian
   noise, L2 sensitivity ``sqrt(2 L)`` for ``L = max_classes_per_user``, and
   a threshold with its own ``delta``);
2. ``clip`` (``clip_norm="auto"``): the clip radius ``r``, the
   ``clip_quantile`` of the users' root-mean-square row norms by
   :func:`~skdpp.privacy._quantile.private_quantile`: ``search_steps`` Gaussian
   releases of counts of users, L2 sensitivity 1 each;
3. ``subspace`` (``candidates="subspace"``): ``sum_i u_{i,p} u_{i,p}^T`` for
   every binary problem ``p``, one Gaussian release of the stack (Frobenius
   sensitivity ``sqrt(2 P)``), symmetric noise;
4. ``selection`` (Alg. 3, line 4): one candidate per problem, the exponential
   mechanism over the product of the candidate sets with the summed score
   ``-(1/n) sum_p sum_i t_{i,p}`` (sensitivity ``P / n``;
   :func:`~skdpp.privacy._product.product_exponential`);
5. ``cold_start``: with an intercept, the users' mean label fractions per
   problem (Gaussian, sensitivity 1 for one problem, ``sqrt(2)`` for more);
   without, one public direction per problem by the exponential mechanism
   over their product (sensitivity ``P / n``).

Then every user's head and intercept is computed locally (Alg. 3, line 6;
billboard model) by :func:`~skdpp.linear_model._margin_scores.heads_block`.
The plan does not depend on the number of problems ``P`` (known only after
the ``labels`` release): every phase is one release.
"""

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..privacy._product import product_exponential
from ..privacy._quantile import private_quantile, quantile_grid
from ._jl_candidates import (
    auto_jl_dim,
    direction_grid,
    jl_matrix,
    precondition,
    random_candidates,
    spread_from_release,
    subspace_candidates,
)
from ._labels import label_counts_block, select_classes
from ._margin_scores import (
    Heads,
    Prepare,
    Project,
    Scores,
    candidate_scores_block,
    clip_statistic_block,
    heads_block,
    label_fractions_block,
    population_scores_block,
    prepare_block,
    project_block,
    subspace_block,
)

__all__ = ["Alg3Config", "cold_start_sensitivity", "fit_alg3", "margin_threshold",
           "n_problems_of", "score_sensitivity", "subspace_sensitivity"]

# Public bounds of the released cold-start positive rate (its logit is the
# cold-start intercept): a rate of 0 or 1 would give an infinite intercept.
_RATE_FLOOR = 1e-3


def score_sensitivity(n_users):
    """Sensitivity of every problem's score ``f`` (Alg. 3, line 4) and cold-start score.

    ``f = -(1/n) sum_i t_i`` with every ``t_i`` in ``[0, 1]`` a function of
    user ``i``'s rows only: replacing one user moves ``f`` by at most ``1/n``.
    """
    return 1.0 / n_users


def subspace_sensitivity(n_problems=1):
    """Frobenius sensitivity of the stack ``(sum_i u_{i,p} u_{i,p}^T)_p`` under replace-one-user.

    Every user contributes ``u u^T`` with ``||u|| in {0, 1}`` to each of the
    ``P`` matrices, and for such vectors ``||a a^T - b b^T||_F^2 = ||a||^4 +
    ||b||^4 - 2 (a^T b)^2 <= 2``: ``sqrt(2 P)`` for the stack.
    """
    return math.sqrt(2.0 * n_problems)


def cold_start_sensitivity(n_problems):
    """L2 sensitivity of ``sum_i f_i`` (the users' positive fractions per problem).

    ``f_i`` lies in ``[0, 1]^P`` with ``sum_p f_{i,p} <= 1`` (one-vs-rest
    positives are disjoint), so ``||f - f'||^2 <= ||f||^2 + ||f'||^2 <= 2``;
    for one problem ``|f - f'| <= 1``.
    """
    return 1.0 if n_problems == 1 else math.sqrt(2.0)


def n_problems_of(n_classes):
    """Number of binary problems: 1 for two classes, one per class (one-vs-rest) otherwise."""
    return 1 if n_classes == 2 else int(n_classes)


@dataclass(frozen=True)
class Alg3Config:
    """Public configuration of one fit (parameters resolved by the estimator)."""

    n_components: int
    jl_dim: object            # int or "auto"
    margin: object            # float (relative to the clip radius) or "auto" (rho -> 0+)
    clip_norm: object         # float, "auto" or None
    clip_quantile: float
    n_candidates: int
    candidates: str
    n_directions: int
    holdout: bool
    fit_intercept: bool
    personal_ridge: float
    classes: object           # ndarray, None (private) or "observed"
    max_classes_per_user: int
    multiclass: str
    verbose: int = 0


def _log(config, message):
    # Only public values are ever printed: phase names, shapes, plan constants
    # and released values' sizes.
    if config.verbose:
        print(f"[JLMarginClassifier] {message}")


def resolve_jl_dim(config, n_users, n_features):
    """``jl_dim`` of a fit from public values (``n_users`` is public)."""
    if config.jl_dim == "auto":
        # margin="auto" is the limit rho -> 0+: Alg. 3's k' -> inf, i.e. the cap.
        margin = 0.0 if config.margin == "auto" else config.margin
        return auto_jl_dim(n_users, n_features, config.n_components, margin=margin)
    return int(config.jl_dim)


def margin_threshold(margin, radius):
    """``rho / Gamma`` of the score: ``margin * r`` (``r = 1`` without clipping), or 0.

    ``margin="auto"`` is the limit ``rho -> 0+`` of Alg. 3's margin loss,
    ``1[y <U~^T z, u> <= 0]`` (the paper's ``l_0``): invariant to any positive
    scaling of the rows, so the score needs no data-dependent scale. Public
    (a function of parameters and of the released radius only).
    """
    if margin == "auto":
        return 0.0
    return float(margin) * (1.0 if radius is None else radius)


def _label_set(executor, release, config):
    """The label set and whether it is covered by the guarantee.

    Alg. 3 has one binary problem; this is the classifier's wrapper. With
    ``classes=None`` the label set is selected privately; if fewer than two
    labels are published (few users or a small epsilon), the fit falls back
    on the observed labels with a warning, and the report marks ``classes_``
    as not covered (the fallback is decided by the DP release only).
    """
    if isinstance(config.classes, np.ndarray):
        return config.classes, True
    counts = executor.map(label_counts_block, config.max_classes_per_user)
    covered = config.classes is None
    if covered:
        classes = select_classes(release, "labels", counts,
                                 max_per_user=config.max_classes_per_user)
        if classes.shape[0] < 2:
            warnings.warn(
                f"The private label selection published {classes.shape[0]} label(s) "
                f"(a label is published when the noisy number of users holding it "
                f"clears a threshold): falling back on the labels observed in y, which "
                f"the privacy guarantee does NOT cover (see privacy_report_). Pass the "
                f"label set as `classes` (public, free), or raise epsilon or "
                f"label_share.", UserWarning, stacklevel=4)
            covered = False
    if not covered:  # "observed" or the fallback: every label present
        classes = counts.labels if counts is not None else np.empty(0)
    if classes.shape[0] < 2:
        raise ValueError(
            f"JLMarginClassifier needs at least 2 classes; y holds {classes.shape[0]} "
            f"class{'' if classes.shape[0] == 1 else 'es'}: {list(classes)!r}.")
    if classes.shape[0] > 2 and config.multiclass == "raise":
        raise ValueError(
            f"multiclass='raise' but the label set has {classes.shape[0]} classes (labels "
            f"must be binary). Pass binary labels or multiclass='ovr'.")
    return classes, covered


def fit_alg3(executor, release, randomness, meta, config):
    """Run Algorithm 3 for every binary problem; return the fitted values.

    Parameters
    ----------
    executor : LocalExecutor
        Blocks of whole users (raw labels as ``y``).
    release : Releaser
        The fit's releases (plan from the estimator's ``_budget_plan``).
    randomness : FitRandomness
    meta : dict
        Public metadata: ``n_users``, ``n_features``.
    config : Alg3Config

    Returns
    -------
    fitted : dict
        ``classes``, ``jl_dim``, ``clip_norm``, ``jl_matrix`` (k', d),
        ``directions`` (D, k), ``embeddings`` (P, d, k), ``cold_start_heads``
        (P, k), ``cold_start_intercepts`` (P,), ``heads`` (n_users, P, k),
        ``intercepts`` (n_users, P), ``candidates`` (P, C, k', k) and
        ``selected`` (P,).
    """
    n_users, n_features = meta["n_users"], meta["n_features"]
    k = config.n_components
    jl_dim = resolve_jl_dim(config, n_users, n_features)
    # Public randomness first (Alg. 3, line 1; the direction grid): its draws
    # never depend on the data. The candidate perturbations are drawn once the
    # number of problems is released.
    M = jl_matrix(jl_dim, n_features, randomness.public)
    directions = direction_grid(k, config.n_directions, randomness.public)

    classes, covered = _label_set(executor, release, config)
    n_problems = n_problems_of(classes.shape[0])
    _log(config, f"labels: {classes.shape[0]} classes, {n_problems} binary problem(s)")
    # Public algorithmic randomness (candidate perturbations), not privacy noise:
    # its shape depends only on public sizes and the released label set.
    perturbations = randomness.public.standard_normal(
        (n_problems, config.n_candidates, jl_dim, k))

    # S^0 / S^1 split (Alg. 3, Require); labels as {-1, +1} per problem; the
    # rows the releases see (not centred: centring each user's rows at its
    # mean of ~10 rows shrinks the margins the selection scores, and cost
    # 0.01-0.12 accuracy on the paper's setting; only the heads centre).
    executor.map(prepare_block, Prepare(classes, randomness.key, config.holdout))
    radius = config.clip_norm
    if radius == "auto":
        grid = quantile_grid()
        counts = executor.map(clip_statistic_block, grid)
        radius = private_quantile(release, "clip", counts, grid,
                                  quantile=config.clip_quantile, n_users=n_users)
        _log(config, f"clip: released clip radius {radius:.6g}")
    executor.map(project_block, Project(M, radius))             # Alg. 3, line 2
    threshold = margin_threshold(config.margin, radius)

    sens = score_sensitivity(n_users)
    all_candidates = np.empty((n_problems, config.n_candidates, jl_dim, k))
    if config.candidates == "subspace":
        # Practical stage (not in the paper): a DP estimate of the relevant
        # k-dim subspace of the JL space per problem; candidates around it.
        stats = executor.map(subspace_block)
        noisy = release.gaussian("subspace", stats,
                                 sensitivity=subspace_sensitivity(n_problems),
                                 clip_norm=1.0, symmetric=True)
        std = release.noise_std("subspace", subspace_sensitivity(n_problems))
        for p in range(n_problems):  # post-processing, per problem
            vals, vecs = np.linalg.eigh(noisy[p])
            vals, vecs = vals[::-1], vecs[:, ::-1]
            spread = spread_from_release(vals, k, std, jl_dim)
            all_candidates[p] = subspace_candidates(precondition(vecs[:, :k], M),
                                                    perturbations[p], max_spread=spread)
        _log(config, f"subspace: released {n_problems} noisy {jl_dim}x{jl_dim} second "
                     f"moment(s) (noise multiplier {release.noise_multiplier('subspace'):.3g})")
    else:
        # Alg. 3, line 3: a finite, data-independent candidate set in B_F.
        for p in range(n_problems):
            all_candidates[p] = random_candidates(perturbations[p])

    # Alg. 3, line 4: the exponential mechanism (over the product of problems).
    scores = np.stack([
        -executor.map(candidate_scores_block,
                      Scores(p, all_candidates[p], directions, threshold)) / n_users
        for p in range(n_problems)])
    selected = product_exponential(release, "selection", scores, sensitivity=sens,
                                   clip_norm=radius)
    utilde = all_candidates[np.arange(n_problems), selected]
    embeddings = np.einsum("jd,pjk->pdk", M, utilde)              # Alg. 3, line 5
    _log(config, f"selection: {config.n_candidates} candidates scored per problem "
                 f"(epsilon {release.noise_multiplier('selection'):.3g})")

    # Cold start (not in the paper).
    cold_heads = np.zeros((n_problems, k))
    cold_intercepts = np.zeros(n_problems)
    if config.fit_intercept:
        # The population's positive rate per problem (users weighted equally);
        # the cold-start decision is its logit, and the personal heads' prior.
        sums = executor.map(label_fractions_block)
        noisy = release.gaussian("cold_start", sums,
                                 sensitivity=cold_start_sensitivity(n_problems),
                                 clip_norm=1.0)
        rate = np.clip(np.asarray(noisy, dtype=float) / n_users, _RATE_FLOOR,
                       1.0 - _RATE_FLOOR)
        cold_intercepts = np.log(rate) - np.log1p(-rate)
        prior = cold_intercepts
    else:
        pop = np.stack([
            -executor.map(population_scores_block,
                          Scores(p, utilde[p], directions, threshold)) / n_users
            for p in range(n_problems)])
        picks = product_exponential(release, "cold_start", pop, sensitivity=sens,
                                    clip_norm=radius)
        cold_heads = directions[picks]
        prior = np.zeros(n_problems)
    _log(config, "cold_start: released")

    # Alg. 3, line 6: every user's head from the releases and its own rows.
    heads, intercepts = executor.collect(heads_block, Heads(
        embeddings, classes, cold_heads, cold_intercepts, prior,
        float(config.personal_ridge), bool(config.fit_intercept)))
    return {"classes": classes, "classes_covered": covered, "jl_dim": jl_dim, "clip_norm": radius, "threshold": threshold, "jl_matrix": M,
            "directions": directions, "embeddings": embeddings,
            "cold_start_heads": cold_heads, "cold_start_intercepts": cold_intercepts,
            "heads": heads, "intercepts": intercepts, "candidates": all_candidates,
            "selected": selected}

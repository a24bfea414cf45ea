"""Algorithm 3 of Snedeker, Zhou & Bassily (2025, Section 4): plan, driver, personal heads.

:func:`plan` declares the phases ``labels``, ``clip``, ``subspace``, ``selection``,
``cold_start`` (each one release of all binary problems, so the plan does not
depend on their number); :func:`run` makes them in that order and fits every
user's head locally (line 6, billboard model). Public randomness and candidate
sets (lines 1 and 3) are here; block functions in :mod:`.jl_kernels`; guarantee
and sensitivities in :class:`~skdpp.linear_model.JLMarginClassifier`.
"""

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ...base import FitResult, _caller_stacklevel
from ...exceptions import PrivacyLeakWarning
from ...privacy import BudgetPlan
from ...privacy._plan import resolve_clip_share
from ...privacy._product import product_exponential
from ...privacy._quantile import private_quantile, quantile_grid, search_steps
from ...privacy._release import THRESHOLD_DELTA_FRACTION
from ...utils._executor import LocalExecutor
from ...utils._grouped import make_blocks
from .._labels import label_counts_block, select_classes
from .jl_kernels import (Heads, Prepare, Project, Scores, candidate_scores_block, circle_grid,
                         clip_statistic_block, heads_block, label_fractions_block,
                         population_scores_block, prepare_block, project_block, row_keys,
                         subspace_block)

#: Default ``budget_shares`` (``selection`` takes the rest).
DEFAULT_SHARES = {"labels": 0.05, "clip": "auto", "subspace": 0.7, "cold_start": 0.05}

BLOCK_ROWS = 32768  # rows per block of a fit (whole users; tests lower it)
# jl_dim="auto": failure probability beta of the JL transform (Alg. 3, Require,
# Lemma 15) and the cap (memory/time guard).
JL_FAILURE_PROBABILITY = 0.05
JL_AUTO_MAX = 256
RIDGE = 0.03  # relative ridge of the subspace candidates' preconditioner


def auto_jl_dim(n_users, n_features, n_components, *, margin):
    """``k' = ceil(log(n / beta) / margin^2)`` in ``[n_components, min(n_features, 256)]``:
    Alg. 3's ``r^2 Gamma^2 log(nm / beta) / rho^2`` with ``rho = margin r``,
    ``Gamma = 1`` and the public ``n`` for the private ``nm``."""
    square = margin * margin
    raw = math.log(max(n_users, 2) / JL_FAILURE_PROBABILITY) / square if square > 0 \
        else math.inf
    raw = math.ceil(raw) if math.isfinite(raw) else math.inf
    return int(max(n_components, min(raw, n_features, JL_AUTO_MAX)))


def jl_matrix(jl_dim, n_features, rng):
    """Alg. 3, line 1: ``M`` in ``R^{k' x d}``, entries uniform on ``{+-1/sqrt(k')}``
    (public randomness, released as ``jl_matrix_``)."""
    signs = rng.integers(0, 2, size=(jl_dim, n_features), dtype=np.int8)
    return (2.0 * signs - 1.0) / math.sqrt(jl_dim)


def direction_grid(n_components, n_directions, rng):
    """Public unit directions ``(D, k)``: ``{+1, -1}`` (``k = 1``), the :func:`circle_grid`
    (``k = 2``), i.i.d. uniform (public randomness) above."""
    if n_components == 1:
        return np.array([[1.0], [-1.0]])
    if n_components == 2:
        return circle_grid(n_directions)
    g = rng.standard_normal((n_directions, n_components))  # public directions, not noise
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def orthonormalize(mats):
    """Batched thin QR with a positive diagonal of ``R`` (a deterministic basis)."""
    q, r = np.linalg.qr(mats)
    signs = np.sign(np.diagonal(r, axis1=-2, axis2=-1))
    signs[signs == 0] = 1.0
    return q * signs[..., None, :]


def random_candidates(perturbations):
    """Data-independent Haar-random frames ``orth(G_c)`` (``||U~||_F = sqrt(k)``): a
    finite subset of the Frobenius ball of Alg. 3, line 3."""
    return orthonormalize(perturbations)


def precondition(basis, M, *, ridge=RIDGE):
    """``orth((M M^T + lambda I)^{-1} P)``: ``M^T U~`` is proportional to ``U*`` for ``U~ =
    (M M^T)^+ M U*`` and the release estimates ``span(M U*)``; ``lambda = RIDGE
    max(d / k', 1)``. Post-processing."""
    jl_dim, n_features = M.shape
    lam = ridge * max(n_features / jl_dim, 1.0)
    pre = np.linalg.solve(M @ M.T + lam * np.eye(jl_dim), basis)
    return orthonormalize(pre[None])[0]


def subspace_candidates(basis, perturbations, *, max_spread=1.0):
    """Candidates ``orth(P + s_c G_c / sqrt(k'))`` around an orthonormal ``P``, the
    spreads ``s_c`` evenly in ``[0, max_spread]`` (post-processing)."""
    n_candidates, jl_dim, _ = perturbations.shape
    spreads = np.linspace(0.0, max_spread, n_candidates)
    return orthonormalize(basis[None] + (spreads / math.sqrt(jl_dim))[:, None, None]
                          * perturbations)


def spread_from_release(eigenvalues, n_components, noise_std, jl_dim):
    """Largest candidate spread: twice the Davis-Kahan bound ``||E||_2 / gap`` (``||E||_2
    ~ 2 sigma sqrt(k')``, the released eigengap) in ``[0.1, 1]``. Post-processing."""
    if eigenvalues.shape[0] <= n_components:
        return 1.0
    gap = float(eigenvalues[n_components - 1] - eigenvalues[n_components])
    bound = 2.0 * noise_std * math.sqrt(jl_dim) / max(gap, 1e-300)
    return float(min(1.0, max(0.1, 2.0 * bound)))


_RATE_FLOOR = 1e-3  # public floor of the released cold-start rate


def score_sensitivity(n_users):
    """Sensitivity ``1/n`` of every score ``f = -(1/n) sum_i t_i`` (Alg. 3, line 4, and the
    cold start): each ``t_i`` in ``[0, 1]`` is a function of user ``i``'s rows only."""
    return 1.0 / n_users


def subspace_sensitivity(n_problems=1):
    """Frobenius sensitivity (replace one user) of ``(sum_i u_{i,p} u_{i,p}^T)_p``: each
    user adds ``u u^T``, ``||u|| in {0, 1}``, to each of ``P`` matrices and ``||a a^T -
    b b^T||_F^2 = ||a||^4 + ||b||^4 - 2 (a^T b)^2 <= 2``: ``sqrt(2 P)``."""
    return math.sqrt(2.0 * n_problems)


def cold_start_sensitivity(n_problems):
    """L2 sensitivity of ``sum_i f_i`` (positive fractions per problem): ``f_i`` in ``[0,
    1]^P`` with ``sum_p f_{i,p} <= 1`` (one-vs-rest positives are disjoint), so
    ``||f - f'||^2 <= ||f||^2 + ||f'||^2 <= 2``; one problem: ``|f - f'| <= 1``."""
    return 1.0 if n_problems == 1 else math.sqrt(2.0)


@dataclass(frozen=True)
class JLConfig:
    """The parameters of :class:`~skdpp.linear_model.JLMarginClassifier`, resolved."""

    epsilon: float
    delta: float
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
    shares: tuple             # sorted (phase, share) pairs of DEFAULT_SHARES' keys
    verbose: int = 0


def plan(config, meta):
    """The releases of :func:`run`, one phase each (``selection`` takes the rest)."""
    shares = dict(config.shares)

    def build(clip_share):
        budget = BudgetPlan(config.epsilon, config.delta)
        if config.classes is None:  # _label_set: one partition selection
            budget.add("labels", share=shares["labels"], param="budget_shares['labels']",
                       threshold_delta=THRESHOLD_DELTA_FRACTION * config.delta)
        if config.clip_norm == "auto":  # private_quantile's counts
            budget.add("clip", share=clip_share, count=search_steps(quantile_grid()),
                       param="budget_shares['clip']")
        if config.candidates == "subspace":
            budget.add("subspace", share=shares["subspace"],
                       param="budget_shares['subspace']")
        budget.add_rest("selection", mechanism="exponential")
        budget.add("cold_start", share=shares["cold_start"],
                   param="budget_shares['cold_start']",
                   mechanism="gaussian" if config.fit_intercept else "exponential")
        return budget

    if config.clip_norm != "auto":
        return build(None)
    return build(resolve_clip_share(shares["clip"], build, meta["n_users"]))


def _log(config, message):  # public values only
    if config.verbose:
        print(f"[JLMarginClassifier] {message}")


def margin_threshold(margin, radius):
    """``rho / Gamma``: ``margin * r`` (``r = 1`` unclipped), or 0 for ``"auto"``."""
    if margin == "auto":
        return 0.0
    return float(margin) * (1.0 if radius is None else radius)


def _label_set(executor, release, config):
    """``(classes, covered)``; ``classes=None``: the private selection, or the observed
    labels with a warning if it publishes fewer than two (decided by the release)."""
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
                f"budget_shares['labels']. (To make such a fit fail instead: "
                f"warnings.simplefilter('error', skdpp.PrivacyLeakWarning).)",
                PrivacyLeakWarning, stacklevel=_caller_stacklevel())
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


def run(executor, release, randomness, meta, config):
    """Run Algorithm 3 for every binary problem (one-vs-rest); a :class:`FitResult`."""
    n_users, n_features = meta["n_users"], meta["n_features"]
    k = config.n_components
    # margin="auto" is the limit rho -> 0+: Alg. 3's k' -> inf, i.e. the cap
    margin = 0.0 if config.margin == "auto" else config.margin
    jl_dim = int(config.jl_dim) if config.jl_dim != "auto" \
        else auto_jl_dim(n_users, n_features, k, margin=margin)
    # public randomness (Alg. 3, line 1), never dependent on the data
    M = jl_matrix(jl_dim, n_features, randomness.public)
    directions = direction_grid(k, config.n_directions, randomness.public)
    classes, covered = _label_set(executor, release, config)
    n_problems = 1 if classes.shape[0] == 2 else int(classes.shape[0])  # one-vs-rest
    _log(config, f"labels: {classes.shape[0]} classes, {n_problems} binary problem(s)")
    # public randomness; its shape depends on the released label set only
    perturbations = randomness.public.standard_normal(
        (n_problems, config.n_candidates, jl_dim, k))
    # S^0 / S^1 split (Alg. 3, Require); labels as {-1, +1} per problem
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
    if config.candidates == "subspace":
        # not in the paper: candidates around a DP estimate of the subspace
        stats = executor.map(subspace_block)
        noisy = release.gaussian("subspace", stats,
                                 sensitivity=subspace_sensitivity(n_problems),
                                 clip_norm=1.0, symmetric=True)
        std = release.noise_std("subspace", subspace_sensitivity(n_problems))
        all_candidates = np.empty((n_problems, config.n_candidates, jl_dim, k))
        for p in range(n_problems):  # post-processing, per problem
            vals, vecs = np.linalg.eigh(noisy[p])
            vals, vecs = vals[::-1], vecs[:, ::-1]
            spread = spread_from_release(vals, k, std, jl_dim)
            all_candidates[p] = subspace_candidates(precondition(vecs[:, :k], M),
                                                    perturbations[p], max_spread=spread)
        _log(config, f"subspace: released {n_problems} noisy {jl_dim}x{jl_dim} second "
                     f"moment(s) (noise multiplier {release.noise_multiplier('subspace'):.3g})")
    else:  # Alg. 3, line 3: a finite, data-independent candidate set in B_F
        all_candidates = np.stack([random_candidates(g) for g in perturbations])

    def select(phase, block_fn, frames):
        # one choice per problem, scores -(1/n) sum_i t_i (sensitivity 1/n each)
        scores = np.stack([-executor.map(block_fn, Scores(p, frames[p], directions,
                                                          threshold)) / n_users
                           for p in range(n_problems)])
        return product_exponential(release, phase, scores,
                                   sensitivity=score_sensitivity(n_users), clip_norm=radius)
    # Alg. 3, line 4: the exponential mechanism (over the product of problems).
    selected = select("selection", candidate_scores_block, all_candidates)
    utilde = all_candidates[np.arange(n_problems), selected]
    embeddings = np.einsum("jd,pjk->pdk", M, utilde)              # Alg. 3, line 5
    _log(config, f"selection: {config.n_candidates} candidates scored per problem "
                 f"(epsilon {release.noise_multiplier('selection'):.3g})")
    # Cold start (not in the paper).
    cold_heads = np.zeros((n_problems, k))
    cold_intercepts = np.zeros(n_problems)
    if config.fit_intercept:
        # the population's positive rate per problem; its logit is the prior
        sums = executor.map(label_fractions_block)
        noisy = release.gaussian("cold_start", sums,
                                 sensitivity=cold_start_sensitivity(n_problems),
                                 clip_norm=1.0)
        rate = np.clip(np.asarray(noisy, dtype=float) / n_users, _RATE_FLOOR,
                       1.0 - _RATE_FLOOR)
        cold_intercepts = np.log(rate) - np.log1p(-rate)
    else:
        cold_heads = directions[select("cold_start", population_scores_block, utilde)]
    _log(config, "cold_start: released")
    # Alg. 3, line 6: every user's head from the releases and its own rows.
    heads, intercepts = executor.collect(heads_block, Heads(
        embeddings, classes, cold_heads, cold_intercepts, float(config.personal_ridge),
        bool(config.fit_intercept)))
    attributes = {"classes_": classes, "jl_dim_": jl_dim, "clip_norm_": radius,
                  "jl_matrix_": M, "embeddings_": embeddings, "cold_start_heads_": cold_heads,
                  "cold_start_intercepts_": cold_intercepts, "heads_": heads,
                  "intercepts_": intercepts}
    released = ["classes_", "jl_matrix_ (public randomness)", "embeddings_",
                "cold_start_intercepts_" if config.fit_intercept else "cold_start_heads_"]
    if config.clip_norm == "auto":
        released.insert(1, "clip_norm_")
    notes, not_covered = _notes(config, threshold, covered, n_problems)
    return FitResult(attributes, released=tuple(released), local=("heads_", "intercepts_"),
                     notes=notes, not_covered=not_covered)


def _notes(config, threshold, covered, n_problems):
    notes = [
        "Shared embedding U_priv = M^T U~ selected by the exponential mechanism "
        "over a finite candidate set (Snedeker et al. 2025, Alg. 3).",
        "Candidates: " + ("data-independent random orthonormal frames."
                          if config.candidates == "random" else
                          "around the top eigenvectors of the DP 'subspace' release."),
    ]
    if config.margin == "auto":
        notes.append("Margin: 'auto', the limit rho -> 0+ of the score's margin loss "
                     "(the 0-1 loss of the projected rows, invariant to the rows' "
                     "scale; no budget).")
    else:
        notes.append(f"Margin: {float(config.margin):g} times the clip radius "
                     f"(rho = {threshold:.6g}).")
    if config.classes is None and covered:
        notes.append("The label set classes_ was selected privately (phase 'labels').")
    elif config.classes is None:
        notes.append("NOT COVERED: the private label selection (phase 'labels') "
                     "published fewer than 2 labels, so classes_ holds the labels "
                     "observed in y (one user holding a unique label changes it). Pass "
                     "the label set as `classes`.")
    elif isinstance(config.classes, str):
        notes.append("NOT COVERED: the label set classes_ was inferred from y "
                     "(classes='observed') and is released as is (one user holding a "
                     "unique label changes it). Use classes=None (private selection) "
                     "or pass the label set.")
    else:
        notes.append("The label set classes_ is public (given by `classes`).")
    if n_problems > 1:
        notes.append(f"One-vs-rest over {n_problems} classes: each phase releases all "
                     f"{n_problems} binary problems at once.")
    return tuple(notes), () if covered else ("classes_",)


def make_jl_blocks(X, y, index):
    """Blocks of whole users, rows in canonical order (by content and label)."""
    return make_blocks(X, y, index, row_keys=row_keys(X, y), max_rows=BLOCK_ROWS)


def fit_personal(X, y, index, config, estimator):
    """``personalize``: heads from the users' rows and ``estimator``'s releases (line 6)."""
    y = np.asarray(y)
    executor = LocalExecutor(make_jl_blocks(X, y, index))
    heads, intercepts = executor.collect(heads_block, Heads(
        estimator.embeddings_, estimator.classes_, estimator.cold_start_heads_,
        estimator.cold_start_intercepts_, float(config.personal_ridge),
        bool(config.fit_intercept)))
    return {"heads_": heads, "intercepts_": intercepts}

"""Private alternating minimisation (Krichene et al. 2023, Alg. 1-3): plan, driver and
personal fit of :class:`~skdpp.decomposition.AdaptiveWeightMF` (kernels:
:mod:`._als_kernels`, :mod:`._item_biases`, :mod:`._task_weights`). The releases, in order:
``"clip"``, ``"mean"``, ``"counts"``, ``"item_bias"``, ``"items"``, ``"ridge"``; their
replace-one-user L2 sensitivities are tabled in the User Guide (``adaptive_mf``) and
computed next to each release below.
"""

import warnings
from dataclasses import dataclass, field

import numpy as np

from ...base import FitResult, _caller_stacklevel
from ...linear_model._auto import (LEVEL_PHASE, FallbackPlan, fallback_level, fallback_note,
                                   fallback_plan)
from ...linear_model._heads import psd_ridge_solve
from ...privacy import MIN_CLIP, BudgetPlan
from ...privacy._plan import resolve_clip_share
from ...privacy._release import THRESHOLD_DELTA_FRACTION
from ...privacy._quantile import (
    LOCATION_SEARCH_STEPS,
    private_location,
    private_quantile,
    quantile_grid,
    search_steps,
)
from ...utils._executor import LocalExecutor
from . import _als_kernels as K
from ._item_biases import bias_sums, bias_weights, item_bias_sensitivities, shrunk_item_biases
from ._task_weights import log_adaptive_item_weights

# mean_clip="auto": the radius quantile of |mean - median| (half the users' means
# clipped costs nothing measurable, MovieLens even ids).
_RADIUS_QUANTILE = 0.5
_GRID = quantile_grid()  # rating_clip="auto": this log grid, then _FINE_SIZE steps
_FINE_SIZE = 16
CLIP_SEARCH_STEPS = search_steps(_GRID) + search_steps(_FINE_SIZE)
DEFAULT_COUNT_CAP = 50  # measured on MovieLens (even user ids) and App. C
#: Default ``budget_shares`` ("items" takes the rest; "counts" is
#: PRIVATE_CATALOGUE_COUNT_SHARE when the counts select the catalogue).
DEFAULT_SHARES = {"clip": "auto", "mean": 0.05, "counts": 0.1, "item_bias": 0.25,
                  "ridge": 0.05}
PRIVATE_CATALOGUE_COUNT_SHARE = 0.3
TINY_CATALOGUE = 10  # below: cannot fill one top-10 list


@dataclass(frozen=True)
class MFConfig:
    """The resolved parameters of one fit; the fields with defaults are constants
    (``noise_ridge``: item ridge in units of ``sigma_A sqrt(k)``; ``grad_clip`` None:
    ``C_u C_r``)."""

    epsilon: float
    delta: float
    n_components: int
    reg: float
    user_bias: bool
    item_bias: bool
    clip_norm: object  # float or None (epsilon=inf only)
    rating_clip: object  # float, "auto" or None (epsilon=inf only)
    center: bool
    mean_clip: object  # float or "auto"
    count_cap: object  # int or None (no cap, epsilon=inf only)
    weighting: str
    mu: float
    user_budget: float
    weight_normalization: str
    solver: str
    n_iter: int
    personal_ridge: float
    embedding_ridge: object  # float or "auto"
    catalogue: str
    shares: dict = field(default_factory=lambda: dict(DEFAULT_SHARES))
    verbose: int = 0
    noise_ridge: float = 1.0
    bias_ridge: float = 3.0
    bias_iter: int = 2
    clip_quantile: float = 0.5
    gd_steps: int = 5
    learning_rate: float = 1.0
    grad_clip: object = None  # float or None

    @property
    def needs_counts(self):
        return (self.weighting in ("adaptive", "tail") or self.solver == "sgd"
                or self.catalogue == "private")


# The budget plan
def plan(config, meta):
    """The fit's :class:`~skdpp.privacy.BudgetPlan` (``"items"`` takes the rest)."""
    cfg, shares = config, config.shares
    clip_count = (LOCATION_SEARCH_STEPS * int(cfg.center and cfg.mean_clip == "auto")
                  + CLIP_SEARCH_STEPS * int(cfg.rating_clip == "auto"))

    def build(clip_share):
        budget = BudgetPlan(cfg.epsilon, cfg.delta)
        if clip_count:
            budget.add("clip", share=clip_share, count=clip_count,
                       param="budget_shares['clip']")
        if cfg.center:  # _dp_mean
            budget.add("mean", share=shares["mean"], param="budget_shares['mean']")
        if cfg.needs_counts:  # _catalogue
            private = cfg.catalogue == "private" and cfg.epsilon != np.inf
            budget.add("counts", share=shares["counts"], param="budget_shares['counts']",
                       threshold_delta=THRESHOLD_DELTA_FRACTION * cfg.delta * private)
        if cfg.item_bias:  # the weighted counts, then one release per pass
            budget.add("item_bias", share=shares["item_bias"], count=1 + cfg.bias_iter,
                       param="budget_shares['item_bias']")
        if cfg.embedding_ridge == "auto":
            budget.add("ridge", share=shares["ridge"], param="budget_shares['ridge']")
        per_iteration = 2 if cfg.solver == "als" else cfg.gd_steps  # (A, b) or GD steps
        budget.add_rest("items", count=cfg.n_iter * per_iteration)
        return budget

    if not clip_count:
        return build(None)
    # predicted useless: _fallback's plan
    return fallback_plan(build(resolve_clip_share(shares["clip"], build, meta["n_users"])),
                         meta["n_users"], "AdaptiveWeightMF", _FALLBACK, level=cfg.center)


_FALLBACK = "each known user predicts its own mean rating (local data only)"


def _fallback(executor, release, meta, cfg):
    """The fit of a :class:`~skdpp.linear_model._auto.FallbackPlan`: no item published
    from a private catalogue (a public one with zero parts); known users their own mean;
    new users the private median mean rating (``mean_``) or 0."""
    n_users, k = int(meta["n_users"]), cfg.n_components
    level = fallback_level(release, lambda fn: executor.map(K.user_mean_statistic, fn), n_users)
    m = 0 if cfg.catalogue == "private" else int(meta["n_items"])  # None iff private
    U, bias = executor.collect(K.own_mean_parts, k)
    attributes = {
        "item_embeddings_": np.zeros((m, k)), "item_biases_": np.zeros(m),
        "item_counts_": None, "item_weighted_counts_": None, "_popularity_noise": (0.0, 0.0),
        "mean_": level, "mean_clip_": None, "rating_clip_": None, "count_cap_": cfg.count_cap,
        "embedding_ridge_": None, "user_embeddings_": U, "user_biases_": bias,
        "n_iter_": 0, "local_only_": True, "_published": np.arange(m)}
    released = ("mean_",) * (LEVEL_PHASE in release.plan) \
        + ("item_ids_",) * (cfg.catalogue == "private")
    return FitResult(attributes=attributes, released=released,
                     local=("user_embeddings_", "user_biases_"),
                     notes=(fallback_note(release, "mean_"),),
                     not_covered=("item_ids_",) if cfg.catalogue == "observed" else ())


# Pre-processing releases (Alg. 3, line 2)
def _dp_mean(executor, release, n_users, mean_clip):
    """``(mean, mean_clip)``: ``"auto"``, the private location of the users' mean ratings;
    a number ``b``, the noisy mean of their means clipped to ``[-b, b]``."""
    if mean_clip == "auto":
        mean, radius = private_location(
            release, lambda fn: executor.map(K.user_mean_statistic, fn), n_users=n_users,
            search_phase="clip", mean_phase="mean", radius_quantile=_RADIUS_QUANTILE)
        return float(mean), float(radius)
    total = executor.map(K.mean_partial, float(mean_clip))
    noisy = release.gaussian("mean", total / n_users, sensitivity=2.0 * mean_clip / n_users,
                             clip_norm=mean_clip)
    return float(np.clip(noisy[0], -mean_clip, mean_clip)), float(mean_clip)


def _rating_clip(executor, release, mean, quantile, n_users):
    """``rating_clip="auto"``: the private ``quantile`` of twice the users' RMS deviation
    (log grid, then ``_FINE_SIZE`` steps of the cell; counts of sensitivity 1)."""
    def search(grid):
        counts = executor.map(K.deviation_counts, (mean, grid))
        return private_quantile(release, "clip", counts, grid, quantile=quantile,
                                n_users=n_users)
    j = int(np.searchsorted(_GRID, search(_GRID)))  # the log grid, then the selected cell
    fine = np.linspace(_GRID[j - 1] if j > 0 else 0.0, _GRID[j], _FINE_SIZE + 1)[1:]
    return max(float(search(fine)), MIN_CLIP)


def catalogue_candidates(counts):
    """Candidates of the private catalogue: the items in some user's capped selection
    (exact ``counts`` of :func:`~._als_kernels.count_partial`), so one user creates at most
    ``count_cap`` candidates of count <= 1 without it, as ``select_partitions`` assumes
    (every rated item a candidate: a delta growing with a user's unique items)."""
    return np.asarray(counts) > 0


def _catalogue(executor, release, meta, cfg, key):
    """The ``"counts"`` phase: published item codes (increasing), noisy counts (or None)
    and their noise std. A private catalogue publishes a candidate iff its noisy count
    exceeds ``1 + sigma Phi^-1(1 - delta_t / count_cap)``, ``delta_t = delta / 4``: an
    item only the replaced user rated passes w.p. <= ``delta_t``."""
    n_count = int(meta["n_item_codes"]) if meta["n_items"] is None else int(meta["n_items"])
    if not cfg.needs_counts:
        return np.arange(n_count), None, 0.0
    total = executor.map(K.count_partial, (key, cfg.count_cap, n_count))
    sens = None if cfg.count_cap is None else float(np.sqrt(2.0 * cfg.count_cap))
    clip = None if cfg.count_cap is None else float(np.sqrt(cfg.count_cap))
    if cfg.catalogue == "private":
        # Private partition selection (Gopi et al. 2020): the noise is drawn for
        # every item code; the draws of non-candidates are discarded unseen.
        keep, noisy = release.select_partitions(
            "counts", total, sensitivity=sens, max_contribution=1.0,
            max_partitions=cfg.count_cap or 1, clip_norm=clip)
        published = np.flatnonzero(keep & catalogue_candidates(total))
        return published, noisy[published], release.noise_std("counts", sens)
    counts = release.gaussian("counts", total, sensitivity=sens, clip_norm=clip)
    return np.arange(n_count), counts, release.noise_std("counts", sens)


def _item_sensitivities(cfg, rating_clip):
    """Sensitivities of the ``"items"`` releases (None: no clipping; overflow: ``inf``)."""
    sqrt_beta = np.sqrt(np.float64(cfg.user_budget))
    cu, cr, grad_clip = cfg.clip_norm, rating_clip, cfg.grad_clip
    with np.errstate(over="ignore"):
        if grad_clip is None and cu is not None and cr is not None:
            # Default Gamma = C_u C_r: the bound of |t_ij| ||u_j||, the gradient at v_i = 0.
            grad_clip = float(np.float64(cu) * cr)
        sens_A = None if cu is None else float(2.0 * sqrt_beta * np.float64(cu) ** 2)
        sens_b = None if cu is None or cr is None else float(2.0 * sqrt_beta * cu * cr)
        sens_g = None if grad_clip is None else float(2.0 * sqrt_beta * grad_clip)
    if grad_clip is not None and not np.isfinite(grad_clip):
        grad_clip = None  # C_u C_r overflows: no finite clip (the release raises)
    return sens_A, sens_b, sens_g, grad_clip


# The driver (Alg. 3)
def run(executor, release, randomness, meta, config):
    """Alternating minimisation with a private item step (Alg. 3); ``meta["n_item_codes"]``
    is internal, never released."""
    cfg, n_users, k, key = config, int(meta["n_users"]), config.n_components, randomness.key
    log = print if cfg.verbose else (lambda message: None)
    # Public sizes only (the number of ratings and of items present are private).
    log(f"[AdaptiveWeightMF] {n_users} users; {cfg.solver} solver, {cfg.weighting} "
        f"weights, {cfg.catalogue} catalogue")
    # The public useless-fit rule (count noise of the bounds' searches against n_users).
    if isinstance(release.plan, FallbackPlan):
        return _fallback(executor, release, meta, cfg)
    # Alg. 3, line 2: pre-processing -- clip bounds, DP mean, DP item counts (which
    # select the catalogue when it is not public).
    mean, mean_clip = 0.0, cfg.mean_clip
    if cfg.center:
        mean, mean_clip = _dp_mean(executor, release, n_users, mean_clip)
    rating_clip = cfg.rating_clip
    if rating_clip == "auto":
        rating_clip = _rating_clip(executor, release, mean, cfg.clip_quantile, n_users)
    # count_std, weight_std: noise of the two popularity releases (public)
    published, counts, count_std = _catalogue(executor, release, meta, cfg, key)
    m = int(published.shape[0])
    remap = np.full(int(meta["n_item_codes"]), m, dtype=np.int64)
    remap[published] = np.arange(m)
    executor.map(K.select_items, (remap, m))
    log(f"[AdaptiveWeightMF] {m} items published")
    # Alg. 3, line 1: data-independent initialisation v_i ~ N(0, I / k) of the published
    # items, from the public stream (its only draw; m is released).
    V = randomness.public.standard_normal((m, k)) / np.sqrt(k)
    # Item biases (Alg. 1 with d = 1, own phase), then the factor model's residuals.
    biases, weights, weight_std = np.zeros(m + 1), None, 0.0
    if cfg.item_bias:
        sens_w, sens_s = item_bias_sensitivities(cfg.count_cap, rating_clip)
        weights = release.gaussian("item_bias", executor.map(bias_weights, (cfg.count_cap, m)),
                                   sensitivity=sens_w, clip_norm=rating_clip)
        weight_std = release.noise_std("item_bias", sens_w)
        for _ in range(cfg.bias_iter):
            sums = release.gaussian(
                "item_bias",
                executor.map(bias_sums, (mean, biases, rating_clip, cfg.personal_ridge)),
                sensitivity=sens_s, clip_norm=rating_clip)
            biases[:m] = shrunk_item_biases(
                sums, weights, ridge=cfg.bias_ridge, rating_clip=rating_clip,
                noise_std=release.noise_std("item_bias", sens_s))
    executor.map(K.prepare_residuals, (mean, biases))
    # Task weights (eq. (11)-(12)): public omega from the DP counts, then per user.
    log_omega = None
    if cfg.weighting == "adaptive":
        log_omega = log_adaptive_item_weights(counts, mu=cfg.mu, budget=cfg.user_budget,
                                              n_users=n_users)
    executor.map(K.prepare_weights, (cfg, key, log_omega, counts))
    sens_A, sens_b, sens_g, grad_clip = _item_sensitivities(cfg, rating_clip)
    # Item-side ridge: reg plus noise_ridge times sigma_A sqrt(k), the spectral scale of
    # the symmetric Gram noise of this phase (public: post-processing).
    z = release.noise_multiplier("items")
    item_ridge = float(cfg.reg)
    if z > 0 and sens_A is not None:
        item_ridge += cfg.noise_ridge * z * sens_A * np.sqrt(k)
    if cfg.solver == "sgd":
        # Per-item steps from public quantities: curvature sum_j w_ij ||u_j||^2 <= C_u^2
        # omega_i n_i.
        scale = np.ones(m) if log_omega is None else np.exp(log_omega)
        c2 = 1.0 if cfg.clip_norm is None else np.float64(cfg.clip_norm) ** 2
        with np.errstate(over="ignore"):  # absurd clip norms: step -> 0
            step = cfg.learning_rate / (c2 * scale * np.maximum(counts, 1.0) + item_ridge)
    auto_ridge = cfg.embedding_ridge == "auto"
    rho = float(K.RIDGE_GRID[0]) if auto_ridge else float(cfg.embedding_ridge)
    for t in range(cfg.n_iter):
        if cfg.solver == "als":
            # Alg. 1, lines 2, 5-6: clipped users, weighted statistics, Gaussian noise.
            A, b = executor.map(K.als_statistics, (V, cfg, rho, rating_clip))
            A_hat = release.gaussian("items", A, sensitivity=sens_A,
                                     clip_norm=cfg.clip_norm, symmetric=True)
            b_hat = release.gaussian("items", b, sensitivity=sens_b, clip_norm=cfg.clip_norm)
            # Alg. 1, line 7: PSD projection, then a data-independent ridge.
            V = psd_ridge_solve(A_hat, b_hat, item_ridge)
        else:
            executor.map(K.user_step, (V, cfg, rho, rating_clip))
            for _ in range(cfg.gd_steps):
                # Alg. 2, line 5: weighted sum of per-entry clipped gradients.
                g_hat = release.gaussian("items", executor.map(K.item_gradient, (V, grad_clip)),
                                         sensitivity=sens_g, clip_norm=grad_clip)
                # Alg. 2, line 6 (the ridge gradient is data-independent).
                V = V - step[:, None] * (g_hat + item_ridge * V)
        log(f"[AdaptiveWeightMF] iteration {t + 1}/{cfg.n_iter} done")
    # The personal parts' embedding ridge, chosen on held-out ratings (charged).
    if auto_ridge:
        sens = None
        if rating_clip is not None:
            with np.errstate(over="ignore"):  # inf: the release raises if it adds noise
                sens = float(np.sqrt(K.RIDGE_GRID.shape[0]) * np.float64(rating_clip) ** 2)
        scores = release.gaussian("ridge", executor.map(K.ridge_scores, (V, cfg, rating_clip)),
                                  sensitivity=sens, clip_norm=rating_clip)
        rho = K.choose_ridge(scores, release.noise_std("ridge", sens))
    # Personal parts (billboard model): exact least squares from the released items.
    U, bias = executor.collect(K.personal_parts, (V, cfg, rho))
    # Post-processing of "counts" (without noise, m is the data's size: no warning).
    if cfg.catalogue == "private" and cfg.epsilon != np.inf and m < TINY_CATALOGUE:
        what = "no item" if m == 0 else f"only {m} item(s)"
        warnings.warn(
            f"The private item catalogue published {what} ({n_users} users at epsilon="
            f"{cfg.epsilon:g}): an item is published only if enough users rated it to clear "
            "the noise. Predictions are then mostly the DP mean plus each user's bias, and "
            "recommend() has little or nothing to offer. Pass a public catalogue items=[...] "
            "(e.g. the ids of a public movie list), raise epsilon, or fit on more users.",
            UserWarning, stacklevel=_caller_stacklevel())
    attributes = {
        "item_embeddings_": V, "item_biases_": biases[:m], "item_counts_": counts,
        "item_weighted_counts_": weights, "_popularity_noise": (count_std, weight_std),
        "mean_": mean, "mean_clip_": float(mean_clip) if cfg.center else None,
        "rating_clip_": rating_clip, "count_cap_": cfg.count_cap,
        "embedding_ridge_": float(rho), "user_embeddings_": U, "user_biases_": bias,
        "n_iter_": cfg.n_iter, "local_only_": False, "_published": published}
    released = [name for name, out in [
        ("item_embeddings_", True), ("item_biases_", cfg.item_bias), ("mean_", cfg.center),
        ("item_counts_", counts is not None), ("item_weighted_counts_", weights is not None),
        ("mean_clip_", cfg.center and cfg.mean_clip == "auto"),
        ("rating_clip_", cfg.rating_clip == "auto"),
        ("embedding_ridge_", auto_ridge), ("item_ids_", cfg.catalogue == "private")] if out]
    return FitResult(attributes=attributes, released=tuple(released),
                     local=("user_embeddings_", "user_biases_"),
                     notes=_notes(cfg, m),
                     not_covered=("item_ids_",) if cfg.catalogue == "observed" else ())


def _notes(cfg, n_published):
    tiny = n_published < TINY_CATALOGUE and cfg.epsilon != np.inf
    catalogue = {
        "private": "The item catalogue item_ids_ was selected under DP: an item is published iff "
                   "its noisy count (phase 'counts') clears a threshold; an item rated by one "
                   "user only is published with probability at most delta/4. "
                   f"{n_published} item(s) published." + (
                       f" The catalogue is {'empty' if n_published == 0 else 'tiny'} (fewer "
                       f"than {TINY_CATALOGUE} items): most predictions are the DP mean plus "
                       "each user's bias, and recommend() cannot fill a top-10 list."
                       if tiny else ""),
        "public": "The item catalogue item_ids_ is public (given by `items`).",
        "observed": "NOT COVERED: items='observed' releases the item catalogue item_ids_ (every "
                    "item present in X) as is: an item rated by a single user appears or "
                    "disappears with that user. Use items=None (selected under DP) or a public "
                    "catalogue items=[...]."}[cfg.catalogue]
    notes = [catalogue, "The number of users is public. Ratings of items outside the "
             "published catalogue only inform their user's personal bias.",
             f"Every user's task weights satisfy sum_i w_ij^2 <= user_budget="
             f"{cfg.user_budget:g} ({cfg.weighting} weights)."]
    if cfg.solver == "als":
        notes.append("Phase 'items' alternates two releases per iteration: the per-item Gram "
                     "matrices (sensitivity 2 sqrt(beta) C_u^2) and right-hand sides (2 "
                     "sqrt(beta) C_u C_r).")
    if cfg.item_bias:
        notes.append("Phase 'item_bias' releases the weighted counts (sensitivity sqrt(2 "
                     "count_cap)) and, per pass, the weighted sums of user-centred ratings (2 "
                     "sqrt(count_cap) C_r).")
    return tuple(notes)


# The personal-part fit (App. D, Remark D.1)
def fit_personal(blocks, n_codes, fitted, config):
    """Every user's ``(U, bias)`` from ``fitted``'s releases and its entries."""
    executor, m = LocalExecutor(blocks), fitted.n_items_
    executor.map(K.select_items, (np.minimum(np.arange(n_codes), m), m))
    executor.map(K.prepare_residuals, (fitted.mean_, np.append(fitted.item_biases_, 0.0)))
    if getattr(fitted, "local_only_", False):
        return executor.collect(K.own_mean_parts, fitted.item_embeddings_.shape[1])
    return executor.collect(K.personal_parts, (fitted.item_embeddings_, config,
                                               fitted.embedding_ridge_))

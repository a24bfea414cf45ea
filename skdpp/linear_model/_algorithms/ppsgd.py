"""PPSGD, Bietti, Wei, Dudík, Langford & Wu (2022), Algorithms 1-3: plan, driver and
personal parts of :class:`skdpp.linear_model.PPSGDRegressor` (kernels: :mod:`.ppsgd_kernels`).
"""

import functools
import warnings
from dataclasses import dataclass, replace
from numbers import Real

import numpy as np

from ...base import FitResult, _caller_stacklevel
from ...exceptions import UselessFitWarning
from ...privacy import BudgetPlan
from ...utils._executor import LocalExecutor
from ...utils._random import FitRandomness
from .. import _auto
from .._auto import (
    AUTO_STEPS, CLIP_PHASE, COLD_START_CLIP_RELEASES, FEATURE_SCALE_STEPS, LABEL_RANGE_STEPS,
    VARIANCE_FLOOR, FallbackPlan, at_grid_edge, auto_bound, auto_bounds_note, cold_start_levels,
    fallback_fit, fallback_plan, feature_scales, gated_plan, gradient_bound_inconsistent,
    head_votes, inverse_scales, label_range, own_label_ranges, scaling_notes, standardize,
    standardize_block, useless_fit_message)
from .._scratch import release_scratch
from .ppsgd_kernels import (PersonalPrior, SGDConfig, feature_scale_statistic,
                            gradient_norm_statistic, make_sgd_blocks, offset_values,
                            personal_refit, personal_sgd, sgd_round)

PHASE = "iterations"  # the per-round releases (Alg. 1, lines 10-12)
#: Default ``budget_shares`` (``"iterations"`` takes the rest).
DEFAULT_SHARES = {"clip": "auto", "cold_start": 0.02}


def step_sizes(alpha, learning_rate):
    """``(global, local)`` step sizes: ``η min(1, alpha)`` and ``η min(1, 1 / alpha)``."""
    alpha, lr = float(alpha), float(learning_rate)
    lr_local = 0.0 if alpha == np.inf else lr * min(1.0, 1.0 / alpha) if alpha > 0 else lr
    return lr * min(1.0, alpha), lr_local


@dataclass(frozen=True)
class PPSGDConfig:
    """The parameters of :class:`~skdpp.linear_model.PPSGDRegressor`, resolved."""

    epsilon: float
    delta: float
    clip_norm: object          # float, "auto" or None
    feature_scale: object      # float or "auto"
    alpha: float
    learning_rate: float
    n_rounds: int
    batch_size: object
    sample_rate: float
    weighting: str
    average: bool
    fit_intercept: bool
    personal_ridge: object     # float or None
    clip_quantile: float
    clip_share: object         # float or "auto"
    cold_start_share: float
    noise_multiplier: object
    verbose: int = 0

    @property
    def releases(self):  # alpha > 0
        return step_sizes(self.alpha, self.learning_rate)[0] > 0

    @property
    def auto_names(self):
        return [name for name in ("clip_norm", "feature_scale")
                if self.releases and getattr(self, name) == "auto"]

    @property
    def cold_start(self):
        return self.fit_intercept and self.releases and self.cold_start_share > 0

    @property
    def labelled(self):  # a label range is released (both bounds "auto")
        return bool(_auto.SCALE_FEATURES) and self.releases and \
            self.noise_multiplier is None and self.clip_norm == "auto" and \
            self.feature_scale == "auto"


def plan(config, meta):
    """The fit's budget plan (nothing when ``alpha=0``); see :func:`_plan`."""
    return _plan(config, meta)[0]


def _plan(config, meta):
    """``(plan, scaled)``: ``"clip"`` (``scaled``: the feature scales' gate of
    :func:`~skdpp.linear_model._auto.gated_plan`), ``"iterations"`` (:func:`run_rounds`)
    and ``"cold_start"`` (two clipped means)."""
    budget = BudgetPlan(config.epsilon, config.delta)
    if not config.releases:  # alpha = 0: nothing is released
        return budget, False
    n_base = AUTO_STEPS * len(config.auto_names) \
        + (COLD_START_CLIP_RELEASES if config.cold_start else 0) \
        + (LABEL_RANGE_STEPS if config.labelled else 0)
    rounds = dict(count=int(config.n_rounds), sampling_rate=float(config.sample_rate))
    if config.noise_multiplier is not None:  # every release at the given multiplier
        z = float(config.noise_multiplier)
        if n_base:
            budget.fix(CLIP_PHASE, noise_multiplier=z, count=n_base)
        budget.fix(PHASE, noise_multiplier=z, **rounds)
        if config.cold_start:
            budget.fix("cold_start", noise_multiplier=z, count=2)
        return budget, False

    def build(share, n_clip):
        budget = BudgetPlan(config.epsilon, config.delta)
        if n_clip:
            budget.add(CLIP_PHASE, share=share, count=n_clip, param="budget_shares['clip']")
        budget.add_rest(PHASE, **rounds)
        if config.cold_start:
            budget.add("cold_start", share=config.cold_start_share, count=2,
                       param="budget_shares['cold_start']")
        return budget

    budget, scaled = gated_plan(build, config.clip_share, meta["n_users"], n_base,
                                FEATURE_SCALE_STEPS * int(meta["n_features"]), config.labelled)
    if config.labelled and config.fit_intercept:  # predicted useless: _fallback's plan
        budget = fallback_plan(budget, meta["n_users"], "PPSGDRegressor",
                               level=config.cold_start)
    return budget, scaled


def run_rounds(executor, release, config, *, n_users, lr_global, w_init=None,
               round_fn=sgd_round, callback=None, verbose=0):
    """Run the rounds of PPSGD (Alg. 1; Alg. 2/3 with client sampling) with the map
    ``round_fn``, then ``callback(t, w, executor)``; the last (or averaged) global
    iterate (``w_init``: zeros, Alg. 1, line 2); offsets stay in the states."""
    n_rounds, q = int(config.n_rounds), float(config.sample_rate)
    w = np.zeros(config.n_features) if w_init is None else np.array(w_init, dtype=float)
    w_sum = np.zeros(config.n_features) if config.average else None
    clip_norm = config.clip_norm
    sensitivity = None if clip_norm is None else 2.0 * float(clip_norm)
    # Alg. 2/3, line 13: the sum is divided by the public expected number of
    # participants q N (never the realised number of participants or rows).
    normaliser = q * n_users
    if not config.release and release is not None:
        release.nothing(PHASE, clip_norm=clip_norm)  # alpha = 0: w is never updated
    step = functools.partial(round_fn, config=config)
    report_every = max(1, n_rounds // 10)
    for t in range(1, n_rounds + 1):  # Alg. 1, line 3
        total = executor.map(step, (t, w))
        if config.release:
            # Alg. 1, lines 10-12: one Gaussian release of the sum of clipped
            # contributions (sensitivity 2C), the global step on it.
            noisy = release.gaussian(PHASE, total, sensitivity=sensitivity,
                                     clip_norm=clip_norm, sampling_rate=q)
            with np.errstate(over="ignore", invalid="ignore"):
                w = w - lr_global * np.asarray(noisy, dtype=float) / normaliser
        if w_sum is not None:
            w_sum += w
        if callback is not None:
            callback(t, w, executor)
        if verbose and (t % report_every == 0 or t == n_rounds):
            print(f"[PPSGD] round {t}/{n_rounds}")
    return w if w_sum is None else w_sum / n_rounds


def _sgd_config(config, key, n_features, *, sample_rate, n_rounds, lr_local, clip_norm):
    return SGDConfig(
        key=key, n_features=int(n_features),
        batch_size=config.batch_size, sample_rate=float(sample_rate),
        weighting=config.weighting, lr_local=lr_local, clip_norm=clip_norm,
        release=config.releases, average=bool(config.average), n_rounds=int(n_rounds),
        center=bool(config.fit_intercept), local_scale=config.feature_scale == "auto")


def run(executor, release, randomness, meta, config):
    """Fit PPSGD: the ``"clip"`` bounds, the rounds, the cold start, the personal parts."""
    try:
        return _run(executor, release, randomness, meta, config)
    finally:
        release_scratch()  # this thread's per-round buffers (see _scratch.py)


def _fallback(executor, release, meta, config, sgd):
    """The fit of a :class:`~skdpp.linear_model._auto.FallbackPlan`: ``coef_ = 0``, known
    users' own ridge fits and means (:func:`personal_refit`)."""
    d = meta["n_features"]

    def attributes(level):
        prior = PersonalPrior(np.zeros(d), level, None, float(config.personal_ridge or 0.0),
                              sgd, 0.0, True)
        theta, b = _personal(executor, config, prior, int(config.n_rounds))
        return {"coef_": np.zeros(d), "intercept_": level, "offsets_": theta,
                "intercept_offsets_": b - level, "n_iter_": 0, "noise_multiplier_": 0.0,
                "clip_norm_": None, "feature_scale_": None, "intercept_clip_": None,
                "feature_scales_": None, "label_range_": None, "local_only_": True,
                "own_label_ranges_": executor.collect(own_label_ranges)}

    return fallback_fit(executor, release, meta["n_users"], attributes,
                        level_attr="intercept_", local=_LOCAL)


_LOCAL = ("offsets_", "intercept_offsets_", "own_label_ranges_")


def _run(executor, release, randomness, meta, config):
    lr_global, lr_local = step_sizes(config.alpha, config.learning_rate)
    n_users, d = meta["n_users"], meta["n_features"]
    releases = config.releases
    scaled = _plan(config, meta)[1]  # the public gate of the plan
    sgd = _sgd_config(config, randomness.key, d, sample_rate=config.sample_rate,
                      n_rounds=config.n_rounds, lr_local=lr_local, clip_norm=None)
    if isinstance(release.plan, FallbackPlan):
        return _fallback(executor, release, meta, config, sgd)
    clip_norm, scale = config.clip_norm, config.feature_scale
    scales, dropped, labels = None, 0, None
    if CLIP_PHASE in release.plan:
        message = useless_fit_message(release.noise_multiplier(CLIP_PHASE), n_users,
                                      "PPSGDRegressor")
        if message is not None:
            warnings.warn(message, UselessFitWarning, stacklevel=_caller_stacklevel())
    if config.labelled:
        labels = label_range(executor, release, n_users=n_users)
    if scaled:
        scales, dropped = feature_scales(executor, release, n_features=d, n_users=n_users)
        executor.map(standardize_block, inverse_scales(scales))
    quantile = float(config.clip_quantile)
    if releases and clip_norm == "auto":
        clip_norm = auto_bound(executor, release, gradient_norm_statistic, sgd,
                               quantile=quantile, n_users=n_users)
    if releases and scale == "auto":
        scale = auto_bound(executor, release, feature_scale_statistic, sgd,
                           quantile=quantile, n_users=n_users)
    inv_s2 = 1.0 / float(scale) ** 2 if isinstance(scale, Real) else 1.0
    if not isinstance(clip_norm, Real):
        clip_norm = None
    if config.feature_scale != "auto":
        lr_local = lr_local * inv_s2  # (per-user scales otherwise)
    sgd = replace(sgd, lr_local=lr_local, clip_norm=clip_norm)
    w = run_rounds(executor, release, sgd, n_users=n_users, lr_global=lr_global * inv_s2,
                   verbose=config.verbose)
    astray = releases and config.fit_intercept and gradient_bound_inconsistent(
        clip_norm, scale, labels, centred=True)
    if releases and (at_grid_edge(clip_norm) or at_grid_edge(scale) or astray):
        # an "auto" bound at the lower edge of its grid: contributions about 0, the
        # weights are noise and discarded (post-processing)
        w = np.zeros_like(w)
    intercept, intercept_scale, searched = 0.0, None, labels
    if config.cold_start:
        # keeps w only when it narrows the spread of mean levels (post-processing)
        w, intercept, intercept_scale, labels = cold_start_levels(
            release, lambda v, fn: executor.map(offset_values, (v, fn)), w,
            n_users=n_users, clip_quantile=quantile, labels=labels,
            reduce_votes=lambda v, b, b0: executor.map(head_votes, (None, v, b, b0)))
    prior = PersonalPrior(w, float(intercept), intercept_scale,
                          float(config.personal_ridge or 0.0), sgd,
                          VARIANCE_FLOOR if scaled else 0.0)
    theta, b = _personal(executor, config, prior, int(config.n_rounds))
    z = float(release.noise_multiplier(PHASE)) if PHASE in release.plan else 0.0
    attributes = {"coef_": w.copy(), "intercept_": float(intercept),
                  "offsets_": theta, "intercept_offsets_": b - float(intercept),
                  "n_iter_": int(config.n_rounds), "noise_multiplier_": z,
                  "clip_norm_": None if clip_norm is None else float(clip_norm),
                  "feature_scale_": float(scale) if isinstance(scale, Real) else None,
                  "intercept_clip_": intercept_scale, "feature_scales_": scales,
                  "label_range_": labels, "local_only_": False,
                  "own_label_ranges_": executor.collect(own_label_ranges)}
    released = (("coef_",) * releases + ("intercept_",) * config.cold_start
                + tuple(f"{name}_" for name in config.auto_names)
                + ("intercept_clip_",) * config.cold_start)
    notes = _notes(config, z)
    if config.labelled:
        released += ("feature_scales_",) * scaled + ("label_range_",)
        bounds = {"clip_norm": clip_norm, "feature_scale": scale}
        notes += scaling_notes(scaled, dropped, labels, bounds, searched)
        if astray:
            notes += (
                "The released clip_norm exceeds what any user's gradient at w = 0 can "
                "be (feature_scale_ x the width of label_range_, with slack): its noisy "
                "search went astray, so coef_ is set to 0 and the cold start is the "
                "released intercept (post-processing, no privacy cost).",)
    return FitResult(attributes, released=released, local=_LOCAL, notes=notes)


def _personal(executor, config, prior, n_rounds):
    """``(theta_i, b_i)``: the shrunk refit, the SGD offsets (``personal_ridge=None`` or
    nothing released), or zeros (``alpha=inf``)."""
    if prior.local_only or (config.personal_ridge is not None and config.releases):
        theta, b = executor.collect(personal_refit, prior)
    else:
        theta, b = executor.collect(personal_sgd, (prior.w, n_rounds, prior.config))
    if float(config.alpha) == np.inf:
        return np.zeros_like(theta), np.full(theta.shape[0], prior.intercept)
    return theta, b


def fit_personal(X, y, index, config, estimator):
    """``personalize``: the end of :func:`run` with the released model fixed (global step
    0, ``max(1, round(q T))`` local SGD steps). No release."""
    scaled = estimator.feature_scales_ is not None
    if scaled:
        X = standardize(X, inverse_scales(estimator.feature_scales_))
    w = np.asarray(estimator.coef_, dtype=float)
    intercept = float(estimator.intercept_)
    n_steps = max(1, int(round(float(config.sample_rate) * int(config.n_rounds))))
    lr_local = step_sizes(config.alpha, config.learning_rate)[1]
    if config.feature_scale != "auto" or estimator.feature_scale_ is None:
        scale = estimator.feature_scale_ if estimator.feature_scale_ is not None else 1.0
        lr_local = lr_local / float(scale) ** 2
    sgd = replace(_sgd_config(config, FitRandomness(estimator.random_state).key, X.shape[1],
                              sample_rate=1.0, n_rounds=n_steps, lr_local=lr_local,
                              clip_norm=estimator.clip_norm_), release=False)
    executor = LocalExecutor(make_sgd_blocks(X, np.asarray(y, dtype=np.float64), index,
                                             batch_size=config.batch_size, sample_rate=1.0))
    prior = PersonalPrior(w, intercept, estimator.intercept_clip_,
                          float(config.personal_ridge or 0.0), sgd,
                          VARIANCE_FLOOR if scaled else 0.0, bool(estimator.local_only_))
    try:
        if float(config.alpha) != np.inf and (config.personal_ridge is None
                                              or not config.releases):
            run_rounds(executor, None, sgd, n_users=index.n_users, lr_global=0.0, w_init=w)
        theta, b = _personal(executor, config, prior, n_steps)
    finally:
        release_scratch()
    return {"offsets_": theta, "intercept_offsets_": b - intercept,
            "own_label_ranges_": executor.collect(own_label_ranges)}


def _notes(config, z):
    if float(config.alpha) == 0:
        return ("alpha=0: local-only learning; the global weights are never "
                "updated, nothing is released and no privacy is spent.",)
    notes = [
        f"{config.n_rounds} rounds, each releasing the Gaussian sum of per-user "
        f"gradients clipped to clip_norm (L2 sensitivity 2*clip_norm under "
        f"replace-one-user), sample_rate q={config.sample_rate}, noise multiplier "
        f"{z:.6g} (noise std = multiplier * 2 * clip_norm); the global step "
        "divides the release by the public q * n_users."]
    if config.auto_names:
        notes.append(auto_bounds_note(config.auto_names, config.clip_quantile))
    if config.cold_start:
        notes.append(
            "fit_intercept=True: gradients are computed on each user's rows centred "
            "on the user's own means; " + _auto.COLD_START_NOTE.format(head="coef_"))
    if config.sample_rate < 1:
        notes.append(
            "Client sampling: each round is charged as a Poisson-subsampled "
            "Gaussian through a zero-out neighbour (sensitivity clip_norm, noise "
            "multiplier 2z, add/remove RDP) and group privacy of size 2 for "
            "replace-one-user. The sample is a keyed hash, never published.")
    if float(config.alpha) == np.inf:
        notes.append("alpha=inf: global-only DP-SGD; personal offsets stay 0.")
    return tuple(notes)

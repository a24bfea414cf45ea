"""The driver of Algorithm 3 (Snedeker, Zhou & Bassily 2025, Section 4).

:func:`fit_alg3` runs the algorithm over blocks of whole users through an
executor (:mod:`skdpp.utils._executor`): it draws the public randomness,
maps the block functions of :mod:`skdpp.linear_model._margin_scores` to get
partial sums, releases their totals through the fit's
:class:`~skdpp.privacy.Releaser` (noise added once, here) and computes the
next broadcast. Per binary problem ``p`` (one-vs-rest keeps its loop over
problems) the releases are:

1. ``subspace[p]`` (``candidates="subspace"`` only): ``sum_i u_i u_i^T``,
   Gaussian, Frobenius sensitivity ``sqrt(2)``, symmetric noise;
2. ``selection[p]`` (Alg. 3, line 4): the exponential mechanism over the
   candidates with score ``f = -(1/n) sum_i t_i``, sensitivity ``1/n``;
3. ``cold_start[p]``: the exponential mechanism over the public directions,
   sensitivity ``1/n``.

Then every user's head is computed locally (Alg. 3, line 6; billboard model)
by :func:`~skdpp.linear_model._margin_scores.heads_block`.

:func:`clipped_blocks` builds the blocks: a copy of the rows clipped to
``clip_norm`` in canonical order (users sorted by id, each user's rows by a
hash of their content), so that a fit is a function of the set of records.
"""

import math
from dataclasses import dataclass

import numpy as np

from ..privacy import clip_by_norm
from ..utils._grouped import DEFAULT_BLOCK_ROWS, UserBlock, make_blocks
from ._jl_candidates import (
    draw_public,
    precondition,
    random_candidates,
    spread_from_release,
    subspace_candidates,
)
from ._margin_scores import (
    Heads,
    Prepare,
    Scores,
    candidate_scores_block,
    heads_block,
    population_scores_block,
    prepare_block,
    subspace_block,
)

__all__ = ["Alg3Config", "clipped_blocks", "fit_alg3", "problem_suffix",
           "score_sensitivity", "subspace_sensitivity"]

# Rows per chunk when building the clipped canonical copy of ``X``.
_CLIP_CHUNK_ROWS = 1 << 14

# Rows per block of an in-process fit (read at call time).
_BLOCK_ROWS = DEFAULT_BLOCK_ROWS


def score_sensitivity(n_users):
    """Sensitivity of the scores ``f`` and of the cold-start score (Alg. 3, line 4).

    ``f = -(1/n) sum_i t_i`` with every ``t_i`` in ``[0, 1]`` a function of
    user ``i``'s rows only: replacing one user moves ``f`` by at most ``1/n``.
    """
    return 1.0 / n_users


def subspace_sensitivity():
    """Frobenius sensitivity of ``sum_i u_i u_i^T`` under replace-one-user.

    Every user contributes ``u u^T`` with ``||u|| in {0, 1}``, and for such
    vectors ``||a a^T - b b^T||_F^2 = ||a||^4 + ||b||^4 - 2 (a^T b)^2 <= 2``.
    """
    return math.sqrt(2.0)


def problem_suffix(p, n_problems):
    """Phase-name suffix of binary problem ``p`` (``""`` for a binary task)."""
    return "" if n_problems == 1 else f"[{p}]"


@dataclass(frozen=True)
class Alg3Config:
    """Public configuration of one fit (parameters resolved by the estimator)."""

    n_components: int
    jl_dim: int
    margin: float
    head_bound: float
    n_candidates: int
    candidates: str
    n_directions: int
    split: str
    verbose: int = 0


def clipped_blocks(X, Y, index, clip_norm, *, max_rows=None):
    """Blocks over a copy of ``X`` clipped to ``clip_norm``, in canonical order.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples, n_problems)
        Labels in ``{-1, +1}``, one column per binary problem.
    index : UserIndex
    clip_norm : float or None
        Every row is scaled to norm at most ``clip_norm`` (the paper's ``r``;
        never changes the sign of ``<x, w>``). ``None``: an unscaled copy.
    max_rows : int, default=None
        Rows per block (``None``: 32768).

    Returns
    -------
    blocks : list of UserBlock
        Blocks of whole users over the clipped copy (float32 data stay
        float32) and a copy of ``Y``, both in canonical order, so that every
        block's rows are a contiguous view.
    """
    whole = make_blocks(X, Y, index, max_rows=None)[0]
    order = whole.source_rows()
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    Xc = np.empty(X.shape, dtype=dtype)
    for a in range(0, X.shape[0], _CLIP_CHUNK_ROWS):  # memory chunks of rows
        rows = order[a:a + _CLIP_CHUNK_ROWS]
        Xc[a:a + rows.shape[0]] = clip_by_norm(X[rows], clip_norm, out_dtype=dtype)
    canonical = UserBlock(Xc, np.asarray(Y, dtype=np.float64)[order], None, whole.users,
                          whole.user_hash, whole.counts)
    return canonical.split(_BLOCK_ROWS if max_rows is None else max_rows)


def _log(config, message):
    # Only public values are ever printed: phase names, shapes and plan constants.
    if config.verbose:
        print(f"[JLMarginClassifier] {message}")


def fit_alg3(executor, release, randomness, meta, config):
    """Run Algorithm 3 for every binary problem; return the fitted values.

    Parameters
    ----------
    executor : LocalExecutor
        Blocks from :func:`clipped_blocks`.
    release : Releaser
        The fit's releases (plan from the estimator's ``_budget_plan``).
    randomness : FitRandomness
    meta : dict
        Public metadata: ``n_users``, ``n_features``, ``n_problems``.
    config : Alg3Config

    Returns
    -------
    fitted : dict
        ``jl_matrix`` (k', d), ``directions`` (D, k), ``embeddings`` (P, d, k),
        ``cold_start_heads`` (P, k), ``heads`` (n_users, P, k), ``candidates``
        (P, C, k', k) and ``selected`` (P,).
    """
    n_users, n_problems = meta["n_users"], meta["n_problems"]
    k, jl_dim = config.n_components, config.jl_dim
    threshold = config.margin / config.head_bound
    # Public randomness first (Alg. 3, line 1; direction grid; candidate
    # perturbations): its draws never depend on the data.
    public = draw_public(randomness.public, jl_dim=jl_dim, n_features=meta["n_features"],
                         n_components=k, n_directions=config.n_directions,
                         n_candidates=config.n_candidates, n_problems=n_problems)
    M, directions = public.jl_matrix, public.directions
    # S^0 / S^1 split (Alg. 3, Require) and S_M (line 2), kept per block.
    executor.map(prepare_block, Prepare(M, randomness.key, config.split))

    embeddings = np.empty((n_problems, meta["n_features"], k))
    cold_heads = np.empty((n_problems, k))
    all_candidates = np.empty((n_problems, config.n_candidates, jl_dim, k))
    selected = np.empty(n_problems, dtype=np.int64)
    sens = score_sensitivity(n_users)
    for p in range(n_problems):  # loop over binary problems (one-vs-rest)
        sfx = problem_suffix(p, n_problems)
        if config.candidates == "subspace":
            # Practical stage (not in the paper): a DP estimate of the relevant
            # k-dim subspace of the JL space; candidates around it.
            phase = f"subspace{sfx}"
            stat = executor.map(subspace_block, p)
            noisy = release.gaussian(phase, stat, sensitivity=subspace_sensitivity(),
                                     clip_norm=1.0, symmetric=True)
            vals, vecs = np.linalg.eigh(noisy)
            vals, vecs = vals[::-1], vecs[:, ::-1]
            basis = precondition(vecs[:, :k], M)
            spread = spread_from_release(
                vals, k, release.noise_std(phase, subspace_sensitivity()), jl_dim)
            cands = subspace_candidates(basis, public.perturbations[p], max_spread=spread)
            _log(config, f"{phase}: released noisy {jl_dim}x{jl_dim} second moment "
                         f"(noise multiplier {release.noise_multiplier(phase):.3g})")
        else:
            # Alg. 3, line 3: a finite, data-independent candidate set in B_F.
            cands = random_candidates(public.perturbations[p])

        # Alg. 3, line 4: the exponential mechanism, sensitivity 1/n.
        phase = f"selection{sfx}"
        losses = executor.map(candidate_scores_block, Scores(p, cands, directions, threshold))
        choice = release.exponential(phase, -losses / n_users, sensitivity=sens)
        utilde = cands[choice]
        embeddings[p] = M.T @ utilde                               # Alg. 3, line 5
        all_candidates[p], selected[p] = cands, choice
        _log(config, f"{phase}: {config.n_candidates} candidates scored, epsilon "
                     f"{release.noise_multiplier(phase):.3g}")

        # Cold start (not in the paper): a population head by the exponential
        # mechanism over the public directions, sensitivity 1/n.
        phase = f"cold_start{sfx}"
        losses = executor.map(population_scores_block,
                              Scores(p, utilde, directions, threshold))
        pick = release.exponential(phase, -losses / n_users, sensitivity=sens)
        cold_heads[p] = config.head_bound * directions[pick]
        _log(config, f"{phase}: {directions.shape[0]} directions scored, epsilon "
                     f"{release.noise_multiplier(phase):.3g}")

    # Alg. 3, line 6: every user's head from the releases and its own rows (S^1).
    heads = executor.collect(heads_block, Heads(embeddings, cold_heads, directions,
                                                config.head_bound, config.margin))
    return {"jl_matrix": M, "directions": directions, "embeddings": embeddings,
            "cold_start_heads": cold_heads, "heads": heads,
            "candidates": all_candidates, "selected": selected}

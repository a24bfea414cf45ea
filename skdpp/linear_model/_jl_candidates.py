"""Public randomness and candidate sets of Algorithm 3 (Snedeker, Zhou & Bassily 2025).

Everything here is either *public randomness* drawn from the fit's
``randomness.public`` generator before any data-dependent step (the JL matrix
``M``, the direction grid, the candidate perturbations: :func:`draw_public`),
or *post-processing* of those draws and of DP releases (the candidate frames
``U~`` of the exponential mechanism). No function here sees private data.

Examples
--------
>>> import numpy as np
>>> from skdpp.linear_model._jl_candidates import draw_public, random_candidates
>>> public = draw_public(np.random.default_rng(0), jl_dim=8, n_features=20,
...                      n_components=2, n_directions=16, n_candidates=5, n_problems=1)
>>> public.jl_matrix.shape, public.directions.shape, public.perturbations.shape
((8, 20), (16, 2), (1, 5, 8, 2))
>>> cands = random_candidates(public.perturbations[0])
>>> np.allclose(np.swapaxes(cands, 1, 2) @ cands, np.eye(2))
True
"""

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "PublicDraws",
    "auto_jl_dim",
    "direction_grid",
    "draw_public",
    "jl_matrix",
    "orthonormalize",
    "precondition",
    "random_candidates",
    "spread_from_release",
    "subspace_candidates",
]

# Failure probability beta of the JL transform in the ``jl_dim="auto"`` rule
# (a public constant; Alg. 3, Require, and Lemma 15).
JL_FAILURE_PROBABILITY = 0.05

# Upper cap of ``jl_dim="auto"`` (memory/time guard; documented).
JL_AUTO_MAX = 256

# Relative ridge of the preconditioner of the subspace candidates (public constant).
RIDGE = 0.03


def auto_jl_dim(n_users, n_features, n_components, *, radius, head_bound, margin):
    """``k' = ceil(r^2 Gamma^2 log(n / beta) / rho^2)``, clipped (Alg. 3, Require).

    Only public quantities enter: the number of users ``n`` (public under
    replace-one-user), ``n_features`` and the parameters ``r`` (``clip_norm``),
    ``Gamma`` (``head_bound``) and ``rho`` (``margin``). The paper's ``nm``
    (number of rows) is replaced by ``n``: the number of rows of a user is
    private under replace-one-user. The result is clipped to
    ``[n_components, min(n_features, 256)]`` (a JL dimension above ``d`` does
    not reduce anything; the cap bounds memory and time).
    """
    # products (not **) so that huge parameters overflow to inf instead of raising
    raw = (radius * radius) * (head_bound * head_bound) * math.log(
        max(n_users, 2) / JL_FAILURE_PROBABILITY) / (margin * margin)
    raw = math.ceil(raw) if math.isfinite(raw) else math.inf
    return int(max(n_components, min(raw, n_features, JL_AUTO_MAX)))


def jl_matrix(jl_dim, n_features, rng):
    """Alg. 3, line 1: ``M`` in ``R^{k' x d}``, i.i.d. entries uniform on ``{+-1/sqrt(k')}``.

    Public randomness (not privacy noise): ``M`` is released as ``jl_matrix_``.
    """
    signs = rng.integers(0, 2, size=(jl_dim, n_features), dtype=np.int8)
    return (2.0 * signs - 1.0) / math.sqrt(jl_dim)


def direction_grid(n_components, n_directions, rng):
    """Public unit directions ``u`` on the sphere ``S^{k-1}``, shape ``(D, k)``.

    ``k = 1``: ``{+1, -1}``; ``k = 2``: ``n_directions`` equally spaced angles
    (no draw); ``k >= 3``: ``n_directions`` i.i.d. uniform directions drawn
    from ``rng`` (public randomness, independent of the data).
    """
    if n_components == 1:
        return np.array([[1.0], [-1.0]])
    if n_components == 2:
        return circle_grid(n_directions)
    g = rng.standard_normal((n_directions, n_components))  # public directions, not noise
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def circle_grid(n_directions):
    """The ``n_directions`` equally spaced unit directions of the circle (``k = 2``)."""
    angles = 2.0 * np.pi * np.arange(n_directions) / n_directions
    return np.column_stack([np.cos(angles), np.sin(angles)])


@dataclass(frozen=True)
class PublicDraws:
    """The public randomness of one fit, drawn before any data-dependent step.

    Attributes
    ----------
    jl_matrix : ndarray of shape (jl_dim, n_features)
        ``M`` (Alg. 3, line 1).
    directions : ndarray of shape (n_directions, n_components)
        Unit directions for the inner minimum over heads, the local heads and
        the cold-start head.
    perturbations : ndarray of shape (n_problems, n_candidates, jl_dim, n_components)
        i.i.d. standard normal matrices: the random candidate frames
        (``candidates="random"``) or the perturbations of the released basis
        (``candidates="subspace"``), one set per binary problem.
    """

    jl_matrix: np.ndarray
    directions: np.ndarray
    perturbations: np.ndarray


def draw_public(rng, *, jl_dim, n_features, n_components, n_directions, n_candidates,
                n_problems):
    """Draw all public randomness of a fit from ``rng`` (``randomness.public``).

    The number of draws depends only on the parameters and on public
    metadata (``n_features``, the number of binary problems), never on the
    data, and everything is drawn before the first data-dependent step.
    """
    M = jl_matrix(jl_dim, n_features, rng)
    directions = direction_grid(n_components, n_directions, rng)
    perturbations = rng.standard_normal((n_problems, n_candidates, jl_dim, n_components))
    return PublicDraws(M, directions, perturbations)


def orthonormalize(mats):
    """Batched thin QR: an orthonormal basis of the columns of each ``(k', k)`` matrix.

    The signs are fixed (positive diagonal of ``R``) so that the result is a
    deterministic function of the input.
    """
    q, r = np.linalg.qr(mats)
    signs = np.sign(np.diagonal(r, axis1=-2, axis2=-1))
    signs[signs == 0] = 1.0
    return q * signs[..., None, :]


def random_candidates(perturbations):
    """Data-independent candidates: Haar-random orthonormal ``k' x k`` frames.

    ``orth(G_c)`` for the public standard normal ``G_c``. Every candidate has
    orthonormal columns, so ``||U~||_F = sqrt(k) <= sqrt(2k)``: a finite
    subset of the Frobenius ball ``B_F`` of Alg. 3, line 3.
    """
    return orthonormalize(perturbations)


def precondition(basis, M, *, ridge=RIDGE):
    """``orth((M M^T + lambda I)^{-1} P)``: frames whose embedding follows ``span(P)``.

    The subspace release estimates ``span(M U*)``; the classifier of a
    candidate is ``<x, M^T U~ v>``, and ``M^T U~`` is proportional to ``U*``
    for ``U~ = (M M^T)^+ M U*`` (exactly when ``k' >= d``, up to the JL error
    otherwise). A small ridge ``lambda = 0.03 max(d / k', 1)`` (the scale of
    the non-zero eigenvalues of ``M M^T``) keeps the inverse stable when
    ``k'`` is close to ``d``. Post-processing of ``P`` and the public ``M``.
    """
    jl_dim, n_features = M.shape
    lam = ridge * max(n_features / jl_dim, 1.0)
    pre = np.linalg.solve(M @ M.T + lam * np.eye(jl_dim), basis)
    return orthonormalize(pre[None])[0]


def subspace_candidates(basis, perturbations, *, max_spread=1.0):
    """Candidates around an orthonormal basis ``P`` (``k' x k``).

    Candidate ``c`` is ``orth(P + s_c G_c / sqrt(k'))`` with the public
    standard normal ``G_c`` and spreads ``s_c`` evenly spaced in
    ``[0, max_spread]`` (``s_0 = 0``: ``P`` itself). A function of the DP
    release and public randomness only (post-processing).
    """
    n_candidates, jl_dim, _ = perturbations.shape
    spreads = np.linspace(0.0, max_spread, n_candidates)
    return orthonormalize(basis[None] + (spreads / math.sqrt(jl_dim))[:, None, None]
                          * perturbations)


def spread_from_release(eigenvalues, n_components, noise_std, jl_dim):
    """Largest candidate spread, from the released spectrum (post-processing).

    Davis-Kahan: the angle between the released top-``k`` eigenspace and the
    noiseless one is at most ``||E||_2 / gap`` with ``||E||_2 ~ 2 sigma
    sqrt(k')`` for the symmetric Gaussian noise ``E`` of std ``sigma`` and
    ``gap`` the released eigengap ``lambda_k - lambda_{k+1}``. The spread is
    twice that bound, clipped to ``[0.1, 1]`` (0.1 covers the sampling error
    that the noise-free bound ignores). Uses only the DP release and public
    constants.
    """
    if eigenvalues.shape[0] <= n_components:
        return 1.0
    gap = float(eigenvalues[n_components - 1] - eigenvalues[n_components])
    bound = 2.0 * noise_std * math.sqrt(jl_dim) / max(gap, 1e-300)
    return float(min(1.0, max(0.1, 2.0 * bound)))

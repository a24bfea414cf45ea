"""Public randomness and candidate sets of Algorithm 3 (Snedeker, Zhou & Bassily 2025).

Everything here is either *public randomness* drawn from the fit's
``randomness.public`` generator (the JL matrix ``M``, the direction grid; the
driver also draws the candidate perturbations), or *post-processing* of those
draws and of DP releases (the candidate frames ``U~`` of the exponential
mechanism). No function here sees private data.

Examples
--------
>>> import numpy as np
>>> from skdpp.linear_model._jl_candidates import jl_matrix, random_candidates
>>> rng = np.random.default_rng(0)
>>> jl_matrix(8, 20, rng).shape
(8, 20)
>>> cands = random_candidates(rng.standard_normal((5, 8, 2)))
>>> np.allclose(np.swapaxes(cands, 1, 2) @ cands, np.eye(2))
True
"""

import math
import numpy as np

__all__ = [
    "auto_jl_dim",
    "direction_grid",
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


def auto_jl_dim(n_users, n_features, n_components, *, margin):
    """``k' = ceil(log(n / beta) / margin^2)``, clipped (Alg. 3, Require).

    Alg. 3 asks for ``k' >= r^2 Gamma^2 log(nm / beta) / rho^2``. Here the
    margin is relative (``rho = margin * r`` for unit directions, i.e.
    ``Gamma = 1``), so the rule depends only on public quantities: the number
    of users ``n`` (public under replace-one-user; the paper's ``nm``, the
    number of rows, is private), ``n_features`` and the parameters. The result
    is clipped to ``[n_components, min(n_features, 256)]`` (a JL dimension
    above ``d`` does not reduce anything; the cap bounds memory and time).
    """
    square = margin * margin
    raw = math.log(max(n_users, 2) / JL_FAILURE_PROBABILITY) / square if square > 0 \
        else math.inf
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

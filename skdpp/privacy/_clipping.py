"""Norms and clipping: the one place where per-user contributions are bounded.

Every sensitivity rests on a clip to a norm ``C``, and these helpers make the
bound hold *in floating point* for any finite input. Rows whose norm ``r`` lies
in ``[_SAFE_LOW, _SAFE_HIGH]`` take a fast pass, the others the robust path
(:func:`unit_rows`: scale by the largest entry first). Both give the same bound:
such a row has no entry whose square overflows and the squares that underflow
are below ``1e-308 <= 1e-108 r**2``, so the scaled row norm is ``C (1 + O(d
eps))`` (the privacy tests compare the two on adversarial magnitudes).
"""

import math
import numbers

import numpy as np

__all__ = ["FLOAT_MAX", "MIN_CLIP", "clip_by_norm", "clip_factors", "clip_values",
           "clipped_magnitudes", "clipped_outer_sum", "row_norms",
           "scaled_clip_factors", "stack_norms", "unit_row_norms", "unit_rows"]

#: Smallest clip bound accepted in skdpp: below it, subnormal rounding can make a
#: clipped contribution exceed its bound (measured on FedRep's initialisation).
MIN_CLIP = 1e-100
#: Largest finite float64 (the saturation bound of non-finite inputs).
FLOAT_MAX = np.finfo(np.float64).max

# Rows whose computed norm lies in this range take the fast path.
_SAFE_LOW, _SAFE_HIGH = 1e-100, 1e100


def _check_clip(clip_norm):
    if clip_norm is None:
        return None
    if isinstance(clip_norm, bool) or not isinstance(clip_norm, numbers.Real):
        raise TypeError(f"`clip_norm` must be a real number or None, got {clip_norm!r}.")
    clip_norm = float(clip_norm)
    if not MIN_CLIP <= clip_norm < math.inf:
        raise ValueError(
            f"`clip_norm` must be a finite bound >= {MIN_CLIP:g}, got {clip_norm!r}. "
            "Pass clip_norm=None to disable clipping (only allowed when epsilon=inf).")
    return clip_norm


def _as_rows(values):
    M = np.asarray(values, dtype=np.float64)
    if M.ndim != 2:
        raise ValueError(f"`values` must be 2-D, got shape {M.shape}.")
    return M


def unit_rows(values):
    """Unit vectors ``unit`` (n, p) and ``norms`` (n,) of the rows of ``values``, any magnitude.

    Each row is divided by its largest absolute entry before its norm is taken, so
    unit rows have norm 1 up to rounding even for subnormal or huge rows. Zero rows
    give 0, rows with infinite entries the normalised sign pattern of those (norm
    ``inf``); NaN propagates.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy import unit_rows
    >>> unit, norms = unit_rows(np.array([[3e-200, 4e-200], [0.0, 0.0]]))
    >>> unit
    array([[0.6, 0.8],
           [0. , 0. ]])
    >>> norms
    array([5.e-200, 0.e+000])
    """
    M = _as_rows(values)
    n = M.shape[0]
    if M.shape[1] == 0 or n == 0:
        return np.zeros_like(M), np.zeros(n)
    absmax = np.max(np.abs(M), axis=1)
    has_inf = np.isinf(absmax)
    scaled = np.zeros_like(M)
    finite = ~has_inf & (absmax > 0)
    # Entries far below their row's largest underflow to 0 (or subnormals):
    # negligible, and never an error, whatever the caller's np.errstate.
    with np.errstate(under="ignore"):
        scaled[finite] = M[finite] / absmax[finite, None]
        if has_inf.any():
            rows = M[has_inf]
            scaled[has_inf] = np.where(np.isinf(rows), np.sign(rows), 0.0)
        unit_norm = np.sqrt(np.einsum("ij,ij->i", scaled, scaled))  # in [1, sqrt(p)] or 0
        nz = unit_norm > 0
        unit = np.zeros_like(M)
        unit[nz] = scaled[nz] / unit_norm[nz, None]
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        norms = np.where(has_inf, np.inf, absmax * unit_norm)
    return unit, norms


def unit_row_norms(values):
    """The norms of :func:`unit_rows`, bit for bit, about 3x faster (NaN rows give NaN).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy._clipping import unit_row_norms
    >>> unit_row_norms(np.array([[3e-200, 4e-200], [0.0, 0.0], [3e200, 4e200]]))
    array([5.e-200, 0.e+000, 5.e+200])
    """
    M = _as_rows(values)
    n = M.shape[0]
    if M.shape[1] == 0 or n == 0:
        return np.zeros(n)
    absmax = np.max(np.abs(M), axis=1)
    with np.errstate(divide="ignore", invalid="ignore", under="ignore", over="ignore"):
        scaled = M / absmax[:, None]
        unit_norm = np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
        norms = absmax * unit_norm
    # as in unit_rows: an infinite, zero or NaN maximum gives inf, 0 and NaN
    norms[np.isinf(absmax)] = np.inf
    norms[absmax == 0] = 0.0
    norms[np.isnan(absmax)] = np.nan
    return norms


def row_norms(values):
    """Euclidean norms (n,) of the rows of a 2-D array, safe for any magnitude.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy import row_norms
    >>> row_norms(np.array([[3.0, 4.0], [3e200, 4e200]]))
    array([5.e+000, 5.e+200])
    """
    M = _as_rows(values)
    if M.shape[0] == 0 or M.shape[1] == 0:
        return np.zeros(M.shape[0])
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        out = np.sqrt(np.einsum("ij,ij->i", M, M))
    bad = ~((out >= _SAFE_LOW) & (out <= _SAFE_HIGH)) & (out != 0.0)
    # a row of tiny entries can also square to 0: recheck it
    zero = out == 0.0
    if zero.any():
        bad |= zero & (np.max(np.abs(M), axis=1) > 0)
    if bad.any():
        out[bad] = unit_row_norms(M[bad])
    return out


def stack_norms(values):
    """Frobenius norms (shape (n,)) of the slices of a stack (n, ...), safe."""
    M = np.asarray(values, dtype=np.float64)
    if M.ndim == 0:
        raise ValueError("`values` must have a leading axis; got a scalar.")
    return row_norms(M.reshape(M.shape[0], -1))


def clip_factors(norms, clip_norm):
    """Clipping factors ``min(1, C / norm)`` (zero norms: 1, infinite: 0, ``clip_norm=None``: 1).

    Examples
    --------
    >>> from skdpp.privacy import clip_factors
    >>> clip_factors([0.5, 2.0, float("inf")], 1.0)
    array([1. , 0.5, 0. ])
    """
    norms = np.asarray(norms, dtype=np.float64)
    scale = np.ones_like(norms)
    if clip_norm is None:
        return scale
    big = norms > clip_norm
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        scale[big] = clip_norm / norms[big]
    return scale


def clipped_magnitudes(norms, clip_norm):
    """``(min(norm, C), min(1, C / norm))`` per contribution: ``magnitude *
    unit_vector`` has norm at most ``C`` up to rounding, whatever the original."""
    norms = np.asarray(norms, dtype=np.float64)
    factors = clip_factors(norms, clip_norm)
    bound = np.inf if clip_norm is None else clip_norm
    return np.where(factors < 1, bound, norms), factors


def clip_by_norm(values, clip_norm, *, out_dtype=np.float64):
    """Scale each leading slice to Frobenius norm at most ``clip_norm``.

    Parameters
    ----------
    values : array-like of shape (n, ...)
        One slice per user (or row); not modified; NaN raises ``ValueError``.
    clip_norm : float or None
        Clip norm ``C >= 1e-100``; ``None`` returns an unchanged copy.
    out_dtype : dtype, default=np.float64
        Dtype of the result (``float32``: the bound holds up to float32 rounding).

    Returns
    -------
    clipped : ndarray of shape (n, ...)
        ``values[i] * min(1, C / ||values[i]||_F)``; slices with infinite entries
        become ``C`` times the normalised sign pattern of those entries.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy import clip_by_norm
    >>> clip_by_norm(np.array([[3.0, 4.0], [0.3, 0.4], [1e300, 1e300]]), 1.0)
    array([[0.6       , 0.8       ],
           [0.3       , 0.4       ],
           [0.70710678, 0.70710678]])
    """
    arr = np.asarray(values)
    if arr.ndim == 0:
        raise ValueError("`values` must have a leading (per-user) axis; got a scalar.")
    clip_norm = _check_clip(clip_norm)
    if clip_norm is None or arr.size == 0:
        return np.array(arr, dtype=out_dtype, copy=True)
    n = arr.shape[0]
    flat = arr.reshape(n, -1)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", flat, flat, dtype=np.float64))
    if np.isnan(norms).any() and np.isnan(flat).any():
        raise ValueError("`values` contains NaN; cannot clip.")
    safe = (norms >= _SAFE_LOW) & (norms <= _SAFE_HIGH)
    factors = np.ones(n)
    big = safe & (norms > clip_norm)
    factors[big] = clip_norm / norms[big]
    out = np.multiply(flat, factors[:, None], dtype=out_dtype)
    # the robust path (tiny rows are rechecked: their computed norm may be off)
    rows = np.flatnonzero(~safe)
    if rows.size:
        unit, rnorm = unit_rows(flat[rows])
        too_big = rnorm > clip_norm
        if too_big.any():
            out[rows[too_big]] = unit[too_big] * clip_norm
    return out.reshape(arr.shape)


def clip_values(values, clip):
    """Scalar clip ``sign(y) min(|y|, clip)`` as floats (``clip=None``: no clip).

    Examples
    --------
    >>> from skdpp.privacy import clip_values
    >>> clip_values([-3.0, 0.5, 2.0], 1.0)
    array([-1. ,  0.5,  1. ])
    """
    values = np.asarray(values, dtype=np.float64)
    return values if clip is None else np.clip(values, -clip, clip)


def clipped_outer_sum(A, B, clip_norm):
    """``sum_i clip(a_i b_i^T, C)`` (p, q) for rows of ``A`` (n, p) and ``B`` (n, q).

    Without an ``n x p x q`` temporary: ``||a b^T||_F = ||a|| ||b||``, so rows with
    both norms in ``[1e-100, 1e100]`` enter one product with factor ``min(||a||
    ||b||, C) / (||a|| ||b||)``, the others go through :func:`unit_rows`.
    ``clip_norm=None``: ``A^T B`` (only at ``epsilon=np.inf``); NaN raises.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.privacy._clipping import clipped_outer_sum
    >>> clipped_outer_sum(np.array([[3.0, 4.0], [1e300, 1e300]]),
    ...                   np.array([[1.0], [1e300]]), 1.0)
    array([[1.30710678],
           [1.50710678]])
    """
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    if A.ndim != 2 or B.ndim != 2 or A.shape[0] != B.shape[0]:
        raise ValueError(f"`A` and `B` must be 2-D with the same number of rows; got "
                         f"shapes {A.shape} and {B.shape}.")
    clip_norm = _check_clip(clip_norm)
    n, p, q = A.shape[0], A.shape[1], B.shape[1]
    if n == 0 or p == 0 or q == 0:
        return np.zeros((p, q))
    if clip_norm is None:
        if np.isnan(A).any() or np.isnan(B).any():
            raise ValueError("`A` or `B` contains NaN; cannot clip.")
        with np.errstate(over="ignore", invalid="ignore"):
            return A.T @ B
    a_norm, b_norm = row_norms(A), row_norms(B)
    if np.isnan(a_norm).any() or np.isnan(b_norm).any():  # NaN norms <=> NaN entries
        raise ValueError("`A` or `B` contains NaN; cannot clip.")
    # never signals whatever the caller's np.errstate (it would depend on one user)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        norms = np.where((a_norm > 0) & (b_norm > 0), a_norm * b_norm, 0.0)
        mag, _ = clipped_magnitudes(norms, clip_norm)
        safe = ((a_norm >= _SAFE_LOW) & (a_norm <= _SAFE_HIGH)
                & (b_norm >= _SAFE_LOW) & (b_norm <= _SAFE_HIGH))
        coef = np.zeros(n)
        coef[safe] = mag[safe] / norms[safe]
        if safe.all():
            total = A.T @ (B * coef[:, None])
        else:
            total = A[safe].T @ (B[safe] * coef[safe, None])
        other = ~safe & (norms > 0)
        if other.any():
            a_unit, _ = unit_rows(A[other])
            b_unit, _ = unit_rows(B[other])
            total += (a_unit * mag[other][:, None]).T @ b_unit
    return total


# Contributions whose scaled norm is below this are dropped (see scaled_clip_factors).
_TINY_SCALED_NORM = 1e-250


def scaled_clip_factors(norms, scales, clip_norm):
    """Factors ``f`` with ``f M = clip(s M, C)`` for contributions ``M_i`` stored unscaled.

    ``norms``: ``||M_i||_F``; ``scales``: ``s_i > 0`` (possibly inf); ``clip_norm``
    validated by the caller (``None``: ``f = s``). ``f = min(s, C / ||M||)``, 0 where
    ``||M_i|| < 1e-250`` (dropping it is within any bound) or not finite. Returns
    ``f`` and ``s_i ||M_i||`` (inf on overflow).

    Examples
    --------
    >>> from skdpp.privacy._clipping import scaled_clip_factors
    >>> scaled_clip_factors([0.5, 0.5], [1.0, 1e300], 1.0)
    (array([1., 2.]), array([5.e-001, 5.e+299]))
    """
    norms = np.asarray(norms, dtype=np.float64)
    scales = np.asarray(scales, dtype=np.float64)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        ok = norms >= _TINY_SCALED_NORM
        full = np.where(norms > 0, scales * norms, 0.0)
        if clip_norm is None:
            f = np.where(ok, scales, 0.0)
        else:
            f = np.where(ok, np.minimum(scales, clip_norm / np.where(ok, norms, 1.0)), 0.0)
        f = np.where(np.isfinite(f), f, 0.0)
    return f, full

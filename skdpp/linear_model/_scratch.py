"""Per-thread scratch buffers for the row gathers a fit repeats every round: fresh
large arrays cost page faults (50% system time, DESIGN §7). Freed after a fit.
"""

import threading

import numpy as np

__all__ = ["release_scratch", "scratch"]

_scratch = threading.local()


def scratch(name, n_rows, n_cols, dtype):
    """This thread's reused ``(n_rows, n_cols)`` buffer ``name`` (contents undefined, valid
    until the next call with that name).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.linear_model._scratch import release_scratch, scratch
    >>> a = scratch("rows", 4, 3, np.float64)
    >>> b = scratch("rows", 2, 3, np.float64)
    >>> bool(np.shares_memory(a, b)), b.shape
    (True, (2, 3))
    >>> release_scratch()
    """
    if not hasattr(_scratch, "buffers"):
        _scratch.buffers = {}
    dtype = np.dtype(dtype)
    buf = _scratch.buffers.get(name)
    if buf is None or buf.dtype != dtype or buf.shape[1] != n_cols or buf.shape[0] < n_rows:
        buf = _scratch.buffers[name] = np.empty((max(n_rows, 1), n_cols), dtype=dtype)
    return buf[:n_rows]


def release_scratch():
    """Free this thread's scratch buffers (between the phases and at the end of a fit)."""
    _scratch.buffers = {}

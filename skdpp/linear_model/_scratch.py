"""Per-thread scratch buffers: reused memory for the gathers a fit repeats.

Block functions gather rows of ``X`` every round (a block's ``S^0`` rows, the
rows of the final heads, a chunk of users of one row count). Writing them into
the same memory instead of a fresh allocation each time avoids the page faults
of fresh large arrays (they showed up as 50% system time, DESIGN §7, and cost
10x the faults in the spectral initialisation). Buffers are per thread, so
block functions may run concurrently in threads; a fit frees them when done.
"""

import threading

import numpy as np

__all__ = ["release_scratch", "scratch"]

_scratch = threading.local()


def scratch(name, n_rows, n_cols, dtype):
    """A reused ``(n_rows, n_cols)`` buffer of this thread (contents undefined).

    The buffer named ``name`` grows to the largest request and is shared by
    every caller in this thread: the returned view is valid until the next
    call with the same name. :func:`release_scratch` frees the buffers.

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
    buffers = getattr(_scratch, "buffers", None)
    if buffers is None:
        buffers = _scratch.buffers = {}
    dtype = np.dtype(dtype)
    buf = buffers.get(name)
    if buf is None or buf.dtype != dtype or buf.shape[1] != n_cols or buf.shape[0] < n_rows:
        buf = np.empty((max(n_rows, 1), n_cols), dtype=dtype)
        buffers[name] = buf
    return buf[:n_rows]


def release_scratch():
    """Free this thread's scratch buffers (between the phases and at the end of a fit)."""
    _scratch.buffers = {}

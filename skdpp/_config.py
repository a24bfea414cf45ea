"""Global configuration of skdpp, in the style of :func:`sklearn.set_config`: one
thread-local option, ``noise`` (:ref:`secure_noise`); new threads and processes
start from the environment variable ``SKDPP_NOISE`` (``"numpy"`` when unset).

Examples
--------
>>> import skdpp
>>> skdpp.get_config()["noise"]
'numpy'
>>> with skdpp.config_context(noise="numpy"):
...     skdpp.get_config()["noise"]
'numpy'
"""

import os
import threading
from contextlib import contextmanager

__all__ = ["config_context", "get_config", "set_config"]

_NOISE_MODES = ("numpy", "secure")
_global_config = {"noise": os.environ.get("SKDPP_NOISE", "numpy") or "numpy"}
_threadlocal = threading.local()


def _get_threadlocal_config():
    if not hasattr(_threadlocal, "global_config"):
        if _global_config["noise"] not in _NOISE_MODES:
            raise ValueError(
                f"The environment variable SKDPP_NOISE must be one of {_NOISE_MODES}, "
                f"got {_global_config['noise']!r}. Unset it for the default ('numpy').")
        _threadlocal.global_config = _global_config.copy()
    return _threadlocal.global_config


def _require_opendp():
    """Import OpenDP or raise a clear error."""
    try:
        import opendp.prelude as dp  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "noise='secure' needs OpenDP (>= 0.16), which is not installed: run "
            "`pip install \"skdpp[secure]\"` (or `pip install opendp`), or use "
            "noise='numpy'."
        ) from exc
    return dp


def get_config():
    """Current values of the skdpp configuration: a copy of ``{"noise": ...}``."""
    return _get_threadlocal_config().copy()


def set_config(noise=None):
    """Set the skdpp configuration (this thread).

    Parameters
    ----------
    noise : {"numpy", "secure"}, default=None
        Source of the privacy noise: numpy's PCG64 generator (fast, floating-point
        samplers), or OpenDP's exact samplers and the OS's cryptographic source
        (``random_state`` then seeds only public randomness; needs ``pip install
        "skdpp[secure]"``). ``None`` leaves it unchanged.

    Raises
    ------
    ValueError
        If ``noise`` is not one of the modes.
    ImportError
        If ``noise="secure"`` and OpenDP is not installed.

    Notes
    -----
    Secure mode removes the floating-point side channels of the samplers
    (Mironov 2012) and the seed as a secret, not timing side channels
    (:ref:`secure_noise`).

    Examples
    --------
    >>> import skdpp
    >>> skdpp.set_config(noise="numpy")
    """
    local = _get_threadlocal_config()
    if noise is not None:
        if noise not in _NOISE_MODES:
            raise ValueError(
                f"`noise` must be one of {_NOISE_MODES}, got {noise!r}. Use "
                "noise='secure' for OpenDP's exact samplers (pip install "
                "\"skdpp[secure]\") or noise='numpy' (the default).")
        if noise == "secure":
            _require_opendp()
        local["noise"] = noise


@contextmanager
def config_context(*, noise=None):
    """Context manager that sets the configuration (:func:`set_config`), then restores
    it."""
    old = get_config()
    set_config(noise=noise)
    try:
        yield
    finally:
        set_config(**old)

"""Randomness of a fit: noise streams (:class:`FitRandomness`) and keyed per-user
randomness (:func:`keyed_uniform`, a keyed SplitMix64 hash). The rule is in
:ref:`data_layer`.

Examples
--------
>>> from skdpp.utils._random import FitRandomness, hash_ids, keyed_uniform
>>> r = FitRandomness(0)
>>> u = keyed_uniform(r.key, "split", hash_ids(["alice", "bob"]), 0)
>>> u.shape, bool(((0 <= u) & (u < 1)).all())
((2,), True)
"""

import hashlib
import numbers

import numpy as np

__all__ = ["DerivedRandomState", "FitRandomness", "hash_ids", "keyed_bits",
           "keyed_uniform", "noise_is_seeded", "row_hashes", "seed_sequence"]

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_M1 = _U64(0xBF58476D1CE4E5B9)
_M2 = _U64(0x94D049BB133111EB)
_S30, _S27, _S31 = _U64(30), _U64(27), _U64(31)

_HASH_CHUNK_ROWS = 1 << 12  # rows per chunk of row_hashes


def _mix(x):
    """SplitMix64 finaliser on a uint64 array."""
    x = np.asarray(x, dtype=_U64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> _S30)) * _M1
        x = (x ^ (x >> _S27)) * _M2
        return x ^ (x >> _S31)


def _blake64(text):
    """A 64-bit int of ``text``, the same in every process (blake2b)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _tag(name):
    """A fixed uint64 for a stream or type name."""
    return _U64(_blake64(name))


def seed_sequence(random_state):
    """The 128-bit ``SeedSequence`` of one fit from ``random_state``: ``None`` (OS
    entropy), an int, a ``SeedSequence`` (as is), or a ``RandomState`` / ``Generator``
    (128 bits drawn from it: successive fits differ)."""
    if random_state is None:
        return np.random.SeedSequence()
    if isinstance(random_state, np.random.SeedSequence):
        return random_state
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return np.random.SeedSequence(int(random_state))
    if isinstance(random_state, (np.random.RandomState, np.random.Generator)):
        draw = getattr(random_state, "integers", None) or random_state.randint
        words = draw(0, 2**32, size=4, dtype=np.uint64)
        return np.random.SeedSequence([int(w) for w in words])
    raise ValueError(
        f"random_state must be None, an int, a numpy.random.RandomState or a "
        f"numpy.random.Generator; got {random_state!r}. Pass e.g. random_state=0 for a "
        "reproducible fit, or None for fresh entropy (deployments).")


def noise_is_seeded(random_state):
    """Whether a fit's noise is reproducible from the user's ``random_state`` (anything
    but ``None``; a :class:`DerivedRandomState` carries its origin's answer).

    Examples
    --------
    >>> from skdpp.utils._random import noise_is_seeded
    >>> noise_is_seeded(None), noise_is_seeded(0)
    (False, True)
    """
    if isinstance(random_state, DerivedRandomState):
        return random_state.user_seeded
    return random_state is not None


class DerivedRandomState(np.random.RandomState):
    """A ``RandomState`` a meta-estimator hands to a sub-fit, carrying ``user_seeded``
    (:func:`noise_is_seeded` of its origin). Its state rebuilds the noise: the
    meta-estimator must reset the parameter before the sub-fit is observed."""

    def __init__(self, seed, *, user_seeded):
        super().__init__(np.random.MT19937(seed))
        self.user_seeded = bool(user_seeded)

    def __reduce__(self):
        return (_derived_random_state, (self.get_state(), self.user_seeded))

    def __repr__(self):
        return f"DerivedRandomState(<secret>, user_seeded={self.user_seeded})"


def _derived_random_state(state, user_seeded):
    out = DerivedRandomState(np.random.SeedSequence(0), user_seeded=user_seeded)
    out.set_state(state)
    return out


class FitRandomness:
    """All randomness of one fit (lives only during the fit): ``seeded``
    (:func:`noise_is_seeded`), ``noise`` (the privacy-noise generator, drawn only by
    :mod:`skdpp.privacy`), ``public`` (data-independent randomness) and ``key``
    (uint64 (2,), of :func:`keyed_uniform`): spawn children of :func:`seed_sequence`."""

    def __init__(self, random_state):
        # noise="secure": the privacy noise and the key of the client sampling
        # come from OpenDP / OS entropy, never from random_state
        from ..privacy.mechanisms import _secure_mode, fit_key

        self.seeded = noise_is_seeded(random_state) and not _secure_mode()
        noise, public, key = seed_sequence(random_state).spawn(3)
        self.noise = np.random.Generator(np.random.PCG64(noise))
        self.public = np.random.Generator(np.random.PCG64(public))
        self.key = fit_key(key.generate_state(2, dtype=np.uint64), random_state)

    def __repr__(self):
        return "FitRandomness(<secret>)"

    def __reduce__(self):
        raise TypeError(
            "FitRandomness holds the fit's privacy-noise stream and cannot be pickled: "
            "noise is drawn once, in the fitting (driver) process. Send its `key` "
            "(keyed per-user randomness) to other processes instead.")


def keyed_bits(key, stream, *words):
    """64 keyed pseudo-random bits per element of the broadcast int ``words`` (e.g. user
    hash, rank, round); ``stream`` names independent purposes (e.g. ``"split"``)."""
    key = np.asarray(key, dtype=_U64)
    h = _mix(np.asarray(key[0] ^ _tag(stream), dtype=_U64))
    with np.errstate(over="ignore"):
        for i, w in enumerate(words):
            w = np.asarray(w)
            if w.dtype != _U64:
                w = w.astype(np.int64).view(_U64) if w.dtype.kind == "i" else w.astype(_U64)
            h = _mix(h ^ _mix(w + _U64(i + 1) * _GOLDEN))
        return _mix(h ^ key[1])


def keyed_uniform(key, stream, *words):
    """Uniforms in ``[0, 1)`` (53 bits each) of :func:`keyed_bits`.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.utils._random import keyed_uniform
    >>> key = np.array([1, 2], dtype=np.uint64)
    >>> a = keyed_uniform(key, "split", np.arange(3), 0)
    >>> b = keyed_uniform(key, "split", np.arange(3)[::-1], 0)[::-1]
    >>> bool(np.array_equal(a, b))   # a function of the coordinates only
    True
    """
    return (keyed_bits(key, stream, *words) >> _U64(11)).astype(np.float64) * (1.0 / 2**53)


def _hash_ints(values):
    return _mix(np.asarray(values, dtype=np.int64).view(_U64) ^ _tag("int"))


def hash_ids(ids):
    """A 64-bit hash of every id, the same in every process (:ref:`data_layer`).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpp.utils._random import hash_ids
    >>> bool(hash_ids([7])[0] == hash_ids(np.array([7.0]))[0])
    True
    >>> bool(hash_ids(["ab"])[0] == hash_ids(np.array(["ab"], dtype="U9"))[0])
    True
    """
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"`ids` must be 1-D, got shape {arr.shape}.")
    kind = arr.dtype.kind
    if kind in "biu":
        if kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
            return _mix(arr.astype(_U64) ^ _tag("uint"))
        return _hash_ints(arr.astype(np.int64))
    if kind == "f":
        f = arr.astype(np.float64) + 0.0  # -0.0 -> 0.0
        integral = (np.floor(f) == f) & (np.abs(f) < 2.0**63)
        out = _mix(f.view(_U64) ^ _tag("float"))
        if integral.any():
            out[integral] = _hash_ints(f[integral].astype(np.int64))
        return out
    if kind in "US":  # code points: 4-byte (str) or 1-byte (bytes) units
        a = np.ascontiguousarray(arr)
        unit = np.dtype(np.uint32 if kind == "U" else np.uint8)
        width = a.dtype.itemsize // unit.itemsize
        codes = a.view(unit).reshape(a.shape[0], width) if width else \
            np.zeros((a.shape[0], 0), dtype=unit)
        lengths = np.char.str_len(a)
        h = np.full(a.shape[0], _tag("str" if kind == "U" else "bytes"), dtype=_U64)
        with np.errstate(over="ignore"):
            for j in range(width):  # loop over character positions, not ids
                live = j < lengths
                if not live.any():
                    break
                h = np.where(live, _mix(h ^ (codes[:, j].astype(_U64) + _GOLDEN)), h)
            return _mix(h ^ lengths.astype(_U64))
    if kind in "mM":
        return _mix(arr.view(np.int64).view(_U64) ^ _tag("datetime"))
    # object ids: ints and strings like their numpy counterparts, others by repr
    values = arr.tolist()
    if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
        try:
            return _hash_ints(np.array(values, dtype=np.int64))
        except OverflowError:
            pass
    if all(isinstance(v, str) for v in values):
        return hash_ids(np.array(values, dtype=str))
    return np.fromiter((_blake64(f"{type(v).__module__}.{type(v).__qualname__}:{v!r}")
                        for v in values), dtype=_U64, count=len(values))


def _multipliers(width, offset):
    """Fixed odd 64-bit multipliers of columns ``offset .. offset + width``."""
    seq = np.random.SeedSequence(0x5EED_0F_C0_1A_55, spawn_key=(offset,))
    m = np.random.Generator(np.random.PCG64(seq)).integers(
        0, 2**62, size=width, dtype=np.int64)
    return m * 2 + 1


def row_hashes(*columns):
    """Keyless 64-bit hash of each row of the numeric ``columns`` ((n,) or (n, p)), as
    float64 values whatever the dtype (one user can change a dtype:
    :ref:`data_layer`); ``-0.0`` hashes like ``0.0``."""
    if not columns:
        raise ValueError("row_hashes needs at least one array.")
    cols = [a.reshape(a.shape[0], -1) for a in map(np.asarray, columns)]
    n, mults, offset = cols[0].shape[0], [], 0
    for c in cols:
        if c.dtype.kind not in "biuf":
            raise TypeError(f"row_hashes needs numeric arrays, got dtype {c.dtype}.")
        if c.shape[0] != n:
            raise ValueError("all columns must have the same number of rows.")
        mults.append(_multipliers(c.shape[1], offset))
        offset += c.shape[1]
    out = np.zeros(n, dtype=np.int64)
    # a reused buffer per float64 column: -0.0 -> 0.0 in one pass
    bufs = [np.empty((min(n, _HASH_CHUNK_ROWS), c.shape[1])) if c.dtype == np.float64
            else None for c in cols]
    with np.errstate(over="ignore"):
        for start in range(0, n, _HASH_CHUNK_ROWS):  # memory chunks of rows
            stop = min(n, start + _HASH_CHUNK_ROWS)
            for c, m, buf in zip(cols, mults, bufs):
                part = c[start:stop]
                if buf is not None:
                    words = np.add(part, 0.0, out=buf[:stop - start]).view(np.int64)
                else:  # every value hashed as its float64: the dtype plays no part
                    words = (part.astype(np.float64) + 0.0).view(np.int64)
                out[start:stop] += words @ m  # exact modulo 2**64
    return _mix(out.view(_U64))

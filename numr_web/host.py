"""NumPy where it is already in use: the NumPy-free core asks here instead of importing it.

``import numr_web`` imports no NumPy (in the browser it is a multi-megabyte
download a GPU-only page does not need).  Code that must tell a NumPy array
from another kind asks ``is_ndarray``, which looks NumPy up only if something
imported it already: no NumPy, no NumPy arrays.  Code that makes host arrays
from Python lists or numbers calls ``require_numpy``.
"""

from __future__ import annotations

import os
import sys


def loaded_numpy():
    """The numpy module if something imported it, else None (never imports it)."""
    return sys.modules.get("numpy")


def is_ndarray(obj) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.ndarray)


def is_numpy_scalar(obj) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, np.generic)


def require_numpy(what: str):
    """The numpy module; ImportError saying that ``what`` needs it when it is not installed."""
    try:
        import numpy
    except ImportError as exc:
        raise ImportError(
            f"{what} needs NumPy, which is not installed here; without NumPy use WebGPU arrays "
            "(numr_web.webgpu.from_buffer) and read results with .tobytes()"
        ) from exc
    return numpy


def environ_reader(key):
    """A function returning the environment variable ``key`` (None when unset), as ``os.environ.get``
    does, for code that reads it on every call: on CPython through the mapping's own dict, with the
    key encoded once (``os.environ.get`` encodes the key, and raises and catches a KeyError inside
    when the variable is unset, the usual case: about 1.5 us)."""
    env = os.environ
    try:
        data, raw, decode = env._data, env.encodekey(key), env.decodevalue
    except AttributeError:  # not CPython's os._Environ
        return lambda: env.get(key)

    def read():
        value = data.get(raw)
        return None if value is None else decode(value)

    return read

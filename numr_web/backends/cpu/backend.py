"""The CPU backend object: which CPU path runs (NumPy or fused Numba), transfers, layouts, and dispatch to that path."""

from __future__ import annotations

import contextlib
import os

import numpy as np

from numr_web.backends.base import Backend
from numr_web.backends.cpu import fused, numpy_path
from numr_web.backends.cpu.shared import LAYOUTS
from numr_web.errors import BackendUnavailable
from numr_web.memory_layout import as_channels_last, is_dense_channels_last

#: the values of ``CpuBackend.path``
PATHS = ("auto", "numpy", "fused")
#: the environment variable the registered backend takes its path from
PATH_ENV = "NUMR_WEB_CPU_PATH"


class CpuBackend(Backend):
    """GroupNorm on the CPU, through NumPy alone or through the fused Numba kernels.

    ``path`` chooses the kernels: ``"numpy"`` (portable; what Pyodide runs),
    ``"fused"`` (Numba; ``BackendUnavailable`` on a call when Numba does not
    import; a call waits for its kernels to compile) or ``"auto"`` (the fused
    kernels of a layout and dtype once they are ready, and the NumPy path while
    a background thread compiles or loads them: no call waits for a compiler;
    without Numba, NumPy).  ``last_path`` says which served the last call.  It is an
    ordinary attribute, validated on assignment::

        be = numr_web.backends.get_backend("cpu")
        be.path = "numpy"              # every later call runs the NumPy path
        with be.using_path("fused"):   # or for a block only; the previous path comes back after
            ...
        be.active_path()               # "fused" or "numpy": what auto resolves to once the kernels are ready

    The registered backend (``get_backend("cpu")``) starts from
    ``NUMR_WEB_CPU_PATH`` (default ``"auto"``); a bad value there is reported
    when a call needs the path, naming the variable.
    """

    name = "numpy"
    device = "cpu"
    xp = np

    def __init__(self, path: str = "auto"):
        self.path = path
        #: the path the last call took ("fused" or "numpy"; None before the first)
        self.last_path = None

    @classmethod
    def from_environment(cls, environ=None) -> CpuBackend:
        """A backend whose path comes from ``NUMR_WEB_CPU_PATH`` (checked when first needed, as before)."""
        environ = os.environ if environ is None else environ
        backend = cls()
        backend._path = environ.get(PATH_ENV, "auto").strip().lower() or "auto"
        backend.last_path = None
        backend._path_origin = PATH_ENV
        return backend

    # -- the CPU path ---------------------------------------------------------
    @property
    def path(self) -> str:
        """``"auto"``, ``"numpy"`` or ``"fused"``: the CPU kernels asked for."""
        return self._path

    @path.setter
    def path(self, value: str) -> None:
        if value not in PATHS:
            raise ValueError(f"path: expected one of {PATHS}, got {value!r}")
        self._path = value
        self._path_origin = "path"

    @contextlib.contextmanager
    def using_path(self, path: str):
        """``path`` for the calls inside the ``with`` block; the previous setting afterwards."""
        before = self._path, self._path_origin
        self.path = path
        try:
            yield self
        finally:
            self._path, self._path_origin = before

    def fused_available(self) -> tuple[bool, str]:
        """(True, Numba's version) when the fused kernels can run here; (False, how to get them)."""
        return fused.available()

    def active_path(self) -> str:
        """The CPU path that calls take now: ``"fused"`` or ``"numpy"``.

        ``ValueError`` for a bad ``NUMR_WEB_CPU_PATH``; ``BackendUnavailable``
        when ``"fused"`` is asked for and Numba does not import.
        """
        path = self._path
        if path not in PATHS:
            raise ValueError(f"{self._path_origin}: expected one of {PATHS}, got {path!r}")
        if path == "numpy":
            return "numpy"
        ok, why = fused.available()
        if path == "fused" and not ok:
            raise BackendUnavailable(f"the fused CPU path was requested but is not usable: {why}")
        return "fused" if ok else "numpy"

    def _kernels(self, layout, dtype):
        """The kernels for a call on ``layout`` and ``dtype``: see ``path``."""
        if self._path == "auto" and not fused.family_ready(layout, dtype):
            if fused.importable():
                fused.warm_in_background(layout, dtype)  # once per family; the NumPy path serves meanwhile
            kernels = numpy_path
        else:
            kernels = fused if self.active_path() == "fused" else numpy_path
        self.last_path = "fused" if kernels is fused else "numpy"
        return kernels

    # -- discovery -------------------------------------------------------------
    def available(self):
        return True, f"NumPy {np.__version__}"

    def owns(self, array):
        return isinstance(array, np.ndarray)

    def info(self):
        ok, why = fused.available()
        d = {"available": True, "detail": f"NumPy {np.__version__}", "fused (Numba)": why if not ok else "yes"}
        try:
            d["cpu path"] = self.active_path()
        except (BackendUnavailable, ValueError) as exc:
            d["cpu path"] = f"error: {exc}"
        if self._path == "auto" and ok:
            d["auto"] = "a layout and dtype run on NumPy until their fused kernels are compiled, in the background"
        if self.last_path is not None:
            d["last call"] = f"{self.last_path} path"
        if fused.families():
            d["fused kernels"] = fused.families()
        if ok:
            d["numba threading layer"] = fused.threading_layer()
            d["numba threads"] = fused.num_threads()
            d["numba wait policy"] = fused.cpu_threads.policy()
        return d

    # -- transfers and layouts ---------------------------------------------------
    def from_numpy(self, array):
        return np.asarray(array)

    def to_numpy(self, array):
        return np.asarray(array)

    def as_layout(self, a, layout):
        """A dense copy of the NumPy array ``a`` in ``layout`` ("nchw": C order; "nhwc": channels-last),
        or ``a`` itself when it already is."""
        if layout == "nchw":
            return a if a.flags.c_contiguous else np.ascontiguousarray(a)
        if layout == "nhwc":
            return a if is_dense_channels_last(a) else as_channels_last(a)
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")

    # -- kernels (x, and dy, dense in ``layout``: the op layer settles it) ----------
    def group_norm_forward(self, x, weight, bias, num_groups, eps, activation=None, *, layout):
        kernels = self._kernels(layout, x.dtype)
        return kernels.group_norm_forward(x, weight, bias, num_groups, eps, activation, layout=layout)

    def group_norm_backward(self, dy, x, mean, rstd, weight, bias, num_groups, activation=None, *, layout):
        kernels = self._kernels(layout, x.dtype)
        return kernels.group_norm_backward(dy, x, mean, rstd, weight, bias, num_groups, activation, layout=layout)

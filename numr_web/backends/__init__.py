"""Which backend owns an array, and lazy access to the backends.

Backend modules are imported on first use only, so ``import numr_web`` stays
light (it runs in Pyodide, where neither CuPy nor wgpu-py exist).
"""

from __future__ import annotations

import importlib

from numr_web.errors import BackendUnavailable, type_label
from numr_web.host import is_ndarray, loaded_numpy

#: device name -> module holding a module-level ``BACKEND``
BACKEND_MODULES = {
    "cpu": "numr_web.backends.cpu",
    "cuda": "numr_web.backends.cupy_",
    "webgpu": "numr_web.backends.webgpu",
}
DEVICES = tuple(BACKEND_MODULES)

_loaded: dict = {}


def _load(device: str):
    be = _loaded.get(device)
    if be is None:
        try:
            module = importlib.import_module(BACKEND_MODULES[device])
        except ImportError as exc:  # the backend's own module is missing or broken
            raise BackendUnavailable(_import_failure(device, exc)) from exc
        be = _loaded[device] = module.BACKEND
    return be


def loaded_backend(device: str):
    """The backend of ``device`` if its module is loaded already, else None (no import, no availability check)."""
    return _loaded.get(device)


class UnavailableBackend:
    """Stands in for a backend whose module cannot be imported here (the CPU backend without NumPy, in a
    browser that has not loaded it): ``available()`` and ``info()`` say why; anything else raises
    ``BackendUnavailable`` with that reason.  Never cached, so the backend loads once its module can."""

    def __init__(self, device: str, why: str):
        self.device, self.name, self.why = device, device, why

    def available(self) -> tuple[bool, str]:
        return False, self.why

    def info(self) -> dict:
        return {"available": False, "detail": self.why}

    def __getattr__(self, name):
        raise BackendUnavailable(self.why)


def _import_failure(device: str, exc: ImportError) -> str:
    if exc.name in ("numpy", "ml_dtypes"):
        return (
            f"the {device!r} backend needs {'NumPy' if exc.name == 'numpy' else exc.name}, which is not installed "
            f"here (pip install {exc.name}; in the browser: await numr_web.notebook.setup('numpy'))"
        )
    return f"the {device!r} backend could not be imported: {exc}"


def get_backend(device: str, *, require: bool = True):
    """The backend for ``device`` ("cpu", "cuda" or "webgpu").

    With ``require`` (the default) an unusable backend raises ``BackendUnavailable`` with its
    reason; with ``require=False`` it never raises for a known device: a backend that cannot even be
    imported comes back as an ``UnavailableBackend`` whose ``available()`` says why.
    """
    if not isinstance(device, str) or device.lower() not in BACKEND_MODULES:
        raise ValueError(f"device: expected one of {', '.join(map(repr, DEVICES))}, got {device!r}")
    device = device.lower()
    try:
        be = _load(device)
    except BackendUnavailable as exc:
        if require:
            raise
        return UnavailableBackend(device, str(exc))
    if require:
        ok, why = be.available()
        if not ok:
            raise BackendUnavailable(f"device {device!r} is not usable here: {why}")
    return be


def fastest_device() -> str:
    """The device a desktop user would pick: "cuda" where usable, then a WebGPU adapter that is not a
    CPU (lavapipe and SwiftShader are CPUs, slower than the CPU backend), else "cpu"."""
    if get_backend("cuda", require=False).available()[0]:
        return "cuda"
    webgpu = get_backend("webgpu", require=False)
    try:
        if webgpu.available()[0] and str(webgpu.info().get("adapter type", "")).upper() != "CPU":
            return "webgpu"
    except Exception:  # no wgpu-py, no driver: the CPU it is
        pass
    return "cpu"


def is_numr_web_array(obj) -> bool:
    """Whether ``obj`` is an array type of numr_web's own (a WebGPU array): it says its ``device``, its
    shape and strides never change, and its backend is loaded once one exists."""
    return getattr(type(obj), "__numr_web_array__", False)


def device_of(array) -> str:
    """The device an array lives on, without importing any optional framework."""
    if is_ndarray(array):
        return "cpu"
    if is_numr_web_array(array):
        return str(array.device)
    module = type(array).__module__ or ""
    if module.startswith("cupy"):
        return "cuda"
    raise TypeError(
        f"expected a NumPy array, a CuPy array, a WebGPU array or a numr_web.Tensor, got {type_label(array)}"
    )


def backend_for(array):
    np = loaded_numpy()
    if np is not None and type(array) is np.ndarray:  # the common case, without the lookups
        be = _loaded.get("cpu")
        if be is not None:
            return be
    if is_numr_web_array(array):  # WebGPU: its backend is loaded already
        be = _loaded.get(array.device)
        if be is not None:
            return be
    return get_backend(device_of(array), require=False)


def is_array(obj) -> bool:
    try:
        device_of(obj)
    except TypeError:
        return False
    return True

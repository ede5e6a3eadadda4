"""numr_web: Group Normalization on NumPy, CUDA (CuPy) and WebGPU (WGSL), with autograd to any order."""

from numr_web import autograd, ops
from numr_web.autograd import Tensor
from numr_web.errors import BackendUnavailable, DeviceMismatch, NumrWebError, ShapeMismatch
from numr_web.ops import group_norm
from numr_web.schema import AmpPolicy, OpSchema, schema
from numr_web.transfer import to_device, to_numpy

__version__ = "0.1.0"

__all__ = [
    "group_norm",
    "ops",
    "autograd",
    "Tensor",
    "to_device",
    "to_numpy",
    "schema",
    "OpSchema",
    "AmpPolicy",
    "ShapeMismatch",
    "BackendUnavailable",
    "DeviceMismatch",
    "NumrWebError",
    "__version__",
]


def __getattr__(name):
    # the Explorer imports anywidget and traitlets: only when asked for, so `import numr_web` stays light
    if name == "Explorer":
        try:
            from numr_web.explorer import Explorer
        except ImportError as exc:
            if exc.name in ("anywidget", "traitlets"):
                raise ImportError(
                    f"numr_web.Explorer needs {exc.name}, which is not installed here: pip install 'numr-web[widget]'"
                ) from exc
            raise
        return Explorer
    raise AttributeError(f"module 'numr_web' has no attribute {name!r}")

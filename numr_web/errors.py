"""Exceptions raised by numr_web."""

from __future__ import annotations


class NumrWebError(Exception):
    """Base class for numr_web's own errors."""


class ShapeMismatch(NumrWebError, ValueError):
    """An argument's shape does not fit the op (a ValueError)."""


class BackendUnavailable(NumrWebError, RuntimeError):
    """A backend cannot run here; the message says why and how to get it."""


class DeviceMismatch(NumrWebError, ValueError):
    """Arrays of one call live on different devices."""


def type_label(value) -> str:
    """How an error message names the type of ``value``.

    A type from another package is named with its module (``torch.Tensor``: a bare
    ``Tensor`` reads as numr_web's own), a builtin by its name (``str``), and where a
    conversion to an array numr_web takes is known, the message says it.
    """
    cls = type(value)
    module = getattr(cls, "__module__", None) or ""
    name = getattr(cls, "__qualname__", None) or cls.__name__
    if module == "builtins":
        return name
    label = f"{module}.{name}" if module else name
    package = module.partition(".")[0]
    if package == "torch":
        hint = "pass its .detach().numpy() for a CPU tensor, or cupy.from_dlpack() of it for a CUDA one"
    elif hasattr(cls, "__array__") or hasattr(cls, "__array_interface__"):
        hint = "convert it with numpy.asarray"
    elif hasattr(cls, "__dlpack__"):
        hint = "convert it with numpy.from_dlpack (host memory) or cupy.from_dlpack (a CUDA device)"
    else:
        return label
    return f"{label} ({hint})"

"""Moving arrays between devices: to_device and to_numpy (NumPy is imported only by the calls that need it)."""

from __future__ import annotations

import numbers

from numr_web.autograd.tensor import Tensor, not_an_array, readable_array
from numr_web.backends import backend_for, device_of, get_backend, is_array
from numr_web.host import is_ndarray, is_numpy_scalar, require_numpy


def _host(array):
    if is_ndarray(array):
        return array
    return backend_for(array).to_numpy(array)


def to_device(array, device: str):
    """Copy ``array`` (NumPy, CuPy, WebGPU array or Tensor) to ``device``: "cpu", "cuda" or "webgpu".

    The memory layout is kept (a channels-last array stays channels-last).
    A Tensor comes back as a new leaf Tensor with the same ``requires_grad``.
    Raises ``BackendUnavailable`` (with how to fix it) when the device is not usable here.
    """
    if isinstance(array, Tensor):
        moved = to_device(array.data, device)
        if moved is array.data:  # already there: the new leaf gets its own values, as Tensor(array) does
            return Tensor(moved, requires_grad=array.requires_grad)
        return Tensor._of(moved, requires_grad=array.requires_grad)
    target = get_backend(device)  # validates the name, raises BackendUnavailable
    if not is_array(array):
        if isinstance(array, (list, tuple, numbers.Real)) or is_numpy_scalar(array):
            array = require_numpy("to_device of a list or a number").asarray(array)
        else:
            raise not_an_array("array", array)
    readable_array(array, "array")
    if device_of(array) == target.device:
        return array
    return target.from_numpy(_host(array))


def to_numpy(array):
    """A NumPy array with the values of ``array`` (any device, or a Tensor)."""
    if isinstance(array, Tensor):
        array = array.data
    if not is_array(array):
        raise not_an_array("array", array)
    return _host(readable_array(array, "array"))

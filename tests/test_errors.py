"""Bad input gets a clear error naming the argument and what was expected."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import require_torch

import numr_web
from numr_web.errors import DeviceMismatch, ShapeMismatch

X = np.zeros((2, 8, 3, 3), np.float32)
W = np.ones(8, np.float32)
MEAN = np.zeros((2, 4), np.float32)
RSTD = np.ones((2, 4), np.float32)


def fwd(**kw):
    args = dict(x=X, weight=W, bias=W, num_groups=4, eps=1e-5)
    args.update(kw)
    act = args.pop("activation", None)
    return numr_web.ops.group_norm_forward(
        args["x"], args["weight"], args["bias"], args["num_groups"], args["eps"], activation=act
    )


def bwd(**kw):
    args = dict(dy=X, x=X, mean=MEAN, rstd=RSTD, weight=W, num_groups=4)
    args.update(kw)
    return numr_web.ops.group_norm_backward(
        args["dy"], args["x"], args["mean"], args["rstd"], args["weight"], args["num_groups"]
    )


# (call, exception type, words the message must contain)
ERROR_TABLE = {
    "num_groups zero": (lambda: fwd(num_groups=0), ValueError, ["num_groups", "positive"]),
    "num_groups negative": (lambda: fwd(num_groups=-2), ValueError, ["num_groups", "positive"]),
    "num_groups float": (lambda: fwd(num_groups=2.5), TypeError, ["num_groups", "integer"]),
    "num_groups bool": (lambda: fwd(num_groups=True), TypeError, ["num_groups"]),
    "num_groups not dividing C": (lambda: fwd(num_groups=3), ShapeMismatch, ["num_groups", "divisible", "8"]),
    "weight wrong shape": (lambda: fwd(weight=np.ones(7, np.float32)), ShapeMismatch, ["weight", "(8,)", "(7,)"]),
    "weight 2-D": (lambda: fwd(weight=np.ones((8, 1), np.float32)), ShapeMismatch, ["weight", "(8,)"]),
    "bias wrong shape": (lambda: fwd(bias=np.ones(9, np.float32)), ShapeMismatch, ["bias", "(8,)", "(9,)"]),
    "rank 1": (lambda: fwd(x=np.zeros(8, np.float32)), ShapeMismatch, ["x", "2 dimensions", "(8,)"]),
    "rank 0": (lambda: fwd(x=np.float32(1.0)), ShapeMismatch, ["x", "2 dimensions"]),
    "eps negative": (lambda: fwd(eps=-1e-5), ValueError, ["eps", "non-negative"]),
    "eps nan": (lambda: fwd(eps=float("nan")), ValueError, ["eps", "finite"]),
    "eps inf": (lambda: fwd(eps=float("inf")), ValueError, ["eps", "finite"]),
    "eps string": (lambda: fwd(eps="1e-5"), TypeError, ["eps"]),
    "integer dtype": (lambda: fwd(x=np.zeros((2, 8, 3), np.int32)), TypeError, ["x", "floating", "int32"]),
    "complex dtype": (lambda: fwd(x=np.zeros((2, 8, 3), np.complex64)), TypeError, ["x", "floating", "complex64"]),
    "bool dtype": (lambda: fwd(x=np.zeros((2, 8, 3), bool)), TypeError, ["x", "floating", "bool"]),
    "integer weight": (lambda: fwd(weight=np.ones(8, np.int64)), TypeError, ["weight", "floating", "int64"]),
    "activation unknown": (lambda: fwd(activation="relu"), ValueError, ["activation", "silu", "relu"]),
    "x not an array": (lambda: fwd(x="abc"), TypeError, ["x", "array"]),
    "mean wrong shape": (lambda: bwd(mean=np.zeros((2, 3), np.float32)), ShapeMismatch, ["mean", "(N, G)", "(2, 4)"]),
    "rstd wrong shape": (lambda: bwd(rstd=np.zeros((8,), np.float32)), ShapeMismatch, ["rstd", "(2, 4)"]),
    "dy wrong shape": (lambda: bwd(dy=np.zeros((2, 8, 3, 4), np.float32)), ShapeMismatch, ["dy", "(2, 8, 3, 3)"]),
    "dy integer": (lambda: bwd(dy=np.zeros((2, 8, 3, 3), np.int16)), TypeError, ["dy", "floating"]),
    "backward num_groups": (lambda: bwd(num_groups=5), ShapeMismatch, ["num_groups", "divisible"]),
    "to_device unknown": (lambda: numr_web.to_device(X, "tpu"), ValueError, ["device", "cpu", "webgpu", "tpu"]),
    "group_norm public": (lambda: numr_web.group_norm(X, 3), ShapeMismatch, ["num_groups", "divisible"]),
    "grad seed missing": (
        lambda: numr_web.Tensor(X, requires_grad=True).reshape(-1).__mul__(2).backward(),
        RuntimeError,
        ["single-element"],
    ),
}


@pytest.mark.parametrize("case", sorted(ERROR_TABLE))
def test_bad_input_raises_clear_error(case):
    call, exc, words = ERROR_TABLE[case]
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{case}: {w!r} missing from message {msg!r}"


def test_shape_mismatch_is_a_value_error():
    assert issubclass(ShapeMismatch, ValueError)
    assert issubclass(DeviceMismatch, ValueError)


class FakeDeviceArray:
    """Stands for an array of another device: routes as a WebGPU array would."""

    __numr_web_array__ = True
    device = "webgpu"
    shape = (8,)
    ndim = 1
    dtype = np.dtype(np.float32)
    strides = (4,)


def test_arrays_on_different_devices_are_rejected():
    with pytest.raises(DeviceMismatch, match="weight on 'webgpu'"):
        fwd(weight=FakeDeviceArray())


DEVICE_ERRORS = {
    "num_groups not dividing C": (dict(num_groups=3), ShapeMismatch, ["num_groups", "divisible"]),
    "num_groups zero": (dict(num_groups=0), ValueError, ["num_groups", "positive"]),
    "weight wrong shape": (dict(weight=np.ones(7, np.float32)), ShapeMismatch, ["weight", "(8,)"]),
    "eps negative": (dict(eps=-1.0), ValueError, ["eps"]),
    "activation unknown": (dict(activation="gelu"), ValueError, ["activation", "gelu"]),
    "rank 1": (dict(x=np.zeros(8, np.float32)), ShapeMismatch, ["x", "2 dimensions"]),
}


@pytest.mark.parametrize("case", sorted(DEVICE_ERRORS))
def test_bad_input_on_every_device(runner, case):
    kw, exc, words = DEVICE_ERRORS[case]
    kw = {k: runner.put(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    args = dict(x=runner.put(X), weight=runner.put(W), bias=runner.put(W), num_groups=4, eps=1e-5)
    args.update(kw)
    act = args.pop("activation", None)
    with pytest.raises(exc) as info:
        numr_web.ops.group_norm_forward(
            args["x"], args["weight"], args["bias"], args["num_groups"], args["eps"], activation=act
        )
    for w in words:
        assert w in str(info.value)


BACKWARD_DEVICE_ERRORS = {
    "mean wrong shape": (dict(mean=np.zeros((2, 3), np.float32)), ShapeMismatch, ["mean", "(N, G)", "(2, 4)"]),
    "rstd wrong shape": (dict(rstd=np.zeros((8,), np.float32)), ShapeMismatch, ["rstd", "(2, 4)"]),
    "dy wrong shape": (dict(dy=np.zeros((2, 8, 3, 4), np.float32)), ShapeMismatch, ["dy", "(2, 8, 3, 3)"]),
    "num_groups not dividing C": (dict(num_groups=5), ShapeMismatch, ["num_groups", "divisible"]),
    "weight wrong shape": (dict(weight=np.ones(7, np.float32)), ShapeMismatch, ["weight", "(8,)"]),
    "activation unknown": (dict(activation="gelu"), ValueError, ["activation", "gelu"]),
}


@pytest.mark.parametrize(
    "case",
    [f"forward: {k}" for k in sorted(DEVICE_ERRORS)] + [f"backward: {k}" for k in sorted(BACKWARD_DEVICE_ERRORS)],
)
def test_bad_input_after_good_calls_on_every_device(runner, case):
    """After good calls of the same kinds of array (which the op then checks at a glance), a bad call still gets
    the full checks' error."""
    put = runner.put
    x, w, mean, rstd = put(X), put(W), put(MEAN), put(RSTD)
    numr_web.ops.group_norm_forward(x, w, w, 4, 1e-5)
    numr_web.ops.group_norm_backward(x, x, mean, rstd, w, 4, bias=w)
    direction, name = case.split(": ")
    table = DEVICE_ERRORS if direction == "forward" else BACKWARD_DEVICE_ERRORS
    kw, exc, words = table[name]
    kw = {k: put(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    with pytest.raises(exc) as info:
        if direction == "forward":
            args = dict(x=x, weight=w, bias=w, num_groups=4, eps=1e-5, activation=None) | kw
            numr_web.ops.group_norm_forward(
                args["x"], args["weight"], args["bias"], args["num_groups"], args["eps"], activation=args["activation"]
            )
        else:
            args = dict(dy=x, x=x, mean=mean, rstd=rstd, weight=w, num_groups=4, activation=None) | kw
            numr_web.ops.group_norm_backward(
                args["dy"],
                args["x"],
                args["mean"],
                args["rstd"],
                args["weight"],
                args["num_groups"],
                bias=w,
                activation=args["activation"],
            )
    for word in words:
        assert word in str(info.value), f"{case}: {word!r} missing from {str(info.value)!r}"


def test_backward_stats_shape_on_every_device(runner):
    with pytest.raises(ShapeMismatch, match="mean"):
        numr_web.ops.group_norm_backward(
            runner.put(X), runner.put(X), runner.put(np.zeros((2, 3), np.float32)), runner.put(RSTD), runner.put(W), 4
        )


@pytest.mark.parametrize("target", ["webgpu", "cuda"])
def test_mixed_devices_named(target):
    from conftest import Runner, require_target

    require_target(target)
    with pytest.raises(DeviceMismatch, match="x on 'cpu'"):
        numr_web.ops.group_norm_forward(X, Runner(target).put(W), None, 4, 1e-5)


@pytest.mark.parametrize("target", ["webgpu", "cuda"])
@pytest.mark.parametrize("odd", ["dy", "x", "mean", "rstd", "weight", "bias"])
def test_backward_mixed_devices_named(target, odd):
    """The backward checks its six arrays together: the one left on the host is named."""
    from conftest import Runner, require_target

    require_target(target)
    put = Runner(target).put
    args = {k: v if k == odd else put(v) for k, v in dict(dy=X, x=X, mean=MEAN, rstd=RSTD, weight=W, bias=W).items()}
    with pytest.raises(DeviceMismatch, match=f"{odd} on 'cpu'"):
        numr_web.ops.group_norm_backward(
            args["dy"], args["x"], args["mean"], args["rstd"], args["weight"], 4, bias=args["bias"]
        )


# -- arrays of other libraries: named by module and class, with a conversion (issue 26) -----------
def _pretend(module, name, **attrs):
    """An instance of a class named ``module.name``: what the error message must call it."""
    return type(name, (), {"__module__": module, **attrs})()


#: where an argument that is not an array numr_web takes gets its error
FOREIGN_CALLS = {
    "group_norm x": (lambda v: numr_web.group_norm(v, 4), "x: "),
    "forward weight": (lambda v: fwd(weight=v), "weight: "),
    "backward dy": (lambda v: bwd(dy=v), "dy: "),
    "to_device": (lambda v: numr_web.to_device(v, "cpu"), "array: "),
    "to_numpy": (lambda v: numr_web.to_numpy(v), "array: "),
    "Tensor": (lambda v: numr_web.Tensor(v), "array: "),
}


@pytest.mark.parametrize("where", sorted(FOREIGN_CALLS))
def test_a_torch_tensor_is_named_torch_tensor_with_a_conversion(where):
    call, name = FOREIGN_CALLS[where]
    with pytest.raises(TypeError) as info:
        call(_pretend("torch", "Tensor"))
    msg = str(info.value)
    assert msg.startswith(name) and "got torch.Tensor (" in msg and ".numpy()" in msg, msg


@pytest.mark.parametrize("where", sorted(FOREIGN_CALLS))
def test_a_class_that_only_takes_cupys_module_name_is_a_type_error(where):
    """``type(x).__module__ == "cupy"`` routes to the CUDA backend; without ``strides`` it is no
    array numr_web can read, and says so instead of an AttributeError from deep inside."""
    call, name = FOREIGN_CALLS[where]
    fake = _pretend("cupy", "ndarray", shape=(2, 8, 3, 3), ndim=4, dtype=np.dtype(np.float32))
    with pytest.raises(TypeError) as info:
        call(fake)
    msg = str(info.value)
    assert msg.startswith(name) and "got cupy.ndarray" in msg and "'strides'" in msg, msg


def test_a_real_torch_tensor_is_named(rng):
    torch = require_torch()
    with pytest.raises(TypeError, match=r"x: expected .*, got torch\.Tensor \(pass its \.detach\(\)\.numpy\(\)"):
        numr_web.group_norm(torch.tensor(X), 4)


def test_type_label_names_foreign_types_by_module():
    from numr_web.errors import type_label

    assert type_label("abc") == "str"  # builtins stay short
    assert type_label(_pretend("jaxlib.xla", "ArrayImpl", __array__=lambda self: None)) == (
        "jaxlib.xla.ArrayImpl (convert it with numpy.asarray)"
    )
    assert type_label(_pretend("mylib", "Thing")) == "mylib.Thing"

"""Tensor and autograd semantics, checked against hand-derived derivatives and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import numr_web
from numr_web import Tensor
from numr_web.autograd import Function, GradcheckError, grad, gradcheck, gradgradcheck, no_grad
from numr_web.schema import AmpPolicy, OpSchema


def t(a, rg=True):
    return Tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def test_arithmetic_gradients_by_hand():
    a, b = t([1.0, 2.0, 3.0]), t([4.0, 5.0, 6.0])
    out = ((a * b + a / b - b) ** 2).sum()
    out.backward()
    av, bv = a.numpy(), b.numpy()
    inner = av * bv + av / bv - bv
    np.testing.assert_allclose(a.grad.numpy(), 2 * inner * (bv + 1 / bv))
    np.testing.assert_allclose(b.grad.numpy(), 2 * inner * (av - av / bv**2 - 1))


def test_broadcasting_gradients_sum_back_to_input_shape():
    a = t(np.arange(6.0).reshape(2, 3))
    b = t([10.0, 20.0, 30.0])
    c = t([[2.0], [3.0]])
    ((a + b) * c).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), [5.0, 5.0, 5.0])
    np.testing.assert_allclose(c.grad.numpy(), (a.numpy() + b.numpy()).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(a.grad.numpy(), np.repeat([[2.0], [3.0]], 3, axis=1))


def test_grad_accumulates_across_backward_calls():
    a = t([1.0, 2.0])
    (a * 3).sum().backward()
    (a * a).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [3 + 2, 3 + 4])


def test_backward_with_array_or_tensor_seed():
    a = t([1.0, 2.0, 3.0])
    (a * a).backward(np.array([1.0, 0.0, 2.0]))
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 0.0, 12.0])
    b = t([1.0, 2.0])
    (b * 5).backward(Tensor(np.array([1.0, 1.0])))
    np.testing.assert_allclose(b.grad.numpy(), [5.0, 5.0])


def test_mean_reshape_neg_rsub_rdiv():
    a = t(np.arange(1.0, 7.0))
    out = (1.0 - a.reshape(2, 3)).mean(axis=1).sum() + (2.0 / a).sum() + (-a).mean()
    out.backward()
    av = a.numpy()
    np.testing.assert_allclose(a.grad.numpy(), -1 / 3 - 2 / av**2 - 1 / 6)


def test_grad_function_and_create_graph_second_derivative():
    x = t([0.5, -1.5, 2.0])
    y = (x**3).sum()
    (gx,) = grad(y, [x], create_graph=True)
    np.testing.assert_allclose(gx.numpy(), 3 * x.numpy() ** 2)
    (ggx,) = grad(gx.sum(), [x])
    np.testing.assert_allclose(ggx.numpy(), 6 * x.numpy())
    assert x.grad is None  # grad() leaves .grad alone


def test_grad_without_create_graph_returns_detached():
    x = t([1.0, 2.0])
    (gx,) = grad((x * x).sum(), [x])
    assert gx.grad_fn is None and not gx.requires_grad


def test_unused_input_raises_or_returns_none():
    x, z = t([1.0]), t([2.0])
    with pytest.raises(RuntimeError, match="allow_unused"):
        grad((x * 2).sum(), [x, z])
    gx, gz = grad((x * 2).sum(), [x, z], allow_unused=True)
    assert gz is None and gx.numpy()[0] == 2


def test_no_grad_records_nothing():
    x = t([1.0, 2.0])
    with no_grad():
        y = x * 2
    assert y.grad_fn is None and not y.requires_grad


def test_backward_on_tensor_without_graph_is_a_clear_error():
    with pytest.raises(RuntimeError, match="does not require grad"):
        Tensor(np.ones(1)).backward()


def test_requires_grad_needs_float():
    with pytest.raises(TypeError, match="floating"):
        Tensor(np.arange(3), requires_grad=True)


def test_gradcheck_catches_a_wrong_derivative():
    class WrongSquare(Function):
        schema = OpSchema("wrong_square_for_test", 1, AmpPolicy.PROMOTE, True)

        @staticmethod
        def forward(ctx, a):
            return a * a

        @staticmethod
        def backward(ctx, g):
            return (g * ctx.inputs[0] * 2.1,)  # off by 5%

    x = t([0.3, -1.2, 2.0])
    with pytest.raises(GradcheckError, match="analytical"):
        gradcheck(lambda a: WrongSquare.apply(a), [x])
    assert gradcheck(lambda a: a * a, [x])


def test_gradgradcheck_catches_a_detached_backward():
    # a first derivative that is right but not differentiable (numr's detached fallback)
    class DetachedSquare(Function):
        schema = OpSchema("detached_square_for_test", 1, AmpPolicy.PROMOTE, True)

        @staticmethod
        def forward(ctx, a):
            return a * a

        @staticmethod
        def backward(ctx, g):
            return (Tensor(g.numpy() * 2 * ctx.inputs[0].numpy()),)

    x = t([0.3, -1.2, 2.0])
    assert gradcheck(lambda a: DetachedSquare.apply(a), [x])
    with pytest.raises((GradcheckError, RuntimeError)):
        gradgradcheck(lambda a: DetachedSquare.apply(a), [x])


def test_group_norm_tensor_result_and_plain_array_result():
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    out = numr_web.group_norm(x, 2)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    tx = Tensor(x, requires_grad=True)
    ty = numr_web.group_norm(tx, 2)
    assert isinstance(ty, Tensor) and ty.grad_fn is not None
    np.testing.assert_array_equal(ty.numpy(), out)


@pytest.mark.parametrize("activation", [None, "silu"])
def test_group_norm_bias_only_gets_gradient(activation):
    rng = np.random.default_rng(1)
    x = t(rng.standard_normal((2, 4, 3)))
    b = t(rng.standard_normal(4))
    assert gradcheck(lambda xx, bb: numr_web.group_norm(xx, 2, None, bb, eps=1e-3, activation=activation), [x, b])


def test_to_numpy_and_to_device_roundtrip():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert numr_web.to_device(x, "cpu") is x
    tx = numr_web.to_device(Tensor(x, requires_grad=True), "cpu")
    assert isinstance(tx, Tensor) and tx.requires_grad
    np.testing.assert_array_equal(numr_web.to_numpy(tx), x)
    with pytest.raises(TypeError, match="array"):
        numr_web.to_numpy("nope")


def test_unavailable_device_error_names_the_fix():
    from numr_web.backends import get_backend

    be = get_backend("cuda", require=False)
    ok, why = be.available()
    if ok:
        pytest.skip("a CUDA device is present here")
    with pytest.raises(numr_web.BackendUnavailable, match="numr-web\\[cuda"):
        numr_web.to_device(np.zeros(3, np.float32), "cuda")


def test_schema_registry():
    s = numr_web.schema("group_norm")
    assert s.name == "group_norm" and s.version == 1 and s.produces_grad is True
    assert s.amp_policy == "force-fp32" and s.amp_policy == "force_fp32"
    assert s.amp_policy == numr_web.AmpPolicy.FORCE_FP32
    with pytest.raises(KeyError, match="group_norm"):
        numr_web.schema("no_such_op")


def test_autograd_skips_ops_whose_schema_produces_no_grad():
    class Frozen(Function):
        schema = OpSchema("frozen_for_test", 1, AmpPolicy.PROMOTE, produces_grad=False)

        @staticmethod
        def forward(ctx, a):
            return a * 2

    y = Frozen.apply(t([1.0]))
    assert y.grad_fn is None and not y.requires_grad

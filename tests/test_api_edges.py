"""Hard edges of the API (issue 16): implicit host conversion, mixed devices, byte order,
masked arrays, np.matrix, SiLU's backward without a bias, and autograd's version counters
and retain_graph."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from conftest import require_target
from oracle import backward as ref_backward
from oracle import rel_err
from webgpu_support import wg  # noqa: F401

import numr_web
from numr_web.autograd import no_grad
from numr_web.backends import get_backend
from numr_web.errors import DeviceMismatch


@pytest.fixture
def x(rng):
    return rng.standard_normal((2, 8, 5, 5)).astype(np.float32)


# -- np.asarray of a WebGPU array ------------------------------------------------------------
def test_asarray_of_webgpu_array_raises_naming_to_numpy(wg, x):
    xg = numr_web.to_device(x, "webgpu")
    for convert in (np.asarray, np.array):
        with pytest.raises(TypeError, match=r"numr_web\.to_numpy"):
            convert(xg)
    np.testing.assert_array_equal(numr_web.to_numpy(xg), x)  # the explicit read-back works


# -- mixed devices in Tensor arithmetic -------------------------------------------------------
@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_tensor_arithmetic_across_devices_is_a_device_mismatch(wg, x, op):
    a = numr_web.Tensor(numr_web.to_device(x, "webgpu"))
    b = numr_web.Tensor(x)
    fn = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}[op]
    for left, right in ((a, b), (b, a)):
        with pytest.raises(DeviceMismatch, match="webgpu.*cpu|cpu.*webgpu"):
            fn(left, right)


def test_webgpu_array_with_numpy_array_names_to_device(wg, x):
    xg = numr_web.to_device(x, "webgpu")
    with pytest.raises(TypeError, match="different devices.*to_device"):
        xg + x
    with pytest.raises(TypeError, match="different devices.*to_device"):
        x * xg


def test_zero_dim_host_value_still_mixes_with_webgpu(wg, x):
    t = numr_web.Tensor(numr_web.to_device(x, "webgpu")) * numr_web.Tensor(np.float32(2.0))
    np.testing.assert_allclose(numr_web.to_numpy(t), 2 * x)


# -- byte order, masked arrays, np.matrix ----------------------------------------------------------
@pytest.mark.parametrize("path", ["numpy", "fused"])
def test_big_endian_input_names_the_byte_order(x, path):
    with get_backend("cpu").using_path(path), pytest.raises(TypeError, match="x: .*big-endian float32.*newbyteorder"):
        numr_web.group_norm(x.astype(">f4"), 2)
    with pytest.raises(TypeError, match="weight: .*big-endian"):
        numr_web.group_norm(x, 2, np.ones(8, ">f4"))
    with pytest.raises(TypeError, match="big-endian"):
        numr_web.Tensor(x.astype(">f4"), requires_grad=True)


def test_masked_array_is_refused(x):
    xm = np.ma.masked_array(x, mask=x > 1)
    with pytest.raises(TypeError, match=r"x: masked arrays \(numpy.ma\) are not supported.*filled"):
        numr_web.group_norm(xm, 2)
    with pytest.raises(TypeError, match="masked"):
        numr_web.ops.group_norm_forward(x, np.ma.masked_array(np.ones(8, np.float32)), None, 2)


@pytest.mark.parametrize("path", ["numpy", "fused"])
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_np_matrix_is_taken_as_an_ndarray(rng, path):
    if path == "fused":
        require_target("cpu-fused")  # skips without Numba, fails under CI=true (README's rule)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    with get_backend("cpu").using_path(path):
        y = numr_web.group_norm(np.matrix(a), 3)
        expected = numr_web.group_norm(a, 3)
    assert type(y) is np.ndarray
    np.testing.assert_array_equal(y, expected)


# -- SiLU backward without a bias: a missing bias is zero ----------------------------------------
def _silu_backward_case(rng, layout):
    x = (rng.standard_normal((2, 8, 6, 6)) + 3.0).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    if layout == "nhwc":
        from oracle import channels_last

        x, dy = channels_last(x), channels_last(dy)
    return x, dy, rng.standard_normal(8).astype(np.float32)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("target", ["numpy", "fused", "webgpu"])
@pytest.mark.parametrize("with_weight", [True, False])
def test_silu_backward_without_bias_matches_float64(rng, layout, target, with_weight):
    from conftest import require_target

    require_target("cpu-fused" if target == "fused" else ("webgpu" if target == "webgpu" else "cpu-numpy"))
    x, dy, w = _silu_backward_case(rng, layout)
    w = w if with_weight else None
    put = (lambda a: numr_web.to_device(a, "webgpu")) if target == "webgpu" else (lambda a: a)
    path = get_backend("cpu").using_path("fused" if target == "fused" else "numpy")
    with path:
        X, DY, W = put(x), put(dy), None if w is None else put(w)
        _, mean, rstd = numr_web.ops.group_norm_forward(X, W, None, 4, activation="silu")
        dx, dw, db = numr_web.ops.group_norm_backward(DY, X, mean, rstd, W, 4, activation="silu")
    rdx, rdw, rdb = ref_backward(dy, x, 4, w, None, activation="silu")
    assert rel_err(numr_web.to_numpy(dx), rdx) < 3e-6
    if with_weight:
        assert rel_err(numr_web.to_numpy(dw), rdw) < 1e-5
        assert rel_err(numr_web.to_numpy(db), rdb) < 1e-5


# -- autograd: version counters -----------------------------------------------------------------
def _graph(x64):
    xt = numr_web.Tensor(x64, requires_grad=True)
    v = numr_web.Tensor(np.linspace(-1, 1, x64.size).reshape(x64.shape))
    loss = (numr_web.group_norm(xt, 2) * v).sum()
    return xt, loss


def test_in_place_change_of_a_saved_input_raises_at_backward(x):
    xt, loss = _graph(x.astype(np.float64))
    assert xt._version == 0
    with no_grad():
        xt.mul_(12.0)
    assert xt._version == 1
    expected = (
        r"modified by an inplace operation: \[float64 Tensor of shape \(2, 8, 5, 5\) on 'cpu'\], "
        r"input 0 of GroupNormFunction.*version 1; expected version 0"
    )
    with pytest.raises(RuntimeError, match=expected):
        loss.backward()


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.add_(1.0),
        lambda t: t.sub_(1.0),
        lambda t: t.div_(2.0),
        lambda t: t.copy_(np.zeros(t.shape)),
        lambda t: t.fill_(3.0),
        lambda t: t.zero_(),
        lambda t: t.detach().mul_(2.0),  # a detached tensor shares the values and the counter
        lambda t: t.reshape(-1).add_(1.0),
    ],
)
def test_every_in_place_op_bumps_the_version(x, change):
    xt, loss = _graph(x.astype(np.float64))
    with no_grad():
        change(xt)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_augmented_assignment_is_in_place_and_tracked(x):
    xt, loss = _graph(x.astype(np.float64))
    data = xt.data
    with no_grad():
        xt += 1.0
    assert xt.data is data and xt._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_in_place_on_an_output_used_by_its_backward_raises(x):
    a = numr_web.Tensor(x.astype(np.float64), requires_grad=True)
    s = a.sigmoid()  # its backward reads s
    loss = s.sum()
    with no_grad():
        s.mul_(0.5)
    with pytest.raises(RuntimeError, match="its output of Sigmoid"):
        loss.backward()


def test_in_place_change_of_a_value_the_backward_does_not_read_is_fine(x):
    a = numr_web.Tensor(x.astype(np.float64), requires_grad=True)
    b = numr_web.Tensor(np.ones(x.shape))
    loss = (a + b).sum()  # Add reads no values
    b.add_(5.0)
    loss.backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.ones(x.shape))


def test_in_place_on_a_leaf_that_requires_grad_needs_no_grad(x):
    w = numr_web.Tensor(x.astype(np.float64), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Tensor that requires grad.*no_grad"):
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="leaf Tensor that requires grad"):
        w += 1.0
    with no_grad():
        w -= 0.5  # a parameter update
    np.testing.assert_allclose(w.data, x.astype(np.float64) - 0.5)


def test_augmented_assignment_inside_a_graph_rebinds(x):
    a = numr_web.Tensor(x.astype(np.float64), requires_grad=True)
    loss = (a * 2.0).sum()
    before = loss
    loss += (a * a).sum()  # out of place, as before: the usual `loss += term`
    assert loss is not before
    loss.backward()
    np.testing.assert_allclose(a.grad.numpy(), 2.0 + 2 * x.astype(np.float64))


def test_version_check_on_webgpu(wg, x):
    xt = numr_web.Tensor(numr_web.to_device(x, "webgpu"), requires_grad=True)
    y = numr_web.group_norm(xt, 2)
    with no_grad():
        xt.mul_(3.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward(numr_web.to_device(x, "webgpu"))
    np.testing.assert_allclose(numr_web.to_numpy(xt.data), 3 * x, rtol=1e-6)


# -- autograd: retain_graph -----------------------------------------------------------------------
def test_second_backward_through_a_freed_graph_raises(x):
    xt, loss = _graph(x.astype(np.float64))
    loss.backward()
    first = xt.grad.numpy().copy()
    with pytest.raises(RuntimeError, match="backward through the graph a second time.*retain_graph=True"):
        loss.backward()
    np.testing.assert_array_equal(xt.grad.numpy(), first)  # nothing accumulated


def test_retain_graph_allows_a_second_backward(x):
    xt, loss = _graph(x.astype(np.float64))
    loss.backward(retain_graph=True)
    first = xt.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(xt.grad.numpy(), 2 * first)


def test_grad_frees_unless_retained(x):
    xt, loss = _graph(x.astype(np.float64))
    (g1,) = numr_web.autograd.grad([loss], [xt], retain_graph=True)
    (g2,) = numr_web.autograd.grad([loss], [xt])
    np.testing.assert_array_equal(g1.numpy(), g2.numpy())
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        numr_web.autograd.grad([loss], [xt])


def test_create_graph_retains_and_double_backward_still_works(x):
    x64 = x.astype(np.float64)
    xt = numr_web.Tensor(x64, requires_grad=True)
    y = numr_web.group_norm(xt, 2)
    (gx,) = numr_web.autograd.grad([y], [xt], [np.linspace(-1, 1, x.size).reshape(x.shape)], create_graph=True)
    (ggx,) = numr_web.autograd.grad([(gx * gx).sum()], [xt])
    assert np.all(np.isfinite(ggx.numpy()))
    assert numr_web.autograd.gradgradcheck(
        lambda t: numr_web.group_norm(t, 2), [numr_web.Tensor(x64[:1, :4, :2, :2].copy(), requires_grad=True)]
    )


# -- Tensor(array) copies; a raw operand the graph keeps is copied (issue 26) ---------------------
def _weighted_loss(xt, w=None, v=None):
    """A loss whose gradient depends on every value of x (and of v)."""
    v = np.linspace(-1.0, 2.0, int(np.prod(xt.shape))).reshape(xt.shape) if v is None else v
    return (numr_web.group_norm(xt, 2, w) * v).sum()


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_changing_the_array_a_tensor_was_made_from_leaves_the_gradient_alone(cpu_runner, x, layout, dtype):
    """``xt = Tensor(x, requires_grad=True); loss = f(xt); x += 5; loss.backward()`` gave a wrong
    gradient without an error when xt shared x; Tensor(array) copies now, keeping the layout."""
    from oracle import channels_last

    x = x.astype(dtype)
    if layout == "nhwc":
        x = channels_last(x)
    expected = numr_web.Tensor(x.copy(), requires_grad=True)
    _weighted_loss(expected).backward()
    xt = numr_web.Tensor(x, requires_grad=True)
    assert not np.shares_memory(xt.data, x) and xt.data.strides == x.strides
    loss = _weighted_loss(xt)
    x += 5.0
    x[0, 0, 0, 0] = 1e3
    loss.backward()
    np.testing.assert_allclose(xt.grad.numpy(), expected.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_raw_arrays_beside_a_tensor_are_copied_when_the_graph_keeps_them(cpu_runner, x):
    """A raw x next to a weight that requires grad (dweight reads x), and a raw factor of a product
    (its gradient reads it): changing them before backward() changes nothing."""
    x64 = x.astype(np.float64)
    v = np.linspace(-1.0, 2.0, x.size).reshape(x.shape)
    w0 = np.linspace(0.5, 1.5, 8)
    expected = numr_web.Tensor(w0, requires_grad=True)
    _weighted_loss(x64.copy(), expected, v.copy()).backward()
    w = numr_web.Tensor(w0, requires_grad=True)
    loss = _weighted_loss(x64, w, v)
    x64 += 5.0
    v *= -3.0
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), expected.grad.numpy(), rtol=1e-12)


def test_a_raw_gradient_seed_is_copied_when_a_graph_of_the_gradient_keeps_it(x):
    x64 = x.astype(np.float64)
    seed = np.linspace(-1.0, 1.0, x.size).reshape(x.shape)

    def second_order(seed):
        xt = numr_web.Tensor(x64, requires_grad=True)
        (gx,) = numr_web.autograd.grad([numr_web.group_norm(xt, 2)], [xt], [seed], create_graph=True)
        return xt, (gx * gx).sum()

    expected, loss = second_order(seed.copy())
    loss.backward()
    xt, loss = second_order(seed)
    seed *= -3.0  # (a shift would not do: dx does not change when dy moves by a constant)
    loss.backward()
    np.testing.assert_allclose(xt.grad.numpy(), expected.grad.numpy(), rtol=1e-12)


def test_tensor_of_a_webgpu_array_takes_it_as_it_is(wg, x):
    """No copy on WebGPU: no operation writes into a WebGPU array (each makes a new one)."""
    xg = numr_web.to_device(x, "webgpu")
    assert numr_web.Tensor(xg, requires_grad=True).data is xg


def test_to_device_on_the_same_device_gives_a_leaf_of_its_own(x):
    xt = numr_web.Tensor(x, requires_grad=True)
    moved = numr_web.to_device(xt, "cpu")
    assert moved.requires_grad and not np.shares_memory(moved.data, xt.data)
    with no_grad():
        moved.add_(1.0)
    assert xt._version == 0
    np.testing.assert_array_equal(xt.data, x)

"""Pipelines compiled ahead of need (issue 27): ``await numr_web.webgpu.prepare(...)`` compiles, on worker
threads here (the browser's createComputePipelineAsync in tests/test_browser_webgpu_extras.py), every
pipeline the named calls can reach, so that their first call compiles nothing.  Counted, not timed:
``Context.compiled_on_call`` counts the pipelines a call had to compile or wait for."""

from __future__ import annotations

import asyncio
import itertools
import threading

import numpy as np
import pytest
from conftest import require_target
from webgpu_support import nhwc

import numr_web
import numr_web.webgpu
from numr_web.dtypes import numpy_dtype


@pytest.fixture
def fresh():
    """A new WebGPU device (empty pipeline cache); the default one again afterwards."""
    require_target("webgpu")
    from numr_web.backends.webgpu import configure, device

    configure()
    yield device.context()
    configure()


# shapes that reach the thread, split, fused (vec4 and odd rows, big groups) and block paths
SHAPES = [
    ((2, 64, 8, 8), 8),
    ((4, 256, 4, 4), 128),
    ((3, 12, 5, 7), 3),
    ((1, 8, 96, 96), 1),
    ((2, 40, 12, 8), 5),
    ((2, 10, 4, 4), 5),
    ((2, 24, 3, 3), 4),
]


def _calls(shape, G, dtype, layout, act, rng, backward=True):
    """Forward (and backward) through the public op, with and without weight and bias."""
    x = rng.standard_normal(shape).astype(np.float32).astype(numpy_dtype(dtype))
    if layout == "nhwc":
        x = nhwc(x)
    xd = numr_web.to_device(x, "webgpu")
    w = numr_web.to_device(rng.standard_normal(shape[1]).astype(np.float32), "webgpu")
    for wt, bt in ((None, None), (w, None), (None, w), (w, w)):
        y, mean, rstd = numr_web.ops.group_norm_forward(xd, wt, bt, G, 1e-5, activation=act)
        if backward:
            numr_web.ops.group_norm_backward(xd, xd, mean, rstd, wt, G, bias=bt, activation=act)


def test_after_prepare_the_first_forward_in_bfloat16_compiles_nothing(fresh, rng):
    n = asyncio.run(
        numr_web.webgpu.prepare(dtypes="bfloat16", layouts=("nchw", "nhwc"), activations=(None, "silu"), backward=False)
    )
    assert n > 500  # every work shape the CPU planner can choose, both layouts
    assert fresh.compiled_on_call == 0 and fresh.compiled_ahead == n
    for (shape, G), layout, act in itertools.product(SHAPES, ("nchw", "nhwc"), (None, "silu")):
        _calls(shape, G, "bfloat16", layout, act, rng, backward=False)
    assert fresh.compiled_on_call == 0
    _calls((2, 16, 4, 4), 4, "float32", "nchw", None, rng, backward=False)  # not prepared: compiles
    assert fresh.compiled_on_call > 0


def test_prepare_for_given_shapes(fresh, rng):
    shapes = [(s, g) for s, g in SHAPES if s != (1, 8, 96, 96)]
    n = asyncio.run(numr_web.webgpu.prepare(dtypes=("float32", "float16"), shapes=shapes))
    assert 0 < n < 400
    for (shape, G), dtype, layout, act in itertools.product(
        shapes, ("float32", "float16"), ("nchw", "nhwc"), (None, "silu")
    ):
        _calls(shape, G, dtype, layout, act, rng)
    # autograd on the device: a loss, its backward, gradient accumulation
    x = numr_web.Tensor(numr_web.to_device(rng.standard_normal((2, 64, 8, 8)).astype(np.float16), "webgpu"), True)
    loss = (numr_web.group_norm(x, 8) ** 2).mean()
    loss.backward()
    assert fresh.compiled_on_call == 0
    assert asyncio.run(numr_web.webgpu.prepare(dtypes=("float32", "float16"), shapes=shapes)) == 0  # all there


def test_the_variants_hold_every_launch_of_any_shape(fresh):
    """Whatever the shape, the planner and the switches, a call's launches are among the variants
    prepare compiles for its dtype, layout and activation (checked on the calls' programs, for
    many shapes, so nothing is compiled)."""
    from numr_web.backends.webgpu import group_norm_launch as gl
    from numr_web.backends.webgpu.array import as_dtype

    ctx = fresh
    rng = np.random.default_rng(3)
    saved = ctx.cpu_adapter, gl.PLAN, gl.SPLIT_PIECE_STEPS, gl.INLINE_REDO_STEPS
    try:
        for cpu, plan in itertools.product((True, False), ("auto", "fused", "split", "thread")):
            ctx.cpu_adapter, gl.PLAN = cpu, plan
            for dtype, layout, act in itertools.product(("float32", "bfloat16"), ("nchw", "nhwc"), (None, "silu")):
                dt = as_dtype(dtype)
                allowed = set(gl.variant_keys(ctx, dt, layout, act))
                for _ in range(25):
                    g = int(rng.choice([1, 2, 3, 4, 5, 8, 32]))
                    cpg = int(rng.choice([1, 2, 3, 4, 6, 8, 16, 64]))
                    spatial = tuple(int(n) for n in rng.integers(1, 40, size=int(rng.integers(0, 3))))
                    shape = (int(rng.integers(1, 5)), g * cpg, *spatial)
                    if layout == "nhwc" and len(shape) < 3:
                        continue
                    got = set(gl.variant_keys(ctx, dt, layout, act, shapes=[(shape, g)]))
                    assert got <= allowed, (cpu, plan, dtype, layout, act, shape, g, sorted(got - allowed)[:3])
    finally:
        ctx.cpu_adapter, gl.PLAN, gl.SPLIT_PIECE_STEPS, gl.INLINE_REDO_STEPS = saved


def test_a_call_waits_for_a_pipeline_still_compiling_instead_of_compiling_it_again(fresh, rng, monkeypatch):
    """prepare's worker has not finished the pipeline a call needs: the call takes that worker's
    pipeline when it is done (one compile per variant)."""
    from concurrent.futures import Future

    transport = fresh.transport
    started, compiles = [], []
    real_create = transport.create_pipeline

    def start(dev, code, entry, kinds):
        future = Future()
        started.append((future, (dev, code, entry, kinds)))
        return future

    def create(*args):
        compiles.append(args[2])
        return real_create(*args)

    monkeypatch.setattr(transport, "start_pipeline", start)
    monkeypatch.setattr(transport, "create_pipeline", create)
    shape, G = (2, 64, 8, 8), 8
    loop = asyncio.new_event_loop()
    task = loop.create_task(
        numr_web.webgpu.prepare(dtypes="float32", layouts="nchw", activations=None, shapes=[(shape, G)])
    )
    loop.run_until_complete(asyncio.sleep(0.05))  # prepare has started every compile by now
    assert started and not task.done()
    done = threading.Event()
    x = numr_web.to_device(rng.standard_normal(shape).astype(np.float32), "webgpu")
    caller = threading.Thread(target=lambda: (numr_web.group_norm(x, G), done.set()))
    caller.start()
    assert not done.wait(0.3)  # waiting for the worker's pipeline
    for future, args in started:  # the workers finish
        future.set_result(real_create(*args))
    caller.join(10)
    assert done.is_set()
    loop.run_until_complete(task)
    loop.close()
    assert compiles == []  # each variant compiled once, by its worker: the call compiled none itself
    assert fresh.compiled_on_call >= 1  # the call counted what it waited for


def test_concurrency_bounds_the_compiles_in_flight_in_the_order_asked(fresh, monkeypatch):
    """With ``concurrency=k`` no more than k pipelines compile at once (a browser's GPU process works through its
    queue in order, so a call's own compile then waits behind k at most), started in the same order as with
    None, which starts them all at once.  Every variant is compiled either way."""
    from concurrent.futures import Future

    from numr_web.backends.webgpu import configure, device

    seen = {}
    for concurrency in (None, 1, 3):
        configure()  # an empty pipeline cache each time
        transport = device.context().transport
        real_create = transport.create_pipeline
        in_flight, most, started = [0], [0], []

        def start(dev, code, entry, kinds, real_create=real_create, in_flight=in_flight, most=most, started=started):
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            started.append((code, entry))
            future = Future()

            def finish():
                in_flight[0] -= 1
                future.set_result(real_create(dev, code, entry, kinds))

            asyncio.get_running_loop().call_soon(finish)
            return future

        monkeypatch.setattr(transport, "start_pipeline", start)
        job = numr_web.webgpu.prepare(
            dtypes=("float32", "bfloat16"), layouts="nchw", shapes=[((2, 64, 8, 8), 8)], concurrency=concurrency
        )
        n = asyncio.run(job)
        assert n == len(started) > 4
        assert most[0] == (n if concurrency is None else concurrency), concurrency
        seen[concurrency] = started
    assert seen[1] == seen[None] and seen[3] == seen[None]


def test_prepare_narrowed_to_calls_with_weight_and_bias(fresh, rng):
    """``weight=True, bias=True, autograd=False`` prepares what a page computing GroupNorm with both, in
    bfloat16 from float32 values and read back as float32, runs (the Explorer's case), and only that: the
    same call without weight and bias, and autograd's arithmetic, still compile on their first call."""
    from numr_web.backends.webgpu import array_kernels

    shape, G = (2, 64, 8, 8), 8
    kwargs = {"dtypes": "bfloat16", "layouts": "nchw", "activations": None, "shapes": [(shape, G)]}
    n = asyncio.run(numr_web.webgpu.prepare(**kwargs, weight=True, bias=True, autograd=False))
    assert n > 0
    x32 = numr_web.to_device(rng.standard_normal(shape).astype(np.float32), "webgpu")
    w = numr_web.to_device(rng.standard_normal(shape[1]).astype(np.float32), "webgpu")
    x = array_kernels.convert(x32, "bfloat16")
    y, mean, rstd = numr_web.ops.group_norm_forward(x, w, w, G, 1e-5)
    dx, _, _ = numr_web.ops.group_norm_backward(y, x, mean, rstd, w, G, bias=w)
    array_kernels.convert(dx, "float32").tobytes()
    assert fresh.compiled_on_call == 0
    numr_web.ops.group_norm_forward(x, None, None, G, 1e-5)
    assert fresh.compiled_on_call > 0
    before = fresh.compiled_on_call
    (x * x).sum()
    assert fresh.compiled_on_call > before
    # the un-narrowed call prepares those and more
    assert asyncio.run(numr_web.webgpu.prepare(**kwargs)) > 0


def test_bad_arguments_name_the_argument(fresh):
    prep = numr_web.webgpu.prepare
    for kwargs, kind, name in (
        ({"dtypes": "float64"}, TypeError, "dtypes"),
        ({"dtypes": ()}, ValueError, "dtypes"),
        ({"layouts": "nhwc8"}, ValueError, "layouts"),
        ({"activations": "relu"}, ValueError, "activations"),
        ({"shapes": [(2, 8, 4)]}, TypeError, "shapes"),
        ({"shapes": [((2, 8, 4), 3)]}, ValueError, "shapes"),
        ({"shapes": [((2,), 1)]}, ValueError, "shapes"),
        ({"concurrency": 0}, ValueError, "concurrency"),
        ({"concurrency": 1.5}, ValueError, "concurrency"),
        ({"concurrency": True}, ValueError, "concurrency"),
        ({"weight": "yes", "shapes": [((2, 8, 4), 2)]}, TypeError, "weight"),
        ({"bias": 1, "shapes": [((2, 8, 4), 2)]}, TypeError, "bias"),
        ({"weight": True}, ValueError, "weight"),  # narrows the calls of shapes: none given
    ):
        with pytest.raises(kind, match=name):
            asyncio.run(prep(**kwargs))


def test_a_variant_that_does_not_compile_is_named(fresh, monkeypatch):
    from numr_web.backends.webgpu import source

    real = source.build
    monkeypatch.setattr(source, "build", lambda k, d, c: real(k, d, c) + ("\nfn broken( {" if "reduce" in k else ""))
    with pytest.raises(RuntimeError, match=r"compiling reduce\.wgsl \(main\) ahead of use failed"):
        asyncio.run(
            numr_web.webgpu.prepare(dtypes="float32", layouts="nchw", activations=None, shapes=[((1, 4, 4), 2)])
        )

"""The WebGPU launcher's kept recipes (issue 27): a repeated call of one signature plans nothing, allocates
only its outputs and reuses its bind groups, never a stale one; the plan modules' switches, assigned on
group_norm_launch, reach the modules that read them."""

from __future__ import annotations

import gc

import claims
import numpy as np
import pytest
from webgpu_support import nhwc, wg  # noqa: F401

# (shape, G, layout): the thread plan, the NCHW split plan (many small groups), the fused plan
# (odd rows), the channels-last split and block paths
SHAPES = [
    ((2, 64, 8, 8), 8, "nchw"),
    ((4, 256, 4, 4), 128, "nchw"),
    ((2, 6, 5, 5), 3, "nchw"),
    ((2, 16, 8, 8), 4, "nhwc"),
    ((2, 10, 4, 4), 5, "nhwc"),
]


def _arrays(wg, rng, shape, layout):  # noqa: F811
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    if layout == "nhwc":
        x, dy = nhwc(x), nhwc(dy)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    return x, dy, w, [wg.from_numpy(a) for a in (x, dy, w)]


class _Allocs:
    """Counts Context.alloc calls (every new array and scratch buffer goes through it)."""

    def __init__(self, ctx, monkeypatch):
        self.count = 0
        inner = ctx.alloc

        def alloc(nbytes):
            self.count += 1
            return inner(nbytes)

        monkeypatch.setattr(ctx, "alloc", alloc)


@pytest.mark.parametrize("shape,G,layout", SHAPES)
def test_a_repeated_call_plans_nothing_and_allocates_only_its_outputs(wg, rng, monkeypatch, shape, G, layout):  # noqa: F811
    from numr_web.backends.webgpu import device, group_norm_launch, group_norm_planner

    ctx = device.context()
    _, _, _, (x, dy, w) = _arrays(wg, rng, shape, layout)
    live = []  # every output kept alive: no call finds its last outputs free (Recipe.outputs)
    for _ in range(2):  # the first call of a signature makes its recipe
        live += wg.group_norm_forward(x, w, None, G, 1e-5, "silu", layout=layout)
        mean, rstd = live[-2:]
        live += wg.group_norm_backward(dy, x, mean, rstd, w, None, G, "silu", layout=layout)
        live += wg.group_norm_backward(dy, x, mean, rstd, None, None, G, layout=layout)
    planned = []
    monkeypatch.setattr(group_norm_planner, "choose", lambda *a, **k: planned.append(a))
    # a kept call never takes the general path (its signature, written out, is the one _signature gives)
    monkeypatch.setattr(group_norm_launch, "_backward", None)
    monkeypatch.setattr(ctx, "batch", None)
    allocs = _Allocs(ctx, monkeypatch)
    live += wg.group_norm_forward(x, w, None, G, 1e-5, "silu", layout=layout)
    assert allocs.count == 3  # y, mean, rstd: the statistics workspace and the zeros for the bias are kept
    allocs.count = 0
    live += wg.group_norm_backward(dy, x, mean, rstd, w, None, G, "silu", layout=layout)
    assert allocs.count == 3  # dx, dweight, dbias: the workspace is kept
    allocs.count = 0
    live += wg.group_norm_backward(dy, x, mean, rstd, None, None, G, layout=layout)
    assert allocs.count == 1  # dx
    assert planned == []


@pytest.mark.parametrize("shape,G,layout", SHAPES)
def test_kept_recipes_give_the_first_calls_bits(wg, rng, shape, G, layout):  # noqa: F811
    """Calls of other signatures in between (other outputs from the pool, other kept bind groups),
    and the same signature on new arrays: each result is the one a first call gives, to the bit."""
    data = [_arrays(wg, rng, shape, layout) for _ in range(2)]

    def run(x, dy, w):
        y, mean, rstd = wg.group_norm_forward(x, w, w, G, 1e-5, layout=layout)
        dx, dw, db = wg.group_norm_backward(dy, x, mean, rstd, w, w, G, layout=layout)
        return [wg.to_numpy(a).tobytes() for a in (y, mean, rstd, dx, dw, db)]

    first = [run(*arrays) for *_, arrays in data]
    other = [(g, lay, _arrays(wg, rng, s, lay)[3]) for s, g, lay in SHAPES]
    for k in range(6):
        x, dy, w = (wg.from_numpy(a) for a in data[k % 2][:3])  # new arrays, maybe other buffers
        assert run(x, dy, w) == first[k % 2], k
        g, lay, (ox, _, ow) = other[k % len(other)]
        wg.group_norm_forward(ox, ow, None, g, 1e-5, layout=lay)


def test_a_dropped_output_is_handed_out_again_and_a_live_one_never(wg, rng, monkeypatch):  # noqa: F811
    """A kept recipe holds its last outputs' buffers (Recipe.outputs): a call whose last outputs were dropped
    allocates nothing and reuses them; an output still alive, or alive through a view of its buffer, is never
    written by a later call; the held bytes go back when the recipes go."""
    from numr_web.backends.webgpu import device

    ctx = device.context()
    G = 8
    x, _, w, (xd, _, wd) = _arrays(wg, rng, (2, 64, 8, 8), "nchw")
    x2 = (x * 3 + 1).astype(np.float32)
    x2d = wg.from_numpy(x2)
    for _ in range(2):  # the recipe made, its outputs held, then dropped
        wg.group_norm_forward(xd, wd, wd, G, 1e-5, layout="nchw")
    allocs = _Allocs(ctx, monkeypatch)
    y, mean, rstd = wg.group_norm_forward(xd, wd, wd, G, 1e-5, layout="nchw")
    assert allocs.count == 0
    bufs = [a._storage.buffer for a in (y, mean, rstd)]
    kept = [wg.to_numpy(a) for a in (y, mean, rstd)]
    view = y.reshape(-1)  # shares y's buffer
    del y, rstd  # mean kept as it is, y through its view; rstd's buffer free
    y2, mean2, rstd2 = wg.group_norm_forward(x2d, wd, wd, G, 1e-5, layout="nchw")
    assert allocs.count == 2  # new buffers for y and mean, rstd's again
    assert y2._storage.buffer is not bufs[0] and mean2._storage.buffer is not bufs[1]
    assert rstd2._storage.buffer is bufs[2]
    assert wg.to_numpy(view).tobytes() == kept[0].tobytes()
    assert wg.to_numpy(mean).tobytes() == kept[1].tobytes()
    claims.check(
        "webgpu", claims.named([wg.to_numpy(a) for a in (y2, mean2, rstd2)]), claims.reference(x2, G, w, w), x2
    )
    claims.check("webgpu", claims.named(kept), claims.reference(x, G, w, w), x)
    assert ctx.held_output_bytes[0] > 0
    del view, mean, y2, mean2, rstd2
    ctx.recipes.clear()
    gc.collect()
    assert ctx.held_output_bytes[0] == 0
    monkeypatch.setattr(device, "HELD_OUTPUT_BYTES", 0)  # none held: every call allocates its outputs
    for _ in range(3):
        allocs.count = 0
        wg.group_norm_forward(xd, wd, wd, G, 1e-5, layout="nchw")
    assert allocs.count == 3 and ctx.held_output_bytes[0] == 0


def test_no_kept_bind_group_outlives_its_buffers(wg, rng, monkeypatch):  # noqa: F811
    """With no idle pool every released buffer is destroyed: a recipe must not dispatch with the
    bind groups of its last call's (destroyed) outputs; results stay right."""
    from numr_web.backends.webgpu import device

    monkeypatch.setattr(device, "_POOL_IDLE_BYTES", 0)
    monkeypatch.setattr(device, "HELD_OUTPUT_BYTES", 0)  # no idle buffer kept anywhere, recipes included
    ctx = device.context()
    destroyed = []
    inner = ctx.transport.destroy_buffer
    monkeypatch.setattr(ctx.transport, "destroy_buffer", lambda buf: (destroyed.append(buf), inner(buf)))
    x, dy, w, _ = _arrays(wg, rng, (2, 64, 8, 8), "nchw")
    ref = claims.reference(x, 8, w, w, dy)
    for _ in range(4):
        destroyed.clear()
        xd, dyd, wd = (wg.from_numpy(a) for a in (x, dy, w))
        y, mean, rstd = wg.group_norm_forward(xd, wd, wd, 8, 1e-5, layout="nchw")
        dx, dw, db = wg.group_norm_backward(dyd, xd, mean, rstd, wd, wd, 8, layout="nchw")
        got = claims.named([wg.to_numpy(a) for a in (y, mean, rstd, dx, dw, db)])
        claims.check("webgpu", got, ref, x)
        del y, mean, rstd, dx, dw, db, xd, dyd, wd
        gc.collect()
        assert len(destroyed) >= 9  # the inputs' and outputs' buffers, destroyed rather than pooled


def test_switches_assigned_on_the_launcher_reach_their_modules(wg, rng, monkeypatch):  # noqa: F811
    from numr_web.backends.webgpu import device, group_norm_launch, group_norm_planner
    from numr_web.backends.webgpu import group_norm_shared as shared
    from numr_web.backends.webgpu import group_norm_split_nhwc as split_nhwc

    for name, owner, value in (
        ("PLAN", group_norm_planner, "split"),
        ("SPLIT_PIECE_STEPS", shared, 3),
        ("INLINE_REDO_STEPS", shared, 0),
        ("USE_X8", shared, False),
        ("NHWC_KQ", split_nhwc, 2),
        ("CPU_SPLIT_MAX_GROUP", group_norm_planner, 100),
    ):
        monkeypatch.setattr(group_norm_launch, name, value)
        assert getattr(owner, name) == value and getattr(group_norm_launch, name) == value, name
    monkeypatch.undo()
    assert group_norm_planner.PLAN is None and shared.USE_X8 is True and split_nhwc.NHWC_KQ is None
    # a switch changed between two calls of one signature changes what runs (the recipe's key holds it)
    ctx = device.context()
    x = wg.from_numpy(rng.standard_normal((2, 16, 8, 8)).astype(np.float32))
    seen = []
    inner = ctx.launch

    def spy(kernel, *args, **kwargs):
        seen.append(kernel)
        return inner(kernel, *args, **kwargs)

    class Transport:  # a kept recipe's call submits its prepared dispatches without ctx.launch
        def __getattr__(self, name):
            return getattr(real, name)

        def submit_dispatches(self, dev, prepared):
            (recipe,) = [r for r in ctx.recipes.values() if r._last is not None and r._last[2] is prepared]
            seen.extend(step[0][0] for step in recipe.steps)
            return real.submit_dispatches(dev, prepared)

    real = ctx.transport
    monkeypatch.setattr(ctx, "launch", spy)
    monkeypatch.setattr(ctx, "transport", Transport())
    for plan in ("fused", "split", "thread", "fused"):
        monkeypatch.setattr(group_norm_launch, "PLAN", plan)
        seen.clear()
        wg.group_norm_forward(x, None, None, 4, 1e-5, layout="nchw")
        want = {
            "fused": "group_norm_forward.wgsl",
            "split": "group_norm_split.wgsl",
            "thread": "group_norm_thread.wgsl",
        }
        assert seen and set(seen) == {want[plan]}, (plan, seen)


def test_threads_never_share_an_output_buffer(wg, rng, monkeypatch):  # noqa: F811
    """Kept calls from several threads at once, each thread giving way to the others in the middle of finding
    which held buffers are free (Recipe.outputs): every live output has a buffer of its own, and each thread's
    results are right."""
    import sys
    import threading
    import time

    from numr_web.backends.webgpu import group_norm_launch

    def yielding_count(o):
        time.sleep(0)  # lets another thread run here, as a thread switch at the worst moment would
        return sys.getrefcount(o)  # the sentinel is counted the same way, so the comparison holds

    monkeypatch.setattr(group_norm_launch, "getrefcount", yielding_count)
    G = 8
    x, _, w, (xd, _, wd) = _arrays(wg, rng, (2, 64, 8, 8), "nchw")
    wg.group_norm_forward(xd, wd, wd, G, 1e-5, layout="nchw")  # the recipe made
    before = sys.getswitchinterval()
    kept = [[] for _ in range(4)]

    def calls(out):
        for k in range(60):
            y, mean, rstd = wg.group_norm_forward(xd, wd, wd, G, 1e-5, layout="nchw")
            if k % 2:  # every other call's outputs kept, the others dropped (their buffers free again)
                out.append((y, mean, rstd))

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=calls, args=(out,)) for out in kept]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(before)
    live = [a for out in kept for trio in out for a in trio]
    assert len(live) == 4 * 30 * 3
    assert len({id(a._storage.buffer) for a in live}) == len(live)
    ref = claims.reference(x, G, w, w)
    for y, mean, rstd in (trio for out in kept for trio in out[::10]):
        claims.check("webgpu", claims.named([wg.to_numpy(a) for a in (y, mean, rstd)]), ref, x)

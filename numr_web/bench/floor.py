"""A second yardstick for WebGPU GroupNorm: the floor of the thread plan's shape.

A copy reads x once.  GroupNorm cannot: a group's output needs the group's
sums, so every kernel reads x (and, backward, dy) twice, the second time from
cache where a group fits there.  ``numr-web bench --floor`` (and
``scripts/browser-bench --floor``) time, in the same interleaved rounds as the
op and the copies, the kernels of ``kernels/wgsl/floor.wgsl``: one invocation
per NCHW (n, g) group, as the thread plan runs, with plain running sums and
nothing else (no shifted or blocked sums, no redo, no weights, no statistics
stored).  ``floor_fwd`` sums x and x*x, then writes x * a + b; ``floor_bwd``
sums dy and dy*x, then writes dy * a + x * b + c.  Each has the storage
conversions of the dtype (float16 and bfloat16 unpacked and packed as the op
does, 8 elements per 16-byte load where a group holds a multiple of 8, as the
split plan loads them).  Their throughput over the copy's says how near to a copy any kernel of
that shape gets on the adapter; the op's over theirs, how much the op's
numerics and launches cost on top.  They compute no GroupNorm: nothing reads
their output.

Channels-last (``layout="nhwc"``): a group is a strided slab (cpg adjacent channels of every
position), and the least work has more than one shape, so there are several forms, and whichever a
few timed calls at setup find faster is the floor (none wins everywhere):

* a window (``floor_nhwc.wgsl``): one invocation walks a window of whole groups and whole channel
  quads of one sample (at least 16 channels where C allows) down its rows twice: per-channel plain
  sums (per group where a group is whole quads), folded into the groups, then the output; 16-bit
  storage also with quads in pairs (16 bytes a load, as the channels-last split plan loads them) in
  windows doubled where that makes their quads even.  Suits lavapipe.
* the split plan's shape (``floor_nhwc_split.wgsl``, its cut the op's own ``NhwcSplitPlan``): many
  short threads, each KQ quads over a tile of positions, writing per-channel partial sums; one thread
  per group adds them; the tile again for the output.  Suits SwiftShader, which ran the op up to 2.7
  times as fast as the window form.

``form_name`` says which form a callable runs (the bench rows' ``floor_forms``).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

#: the timed callables' names, in the order they are timed
NAMES = ("floor_fwd", "floor_bwd")
#: groups per workgroup (one per invocation), as the thread plan runs them
FLOOR_WG = 8


def _check(x, dy, groups, dense_only=False):
    """(groups, elements of a group) of an NCHW call; with ``dense_only`` only the checks every
    layout shares (WebGPU arrays, one shape and dtype, one binding)."""
    from numr_web.backends.webgpu.array import WebGPUArray
    from numr_web.backends.webgpu.group_norm_launch import STEP_CAP

    for name, a in (("x", x), ("dy", dy)):
        if not isinstance(a, WebGPUArray):
            raise TypeError(f"{name}: expected a WebGPU array, got {type(a).__name__}")
    if x.shape != dy.shape or x.dtype != dy.dtype:
        raise ValueError(f"x, dy: expected one shape and dtype, got {x.shape} {x.dtype} and {dy.shape} {dy.dtype}")
    if dense_only:
        if x.nbytes > x.ctx.max_binding:
            raise ValueError(f"x: {x.nbytes} bytes, past this adapter's binding limit ({x.ctx.max_binding})")
        return None
    if len(x.shape) < 3 or not (x.is_c_contiguous and dy.is_c_contiguous):
        raise ValueError(f"x: the floor kernels take C-ordered (NCHW) arrays of 3 or more dimensions, got {x.shape}")
    n, c = x.shape[:2]
    hw = x.size // max(n * c, 1)
    if not (isinstance(groups, int) and groups > 0 and c % groups == 0):
        raise ValueError(f"groups: expected a positive divisor of C={c}, got {groups!r}")
    m = c // groups * hw
    if hw % 4 or m == 0:
        raise ValueError(f"x: the floor kernels step 4 elements at a time: H*W={hw} must be a positive multiple of 4")
    if m // 4 > STEP_CAP:
        raise ValueError(
            f"x: a group of {m} elements is longer than one invocation may walk ({4 * STEP_CAP}: lavapipe's loop limit)"
        )
    if x.nbytes > x.ctx.max_binding:
        raise ValueError(f"x: {x.nbytes} bytes, past this adapter's binding limit ({x.ctx.max_binding})")
    return n * groups, m


#: lavapipe ends an invocation after 65535 loop back-edges in all: a channels-last floor invocation
#: walks its rows twice, each row's quads in an inner loop
_NHWC_BACK_EDGES = 60000


def _check_nhwc(x, dy, groups, pairs=False):
    """(windows, quads a window, elements of a group, quads in pairs) of a channels-last call: a window is whole
    groups and whole quads (a multiple of cpg and of 4 channels), doubled up to 16 channels where C
    allows (a lane then reads at least 64 contiguous bytes of a row, as the split plan's threads do);
    with ``pairs`` (16-bit storage) doubled once more where that makes its quads even, so that they
    load in pairs."""
    import math

    from numr_web.memory_layout import channels_last_perm, memory_order

    for name, a in (("x", x), ("dy", dy)):
        if len(a.shape) < 3 or memory_order(a.shape, a.strides) != channels_last_perm(len(a.shape)):
            raise ValueError(f"{name}: the channels-last floor takes channels-last arrays of 3 or more dimensions")
    n, c = x.shape[:2]
    hw = x.size // max(n * c, 1)
    if not (isinstance(groups, int) and groups > 0 and c % groups == 0):
        raise ValueError(f"groups: expected a positive divisor of C={c}, got {groups!r}")
    cpg = c // groups
    if c % 4 or hw == 0:
        raise ValueError(f"x: the channels-last floor reads whole channel quads: C={c} must be a multiple of 4")
    window = cpg * 4 // math.gcd(cpg, 4)
    while window < 16 and c % (2 * window) == 0:
        window *= 2
    if pairs and window % 8 and c % (2 * window) == 0:  # an even number of quads: 16-bit loads in pairs
        window *= 2
    q = window // 4
    u8 = pairs and q % 2 == 0  # then C % 8 == 0 too (a window divides C)
    if 2 * hw * (q // (2 if u8 else 1) + 1) > _NHWC_BACK_EDGES:
        raise ValueError(
            f"x: {hw} positions of {q} channel quads are more than one invocation may walk twice "
            f"(lavapipe stops an invocation after 65535 loop iterations)"
        )
    return n * c // window, q, cpg * hw, u8


def timed_callables(x, dy, groups, layout="nchw", *, split=True) -> dict:
    """``{name: callable}`` for ``NAMES`` on the WebGPU arrays x and dy, one dtype; each call
    returns its output array.  ``layout="nchw"``: C-ordered arrays, H*W a multiple of 4, groups
    within lavapipe's loop limit (``floor.wgsl``); ``"nhwc"``: channels-last arrays with C a
    multiple of 4, blocks of whole channel quads (``floor_nhwc.wgsl``) or the split plan's cut
    (``floor_nhwc_split.wgsl``), the faster at setup; ``split=False`` leaves the split form out (one dispatch
    a call: ``numr_web.bench.webgpu_host``'s floor is the host work of the least call, not of the fastest)."""
    from numr_web.backends.webgpu import array_kernels
    from numr_web.backends.webgpu.device import Scratch, grid
    from numr_web.backends.webgpu.group_norm_launch import X8_KEYS

    if layout not in ("nchw", "nhwc"):
        raise ValueError(f"layout: expected 'nchw' or 'nhwc', got {layout!r}")
    if layout == "nhwc":
        _check(x, dy, groups, dense_only=True)
        key = x.ctx.dtype_key(x.dtype.name)
        forms = [_nhwc_form(x, dy, groups, key, False)]
        if key in X8_KEYS:  # 16-bit: quads in pairs, 16 bytes a load, as the channels-last split plan loads them
            paired = _nhwc_form(x, dy, groups, key, True)
            if paired is not None and paired != forms[0]:
                forms.append(paired)
        split_form = _nhwc_split_form(x, groups, key) if split else None
        if split_form is not None:
            forms.append(split_form)
    else:
        ngroups, m = _check(x, dy, groups)
        key = x.ctx.dtype_key(x.dtype.name)
        u8 = key in X8_KEYS and m % 8 == 0  # 16-bit: 8 elements (16 bytes) per load, as the split plan
        params = struct.pack("<2If4x", ngroups, m // (8 if u8 else 4), 1.0 / m)
        consts = {"WG": FLOOR_WG, "U8": u8}
        forms = [_one_pass("groups", "floor.wgsl", consts, X8_KEYS[key] if u8 else key, params, ngroups)]
    ctx = x.ctx
    out = array_kernels.empty_like(x)

    def call(form, direction, arrays):
        # the least any call can do: its pipelines, parameters and bind groups made once, each call one
        # transport call that records the dispatches and submits them (as a kept GroupNorm recipe's call)
        held = ctx.params_buffer(form.params)
        binds = [(a.buffer, 0, min(a.buffer.size, ctx.max_binding)) for a in arrays]
        binds.append((held.buffer, 0, held.size))
        scratch = [Scratch(ctx, nbytes) for nbytes in form.scratch]
        binds += [(s.buffer, 0, min(s.size, ctx.max_binding)) for s in scratch]
        steps = []
        for entry, count in form.launches[direction]:
            pipe = ctx.pipeline(form.kernel, entry, {"X": form.key, "DY": form.key, "OUT": form.key}, form.consts)
            steps.append((pipe, ctx.bind_group(pipe, binds), grid(-(-count // form.consts["WG"]))))
        prepared = ctx.transport.prepare_dispatches(ctx.dev, steps)

        def run():
            ctx.transport.submit_dispatches(ctx.dev, prepared)
            return out

        run.arrays = arrays  # held by the call: a freed array's buffer goes back to the pool for reuse
        run.held = (held, scratch)
        run.form = form.consts
        run.form_name = form.name
        return run

    # the forward binds x as DY too (it reads only X)
    fns = {}
    for name, arrays in (("floor_fwd", (x, x, out)), ("floor_bwd", (x, dy, out))):
        runs = [call(form, name, arrays) for form in forms]
        fns[name] = runs[0] if len(runs) == 1 else _fastest(runs)
    return fns


class Form(NamedTuple):
    """One shape of a floor kernel: its name (``form_name``), WGSL file, constants, storage key and parameter
    block; per direction (``floor_fwd``, ``floor_bwd``) its dispatches, ``(entry, invocations)`` each; the scratch
    buffers it binds after the parameters (bytes each)."""

    name: str
    kernel: str
    consts: dict
    key: str
    params: bytes
    launches: dict
    scratch: tuple = ()


def _one_pass(name, kernel, consts, key, params, count):
    """A form of one dispatch per direction (``floor_forward`` / ``floor_backward``) of ``count`` invocations."""
    launches = {"floor_fwd": [("floor_forward", count)], "floor_bwd": [("floor_backward", count)]}
    return Form(name, kernel, consts, key, params, launches)


def _nhwc_form(x, dy, groups, key, pairs):
    """(kernel, constants, storage key, parameters, invocations) of the channels-last floor, or None
    where ``pairs`` asks for a window that one invocation may not walk."""
    from numr_web.backends.webgpu.group_norm_launch import X8_KEYS

    try:
        windows, q, m, u8 = _check_nhwc(x, dy, groups, pairs=pairs)
    except ValueError:
        if pairs:
            return None
        raise
    n, c = x.shape[:2]
    hw = x.size // max(n * c, 1)
    cpg = c // groups
    qg = cpg // 4 if cpg % 4 == 0 else 0  # a group of whole quads: one running sum per group (fewer live values)
    params = struct.pack("<5If12x", windows, hw, c // 4, c // (4 * q), cpg, 1.0 / m)
    consts = {"WG": FLOOR_WG, "Q": q, "U8": u8, "QG": qg}
    name = "window, pairs" if u8 else "window"
    return _one_pass(name, "floor_nhwc.wgsl", consts, X8_KEYS[key] if u8 else key, params, windows)


def _nhwc_split_form(x, groups, key):
    """The channels-last floor in the split plan's work shape (``floor_nhwc_split.wgsl``: many short threads,
    partials, a combine per group, the output), its cut the op's own (``NhwcSplitPlan``), or None where the
    split plan cannot cut this shape."""
    from numr_web.backends.webgpu.group_norm_shared import GroupPlan, x8_key
    from numr_web.backends.webgpu.group_norm_split_nhwc import NhwcSplitPlan

    ctx = x.ctx
    plan = GroupPlan(x, groups, "nhwc", ctx.cpu_adapter)
    try:
        sp = NhwcSplitPlan(plan, ctx.cpu_adapter)
    except ValueError:
        return None
    n, c = x.shape[:2]
    threads = n * sp.P * sp.A
    ngroups = n * groups
    key8 = x8_key(key, sp.KQ % 2 == 0)  # quads in pairs (16 bytes a load), as the split plan loads them
    params = struct.pack(
        "<9If8x", threads, plan.HW, c // 4, sp.A, sp.P, sp.tile, plan.channels_per_group, groups, ngroups, 1.0 / plan.M
    )
    consts = {"WG": sp.wg, "KQ": sp.KQ, "U8": key8 != key}
    launches = {
        f"floor_{d}": [(f"{d}_partials", threads), (f"{d}_combine", ngroups), (f"{d}_apply", threads)]
        for d in ("fwd", "bwd")
    }
    scratch = (n * sp.P * (c // 4) * 32, ngroups * 8)  # two vec4 per (n, tile, quad); a vec2 per group
    return Form("split", "floor_nhwc_split.wgsl", consts, key8, params, launches, scratch)


#: calls each candidate form of a floor kernel is timed for at setup (after two untimed ones)
PICK_CALLS = 5


def _fastest(runs):
    """The run whose call-and-wait took least (median of ``PICK_CALLS``): where the least work has more
    than one shape (channels-last 16-bit: quads one at a time or in pairs, in windows twice as wide),
    which one wins depends on the dtype and the adapter (lavapipe, bfloat16 at 2x320x64x64 backward:
    25 ms one at a time, 46 ms in pairs; float16 43 ms and 27 ms)."""
    import statistics
    import time

    from numr_web.bench.timing import read_back_small

    def median_s(run):  # timed as the benches time a call: then a 4-byte read-back of its output
        for _ in range(2):
            read_back_small(run())
        times = []
        for _ in range(PICK_CALLS):
            t0 = time.perf_counter()
            read_back_small(run())
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return min(runs, key=median_s)


def form_name(run) -> str:
    """Which form a floor callable runs: ``"groups"`` (NCHW, an invocation per group), ``"window"`` or
    ``"window, pairs"`` (channels-last, a window of groups walked down the rows, 16-bit quads one at a time or in
    pairs), ``"split"`` (channels-last, the split plan's shape)."""
    return run.form_name


def row_fields(samples: dict, row: dict) -> dict:
    """The bench row's floor fields from the rounds' samples (seconds): each kernel's ms, its
    throughput over the copy's (``floor_fwd_of_copy``, ``floor_bwd_of_copy``; the op's bytes, so
    comparable with ``fwd_of_copy``) and the op's throughput over the floor's (``fwd_of_floor``,
    ``bwd_of_floor``), medians of per-round ratios."""
    import statistics

    from numr_web.bench.timing import median_throughput_ratio

    out = {}
    for kind in ("fwd", "bwd"):
        name, moved = f"floor_{kind}", row[f"{kind}_bytes"]
        out[f"{name}_ms"] = statistics.median(samples[name]) * 1e3
        out[f"{name}_of_copy"] = median_throughput_ratio(samples, name, moved, "copy", row["copy_bytes"])
        out[f"{kind}_of_floor"] = median_throughput_ratio(samples, kind, moved, name, moved)
    return out

"""GroupNorm launches: which WGSL variant, how the work is cut, chunking."""

from __future__ import annotations

import math
import os
import struct
from functools import lru_cache

from numr_web.backends.webgpu import array_kernels
from numr_web.backends.webgpu.array import WebGPUArray, as_dtype
from numr_web.backends.webgpu.device import OFFSET_ALIGN, Scratch, round_up
from numr_web.numerics import eps_as_float32

WG = 64  # threads per (n, g) workgroup
F32 = as_dtype("float32")


def pack_params(plan, a, p, items, steps, x_base, g_first, ngroups, eps=0.0, workspace=None) -> bytes:
    """The kernels' parameter block (``struct Params``, group_norm_common.wgsl): the shape facts
    of ``plan`` (a GroupPlan), the cut (A, P, items, steps), the chunk and eps, 1 / M and the
    backward's workspace offsets."""
    return struct.pack(
        "<12I2f2I",
        plan.C,
        plan.HW,
        plan.G,
        plan.channels_per_group,
        a,
        p,
        items,
        steps,
        x_base,
        g_first,
        ngroups,
        plan.M,
        float(eps),
        1.0 / plan.M if plan.M else 0.0,
        *(workspace.offsets if workspace else (0, 0)),
    )


@lru_cache(maxsize=1024)
def plan_pieces(a_count: int, steps: int, wg: int = WG) -> int:
    """Pieces per row so that a_count * P items spread evenly over ``wg`` threads.

    Cost of the busiest thread: (items it walks) * (setup) + (steps it walks).
    """
    best, best_p = None, 1
    for p in range(1, max(1, min(steps, 1024)) + 1):
        items = a_count * p
        rounds = -(-items // wg)
        cost = rounds * (-(-steps // p) + 4)
        if best is None or cost < best:
            best, best_p = cost, p
    return best_p


#: lavapipe (llvmpipe's gallivm) ends a shader invocation's loops after 65535
#: back-edges in all (a watchdog against endless loops): an invocation of the
#: GroupNorm kernels runs each of its steps 2 to 3 times (statistics, apply;
#: backward: two sweeps), so one thread takes at most this many steps.
STEP_CAP = 12000


@lru_cache(maxsize=1024)
def plan_pieces_cpu(a_count: int, steps: int, simd: int = 8, max_wg: int = 256):
    """(pieces, workgroup size) for adapters that run a workgroup's SIMD batches one after another
    on one CPU core (lavapipe, SwiftShader).

    Measured on lavapipe: long contiguous runs per thread beat more threads, and a
    batch with idle lanes costs as much as a full one.  So: one item per thread,
    the item count a multiple of the SIMD width where possible, pieces as long
    as that allows (and short enough for lavapipe's loop limit).
    Cost = batches * (steps per piece + setup).
    """
    best, best_p = None, None
    hi = max(1, min(steps, max(max_wg // a_count, -(-steps // STEP_CAP) * 4, 1)))
    for p in range(1, hi + 1):
        items = a_count * p
        wg = min(max_wg, max(simd, -(-items // simd) * simd))
        per_thread = -(-items // wg) * -(-steps // p)
        if per_thread > STEP_CAP:
            continue
        cost = -(-items // simd) * (-(-steps // p) + 4)
        if best is None or cost < best * 0.97:
            best, best_p = cost, p
    if best_p is None:
        raise ValueError(
            f"x: a group of {a_count} x {steps} steps is more than one workgroup may loop over on this "
            f"software adapter (lavapipe stops an invocation after 65535 loop iterations); "
            f"use more groups, a smaller input, or the cpu device"
        )
    wg = min(max_wg, max(simd, -(-(a_count * best_p) // simd) * simd))
    return best_p, wg


class GroupPlan:
    """Shape facts of one call."""

    def __init__(self, x: WebGPUArray, num_groups: int, layout: str, cpu_adapter: bool = False):
        self.N, self.C = x.shape[:2]
        self.HW = math.prod(x.shape[2:])
        self.G = num_groups
        self.channels_per_group = self.C // num_groups
        self.M = self.channels_per_group * self.HW
        self.nhwc = layout == "nhwc"
        quads = self.channels_per_group % 4 == 0 if self.nhwc else self.HW % 4 == 0
        self.vec = 4 if quads else 1
        self.fused = self.vec == 4
        self.A = self.channels_per_group // 4 if (self.nhwc and self.vec == 4) else self.channels_per_group
        self.steps = self.HW if self.nhwc else self.HW // self.vec
        if self.A == 0 or self.steps == 0:  # no elements (C = 0 or no spatial extent): nothing is launched
            self.P, self.wg = 1, WG
        elif cpu_adapter:
            self.P, self.wg = plan_pieces_cpu(self.A, self.steps)
        else:
            self.P, self.wg = plan_pieces(self.A, self.steps), WG
        self.items = self.A * self.P
        self.isz = x.itemsize

    def chunks(self, max_binding, part_bytes_per_group=0):
        """Ranges of whole groups (NCHW) or samples (channels-last), each within one binding.

        Yields (g_first, ngroups, byte_offset, byte_size, x_base, count).  Every
        chunk starts at a multiple of 4 elements; binding offsets are 256-aligned.
        """
        unit_elems = self.HW * self.C if self.nhwc else self.M
        per_unit_groups = self.G if self.nhwc else 1
        total_units = self.N if self.nhwc else self.N * self.G
        unit_bytes = unit_elems * self.isz
        total = total_units * unit_bytes
        part_unit = part_bytes_per_group * per_unit_groups
        if total <= max_binding and part_unit * total_units <= max_binding:
            yield 0, total_units * per_unit_groups, 0, round_up(total, 16), 0, total_units * unit_elems
            return
        k0 = 4 // math.gcd(unit_elems, 4)
        per = (max_binding - OFFSET_ALIGN - 16) // max(unit_bytes, 1)
        if part_unit:
            per = min(per, max_binding // part_unit)
        per = per // k0 * k0
        if per < 1:
            what = "sample (channels-last)" if self.nhwc else "group"
            raise ValueError(
                f"x: one {what} holds {unit_bytes} bytes, more than this adapter binds at once "
                f"(maxStorageBufferBindingSize {max_binding}); use fewer elements per group or the cpu/cuda device"
            )
        u0 = 0
        while u0 < total_units:
            u1 = min(total_units, u0 + per)
            start = u0 * unit_bytes
            off = start // OFFSET_ALIGN * OFFSET_ALIGN
            size = round_up(u1 * unit_bytes, 16) - off
            yield (
                u0 * per_unit_groups,
                (u1 - u0) * per_unit_groups,
                off,
                size,
                (start - off) // self.isz,
                (u1 - u0) * unit_elems,
            )
            u0 = u1

    def params(self, x_base, g_first, ngroups, eps=0.0, workspace=None):
        return pack_params(self, self.A, self.P, self.items, self.steps, x_base, g_first, ngroups, eps, workspace)

    def flat_params(self, x_base, g_first, count):
        return struct.pack(
            "<8I", self.C, self.HW, self.G, self.channels_per_group, x_base, g_first // self.G, g_first, count
        )

    def constants(self, apply, silu, affine):
        return {"NHWC": self.nhwc, "VEC": self.vec, "APPLY": apply, "SILU": silu, "AFFINE": affine, "WG": self.wg}


#: Which work plan NCHW GroupNorm uses: "auto" (the planner below), "fused" (one workgroup per
#: (n, g): statistics and output together) or "split" (barrier-free partials, combine, apply:
#: group_norm_split*.wgsl).  None: the environment variable NUMR_WEB_WEBGPU_PLAN, read per call.
PLAN = None
#: Tests: the longest piece of a row (vec4 steps) the split plan may use (None: the planner's),
#: so that tiny shapes still cut a group into many pieces.
SPLIT_PIECE_STEPS = None
PLANS = ("auto", "fused", "split", "thread")
#: groups of at most this many vec4s are summed again inside the split plan's combine thread
INLINE_REDO_STEPS = STEP_CAP // 2

#: auto on GPU adapters: split when the fused plan's N * G workgroups would underfill the device
#: (fewer than this many; about 2 workgroups per core of a large GPU) and groups are large.
GPU_SPLIT_BELOW_GROUPS = 256
GPU_SPLIT_MIN_GROUP = 16384
#: auto on CPU adapters (lavapipe, SwiftShader): split for groups of at most this many elements
#: (small groups pay the fused plan's per-group fixed costs) when there are many groups or much
#: data (the split plan's extra dispatches cost about 0.3 ms each on lavapipe); measured on
#: lavapipe, see docs/webgpu.md.  Larger groups read x twice from memory under split but once
#: (the second sweep from cache) under fused.
CPU_SPLIT_MAX_GROUP = 4096
CPU_SPLIT_MIN_GROUPS = 512
CPU_SPLIT_MIN_ELEMENTS = 1 << 18
#: the split plan on CPU adapters: vec4 steps a thread walks in a pass, threads per workgroup
CPU_PIECE_STEPS = 1024
CPU_SPLIT_WG = 16


def plan_name() -> str:
    name = PLAN if PLAN is not None else os.environ.get("NUMR_WEB_WEBGPU_PLAN", "auto")
    name = (name or "auto").strip().lower()
    if name not in PLANS:
        raise ValueError(f"NUMR_WEB_WEBGPU_PLAN={name!r}: expected one of {', '.join(PLANS)}")
    return name


#: the "thread" plan (group_norm_thread*.wgsl): one invocation per (n, g), this many groups per
#: workgroup (a SIMD batch of 8 lanes on lavapipe)
THREAD_WG = 8
#: auto on CPU adapters: the thread plan for NCHW groups of at most THREAD_MAX_GROUP_BYTES (float32:
#: 24576 elements; 16-bit storage: 49152, in 8-element steps, so only rows of HW % 8 == 0) when a
#: sample has at least THREAD_MIN_GROUPS of them (fewer leave SIMD lanes idle).  The rule looks at
#: G, not N * G, so that a sample's results do not depend on the batch it came in (the plans sum in
#: different orders: the last bit may differ).  Side by side with the other plans
#: (scripts/webgpu-plans on lavapipe, scripts/browser-bench --plans on SwiftShader; docs/webgpu.md):
#: float32, on SwiftShader the fastest forward on every bench shape (0.62 to 0.80 of a copy against
#: fused 0.28 to 0.65); on lavapipe the fastest for many small groups (16x1280x8x8: 0.71 to 0.73 of
#: the fused plan's time), within 7% of fused up to 20480 elements, and slower at 40960 (8 lanes'
#: groups no longer in cache for the second sweep: hence a limit in bytes).  16-bit, against the
#: split plan's 8-element loads: on lavapipe 0.74 to 1.01 of its time (even at 2x320x64x64, faster
#: on the other bench shapes), on SwiftShader ahead for many small groups and even elsewhere.
THREAD_MIN_GROUPS = 8
THREAD_MAX_GROUP_BYTES = 24576 * 4


def use_thread(plan: GroupPlan, ctx) -> bool:
    """Whether this call runs the thread plan: NCHW rows of HW % 4 == 0 whose group one
    invocation can walk two or three times within lavapipe's loop watchdog (M / 4 <= STEP_CAP);
    ``auto`` takes it on CPU adapters for groups of at most THREAD_MAX_GROUP_BYTES with enough
    groups per sample (16-bit storage: rows of HW % 8 == 0, loaded 8 elements at a time), never on
    GPUs (one invocation per group leaves a GPU idle)."""
    if plan.nhwc or plan.vec != 4 or plan.N * plan.G == 0 or plan.M == 0 or plan.M // 4 > STEP_CAP:
        return False
    name = plan_name()
    if name != "auto":
        return name == "thread"
    wide = plan.isz == 4 or (plan.HW % 8 == 0 and USE_X8)
    return ctx.cpu_adapter and wide and plan.M * plan.isz <= THREAD_MAX_GROUP_BYTES and plan.G >= THREAD_MIN_GROUPS


def _whole_group_kernel(plan: GroupPlan, thread: bool, backward: bool, silu, affine, key):
    """(kernel, constants, groups per workgroup, storage key) of the kernels that take whole (n, g)
    groups and share one binding list: the thread plan's (THREAD_WG groups per workgroup, one per
    invocation; 16-bit storage with HW % 8 == 0 in 16-byte units, 8 elements a step: the same sums
    in the same order as 4-element steps) or the fused plan's (a workgroup per group)."""
    if thread:
        kernel = "group_norm_thread_backward.wgsl" if backward else "group_norm_thread.wgsl"
        x8 = _x8_key(key, plan.HW % 8 == 0)
        consts = {"NHWC": False, "VEC": 4, "APPLY": True, "SILU": silu, "AFFINE": affine, "WG": THREAD_WG}
        return kernel, {**consts, "U8": x8 != key}, THREAD_WG, x8
    kernel = "group_norm_backward.wgsl" if backward else "group_norm_forward.wgsl"
    return kernel, plan.constants(plan.fused, silu, affine), 1, key


def _use_split_nhwc(plan: GroupPlan, ctx) -> bool:
    """Channels-last (C % 4 == 0: whole channel quads per row): ``auto`` splits on every adapter.
    lavapipe: 1.5 to 3 times the fused plan's throughput on the bench shapes, forward and
    backward (docs/webgpu.md); GPUs: one quad per thread, neighbours reading neighbouring
    16 bytes, every group spread over many workgroups (not measured on a GPU here)."""
    if plan.C % 4 or plan_name() == "fused":
        return False
    try:
        NhwcSplitPlan(plan, ctx.cpu_adapter)
    except ValueError:
        return False
    return True


def use_split(plan: GroupPlan, ctx, backward: bool = False) -> bool:
    """Whether this call runs the split plan (only NCHW rows of HW % 4 == 0 can, and only groups
    whose pieces fit the loop limit: others run the fused plan whatever was asked)."""
    if plan.N * plan.G == 0 or plan.M == 0:
        return False
    if plan.nhwc:
        return _use_split_nhwc(plan, ctx)
    if plan.vec != 4:
        return False
    if plan.channels_per_group > STEP_CAP // 2:  # the combine thread walks every row of its group
        return False
    name = plan_name()
    if name != "auto":
        want = name == "split"
    elif ctx.cpu_adapter:
        many = plan.N * plan.G >= CPU_SPLIT_MIN_GROUPS or plan.N * plan.G * plan.M >= CPU_SPLIT_MIN_ELEMENTS
        # 16-bit storage in 8-element steps (HW % 8 == 0): split for groups of every size (lavapipe:
        # 1.1 to 1.6 times the fused plan's throughput on the bench shapes, see docs/webgpu.md)
        x8 = plan.isz == 2 and plan.HW % 8 == 0 and USE_X8
        want = (plan.M <= CPU_SPLIT_MAX_GROUP or x8) and many
    else:
        want = plan.N * plan.G < GPU_SPLIT_BELOW_GROUPS and plan.M >= GPU_SPLIT_MIN_GROUP
    if not want:
        return False
    try:  # pieces within the loop limit (huge groups may not have them: they run fused)
        SplitPlan(plan, ctx.cpu_adapter)
    except ValueError:
        return False
    return True


class SplitPlan:
    """The split plan's cut: rows ((n, c), ``steps`` vec4s) in P pieces, A pieces per partials
    thread, ``run`` vec4s per apply thread, workgroups of ``wg``.

    CPU adapters run a workgroup's SIMD batches one after another on one core and like long
    contiguous runs per thread: pieces up to ``target`` steps, a thread walks whole pieces (of
    several rows or groups when rows are short) for about ``target`` steps.  GPUs get short
    interleaved pieces (INTERLEAVE: piece k of a row takes steps k, k + P, ..., so that
    neighbouring threads read neighbouring vec4s), many threads, and one vec4 per thread in
    the elementwise pass.  Every thread stays within lavapipe's loop limit (STEP_CAP)."""

    def __init__(self, plan: GroupPlan, cpu_adapter: bool, wg: int = WG, unit: int = 4):
        self.plan = plan
        self.interleave = not cpu_adapter
        #: elements per step: 4 (a vec4), or 8 (16-bit storage in 16-byte units, HW % 8 == 0)
        self.unit = unit
        self.steps = plan.HW // unit
        target = CPU_PIECE_STEPS if cpu_adapter else 16
        # enough threads for every core: about 8 per core of a 16-core host; a GPU's many more
        rows = plan.N * plan.C
        want_threads = 128 if cpu_adapter else 1 << 16
        total = rows * self.steps
        target = max(8, min(target, -(-total // want_threads)))
        if SPLIT_PIECE_STEPS is not None:
            target = max(1, min(target, SPLIT_PIECE_STEPS))
        P = max(1, -(-self.steps // target))
        # the combine thread walks Cg * P pieces: keep that within the loop limit too
        P = max(1, min(P, STEP_CAP // (2 * max(plan.channels_per_group, 1))))
        seg = -(-self.steps // P)
        self.P = P
        self.A = max(1, min(max(target, seg) // seg, STEP_CAP // (2 * seg)))
        self.run = max(1, min(target, STEP_CAP // 2))
        self.wg = wg if not cpu_adapter else CPU_SPLIT_WG
        if seg * self.A > STEP_CAP or plan.channels_per_group * P > STEP_CAP:
            raise ValueError(
                f"x: a group of {plan.channels_per_group} rows x {self.steps} steps cannot be split within the "
                f"software adapter's loop limit; use the fused plan (NUMR_WEB_WEBGPU_PLAN=fused)"
            )

    def params(self, per_thread, x_base, g_first, ngroups, eps=0.0, workspace=None):
        plan = self.plan
        items = ngroups * plan.channels_per_group * self.P
        return pack_params(plan, per_thread, self.P, items, self.steps, x_base, g_first, ngroups, eps, workspace)

    def constants(self, silu, affine, **flags):
        return {
            "NHWC": False,
            "VEC": 4,
            "SILU": silu,
            "AFFINE": affine,
            "WG": self.wg,
            "INTERLEAVE": self.interleave,
            "U8": self.unit == 8,
            **flags,
        }

    def threads_partials(self, ngroups):
        return -(-(ngroups * self.plan.channels_per_group * self.P) // self.A)

    def threads_apply(self, ngroups):
        units = ngroups * self.plan.M // self.unit
        return units if self.interleave else -(-units // self.run)

    def workgroups(self, threads):
        return max(1, -(-threads // self.wg))

    def grids(self, ngroups):
        """Workgroup counts of partials, combine and the elementwise pass (apply, dx)."""
        partials, apply = self.threads_partials(ngroups), self.threads_apply(ngroups)
        return self.workgroups(partials), self.workgroups(ngroups), self.workgroups(apply)

    def pass_params(self, x_base, g_first, ngroups, eps=0.0, workspace=None):
        """Parameter blocks of partials, combine and the elementwise pass (their A: pieces,
        one group, steps per thread)."""
        return [self.params(per, x_base, g_first, ngroups, eps, workspace) for per in (self.A, 1, self.run)]


def _chunk_binds(ctx, off, size, arrays, affine_binds, whole):
    """A split kernel's bindings: the chunk's byte range [off, off + size) of each of ``arrays``
    (x, then y or dy and dx), the affine parameters, then each of ``whole`` bound whole."""
    return [*((a.buffer, off, size) for a in arrays), *affine_binds, *(_whole(ctx, b) for b in whole)]


def _split_passes(ctx, kernel, last, dt, binds, rounds, final, grids, params):
    """One chunk's split passes: partials then combine under each constants dict of ``rounds``
    (FIX or REFINE passes), then ``last`` (apply or dx) under ``final``.  ``grids`` and
    ``params``: the workgroup counts and parameter blocks of partials, combine and ``last``."""
    for consts in rounds:
        ctx.launch(kernel, "partials", dt, consts, binds, grids[0], params[0])
        ctx.launch(kernel, "combine", dt, consts, binds, grids[1], params[1])
    ctx.launch(kernel, last, dt, final, binds, grids[2], params[2])


def _forward_rounds(sp, silu, affine, inline):
    """(rounds, final) of a split forward: the partials-and-combine rounds' constants (a FIX
    round after the first where second sums do not run inline) and apply's."""
    rounds = [
        sp.constants(silu, affine, FIX=fix, INLINE_REDO=inline) for fix in ((False,) if inline else (False, True))
    ]
    return rounds, sp.constants(silu, affine, FIX=False, INLINE_REDO=inline)


def _backward_rounds(sp, silu, use_w):
    """(rounds, final) of a split backward: a REFINE round first with SILU, then the sums; dx's."""
    rounds = [sp.constants(silu, use_w, REFINE=refine) for refine in ((True, False) if silu else (False,))]
    return rounds, sp.constants(silu, use_w, REFINE=False)


def _split_nchw(ctx, plan, key):
    """(SplitPlan, storage key): 16-bit storage with HW % 8 == 0 steps 8 elements at a time."""
    x8 = _x8_key(key, plan.HW % 8 == 0)
    return SplitPlan(plan, ctx.cpu_adapter, unit=8 if x8 != key else 4), x8


def _forward_split(ctx, x, y, mean, rstd, plan, affine_binds, eps, silu, affine, key):
    sp, key = _split_nchw(ctx, plan, key)
    aux = Scratch(ctx, plan.N * plan.G * 16)
    part_per_group = plan.channels_per_group * sp.P * 8
    dt = {"X": key, "Y": key}
    # a group that needs a second sum is summed again by its combine thread when that stays
    # within the loop limit (no FIX passes: two dispatches fewer); larger ones get the FIX passes
    inline = plan.M // 4 <= INLINE_REDO_STEPS
    for g_first, ngroups, off, size, x_base, _count in plan.chunks(ctx.max_binding, part_per_group):
        part = Scratch(ctx, ngroups * part_per_group)
        binds = _chunk_binds(ctx, off, size, (x, y), affine_binds, (mean, rstd, aux, part))
        _split_passes(
            ctx,
            "group_norm_split.wgsl",
            "apply",
            dt,
            binds,
            *_forward_rounds(sp, silu, affine, inline),
            sp.grids(ngroups),
            sp.pass_params(x_base, g_first, ngroups, eps),
        )


def _backward_split(ctx, x, dy, dx, mean, rstd, plan, affine_binds, silu, use_w, key):
    sp, key = _split_nchw(ctx, plan, key)
    ws = Workspace(ctx, plan, plan.channels_per_group * sp.P * 16)
    dt = {"X": key, "DY": key, "DX": key}
    for g_first, ngroups, off, size, x_base, _count in ws.chunks:
        binds = _chunk_binds(ctx, off, size, (x, dy, dx), affine_binds, (mean, rstd, ws.scratch))
        _split_passes(
            ctx,
            "group_norm_split_backward.wgsl",
            "dx",
            dt,
            binds,
            *_backward_rounds(sp, silu, use_w),
            sp.grids(ngroups),
            sp.pass_params(x_base, g_first, ngroups, workspace=ws),
        )
    return ws


#: channels-last split plan: quads a thread owns side by side (None: the planner's choice)
NHWC_KQ = None


class NhwcSplitPlan:
    """The channels-last split plan's cut (group_norm_split_nhwc*.wgsl): a thread owns KQ
    adjacent channel quads (a quad block; A blocks per row) over a tile of consecutive
    positions of one sample (P tiles per sample, ``tile`` positions at most).

    CPU adapters: contiguous loads matter (lavapipe runs each SIMD batch through its whole loop,
    and the lanes of a batch are adjacent quad blocks, so a batch reads 8 * KQ * 16 contiguous
    bytes of a row per step); tiles of about CPU_PIECE_STEPS vec4 steps.  GPUs: one quad per
    thread (neighbouring threads read neighbouring 16 bytes: coalesced), short tiles, many
    threads.  Every thread and every combine thread stays within lavapipe's loop limit."""

    def __init__(self, plan: GroupPlan, cpu_adapter: bool):
        self.plan = plan
        Q = plan.C // 4
        if cpu_adapter:
            kq = NHWC_KQ or 4
            while Q % kq:
                kq //= 2
        else:
            kq = 1
        self.KQ = kq
        self.A = Q // kq
        target = CPU_PIECE_STEPS if cpu_adapter else 16
        want_threads = 128 if cpu_adapter else 1 << 16
        total = plan.N * plan.HW * Q
        target = max(8, min(target, -(-total // want_threads)))
        tile = max(1, target // kq)
        if SPLIT_PIECE_STEPS is not None:
            tile = max(1, min(tile, SPLIT_PIECE_STEPS))
        P = max(1, -(-plan.HW // tile))
        P = max(1, min(P, STEP_CAP // (2 * max(plan.channels_per_group, 1))))
        self.P = P
        self.tile = -(-plan.HW // P)
        self.wg = WG if not cpu_adapter else CPU_SPLIT_WG
        if self.tile * kq > STEP_CAP or plan.channels_per_group * P > STEP_CAP // 2:
            raise ValueError(
                f"x: a channels-last group of {plan.channels_per_group} channels x {plan.HW} positions cannot be "
                f"split within the software adapter's loop limit; use the fused plan (NUMR_WEB_WEBGPU_PLAN=fused)"
            )

    def part_bytes_per_group(self, vec4s_per_quad):
        plan = self.plan
        return -(-(self.P * (plan.C // 4) * vec4s_per_quad * 16) // plan.G)

    def threads(self, ngroups):
        return ngroups // self.plan.G * self.P * self.A

    def params(self, x_base, g_first, ngroups, eps=0.0, workspace=None):
        threads = self.threads(ngroups)
        return pack_params(self.plan, self.A, self.P, threads, self.tile, x_base, g_first, ngroups, eps, workspace)

    def constants(self, silu, affine, **flags):
        return {"NHWC": True, "VEC": 4, "SILU": silu, "AFFINE": affine, "WG": self.wg, "KQ": self.KQ, **flags}

    def workgroups(self, threads):
        return max(1, -(-threads // self.wg))


#: 16-bit storage read and written 8 elements (16 bytes) per load by the split kernels
#: (dtype_*_x8.wgsl); float16 takes the packed form with or without shader-f16 there
X8_KEYS = {"f16": "f16_packed_x8", "f16_packed": "f16_packed_x8", "bf16": "bf16_x8"}
#: tests and measurements: False keeps 16-bit storage at 4 elements per load
USE_X8 = True


def _x8_key(key, units_even):
    """The 16-byte-unit storage key for ``key`` where every chunk's element offset and the kernel's
    pair loads fall on multiples of 8 elements (``units_even``), else ``key``."""
    return X8_KEYS.get(key, key) if USE_X8 and units_even else key


def _forward_split_nhwc(ctx, x, y, mean, rstd, plan, affine_binds, eps, silu, affine, key):
    sp = NhwcSplitPlan(plan, ctx.cpu_adapter)
    key = _x8_key(key, sp.KQ % 2 == 0)  # quads loaded in pairs (KQ even: C % 8 == 0)
    aux = Scratch(ctx, plan.N * plan.G * 16)
    part_per_group = sp.part_bytes_per_group(2)
    dt = {"X": key, "Y": key}
    # a group that needs a second sum is summed again (scalar loads) by its combine thread when
    # that stays within the loop limit; larger ones get the FIX passes
    inline = plan.M <= 2 * INLINE_REDO_STEPS
    kernel = "group_norm_split_nhwc.wgsl"
    for g_first, ngroups, off, size, x_base, _count in plan.chunks(ctx.max_binding, part_per_group):
        part = Scratch(ctx, max(ngroups * part_per_group, 32))
        binds = _chunk_binds(ctx, off, size, (x, y), affine_binds, (mean, rstd, aux, part))
        grid = sp.workgroups(sp.threads(ngroups))
        params = sp.params(x_base, g_first, ngroups, eps)
        _split_passes(
            ctx,
            kernel,
            "apply",
            dt,
            binds,
            *_forward_rounds(sp, silu, affine, inline),
            (grid, sp.workgroups(ngroups), grid),
            (params,) * 3,
        )


def _backward_split_nhwc(ctx, x, dy, dx, mean, rstd, plan, affine_binds, silu, use_w, key):
    sp = NhwcSplitPlan(plan, ctx.cpu_adapter)
    key = _x8_key(key, sp.KQ % 2 == 0)
    ws = Workspace(ctx, plan, sp.part_bytes_per_group(3))
    dt = {"X": key, "DY": key, "DX": key}
    kernel = "group_norm_split_nhwc_backward.wgsl"
    for g_first, ngroups, off, size, x_base, _count in ws.chunks:
        binds = _chunk_binds(ctx, off, size, (x, dy, dx), affine_binds, (mean, rstd, ws.scratch))
        grid = sp.workgroups(sp.threads(ngroups))
        params = sp.params(x_base, g_first, ngroups, workspace=ws)
        _split_passes(
            ctx,
            kernel,
            "dx",
            dt,
            binds,
            *_backward_rounds(sp, silu, use_w),
            (grid, sp.workgroups(ngroups), grid),
            (params,) * 3,
        )
    return ws


MAXGB = 64  # workgroup array size in group_norm_nhwc.wgsl


class BlockPlan:
    """Channels-last with C % 4 == 0: workgroups over blocks of GB groups (whole channel quads)."""

    def __init__(self, plan: GroupPlan, cpu_adapter: bool):
        # the narrowest blocks of whole channel quads: on lavapipe at (8,320,64,64) G=32 wider
        # blocks measured slower (0.26 of the vec4 copy, against 0.23 and 0.17 at 128 and 512
        # bytes per row segment), since a narrow group slab stays in L2 for the second sweep
        gb = 4 // math.gcd(plan.channels_per_group, 4)
        self.GB = gb
        self.A = gb * plan.channels_per_group // 4
        if cpu_adapter:
            self.P, self.wg = plan_pieces_cpu(self.A, plan.HW)
        else:
            self.P, self.wg = plan_pieces(self.A, plan.HW), WG
        self.items = self.A * self.P
        self.plan = plan

    def params(self, x_base, g_first, ngroups, eps=0.0, workspace=None):
        plan = self.plan
        return pack_params(
            plan, self.A, self.P, self.items, self.GB, x_base, g_first // plan.G, ngroups // self.GB, eps, workspace
        )

    def constants(self, silu, affine):
        return {"SILU": silu, "AFFINE": affine, "WG": self.wg, "MAXGB": MAXGB}


def _block_path(plan: GroupPlan) -> bool:
    return plan.nhwc and plan.C % 4 == 0


def _f32_param(v):
    if v is None:
        return None
    return v if v.dtype == F32 else array_kernels.convert(v, F32)


def _whole(ctx, arr_or_buf):
    buf = arr_or_buf.buffer if isinstance(arr_or_buf, (WebGPUArray, Scratch)) else arr_or_buf
    size = (
        arr_or_buf.size
        if isinstance(arr_or_buf, Scratch)
        else (arr_or_buf._storage.size if isinstance(arr_or_buf, WebGPUArray) else 256)
    )
    return (buf, 0, min(size, ctx.max_binding))


class Workspace:
    """The backward's one scratch binding: PART (per-item partials, reused by every chunk) from
    byte 0, then DSDB ((ds, db, 0, 0) per (n, c)) and COEF ((c0, c1, mean_lo, zlo) per (n, g)),
    each at a 256-byte aligned offset so dweight and the flat dx kernel bind them as ranges.
    One binding for three arrays keeps every kernel within WebGPU's default of 8 storage
    buffers per stage (the browser's SwiftShader allows 10, some GPUs 8)."""

    def __init__(self, ctx, plan, part_bytes_per_group):
        dsdb_bytes = round_up(max(plan.N * plan.C * 16, 16), OFFSET_ALIGN)
        coef_bytes = max(plan.N * plan.G * 16, 16)
        # PART is rounded up to OFFSET_ALIGN below: leave room for that inside one binding
        budget = ctx.max_binding - dsdb_bytes - coef_bytes - OFFSET_ALIGN
        self.chunks = list(plan.chunks(budget, part_bytes_per_group))
        part_bytes = round_up(max((c[1] * part_bytes_per_group for c in self.chunks), default=16), OFFSET_ALIGN)
        self.scratch = Scratch(ctx, part_bytes + dsdb_bytes + coef_bytes)
        buf = self.scratch.buffer
        self.dsdb = (buf, part_bytes, plan.N * plan.C * 16)
        self.coef = (buf, part_bytes + dsdb_bytes, coef_bytes)
        #: (dsdb_at, coef_at) in vec4s, the last two fields of the kernels' Params
        self.offsets = (part_bytes // 16, (part_bytes + dsdb_bytes) // 16)


def forward(x: WebGPUArray, weight, bias, num_groups, eps, activation, layout):
    ctx = x.ctx
    eps = eps_as_float32(eps)  # inf beyond float32's range (rstd = 0), as on the CPU's float32 path
    plan = GroupPlan(x, num_groups, layout, ctx.cpu_adapter)
    y = array_kernels.empty_like(x)
    mean = array_kernels.empty(ctx, (plan.N, plan.G), F32)
    rstd = array_kernels.empty(ctx, (plan.N, plan.G), F32)
    if plan.N * plan.G == 0:
        return y, mean, rstd
    if plan.M == 0:  # empty groups have no statistics (as on every backend)
        mean, rstd = (array_kernels.full(ctx, (plan.N, plan.G), F32, math.nan) for _ in range(2))
        return y, mean, rstd
    w, b = _f32_param(weight), _f32_param(bias)
    affine = w is not None
    if affine and b is None:
        b = array_kernels.full(ctx, w.shape, F32, 0.0)
    elif b is not None and not affine:
        w = array_kernels.full(ctx, b.shape, F32, 1.0)
        affine = True
    silu = activation == "silu"
    aux = Scratch(ctx, plan.N * plan.G * 16)
    key = ctx.dtype_key(x.dtype.name)
    affine_binds = [_whole(ctx, w if affine else ctx.dummy), _whole(ctx, b if affine else ctx.dummy)]
    thread = use_thread(plan, ctx)
    if not thread and use_split(plan, ctx):
        run = _forward_split_nhwc if plan.nhwc else _forward_split
        run(ctx, x, y, mean, rstd, plan, affine_binds, eps, silu, affine, key)
        return y, mean, rstd
    if _block_path(plan):
        blocks = BlockPlan(plan, ctx.cpu_adapter)
        part_per_group = blocks.items * 32 // blocks.GB
        for g_first, ngroups, off, size, x_base, _count in plan.chunks(ctx.max_binding, part_per_group):
            xb = (x.buffer, off, size)
            part = Scratch(ctx, ngroups * part_per_group)
            ctx.launch(
                "group_norm_nhwc.wgsl",
                "forward",
                {"X": key, "DY": key, "Y": key},
                blocks.constants(silu, affine),
                [
                    xb,
                    xb,
                    (y.buffer, off, size),
                    *affine_binds,
                    _whole(ctx, mean),
                    _whole(ctx, rstd),
                    _whole(ctx, part),
                ],
                ngroups // blocks.GB,
                blocks.params(x_base, g_first, ngroups, eps),
            )
        return y, mean, rstd
    kernel, consts, per_wg, whole_key = _whole_group_kernel(plan, thread, False, silu, affine, key)
    for g_first, ngroups, off, size, x_base, count in plan.chunks(ctx.max_binding):
        xb = (x.buffer, off, size)
        yb = (y.buffer, off, size)
        ctx.launch(
            kernel,
            "main",
            {"X": whole_key, "Y": whole_key},
            consts,
            [xb, yb, *affine_binds, _whole(ctx, mean), _whole(ctx, rstd), _whole(ctx, aux)],
            -(-ngroups // per_wg),
            plan.params(x_base, g_first, ngroups, eps),
        )
        if not plan.fused:
            ctx.launch(
                "group_norm_flat.wgsl",
                "apply",
                {"X": key, "DY": key, "Y": key},
                {"NHWC": plan.nhwc, "SILU": silu, "AFFINE": affine},
                [xb, xb, yb, *affine_binds, _whole(ctx, aux), _whole(ctx, mean), _whole(ctx, rstd)],
                -(-count // 1024),
                plan.flat_params(x_base, g_first, count),
            )
    return y, mean, rstd


def backward(dy: WebGPUArray, x: WebGPUArray, mean, rstd, weight, bias, num_groups, activation, layout):
    ctx = x.ctx
    if dy.dtype != x.dtype:
        dy = array_kernels.convert(dy, x.dtype)
    plan = GroupPlan(x, num_groups, layout, ctx.cpu_adapter)
    mean = _f32_param(mean)
    rstd = _f32_param(rstd)
    if not mean.is_c_contiguous:
        mean = array_kernels.convert(mean, F32, c_order=True)
    if not rstd.is_c_contiguous:
        rstd = array_kernels.convert(rstd, F32, c_order=True)
    dx = array_kernels.empty_like(x)
    w = _f32_param(weight)
    affine = w is not None
    silu = activation == "silu"
    b = _f32_param(bias) if silu else None
    if silu and b is None:
        b = array_kernels.full(ctx, (plan.C,), F32, 0.0)
    if silu and w is None:
        w_eff, use_w = array_kernels.full(ctx, (plan.C,), F32, 1.0), True
    else:
        w_eff, use_w = w, affine
    if b is None and use_w:
        # the backward kernels read B only with SILU (z = xc * scale + shift), which always has a
        # bias by now: any C float32s fill the binding, so no array of zeros is made and filled
        b = w_eff

    ws = None
    if plan.N * plan.G > 0 and plan.M > 0:
        key = ctx.dtype_key(x.dtype.name)
        affine_binds = [
            _whole(ctx, w_eff) if use_w else _whole(ctx, ctx.dummy),
            _whole(ctx, b) if use_w else _whole(ctx, ctx.dummy),
        ]
        thread = use_thread(plan, ctx)
        split = not thread and use_split(plan, ctx, backward=True)
        if split:
            run = _backward_split_nhwc if plan.nhwc else _backward_split
            ws = run(ctx, x, dy, dx, mean, rstd, plan, affine_binds, silu, use_w, key)
        elif _block_path(plan):
            blocks = BlockPlan(plan, ctx.cpu_adapter)
            part_per_group = blocks.items * 48 // blocks.GB
            ws = Workspace(ctx, plan, part_per_group)
            for g_first, ngroups, off, size, x_base, _count in ws.chunks:
                ctx.launch(
                    "group_norm_nhwc.wgsl",
                    "backward",
                    {"X": key, "DY": key, "Y": key},
                    blocks.constants(silu, use_w),
                    [
                        (x.buffer, off, size),
                        (dy.buffer, off, size),
                        (dx.buffer, off, size),
                        *affine_binds,
                        _whole(ctx, mean),
                        _whole(ctx, rstd),
                        _whole(ctx, ws.scratch),
                    ],
                    ngroups // blocks.GB,
                    blocks.params(x_base, g_first, ngroups, workspace=ws),
                )
        else:  # the thread plan leaves PART empty: a group's sums stay in its invocation
            ws = Workspace(ctx, plan, 0 if thread else plan.items * 32)
        kernel, consts, per_wg, whole_key = _whole_group_kernel(plan, thread, True, silu, use_w, key)
        for g_first, ngroups, off, size, x_base, count in [] if (split or _block_path(plan)) else ws.chunks:
            xb, dyb, dxb = (x.buffer, off, size), (dy.buffer, off, size), (dx.buffer, off, size)
            ctx.launch(
                kernel,
                "main",
                {"X": whole_key, "DY": whole_key, "DX": whole_key},
                consts,
                [
                    xb,
                    dyb,
                    dxb,
                    *affine_binds,
                    _whole(ctx, mean),
                    _whole(ctx, rstd),
                    _whole(ctx, ws.scratch),
                ],
                -(-ngroups // per_wg),
                plan.params(x_base, g_first, ngroups, workspace=ws),
            )
            if not plan.fused:
                ctx.launch(
                    "group_norm_flat.wgsl",
                    "dx",
                    {"X": key, "DY": key, "Y": key},
                    {"NHWC": plan.nhwc, "SILU": silu, "AFFINE": use_w},
                    [xb, dyb, dxb, *affine_binds, ws.coef, _whole(ctx, mean), _whole(ctx, rstd)],
                    -(-count // 1024),
                    plan.flat_params(x_base, g_first, count),
                )
    if weight is None:
        return dx, None, None
    dweight = array_kernels.empty(ctx, (plan.C,), F32)
    dbias = array_kernels.empty(ctx, (plan.C,), F32)
    if plan.C:
        if plan.N * plan.G == 0 or plan.M == 0:
            dweight = array_kernels.full(ctx, (plan.C,), F32, 0.0)
            dbias = array_kernels.full(ctx, (plan.C,), F32, 0.0)
        else:
            ctx.launch(
                "group_norm_dweight.wgsl",
                "main",
                {},
                {},
                [ws.dsdb, _whole(ctx, rstd), _whole(ctx, dweight), _whole(ctx, dbias), ws.coef],
                -(-plan.C // 64),
                struct.pack("<4I", plan.N, plan.C, plan.G, plan.channels_per_group),
            )
    if weight.dtype != F32:
        dweight, dbias = array_kernels.convert(dweight, weight.dtype), array_kernels.convert(dbias, weight.dtype)
    return dx, dweight, dbias

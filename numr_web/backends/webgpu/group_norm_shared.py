"""What every GroupNorm work plan shares: shape facts, work shapes, parameters, chunks, workspace, Program.

The shape facts (``GroupPlan``) and the fused work shape, parameter packing, chunks, the
backward's workspace, and ``Program``, a call's launches written down before any buffer exists.

A plan module (``group_norm_fused``, ``group_norm_thread``, ``group_norm_split``,
``group_norm_split_nhwc``) writes the launches of one forward or backward call into a
``Program``: kernel, entry, storage keys, constants, parameter block, workgroups, and the
bindings by name (the call's arrays ``x``, ``y``, ``dy``, ``dx``, ``w``, ``b``, ``mean``,
``rstd``, ``dweight``, ``dbias``; the call's scratch ``#name``; ``~dummy``).  The launcher
(``group_norm_launch``) turns a Program into a kept ``Recipe`` (pipelines, parameter buffers
and scratch made once) and runs it per call with that call's arrays.

The switches ``SPLIT_PIECE_STEPS``, ``INLINE_REDO_STEPS`` and ``USE_X8`` are read per call
from this module (``group_norm_launch`` forwards assignments to them here).
"""

from __future__ import annotations

import math
import struct
from functools import lru_cache

from numr_web.backends.webgpu.array import as_dtype
from numr_web.backends.webgpu.device import OFFSET_ALIGN, round_up

WG = 64  # threads per (n, g) workgroup on GPUs
F32 = as_dtype("float32")

#: lavapipe (llvmpipe's gallivm) ends a shader invocation's loops after 65535
#: back-edges in all (a watchdog against endless loops): an invocation of the
#: GroupNorm kernels runs each of its steps 2 to 3 times (statistics, apply;
#: backward: two sweeps), so one thread takes at most this many steps.  Seen: a
#: thread that walked a 2M-element group in 8 pieces left the end of its output
#: unwritten (docs/webgpu.md, Work shapes).
STEP_CAP = 12000

# -- switches, read per call (tests and measurements) ---------------------------------------------
#: the longest piece of a row (vec4 steps) the split plans may use (None: their own), so that
#: tiny shapes still cut a group into many pieces
SPLIT_PIECE_STEPS = None
#: groups of at most this many vec4s are summed again inside the split plans' combine thread
#: (no FIX passes: two dispatches fewer); 0 sends every second sum to the FIX passes
INLINE_REDO_STEPS = STEP_CAP // 2
#: 16-bit storage read and written 8 elements (16 bytes) per load by the split and thread kernels
#: (dtype_*_x8.wgsl); False keeps 4 elements per load
USE_X8 = True
#: float16 takes the packed 16-byte form with or without shader-f16 there
X8_KEYS = {"f16": "f16_packed_x8", "f16_packed": "f16_packed_x8", "bf16": "bf16_x8"}


def x8_key(key, units_even):
    """The 16-byte-unit storage key for ``key`` where every chunk's element offset and the kernel's
    pair loads fall on multiples of 8 elements (``units_even``), else ``key``."""
    return X8_KEYS.get(key, key) if USE_X8 and units_even else key


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
    """Pieces per row so that a_count * P items spread evenly over ``wg`` threads (GPUs).

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


#: workgroup sizes plan_pieces_cpu can choose: SIMD-width multiples up to 256
CPU_WORKGROUPS = tuple(range(8, 257, 8))


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
    """Shape facts of one call, and the fused plan's work shape (items of a workgroup)."""

    def __init__(self, x, num_groups: int, layout: str, cpu_adapter: bool = False):
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


class Workspace:
    """The backward's one scratch binding (``#ws``): PART (per-item partials, reused by every chunk)
    from byte 0, then DSDB ((ds, db, 0, 0) per (n, c)) and COEF ((c0, c1, mean_lo, zlo) per (n, g)),
    each at a 256-byte aligned offset so dweight and the flat dx kernel bind them as ranges.
    One binding for three arrays keeps every kernel within WebGPU's default of 8 storage
    buffers per stage (the browser's SwiftShader allows 10, some GPUs 8)."""

    def __init__(self, max_binding, plan, part_bytes_per_group):
        dsdb_bytes = round_up(max(plan.N * plan.C * 16, 16), OFFSET_ALIGN)
        coef_bytes = max(plan.N * plan.G * 16, 16)
        # PART is rounded up to OFFSET_ALIGN below: leave room for that inside one binding
        budget = max_binding - dsdb_bytes - coef_bytes - OFFSET_ALIGN
        self.chunks = list(plan.chunks(budget, part_bytes_per_group))
        part_bytes = round_up(max((c[1] * part_bytes_per_group for c in self.chunks), default=16), OFFSET_ALIGN)
        self.nbytes = part_bytes + dsdb_bytes + coef_bytes
        self.dsdb = ("#ws", part_bytes, plan.N * plan.C * 16)
        self.coef = ("#ws", part_bytes + dsdb_bytes, coef_bytes)
        #: (dsdb_at, coef_at) in vec4s, the last two fields of the kernels' Params
        self.offsets = (part_bytes // 16, (part_bytes + dsdb_bytes) // 16)


class Program:
    """One call's launches, written before any buffer exists.

    ``launches``: (kernel, entry, dtypes, constants, binds, workgroups, params), each bind a
    name and optionally a byte range: ``("x", off, size)`` a range of the call's array ``x``,
    ``("w",)`` the whole array, ``("#aux",)`` / ``("#ws", off, size)`` the call's scratch (made
    once per recipe, ``scratch``: name -> bytes), ``("~dummy",)`` the context's placeholder.
    ``fills``: scratch arrays of float32 constants (name -> (count, value)), filled once.
    """

    def __init__(self):
        self.launches = []
        self.scratch = {}
        self.fills = {}

    def add_scratch(self, name, nbytes):
        """Scratch ``#name`` of ``nbytes`` (the largest asked for, if asked again)."""
        key = "#" + name
        self.scratch[key] = max(int(nbytes), self.scratch.get(key, 0))
        return (key,)

    def add_fill(self, name, count, value):
        """A float32 array of ``count`` elements all ``value``, bound whole as ``#name``."""
        key = "#" + name
        self.fills[key] = (int(count), float(value))
        return (key,)

    def launch(self, kernel, entry, dtypes, constants, binds, workgroups, params):
        self.launches.append((kernel, entry, dtypes, constants, tuple(binds), int(workgroups), bytes(params)))

    def pipeline_keys(self):
        """(kernel, entry, dtypes, constants) of every launch."""
        return [launch[:4] for launch in self.launches]


def chunk_binds(off, size, arrays, affine_binds, whole):
    """A kernel's bindings: the chunk's byte range [off, off + size) of each of ``arrays`` (names:
    x, then y or dy and dx), the affine parameters, then each of ``whole`` (names) bound whole."""
    return [*((a, off, size) for a in arrays), *affine_binds, *((w,) if isinstance(w, str) else w for w in whole)]


def split_passes(prog, kernel, last, dt, binds, rounds, final, grids, params):
    """One chunk's split passes: partials then combine under each constants dict of ``rounds``
    (FIX or REFINE passes), then ``last`` (apply or dx) under ``final``.  ``grids`` and
    ``params``: the workgroup counts and parameter blocks of partials, combine and ``last``."""
    for consts in rounds:
        prog.launch(kernel, "partials", dt, consts, binds, grids[0], params[0])
        prog.launch(kernel, "combine", dt, consts, binds, grids[1], params[1])
    prog.launch(kernel, last, dt, final, binds, grids[2], params[2])


def forward_rounds(constants, silu, affine, inline):
    """(rounds, final) of a split forward, from ``constants(silu, affine, **flags)``: the
    partials-and-combine rounds' constants (a FIX round after the first where second sums do
    not run inline) and apply's."""
    rounds = [constants(silu, affine, FIX=fix, INLINE_REDO=inline) for fix in ((False,) if inline else (False, True))]
    return rounds, constants(silu, affine, FIX=False, INLINE_REDO=inline)


def backward_rounds(constants, silu, use_w):
    """(rounds, final) of a split backward: a REFINE round first with SILU, then the sums; dx's."""
    rounds = [constants(silu, use_w, REFINE=refine) for refine in ((True, False) if silu else (False,))]
    return rounds, constants(silu, use_w, REFINE=False)


def split_variants(kernels, dtypes, constants, silu, backward):
    """Every (kernel, entry, dtypes, constants) of a split plan's passes: ``kernels`` (forward's,
    backward's), ``dtypes`` the storage keys of its roles, ``constants(silu, affine, **flags)``;
    forward with and without weight, second sums inline or in the FIX passes; backward with a
    weight or none (SiLU always has one), REFINE first with SiLU."""
    if backward:
        kernel, last = kernels[1], "dx"
        plans = [backward_rounds(constants, silu, use_w) for use_w in ((True,) if silu else (False, True))]
    else:
        kernel, last = kernels[0], "apply"
        plans = [forward_rounds(constants, silu, a, inline) for a in (False, True) for inline in (False, True)]
    out = []
    for rounds, final in plans:
        out += [(kernel, entry, dtypes, c) for c in rounds for entry in ("partials", "combine")]
        out.append((kernel, last, dtypes, final))
    return out


def whole_group_forward(
    prog, plan, max_binding, affine_binds, kernel, consts, per_wg, whole_key, key, silu, affine, eps
):
    """The fused and thread plans' forward: ``kernel`` over whole (n, g) groups (``per_wg`` per
    workgroup) chunk by chunk; rows of odd length (VEC 1) then get the flat apply pass."""
    aux = prog.add_scratch("aux", plan.N * plan.G * 16)
    for g_first, ngroups, off, size, x_base, count in plan.chunks(max_binding):
        xb, yb = ("x", off, size), ("y", off, size)
        prog.launch(
            kernel,
            "main",
            {"X": whole_key, "Y": whole_key},
            consts,
            [xb, yb, *affine_binds, ("mean",), ("rstd",), aux],
            -(-ngroups // per_wg),
            plan.params(x_base, g_first, ngroups, eps),
        )
        if not plan.fused:
            prog.launch(
                "group_norm_flat.wgsl",
                "apply",
                {"X": key, "DY": key, "Y": key},
                {"NHWC": plan.nhwc, "SILU": silu, "AFFINE": affine},
                [xb, xb, yb, *affine_binds, aux, ("mean",), ("rstd",)],
                -(-count // 1024),
                plan.flat_params(x_base, g_first, count),
            )


def whole_group_backward(prog, plan, ws, affine_binds, kernel, consts, per_wg, whole_key, key, silu, use_w):
    """The fused and thread plans' backward over whole groups, chunk by chunk (the flat dx pass
    after each chunk for rows of odd length)."""
    for g_first, ngroups, off, size, x_base, count in ws.chunks:
        xb, dyb, dxb = ("x", off, size), ("dy", off, size), ("dx", off, size)
        prog.launch(
            kernel,
            "main",
            {"X": whole_key, "DY": whole_key, "DX": whole_key},
            consts,
            [xb, dyb, dxb, *affine_binds, ("mean",), ("rstd",), ("#ws",)],
            -(-ngroups // per_wg),
            plan.params(x_base, g_first, ngroups, workspace=ws),
        )
        if not plan.fused:
            prog.launch(
                "group_norm_flat.wgsl",
                "dx",
                {"X": key, "DY": key, "Y": key},
                {"NHWC": plan.nhwc, "SILU": silu, "AFFINE": use_w},
                [xb, dyb, dxb, *affine_binds, ws.coef, ("mean",), ("rstd",)],
                -(-count // 1024),
                plan.flat_params(x_base, g_first, count),
            )

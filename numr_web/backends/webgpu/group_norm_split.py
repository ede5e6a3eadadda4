"""The NCHW split work plan: barrier-free partials, a fixed-order combine per group, an elementwise pass.

Partials over pieces of rows (``group_norm_split.wgsl``, ``group_norm_split_backward.wgsl``;
rows of HW % 4 == 0).

``SplitPlan`` cuts the work; its measured constants are here: ``CPU_PIECE_STEPS`` and
``CPU_SPLIT_WG`` (docs/webgpu.md, Two plans for NCHW: contiguous pieces of about 1024 vec4
steps per thread in workgroups of 16 on lavapipe; GPUs: interleaved pieces of about 16 steps,
workgroups of 64).  When ``auto`` takes it: ``group_norm_planner.use_split``.
"""

from __future__ import annotations

from numr_web.backends.webgpu import group_norm_shared as shared
from numr_web.backends.webgpu.group_norm_shared import (
    STEP_CAP,
    WG,
    X8_KEYS,
    Workspace,
    backward_rounds,
    chunk_binds,
    forward_rounds,
    pack_params,
    split_passes,
    split_variants,
    x8_key,
)

#: the forward's and the backward's kernel
KERNELS = ("group_norm_split.wgsl", "group_norm_split_backward.wgsl")

#: the split plans on CPU adapters: vec4 steps a thread walks in a pass, threads per workgroup
CPU_PIECE_STEPS = 1024
CPU_SPLIT_WG = 16


class SplitPlan:
    """The split plan's cut: rows ((n, c), ``steps`` vec4s) in P pieces, A pieces per partials
    thread, ``run`` vec4s per apply thread, workgroups of ``wg``.

    CPU adapters run a workgroup's SIMD batches one after another on one core and like long
    contiguous runs per thread: pieces up to ``target`` steps, a thread walks whole pieces (of
    several rows or groups when rows are short) for about ``target`` steps.  GPUs get short
    interleaved pieces (INTERLEAVE: piece k of a row takes steps k, k + P, ..., so that
    neighbouring threads read neighbouring vec4s), many threads, and one vec4 per thread in
    the elementwise pass.  Every thread stays within lavapipe's loop limit (STEP_CAP)."""

    def __init__(self, plan, cpu_adapter: bool, wg: int = WG, unit: int = 4):
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
        if shared.SPLIT_PIECE_STEPS is not None:
            target = max(1, min(target, shared.SPLIT_PIECE_STEPS))
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
        return constants(silu, affine, self.wg, self.interleave, self.unit == 8, **flags)

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


def constants(silu, affine, wg, interleave, u8, **flags):
    return {
        "NHWC": False,
        "VEC": 4,
        "SILU": silu,
        "AFFINE": affine,
        "WG": wg,
        "INTERLEAVE": interleave,
        "U8": u8,
        **flags,
    }


def cut(plan, cpu_adapter, key):
    """(SplitPlan, storage key): 16-bit storage with HW % 8 == 0 steps 8 elements at a time.
    Raises ValueError where the pieces cannot stay within the loop limit."""
    x8 = x8_key(key, plan.HW % 8 == 0)
    return SplitPlan(plan, cpu_adapter, unit=8 if x8 != key else 4), x8


def forward(prog, plan, cpu_adapter, max_binding, affine_binds, eps, silu, affine, key):
    sp, key = cut(plan, cpu_adapter, key)
    aux = prog.add_scratch("split_aux", plan.N * plan.G * 16)
    part_per_group = plan.channels_per_group * sp.P * 8
    dt = {"X": key, "Y": key}
    # a group that needs a second sum is summed again by its combine thread when that stays
    # within the loop limit (no FIX passes: two dispatches fewer); larger ones get the FIX passes
    inline = plan.M // 4 <= shared.INLINE_REDO_STEPS
    for g_first, ngroups, off, size, x_base, _count in plan.chunks(max_binding, part_per_group):
        part = prog.add_scratch(f"part{g_first}", ngroups * part_per_group)
        binds = chunk_binds(off, size, ("x", "y"), affine_binds, ("mean", "rstd", aux, part))
        split_passes(
            prog,
            KERNELS[0],
            "apply",
            dt,
            binds,
            *forward_rounds(sp.constants, silu, affine, inline),
            sp.grids(ngroups),
            sp.pass_params(x_base, g_first, ngroups, eps),
        )


def backward(prog, plan, cpu_adapter, max_binding, affine_binds, silu, use_w, key):
    sp, key = cut(plan, cpu_adapter, key)
    ws = Workspace(max_binding, plan, plan.channels_per_group * sp.P * 16)
    prog.add_scratch("ws", ws.nbytes)
    dt = {"X": key, "DY": key, "DX": key}
    for g_first, ngroups, off, size, x_base, _count in ws.chunks:
        binds = chunk_binds(off, size, ("x", "dy", "dx"), affine_binds, ("mean", "rstd", ("#ws",)))
        split_passes(
            prog,
            KERNELS[1],
            "dx",
            dt,
            binds,
            *backward_rounds(sp.constants, silu, use_w),
            sp.grids(ngroups),
            sp.pass_params(x_base, g_first, ngroups, workspace=ws),
        )
    return ws


def variants(cpu_adapter, key, layout, silu, backward):
    """Every (kernel, entry, dtypes, constants) this plan can launch (NCHW only)."""
    if layout != "nchw":
        return []
    wg = CPU_SPLIT_WG if cpu_adapter else WG
    out = []
    for k in [key] + ([X8_KEYS[key]] if key in X8_KEYS else []):
        roles = ("X", "DY", "DX") if backward else ("X", "Y")
        make = lambda silu, affine, **flags: constants(silu, affine, wg, not cpu_adapter, k != key, **flags)  # noqa: E731
        out += split_variants(KERNELS, dict.fromkeys(roles, k), make, silu, backward)
    return out

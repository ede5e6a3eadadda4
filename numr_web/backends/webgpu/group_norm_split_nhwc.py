"""The channels-last split work plan (C % 4 == 0): partials, a fixed-order combine, an elementwise pass.

Partials over (sample, tile of positions, quad block) cuts (``group_norm_split_nhwc.wgsl``,
``group_norm_split_nhwc_backward.wgsl``).

``NhwcSplitPlan`` cuts the work (docs/webgpu.md, Channels-last: fused and split, has the
measurements: KQ = 4 quads spelled out per thread, tiles of about ``group_norm_split.CPU_PIECE_STEPS``
vec4 steps in workgroups of ``CPU_SPLIT_WG`` on lavapipe; GPUs one quad per thread, 16-position
tiles).  When ``auto`` takes it: ``group_norm_planner.use_split``.
"""

from __future__ import annotations

from numr_web.backends.webgpu import group_norm_shared as shared
from numr_web.backends.webgpu import group_norm_split
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
KERNELS = ("group_norm_split_nhwc.wgsl", "group_norm_split_nhwc_backward.wgsl")

#: quads a thread owns side by side (None: 4, else 2 or 1, whichever divides C / 4; GPUs 1).
#: Measured on lavapipe: one quad per thread 0.11 to 0.24 of a copy, four spelled out with
#: constant indices 0.29 to 0.63 (a runtime-indexed private array of them: 0.24 to 0.42)
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

    def __init__(self, plan, cpu_adapter: bool):
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
        target = group_norm_split.CPU_PIECE_STEPS if cpu_adapter else 16
        want_threads = 128 if cpu_adapter else 1 << 16
        total = plan.N * plan.HW * Q
        target = max(8, min(target, -(-total // want_threads)))
        tile = max(1, target // kq)
        if shared.SPLIT_PIECE_STEPS is not None:
            tile = max(1, min(tile, shared.SPLIT_PIECE_STEPS))
        P = max(1, -(-plan.HW // tile))
        P = max(1, min(P, STEP_CAP // (2 * max(plan.channels_per_group, 1))))
        self.P = P
        self.tile = -(-plan.HW // P)
        self.wg = WG if not cpu_adapter else group_norm_split.CPU_SPLIT_WG
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
        return constants(silu, affine, self.wg, self.KQ, **flags)

    def workgroups(self, threads):
        return max(1, -(-threads // self.wg))


def constants(silu, affine, wg, kq, **flags):
    return {"NHWC": True, "VEC": 4, "SILU": silu, "AFFINE": affine, "WG": wg, "KQ": kq, **flags}


def forward(prog, plan, cpu_adapter, max_binding, affine_binds, eps, silu, affine, key):
    sp = NhwcSplitPlan(plan, cpu_adapter)
    key = x8_key(key, sp.KQ % 2 == 0)  # quads loaded in pairs (KQ even: C % 8 == 0)
    aux = prog.add_scratch("split_aux", plan.N * plan.G * 16)
    part_per_group = sp.part_bytes_per_group(2)
    dt = {"X": key, "Y": key}
    # a group that needs a second sum is summed again (scalar loads) by its combine thread when
    # that stays within the loop limit; larger ones get the FIX passes
    inline = plan.M <= 2 * shared.INLINE_REDO_STEPS
    for g_first, ngroups, off, size, x_base, _count in plan.chunks(max_binding, part_per_group):
        part = prog.add_scratch(f"part{g_first}", max(ngroups * part_per_group, 32))
        binds = chunk_binds(off, size, ("x", "y"), affine_binds, ("mean", "rstd", aux, part))
        grid = sp.workgroups(sp.threads(ngroups))
        params = sp.params(x_base, g_first, ngroups, eps)
        split_passes(
            prog,
            KERNELS[0],
            "apply",
            dt,
            binds,
            *forward_rounds(sp.constants, silu, affine, inline),
            (grid, sp.workgroups(ngroups), grid),
            (params,) * 3,
        )


def backward(prog, plan, cpu_adapter, max_binding, affine_binds, silu, use_w, key):
    sp = NhwcSplitPlan(plan, cpu_adapter)
    key = x8_key(key, sp.KQ % 2 == 0)
    ws = Workspace(max_binding, plan, sp.part_bytes_per_group(3))
    prog.add_scratch("ws", ws.nbytes)
    dt = {"X": key, "DY": key, "DX": key}
    for g_first, ngroups, off, size, x_base, _count in ws.chunks:
        binds = chunk_binds(off, size, ("x", "dy", "dx"), affine_binds, ("mean", "rstd", ("#ws",)))
        grid = sp.workgroups(sp.threads(ngroups))
        params = sp.params(x_base, g_first, ngroups, workspace=ws)
        split_passes(
            prog,
            KERNELS[1],
            "dx",
            dt,
            binds,
            *backward_rounds(sp.constants, silu, use_w),
            (grid, sp.workgroups(ngroups), grid),
            (params,) * 3,
        )
    return ws


def variants(cpu_adapter, key, layout, silu, backward):
    """Every (kernel, entry, dtypes, constants) this plan can launch (channels-last only)."""
    if layout != "nhwc":
        return []
    wg = group_norm_split.CPU_SPLIT_WG if cpu_adapter else WG
    out = []
    for kq in (4, 2, 1) if cpu_adapter else (1,):
        # quads in pairs (KQ even) load 16-bit storage 8 elements at a time, unless USE_X8 is off
        for k in dict.fromkeys([X8_KEYS.get(key, key) if kq % 2 == 0 else key, key]):
            roles = ("X", "DY", "DX") if backward else ("X", "Y")
            make = lambda silu, affine, **flags: constants(silu, affine, wg, kq, **flags)  # noqa: E731
            out += split_variants(KERNELS, dict.fromkeys(roles, k), make, silu, backward)
    return out

"""The fused work plan: one workgroup per group or block of groups, statistics and output in one dispatch.

A workgroup per (n, g) group (NCHW, and channels-last when C % 4 != 0) or per block of
groups (channels-last with C % 4 == 0).

Kernels: ``group_norm_forward.wgsl`` / ``group_norm_backward.wgsl`` (rows of HW % 4 == 0 in
vec4s, APPLY in the same dispatch; other rows with VEC 1 and the elementwise pass of
``group_norm_flat.wgsl`` after it), ``group_norm_nhwc.wgsl`` (the channels-last block path).
Work shape: ``GroupPlan``'s items (``plan_pieces_cpu`` on CPU adapters, ``plan_pieces`` on
GPUs); measurements in docs/webgpu.md, Work shapes.
"""

from __future__ import annotations

import math

from numr_web.backends.webgpu.group_norm_shared import (
    CPU_WORKGROUPS,
    WG,
    Workspace,
    plan_pieces,
    plan_pieces_cpu,
    whole_group_backward,
    whole_group_forward,
)

MAXGB = 64  # workgroup array size in group_norm_nhwc.wgsl


class BlockPlan:
    """Channels-last with C % 4 == 0: workgroups over blocks of GB groups (whole channel quads)."""

    def __init__(self, plan, cpu_adapter: bool):
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
        from numr_web.backends.webgpu.group_norm_shared import pack_params

        plan = self.plan
        return pack_params(
            plan, self.A, self.P, self.items, self.GB, x_base, g_first // plan.G, ngroups // self.GB, eps, workspace
        )

    @staticmethod
    def constants(silu, affine, wg):
        return {"SILU": silu, "AFFINE": affine, "WG": wg, "MAXGB": MAXGB}


def block_path(plan) -> bool:
    """Channels-last with whole channel quads per row (C % 4 == 0): the block kernel."""
    return plan.nhwc and plan.C % 4 == 0


def kernel(plan, backward, silu, affine, key):
    """(kernel, constants, groups per workgroup, storage key) of the whole-group fused kernel."""
    name = "group_norm_backward.wgsl" if backward else "group_norm_forward.wgsl"
    return name, plan.constants(plan.fused, silu, affine), 1, key


def forward(prog, plan, cpu_adapter, max_binding, affine_binds, eps, silu, affine, key):
    if block_path(plan):
        blocks = BlockPlan(plan, cpu_adapter)
        part_per_group = blocks.items * 32 // blocks.GB
        for g_first, ngroups, off, size, x_base, _count in plan.chunks(max_binding, part_per_group):
            xb = ("x", off, size)
            part = prog.add_scratch(f"part{g_first}", ngroups * part_per_group)
            prog.launch(
                "group_norm_nhwc.wgsl",
                "forward",
                {"X": key, "DY": key, "Y": key},
                blocks.constants(silu, affine, blocks.wg),
                [xb, xb, ("y", off, size), *affine_binds, ("mean",), ("rstd",), part],
                ngroups // blocks.GB,
                blocks.params(x_base, g_first, ngroups, eps),
            )
        return
    name, consts, per_wg, whole_key = kernel(plan, False, silu, affine, key)
    whole_group_forward(prog, plan, max_binding, affine_binds, name, consts, per_wg, whole_key, key, silu, affine, eps)


def backward(prog, plan, cpu_adapter, max_binding, affine_binds, silu, use_w, key):
    """The launches of a fused backward; returns its Workspace (dweight reads DSDB and COEF)."""
    if block_path(plan):
        blocks = BlockPlan(plan, cpu_adapter)
        ws = Workspace(max_binding, plan, blocks.items * 48 // blocks.GB)
        prog.add_scratch("ws", ws.nbytes)
        for g_first, ngroups, off, size, x_base, _count in ws.chunks:
            prog.launch(
                "group_norm_nhwc.wgsl",
                "backward",
                {"X": key, "DY": key, "Y": key},
                blocks.constants(silu, use_w, blocks.wg),
                [("x", off, size), ("dy", off, size), ("dx", off, size), *affine_binds, ("mean",), ("rstd",), ("#ws",)],
                ngroups // blocks.GB,
                blocks.params(x_base, g_first, ngroups, workspace=ws),
            )
        return ws
    ws = Workspace(max_binding, plan, plan.items * 32)
    prog.add_scratch("ws", ws.nbytes)
    name, consts, per_wg, whole_key = kernel(plan, True, silu, use_w, key)
    whole_group_backward(prog, plan, ws, affine_binds, name, consts, per_wg, whole_key, key, silu, use_w)
    return ws


def variants(cpu_adapter, key, layout, silu, backward):
    """Every (kernel, entry, dtypes, constants) this plan can launch for a call of ``layout`` and
    storage ``key`` (any shape; forward, or backward with ``backward``)."""
    wgs = CPU_WORKGROUPS if cpu_adapter else (WG,)
    nhwc = layout == "nhwc"
    affines = (True,) if (backward and silu) else (False, True)  # the backward with SiLU always has a weight
    out = []
    for affine in affines:
        if nhwc:  # the block kernel (C % 4 == 0), the scalar whole-group kernel otherwise
            entry = "backward" if backward else "forward"
            out += [
                ("group_norm_nhwc.wgsl", entry, {"X": key, "DY": key, "Y": key}, BlockPlan.constants(silu, affine, wg))
                for wg in wgs
            ]
        for vec in (1,) if nhwc else (4, 1):
            name = "group_norm_backward.wgsl" if backward else "group_norm_forward.wgsl"
            dtypes = {"X": key, "DY": key, "DX": key} if backward else {"X": key, "Y": key}
            for wg in wgs:
                consts = {"NHWC": nhwc, "VEC": vec, "APPLY": vec == 4, "SILU": silu, "AFFINE": affine, "WG": wg}
                out.append((name, "main", dtypes, consts))
            if vec == 1:
                out.append(
                    (
                        "group_norm_flat.wgsl",
                        "dx" if backward else "apply",
                        {"X": key, "DY": key, "Y": key},
                        {"NHWC": nhwc, "SILU": silu, "AFFINE": affine},
                    )
                )
    return out

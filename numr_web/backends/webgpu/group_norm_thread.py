"""The thread work plan: one invocation per NCHW (n, g) group, two sweeps, no barriers.

Kernels ``group_norm_thread.wgsl``, ``group_norm_thread_backward.wgsl``.

Rows of HW % 4 == 0 (16-bit storage with HW % 8 == 0 in 16-byte units, 8 elements a step:
the same sums in the same order as 4-element steps); groups of at most ``STEP_CAP`` vec4s (an
invocation walks its group two or three times within lavapipe's loop watchdog).  When
``auto`` takes it: ``group_norm_planner.use_thread``.
"""

from __future__ import annotations

from numr_web.backends.webgpu.group_norm_shared import (
    X8_KEYS,
    Workspace,
    whole_group_backward,
    whole_group_forward,
    x8_key,
)

#: groups per workgroup, one per invocation: a SIMD batch of 8 lanes on lavapipe, each lane one
#: long contiguous run (how copy_ranges, lavapipe's fastest copy, walks memory)
THREAD_WG = 8


def kernel(plan, backward, silu, affine, key):
    """(kernel, constants, groups per workgroup, storage key)."""
    name = "group_norm_thread_backward.wgsl" if backward else "group_norm_thread.wgsl"
    x8 = x8_key(key, plan.HW % 8 == 0)
    return name, constants(silu, affine, x8 != key), THREAD_WG, x8


def constants(silu, affine, u8):
    return {"NHWC": False, "VEC": 4, "APPLY": True, "SILU": silu, "AFFINE": affine, "WG": THREAD_WG, "U8": u8}


def forward(prog, plan, cpu_adapter, max_binding, affine_binds, eps, silu, affine, key):
    name, consts, per_wg, whole_key = kernel(plan, False, silu, affine, key)
    whole_group_forward(prog, plan, max_binding, affine_binds, name, consts, per_wg, whole_key, key, silu, affine, eps)


def backward(prog, plan, cpu_adapter, max_binding, affine_binds, silu, use_w, key):
    """The launches of a thread-plan backward (PART stays empty: a group's sums stay in its
    invocation); returns its Workspace."""
    ws = Workspace(max_binding, plan, 0)
    prog.add_scratch("ws", ws.nbytes)
    name, consts, per_wg, whole_key = kernel(plan, True, silu, use_w, key)
    whole_group_backward(prog, plan, ws, affine_binds, name, consts, per_wg, whole_key, key, silu, use_w)
    return ws


def variants(cpu_adapter, key, layout, silu, backward):
    """Every (kernel, entry, dtypes, constants) this plan can launch (NCHW only)."""
    if layout != "nchw":
        return []
    name = "group_norm_thread_backward.wgsl" if backward else "group_norm_thread.wgsl"
    roles = ("X", "DY", "DX") if backward else ("X", "Y")
    affines = (True,) if (backward and silu) else (False, True)
    keys = [key] + ([X8_KEYS[key]] if key in X8_KEYS else [])
    return [
        (name, "main", dict.fromkeys(roles, k), constants(silu, affine, k != key)) for affine in affines for k in keys
    ]

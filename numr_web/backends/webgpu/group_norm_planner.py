"""Which GroupNorm work plan a call runs: the rules and their thresholds, each with the measurement that set it.

Plans (one module each): ``group_norm_fused`` (a workgroup per group or block of groups),
``group_norm_thread`` (an invocation per NCHW group), ``group_norm_split`` (NCHW
partials, combine, apply) and ``group_norm_split_nhwc`` (the same, channels-last).  ``choose``
applies the rules below; ``PLAN`` or ``NUMR_WEB_WEBGPU_PLAN`` (read per call) force one where
the shape allows it.  The plans sum in different orders, so their last bits may differ: a
rule decides from the shape of one sample (G, M) where it can, so that a sample's results do
not depend on its batch.  Every figure below was measured end to end on lavapipe (and
SwiftShader where said) as docs/webgpu.md and docs/reports/2026-12-01-webgpu-speed.md,
2026-12-02-webgpu-floor.md record them.
"""

from __future__ import annotations

from numr_web.backends.webgpu import group_norm_fused, group_norm_split, group_norm_split_nhwc, group_norm_thread
from numr_web.backends.webgpu import group_norm_shared as shared
from numr_web.backends.webgpu.group_norm_shared import STEP_CAP
from numr_web.host import environ_reader

#: Which work plan GroupNorm uses: "auto" (the rules below), "fused", "split" or "thread".
#: None: the environment variable NUMR_WEB_WEBGPU_PLAN, read per call.
PLAN = None
PLANS = ("auto", "fused", "split", "thread")

# -- auto on GPU adapters (not measured on a GPU here) ----------------------------------------------
#: split when the fused plan's N * G workgroups would underfill the device (fewer than this
#: many: about 2 workgroups per core of a large GPU) and groups are large
GPU_SPLIT_BELOW_GROUPS = 256
GPU_SPLIT_MIN_GROUP = 16384

# -- auto on CPU adapters (lavapipe, SwiftShader) -----------------------------------------------------
#: split for groups of at most this many elements (small groups pay the fused plan's per-group
#: fixed costs) when there are many groups or much data.  Measured on lavapipe (2026-12-01,
#: split/fused time, float32, G = 32): 0.65 to 0.95 at 2x1280x16x16 and 16x1280x8x8 (groups of
#: 2560 and 1280), 1.02 to 1.37 at 8x64x56x56 (6272); 32x64x8x8 0.60 to 0.87, 2x32x8x8 1.36
#: (too few groups: each extra dispatch cost about 0.3 ms then).  Larger groups read x twice
#: from memory under split but once (the second sweep from cache) under fused.
CPU_SPLIT_MAX_GROUP = 4096
CPU_SPLIT_MIN_GROUPS = 512
CPU_SPLIT_MIN_ELEMENTS = 1 << 18
#: the thread plan for NCHW groups of at most THREAD_MAX_GROUP_BYTES (float32: 24576 elements;
#: 16-bit storage: 49152, in 8-element steps, so only rows of HW % 8 == 0) when a sample has at
#: least THREAD_MIN_GROUPS of them (fewer leave SIMD lanes idle).  The rule looks at G, not N * G,
#: so that a sample's results do not depend on the batch it came in.  Side by side with the other
#: plans (scripts/webgpu-plans on lavapipe, scripts/browser-bench --plans on SwiftShader):
#: float32, on SwiftShader the fastest forward on every bench shape (0.62 to 0.80 of a copy against
#: fused 0.28 to 0.65); on lavapipe the fastest for many small groups (16x1280x8x8: 0.71 to 0.73 of
#: the fused plan's time), within 7% of fused up to 20480 elements, and slower at 40960 (8 lanes'
#: groups no longer in cache for the second sweep: hence a limit in bytes).  16-bit, against the
#: split plan's 8-element loads: on lavapipe 0.74 to 1.01 of its time (even at 2x320x64x64, faster
#: on the other bench shapes), on SwiftShader ahead for many small groups and even elsewhere.
THREAD_MIN_GROUPS = 8
THREAD_MAX_GROUP_BYTES = 24576 * 4
#: channels-last on CPU adapters: the fused plan for samples of at most this many elements (C * H * W),
#: the split plan above.  Side by side (scripts/webgpu-plans --layout nhwc --plans fused,split, 30 rounds,
#: lavapipe, 2026-12-04), split / fused time: samples of 2048 and 8192 elements (2x32x8x8, 2x32x16x16, G = 8)
#: 1.11 to 1.27 in the three dtypes, both directions; 16384 and 32768 (2x64x16x16, 1x128x16x16, G = 32) 0.93
#: to 1.07; 65536 (4x64x32x32) 0.60 to 0.75.  SwiftShader (scripts/browser-bench --plans, float32 and
#: bfloat16): at 2048 to 32768 elements the two within the rounds' noise of each other, at 65536 split ahead.
#: Where they tie, fused compiles two pipelines a variant instead of six, and about half the compile time on
#: SwiftShader (scripts/pipeline-compile-times): what the playground's first layout switch waits for.
CPU_NHWC_FUSED_MAX_SAMPLE = 16384


# read per GroupNorm call: right after a wait on cold caches, os.environ.get's caught KeyError was a visible part
# of the call's host work on lavapipe (docs/reports/2026-12-03-webgpu-host-work.md)
_read_plan_env = environ_reader("NUMR_WEB_WEBGPU_PLAN")


def plan_name() -> str:
    if PLAN is not None:
        name = PLAN
    else:
        name = _read_plan_env()
        if name is None or name == "auto":
            return "auto"
    name = (name or "auto").strip().lower()
    if name not in PLANS:
        raise ValueError(f"NUMR_WEB_WEBGPU_PLAN={name!r}: expected one of {', '.join(PLANS)}")
    return name


def use_thread(plan, ctx) -> bool:
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
    wide = plan.isz == 4 or (plan.HW % 8 == 0 and shared.USE_X8)
    return ctx.cpu_adapter and wide and plan.M * plan.isz <= THREAD_MAX_GROUP_BYTES and plan.G >= THREAD_MIN_GROUPS


def _use_split_nhwc(plan, ctx) -> bool:
    """Channels-last (C % 4 == 0: whole channel quads per row): ``auto`` splits on every adapter,
    but for small samples on CPU adapters (CPU_NHWC_FUSED_MAX_SAMPLE).
    lavapipe: 1.5 to 3 times the fused plan's throughput on the bench shapes, forward and
    backward (docs/webgpu.md); GPUs: one quad per thread, neighbours reading neighbouring
    16 bytes, every group spread over many workgroups (not measured on a GPU here)."""
    name = plan_name()
    if plan.C % 4 or name == "fused":
        return False
    if name == "auto" and ctx.cpu_adapter and plan.C * plan.HW <= CPU_NHWC_FUSED_MAX_SAMPLE:
        return False
    try:
        group_norm_split_nhwc.NhwcSplitPlan(plan, ctx.cpu_adapter)
    except ValueError:
        return False
    return True


def use_split(plan, ctx, backward: bool = False) -> bool:
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
        x8 = plan.isz == 2 and plan.HW % 8 == 0 and shared.USE_X8
        want = (plan.M <= CPU_SPLIT_MAX_GROUP or x8) and many
    else:
        want = plan.N * plan.G < GPU_SPLIT_BELOW_GROUPS and plan.M >= GPU_SPLIT_MIN_GROUP
    if not want:
        return False
    try:  # pieces within the loop limit (huge groups may not have them: they run fused)
        group_norm_split.SplitPlan(plan, ctx.cpu_adapter)
    except ValueError:
        return False
    return True


def choose(plan, ctx, backward=False):
    """The plan module this call runs (thread, split or split_nhwc, else fused)."""
    if use_thread(plan, ctx):
        return group_norm_thread
    if use_split(plan, ctx, backward=backward):
        return group_norm_split_nhwc if plan.nhwc else group_norm_split
    return group_norm_fused


def variants(cpu_adapter, key, layout, silu, backward):
    """Every (kernel, entry, dtypes, constants) a GroupNorm call of ``layout`` and storage ``key``
    can launch on this kind of adapter, whatever its shape: the plans ``auto`` or the forced
    plan can choose (a forced plan falls back to fused where a shape does not fit it)."""
    name = plan_name()
    modules = [group_norm_fused]
    if name in ("auto", "split"):
        modules.append(group_norm_split)
    if name != "fused":  # channels-last splits under every plan but fused
        modules.append(group_norm_split_nhwc)
    if name == "thread" or (name == "auto" and cpu_adapter):
        modules.append(group_norm_thread)
    out = []
    for module in modules:
        out += module.variants(cpu_adapter, key, layout, silu, backward)
    if backward:
        out.append(("group_norm_dweight.wgsl", "main", {}, {}))
    return out

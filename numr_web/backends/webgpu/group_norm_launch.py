"""GroupNorm on WebGPU, forward and backward: a call's outputs, its kept recipe, the launcher's names.

The names the tests and scripts reach (``PLAN``, ``PLANS``, ``use_split``, ``GroupPlan``...)
stay importable from here.

A call's launches depend only on its signature (shape, dtype, layout, G, eps, SiLU, which of
weight and bias, the adapter kind, the binding limit and the switches): the first call of a
signature asks the planner (``group_norm_planner``) for the plan, lets that plan's module write
its launches into a ``Program`` (``group_norm_shared``), and keeps the result as a ``Recipe``:
pipelines looked up, parameter blocks written into kept buffers, scratch (the forward's
statistics workspace, the backward's partials) and constant arrays (a missing bias's zeros)
made once.  A later call of that signature makes its outputs, binds them and records the
dispatches; the kept bind groups (``device.Context``) find its buffers when the pool hands the
same ones back.

The switches (``PLAN``, ``SPLIT_PIECE_STEPS``, ``INLINE_REDO_STEPS``, ``USE_X8``, ``NHWC_KQ``)
and the planner's thresholds live in the modules that read them; reading or assigning them
here (``group_norm_launch.PLAN = "split"``) reaches those modules.
"""

from __future__ import annotations

import functools
import math
import struct
import sys
import types
import weakref
from sys import getrefcount

from numr_web.backends.webgpu import (
    array_kernels,
    device,
    group_norm_fused,
    group_norm_planner,
    group_norm_split,
    group_norm_split_nhwc,
    group_norm_thread,
)
from numr_web.backends.webgpu import group_norm_shared as shared
from numr_web.backends.webgpu.array import WebGPUArray
from numr_web.backends.webgpu.device import Scratch, grid
from numr_web.backends.webgpu.group_norm_fused import BlockPlan
from numr_web.backends.webgpu.group_norm_planner import plan_name, use_split, use_thread
from numr_web.backends.webgpu.group_norm_shared import (
    F32,
    GroupPlan,
    Program,
    Workspace,
    pack_params,
    plan_pieces,
    plan_pieces_cpu,
)
from numr_web.backends.webgpu.group_norm_split import SplitPlan
from numr_web.backends.webgpu.group_norm_split_nhwc import NhwcSplitPlan
from numr_web.numerics import eps_as_float32

__all__ = [
    "BlockPlan",
    "GroupPlan",
    "NhwcSplitPlan",
    "Program",
    "Recipe",
    "SplitPlan",
    "Workspace",
    "backward",
    "forward",
    "pack_params",
    "plan_name",
    "plan_pieces",
    "plan_pieces_cpu",
    "use_split",
    "use_thread",
]

#: recipes kept per device (each holds its parameter buffers and scratch)
RECIPES_KEPT = 64


def _f32_param(v):
    if v is None:
        return None
    return v if v.dtype == F32 else array_kernels.convert(v, F32)


def _switches():
    """What a call's launches depend on beyond its arguments: the plan and the test switches."""
    planner = group_norm_planner
    return (
        # the usual case without plan_name's call: no plan assigned or asked for in the environment
        "auto" if planner.PLAN is None and planner._read_plan_env() is None else plan_name(),
        shared.SPLIT_PIECE_STEPS,
        shared.INLINE_REDO_STEPS,
        shared.USE_X8,
        group_norm_split_nhwc.NHWC_KQ,
    )


_new_array = WebGPUArray.__new__


def _unhold(held, nbytes):
    held[0] -= nbytes


class Recipe:
    """A Program made ready for one device: each launch's pipeline, kept parameter buffer and
    bindings, those of the call's arrays left as names; the scratch and constant arrays made
    (and filled) once.  ``run(ctx, arrays)`` records the launches for one call."""

    __slots__ = ("names", "steps", "held", "_last", "out_specs", "_outs", "__weakref__")

    def __init__(self, ctx, prog: Program):
        maxb = ctx.max_binding
        scratch = {name: Scratch(ctx, nbytes) for name, nbytes in prog.scratch.items()}
        for name, (count, value) in prog.fills.items():
            s = scratch[name] = Scratch(ctx, count * 4)
            array_kernels.fill(WebGPUArray(s, (count,), F32), value)
        self.held = list(scratch.values())
        names = {}  # the call's arrays, in order of first use
        steps = []
        for kernel, entry, dtypes, consts, binds, workgroups, params in prog.launches:
            pipe = ctx.pipeline(kernel, entry, dtypes, consts)
            held = ctx.params_buffer(params)
            self.held.append(held)
            slots = []
            for bind in binds:
                name = bind[0]
                if name[0] == "#":
                    s = scratch[name]
                    whole = (s.buffer, 0, min(s.size, maxb))
                    slots.append((-1, (s.buffer, bind[1], bind[2]) if len(bind) == 3 else whole))
                elif name == "~dummy":
                    slots.append((-1, (ctx.dummy, 0, min(256, maxb))))
                else:
                    slots.append((names.setdefault(name, len(names)), bind[1:]))
            slots.append((-1, (held.buffer, 0, held.size)))
            steps.append(((kernel, entry, dtypes, consts), pipe, grid(workgroups), tuple(slots)))
        self.names = tuple(names)
        self.steps = tuple(steps)
        #: (the call arrays' buffers and binding sizes, bind groups, the transport's prepared dispatches)
        #: of the last call: a call with the
        #: same buffers (the pool hands them back) binds nothing anew.  The buffer objects are held
        #: and compared themselves: a destroyed one never comes back from the pool, so a kept group
        #: never names a destroyed buffer
        self._last = None
        #: the call's outputs, ``(nbytes, shape, dtype, strides)`` each (set by the caller on the first call)
        self.out_specs = None
        #: [a sentinel, the buffers of the last call's outputs...] (``outputs``), or None
        self._outs = None

    def outputs(self, ctx):
        """New arrays for a call's outputs (``out_specs``).  The recipe holds its last outputs' buffers
        (``Scratch``) while the device's budget (``HELD_OUTPUT_BYTES``) allows: a buffer that nothing else
        refers to any more (its arrays were dropped) is handed out again as it is, one still in use is
        replaced by a new one from the pool.  A reused buffer skips the pool's allocation, its weak
        reference and the release when its arrays die: on lavapipe right after a wait, about half of what
        a kept call's Python cost beyond the floor kernels' call (docs/reports/2026-12-04-held-outputs.md).
        Whether a buffer is free is read from its reference count against a sentinel's held the same way
        (a plain object that only the list refers to), so no interpreter's counting is assumed."""
        outs = self._outs
        if outs is None:
            made = [Scratch(ctx, n) for n, _, _, _ in self.out_specs]
            self._hold(ctx, made)
        else:
            with ctx.lock:  # two threads never take one free buffer both: each holds what it took (made) on leaving
                counts = [getrefcount(o) for o in outs]
                free = counts[0]
                made = []
                for i in range(1, len(outs)):
                    o = outs[i]
                    if counts[i] != free:  # its arrays (or an array sharing its buffer) still live
                        o = outs[i] = Scratch(ctx, self.out_specs[i - 1][0])
                    made.append(o)
        arrays = []
        for o, (_, shape, dt, st) in zip(made, self.out_specs):  # WebGPUArray._wrap's work, without its calls
            a = _new_array(WebGPUArray)
            a._storage, a.shape, a.dtype, a.strides = o, shape, dt, st
            arrays.append(a)
        return arrays

    def _hold(self, ctx, made):
        held = ctx.held_output_bytes
        nbytes = sum(o.size for o in made)
        if held[0] + nbytes <= device.HELD_OUTPUT_BYTES:
            held[0] += nbytes
            self._outs = [object(), *made]
            weakref.finalize(self, _unhold, held, nbytes)

    def run(self, ctx, arrays):
        maxb = ctx.max_binding
        found = []
        for name in self.names:
            a = arrays[name]
            st = a._storage
            if st.ctx is not ctx or st.buffer is None:
                a._check_alive()  # raises for an array of a lost device (ctx itself is checked by the caller's x.ctx)
            found.append((st.buffer, min(st.size, maxb)))
        last = self._last
        if last is not None and last[0] == found:
            if not ctx._batch_depth:
                # outside a batch: the kept dispatches in one command buffer of their own, recorded and
                # submitted by one transport call (no batch to open and close: on lavapipe, right after a
                # wait, that took about 0.07 of the floor kernels' call, and a launch() per dispatch
                # about as much again; docs/reports/2026-12-03-webgpu-host-work.md).  Nothing is
                # allocated or written before that submit, so no buffer is handed out too early
                ctx.transport.submit_dispatches(ctx.dev, last[2])
                return
            launch = ctx.launch
            for (names, pipe, groups, _slots), group in zip(self.steps, last[1]):
                launch(*names, None, 0, prepared=(pipe, groups, group))
            return
        enc = None if ctx._batch_depth else ctx.transport.encode(ctx.dev)
        launch = ctx.launch
        made = []
        for names, pipe, groups, slots in self.steps:
            binds = []
            for i, rng in slots:
                if i < 0:
                    binds.append(rng)
                else:
                    buf, whole = found[i]
                    binds.append((buf, rng[0], rng[1]) if rng else (buf, 0, whole))
            group = ctx.bind_group(pipe, binds)
            made.append(group)
            launch(*names, binds, 0, prepared=(pipe, groups, group), encoding=enc)
        prepared = ctx.transport.prepare_dispatches(ctx.dev, [(s[1], g, s[2]) for s, g in zip(self.steps, made)])
        self._last = (found, made, prepared)
        if enc is not None:
            ctx.transport.submit_encoded(ctx.dev, enc)


def _signature(ctx, program, x, layout, num_groups, *args):
    """What the launches of the call ``program(plan, ctx, key, *args)`` on ``x`` depend on:
    ``(program, shape, dtype name, layout, G, *args, adapter kind, binding limit, switches)``
    (``_recipe`` reads the program and its args back from it)."""
    return (program, x.shape, x.dtype.name, layout, num_groups, *args, ctx.cpu_adapter, ctx.max_binding, _switches())


def _kept_recipe(ctx, sig):
    """The recipe kept for the signature ``sig`` (now the most recently used), else None."""
    recipe = ctx.recipes.get(sig)
    if recipe is not None:
        ctx.recipes.move_to_end(sig)
    return recipe


def _recipe(ctx, sig, x, layout, num_groups):
    """The kept recipe of the call signed ``sig`` (``_signature``), made on its first call (the
    least recently used beyond RECIPES_KEPT go)."""
    recipe = _kept_recipe(ctx, sig)
    if recipe is not None:
        return recipe
    recipes = ctx.recipes
    plan = GroupPlan(x, num_groups, layout, ctx.cpu_adapter)
    recipe = recipes[sig] = Recipe(ctx, sig[0](plan, ctx, ctx.dtype_key(x.dtype.name), *sig[5:-3]))
    while len(recipes) > RECIPES_KEPT:
        recipes.popitem(last=False)
    return recipe


# -- programs: a call's launches from its signature alone ---------------------------------------------


def _forward_affine(prog, C, has_w, has_b):
    """(affine, bindings of W and B): a missing one of the two is a kept constant array."""
    if not has_w and not has_b:
        return False, [("~dummy",), ("~dummy",)]
    w = ("w",) if has_w else prog.add_fill("ones", C, 1.0)
    b = ("b",) if has_b else prog.add_fill("zeros", C, 0.0)
    return True, [w, b]


def forward_program(plan, ctx, key, eps, silu, has_w, has_b) -> Program:
    prog = Program()
    affine, affine_binds = _forward_affine(prog, plan.C, has_w, has_b)
    module = group_norm_planner.choose(plan, ctx)
    module.forward(prog, plan, ctx.cpu_adapter, ctx.max_binding, affine_binds, eps, silu, affine, key)
    return prog


def _backward_affine(prog, C, silu, has_w, has_b):
    """(use_w, bindings of W and B) of a backward.  The kernels read B only with SiLU (z = xc *
    scale + shift): without it the weight fills that binding.  SiLU without a weight or a bias
    gets kept constant arrays of ones or zeros."""
    if silu:
        w = ("w",) if has_w else prog.add_fill("ones", C, 1.0)
        b = ("b",) if has_b else prog.add_fill("zeros", C, 0.0)
        return True, [w, b]
    if has_w:
        return True, [("w",), ("w",)]
    return False, [("~dummy",), ("~dummy",)]


def backward_program(plan, ctx, key, silu, has_w, has_b) -> Program:
    prog = Program()
    use_w, affine_binds = _backward_affine(prog, plan.C, silu, has_w, has_b)
    module = group_norm_planner.choose(plan, ctx, backward=True)
    ws = module.backward(prog, plan, ctx.cpu_adapter, ctx.max_binding, affine_binds, silu, use_w, key)
    if has_w and plan.C:
        prog.launch(
            "group_norm_dweight.wgsl",
            "main",
            {},
            {},
            [ws.dsdb, ("rstd",), ("dweight",), ("dbias",), ws.coef],
            -(-plan.C // 64),
            struct.pack("<4I", plan.N, plan.C, plan.G, plan.channels_per_group),
        )
    return prog


def variant_keys(ctx, dtype, layout, activation, *, shapes=None, backward=True, weight=None, bias=None):
    """The pipeline keys (``Context.pipeline_key``) GroupNorm calls of storage ``dtype`` (a
    DType), ``layout`` and ``activation`` can launch on this device: for any shape (every
    variant the planner's plans can reach: with the CPU planner's workgroup sizes, some
    hundreds), or for the calls of ``shapes`` only (``(shape, num_groups)`` pairs), with and
    without weight and bias (``weight`` / ``bias`` True or False: only with or only without
    it; None: both); the backward's too with ``backward``."""
    key = ctx.dtype_key(dtype.name)
    silu = activation == "silu"
    found = []
    if shapes is None:
        for bwd in (False, True) if backward else (False,):
            found += group_norm_planner.variants(ctx.cpu_adapter, key, layout, silu, bwd)
        found.append(array_kernels.FILL_F32)  # a missing weight's ones, a missing bias's zeros
        return [ctx.pipeline_key(*k) for k in found]
    affines = [(w, b) for w in (False, True) for b in (False, True) if weight in (None, w) and bias in (None, b)]
    fills = False
    for shape, groups in shapes:
        plan = GroupPlan(
            types.SimpleNamespace(shape=tuple(shape), itemsize=dtype.itemsize), groups, layout, ctx.cpu_adapter
        )
        if plan.N * plan.G == 0 or plan.M == 0:
            continue
        for has_w, has_b in affines:
            progs = [forward_program(plan, ctx, key, 0.0, silu, has_w, has_b)]
            if backward:
                progs.append(backward_program(plan, ctx, key, silu, has_w, has_b))
            for prog in progs:
                found += prog.pipeline_keys()
                fills = fills or bool(prog.fills)
    if fills:  # the recipes' constant arrays
        found.append(array_kernels.FILL_F32)
    return [ctx.pipeline_key(*k) for k in found]


# -- the calls ---------------------------------------------------------------------------------------


#: eps_as_float32 for the eps values calls have used (a few): a cache lookup instead of struct's pack and unpack,
#: which right after a wait took about 0.06 of the floor kernels' call on lavapipe
_eps32 = functools.lru_cache(maxsize=64)(eps_as_float32)


def _stats(ctx, n, g):
    """A new (n, g) float32 array (mean or rstd)."""
    return WebGPUArray._wrap(Scratch(ctx, n * g * 4), (n, g), F32, (g * 4, 4))


def _ctx_of(x):
    """``x.ctx`` without its property's calls: the array's device, checked alive."""
    st = x._storage
    ctx = st.ctx
    if ctx.dev.lost or st.buffer is None:
        x._check_alive()  # raises, naming the lost device
    return ctx


def forward(x: WebGPUArray, weight, bias, num_groups, eps, activation, layout):
    ctx = _ctx_of(x)
    eps = _eps32(eps)  # inf beyond float32's range (rstd = 0), as on the CPU's float32 path
    shape = x.shape
    N, C = shape[0], shape[1]
    if N * num_groups == 0 or C // num_groups * math.prod(shape[2:]) == 0:
        y = array_kernels.empty_like(x)
        if N * num_groups == 0:
            return y, _stats(ctx, N, num_groups), _stats(ctx, N, num_groups)
        # empty groups have no statistics (as on every backend)
        mean, rstd = (array_kernels.full(ctx, (N, num_groups), F32, math.nan) for _ in range(2))
        return y, mean, rstd
    # _signature(ctx, forward_program, x, layout, num_groups, eps, silu, has_w, has_b), written out: a kept call
    # runs this on every call, and each Python call it saves counts right after a wait
    sig = (
        forward_program,
        shape,
        x.dtype.name,
        layout,
        num_groups,
        eps,
        activation == "silu",
        weight is not None,
        bias is not None,
        ctx.cpu_adapter,
        ctx.max_binding,
        _switches(),
    )
    if (weight is None or weight.dtype is F32) and (bias is None or bias.dtype is F32):  # identity: as backward
        recipes = ctx.recipes
        recipe = recipes.get(sig)  # _kept_recipe's work, written out
        if recipe is not None:
            recipes.move_to_end(sig)
            y, mean, rstd = recipe.outputs(ctx)
            recipe.run(ctx, {"x": x, "y": y, "mean": mean, "rstd": rstd, "w": weight, "b": bias})  # one submit
            return y, mean, rstd
    with ctx.batch():  # a new recipe's constant fills, the conversions and the plan's dispatches: one submit
        recipe = _recipe(ctx, sig, x, layout, num_groups)
        if recipe.out_specs is None:
            stats = (N * num_groups * 4, (N, num_groups), F32, (num_groups * 4, 4))
            recipe.out_specs = ((x.nbytes, shape, x.dtype, x.strides), stats, stats)
        y, mean, rstd = recipe.outputs(ctx)
        arrays = {"x": x, "y": y, "mean": mean, "rstd": rstd, "w": _f32_param(weight), "b": _f32_param(bias)}
        recipe.run(ctx, arrays)
    return y, mean, rstd


def _given(weight, bias):
    return weight is not None, bias is not None


def backward(dy: WebGPUArray, x: WebGPUArray, mean, rstd, weight, bias, num_groups, activation, layout):
    ctx = _ctx_of(x)
    silu = activation == "silu"
    b = bias if silu else None
    if (
        # identity, not DType.__eq__ (a Python call each): an equal dtype that is another object takes the
        # general path below, which gives the same results
        dy.dtype is x.dtype
        and mean.dtype is F32
        and rstd.dtype is F32
        and (weight is None or weight.dtype is F32)
        and (b is None or b.dtype is F32)
        # C-ordered (N, G) statistics as the forward makes them (other strides: the general path's copy)
        and mean.strides == rstd.strides == (num_groups * 4, 4)
    ):
        sig = (
            backward_program,
            x.shape,
            x.dtype.name,
            layout,
            num_groups,
            silu,
            weight is not None,
            b is not None,
            ctx.cpu_adapter,
            ctx.max_binding,
            _switches(),
        )  # _signature(ctx, backward_program, x, layout, num_groups, silu, has_w, has_b), written out as forward's
        recipes = ctx.recipes
        recipe = recipes.get(sig)
        if recipe is not None:
            recipes.move_to_end(sig)  # nothing to convert and the recipe made: its dispatches, one submit (Recipe.run)
            return _backward_run(ctx, recipe, dy, x, mean, rstd, weight, b)
    with ctx.batch():  # a new recipe's constant fills, the conversions and the plan's dispatches: one submit
        return _backward(dy, x, mean, rstd, weight, bias, num_groups, activation, layout)


def _backward(dy, x, mean, rstd, weight, bias, num_groups, activation, layout):
    ctx = x.ctx
    if dy.dtype != x.dtype:
        dy = array_kernels.convert(dy, x.dtype)
    shape = x.shape
    N, C = shape[0], shape[1]
    mean = _f32_param(mean)
    rstd = _f32_param(rstd)
    if not mean.is_c_contiguous:
        mean = array_kernels.convert(mean, F32, c_order=True)
    if not rstd.is_c_contiguous:
        rstd = array_kernels.convert(rstd, F32, c_order=True)
    w = _f32_param(weight)
    silu = activation == "silu"
    b = _f32_param(bias) if silu else None
    if N * num_groups == 0 or C // num_groups * math.prod(shape[2:]) == 0:
        dx = array_kernels.empty_like(x)
        if weight is None:
            return dx, None, None
        dweight = array_kernels.empty(ctx, (C,), F32)
        dbias = array_kernels.empty(ctx, (C,), F32)
        if C:
            dweight = array_kernels.full(ctx, (C,), F32, 0.0)
            dbias = array_kernels.full(ctx, (C,), F32, 0.0)
        return _in_weight_dtype(weight, dx, dweight, dbias)
    sig = _signature(ctx, backward_program, x, layout, num_groups, silu, *_given(w, b))
    recipe = _recipe(ctx, sig, x, layout, num_groups)
    if recipe.out_specs is None:
        specs = [(x.nbytes, shape, x.dtype, x.strides)]
        if w is not None:
            specs += [(C * 4, (C,), F32, (4,))] * 2  # dweight, dbias
        recipe.out_specs = tuple(specs)
    dx, dweight, dbias = _backward_run(ctx, recipe, dy, x, mean, rstd, w, b)
    return (dx, None, None) if weight is None else _in_weight_dtype(weight, dx, dweight, dbias)


def _backward_run(ctx, recipe, dy, x, mean, rstd, w, b):
    """(dx, dweight, dbias) of the kept backward ``recipe`` on arrays of the kernels' dtypes (dweight and
    dbias None without ``w``)."""
    if w is None:
        (dx,) = recipe.outputs(ctx)
        recipe.run(ctx, {"x": x, "dy": dy, "dx": dx, "mean": mean, "rstd": rstd, "w": w, "b": b})
        return dx, None, None
    dx, dweight, dbias = recipe.outputs(ctx)
    arrays = {
        "x": x,
        "dy": dy,
        "dx": dx,
        "mean": mean,
        "rstd": rstd,
        "w": w,
        "b": b,
        "dweight": dweight,
        "dbias": dbias,
    }
    recipe.run(ctx, arrays)
    return dx, dweight, dbias


def _in_weight_dtype(weight, dx, dweight, dbias):
    if weight.dtype != F32:
        dweight, dbias = array_kernels.convert(dweight, weight.dtype), array_kernels.convert(dbias, weight.dtype)
    return dx, dweight, dbias


# -- the switches and thresholds, read and assigned where they live -----------------------------------

_OWNERS = {
    **dict.fromkeys(
        (
            "PLAN",
            "PLANS",
            "GPU_SPLIT_BELOW_GROUPS",
            "GPU_SPLIT_MIN_GROUP",
            "CPU_SPLIT_MAX_GROUP",
            "CPU_SPLIT_MIN_GROUPS",
            "CPU_SPLIT_MIN_ELEMENTS",
            "THREAD_MIN_GROUPS",
            "THREAD_MAX_GROUP_BYTES",
        ),
        group_norm_planner,
    ),
    **dict.fromkeys(
        ("SPLIT_PIECE_STEPS", "INLINE_REDO_STEPS", "USE_X8", "X8_KEYS", "STEP_CAP", "WG"),
        shared,
    ),
    **dict.fromkeys(("CPU_PIECE_STEPS", "CPU_SPLIT_WG"), group_norm_split),
    "NHWC_KQ": group_norm_split_nhwc,
    "THREAD_WG": group_norm_thread,
    "MAXGB": group_norm_fused,
}


def _forwarded(name, owner):
    """A property of the launcher module reading and assigning ``owner.name``: a data descriptor, so
    tools that save and restore a module attribute (pytest's monkeypatch) restore the owner's value
    instead of finding nothing in this module's ``__dict__``."""

    def get(_self):
        return getattr(owner, name)

    def put(_self, value):
        setattr(owner, name, value)

    return property(get, put, doc=f"{owner.__name__}.{name}")


#: this module's type: the names of ``_OWNERS`` are properties reading from and assigning to their modules
_Launcher = type(
    "_Launcher",
    (types.ModuleType,),
    {name: _forwarded(name, owner) for name, owner in _OWNERS.items()},
)

sys.modules[__name__].__class__ = _Launcher

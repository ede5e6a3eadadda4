"""Double backward cases shared by tests/test_webgpu_double_backward.py (CPython, lavapipe) and
tests/test_browser_webgpu_extras.py (Pyodide in Chromium).

``second_derivatives`` is the computation: it runs unchanged on the host and, as source text sent
to the browser, in Pyodide without NumPy.  Following ``numr_web.autograd.gradgradcheck``: the
first gradients of ``<v, group_norm(x, G, w, b)>`` with respect to x (and w, b) are taken with
``create_graph=True``, then the gradients of ``sum_i <u_i, grad_i>`` with respect to the same
inputs.  Those exercise every node of ops/composite.py (and SiLU's sigmoid) a second time.

Tolerance (``tolerance``): both float32 paths compute the same formula in float32 and differ in
summation order (NumPy's pairwise sums; WGSL's reduce sums runs of up to 2048 elements in order,
then the runs) and in the rounding of single operations.  Each result is held, against the same
computation in float64 on the CPU and on the scale of its largest element, to 10x the larger of
the CPU float32 path's own error there and the typical error of one in-order float32 sum of the
group's M elements, sqrt(M) u (u = 2^-24; bfloat16 storage: its rounding, 2^-9).  Measured on
lavapipe (scripts are the tests: the errors are printed with -s): the WebGPU results stay within
2 to 30 u where the CPU's are 1.4 to 14 u, at M = 64 to 16384.
"""

from __future__ import annotations

import math

import numpy as np

U32 = 2.0**-24
#: relative rounding of a bfloat16 / float16 store (half an ulp at 1)
U16 = {"bfloat16": 2.0**-9, "float16": 2.0**-11}

# (name, shape, G, affine ("none" | "weight" | "both"), activation, layout, dtype)
CASES = [
    ("plain", (2, 8, 4, 4), 2, "none", None, "nchw", "float32"),
    ("affine", (2, 8, 4, 4), 2, "both", None, "nchw", "float32"),
    ("weight-silu", (2, 8, 4, 4), 2, "weight", "silu", "nchw", "float32"),
    ("affine-silu", (2, 16, 8, 8), 4, "both", "silu", "nchw", "float32"),
    ("plain-silu-nhwc", (2, 16, 8, 8), 4, "none", "silu", "nhwc", "float32"),
    ("affine-nhwc", (2, 16, 6, 6), 4, "both", None, "nhwc", "float32"),
    ("affine-silu-nhwc", (2, 8, 4, 4), 2, "both", "silu", "nhwc", "float32"),
    ("rank3-affine-silu", (3, 12, 10), 3, "both", "silu", "nchw", "float32"),
    ("bf16-affine-silu", (2, 8, 4, 4), 2, "both", "silu", "nchw", "bfloat16"),
]


def second_derivatives(numr_web, x, v, u, w, b, G, act):
    """Gradients of sum_i <u_i, d<v, group_norm(x, G, w, b, act)>/d input_i> with respect to the
    inputs (x, then w and b where given), as raw arrays (None where an input does not reach it)."""
    xt = numr_web.Tensor(x, requires_grad=True)
    wt = numr_web.Tensor(w, requires_grad=True) if w is not None else None
    bt = numr_web.Tensor(b, requires_grad=True) if b is not None else None
    inputs = [t for t in (xt, wt, bt) if t is not None]
    y = numr_web.group_norm(xt, G, wt, bt, activation=act)
    firsts = numr_web.autograd.grad([y], inputs, [v], create_graph=True)
    loss = None
    for g, uu in zip(firsts, u):
        term = (g * numr_web.Tensor(uu)).sum()
        loss = term if loss is None else loss + term
    seconds = numr_web.autograd.grad([loss], inputs, allow_unused=True)
    return [None if s is None else s.data for s in seconds]


def case_arrays(case, seed=7):
    """(x, v, [u...], w, b) as NumPy float64 for one case; x has an offset and a scale so that the
    statistics are not trivial, and w, b are random (signs included)."""
    name, shape, _G, affine, _act, _layout, _dtype = case
    rng = np.random.default_rng(seed + sum(map(ord, name)))
    c = shape[1]
    x = rng.standard_normal(shape) * 2.0 + 0.5
    v = rng.standard_normal(shape)
    w = rng.standard_normal(c) if affine in ("weight", "both") else None
    b = rng.standard_normal(c) if affine == "both" else None
    u = [rng.standard_normal(shape)] + [rng.standard_normal(c) for t in (w, b) if t is not None]
    return x, v, u, w, b


def stored(a, dtype):
    """``a`` rounded to the storage dtype, as float64 again (what both float32 paths start from)."""
    if a is None:
        return None
    if dtype == "bfloat16":
        import ml_dtypes

        return a.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    return a.astype(dtype).astype(np.float64)


def group_size(case):
    _name, shape, G, *_ = case
    return shape[1] // G * math.prod(shape[2:])


def rel_err(got, ref):
    """max |got - ref| / max |ref| (ref's scale; 0 when both are 0)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    scale = np.abs(ref).max() if ref.size else 0.0
    diff = np.abs(got - ref).max() if ref.size else 0.0
    return float(diff / scale) if scale else float(diff)


def tolerance(case, cpu_err):
    """10x the larger of the CPU float32 path's error on this output and sqrt(M) u (see above);
    16-bit storage adds its own rounding of the stored result."""
    dtype = case[-1]
    floor = math.sqrt(group_size(case)) * U32
    if dtype in U16:
        floor = max(floor, U16[dtype])
    return 10.0 * max(cpu_err, floor)

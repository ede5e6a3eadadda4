"""The fused Numba path of the CPU backend: a kernel plan per shape and layout, and the calls into ``kernels_*``.

``CpuBackend`` calls :func:`group_norm_forward` / :func:`group_norm_backward`
when its path is ``"fused"``.  Same contract as ``numr_web.backends.base``:
NumPy arrays in and out, dense in the given ``layout`` (``"nchw"`` or
``"nhwc"``; ``dy`` in x's), float16/bfloat16/float32 storage with float32
accumulation, float64 with float64, optional SiLU after the affine.

Design (details in docs/cpu.md):

* NCHW with enough groups: one work item per (n, g); the group's statistics
  (shifted sums, vectorized float32 partials flushed to float64) and its apply
  run back to back, so the second read of the group comes from the core's
  cache.  Backward likewise: per-channel sums, then dx, per (n, g).
* NCHW with few or huge groups: each channel is cut into spatial pieces fixed by
  the shape, each piece gives float64 moments with its own shift, and pieces are
  merged with Chan's formula in a fixed order.
* Channels-last: one kernel call per direction on the (N, S, C) buffer viewed as
  super-rows of R whole rows; one work item per sample when samples are small
  (statistics and apply back to back, from cache), else blocks of super-rows
  whose per-channel moments are merged per group (Chan) and then per sample.
  Every split is fixed by the shape: deterministic and independent of the
  thread count.

Importing this module never imports Numba; the kernels (``kernels_nchw``,
``kernels_nhwc``, with ``kernels_common`` and ``kernels_dtype``) are imported on
first use, compile then and are cached on disk (Numba's ``cache=True``;
``NUMBA_CACHE_DIR`` moves it).

Compiling a layout and dtype's kernels takes 15 to 40 s on a small machine; loading them from the
cache about a second.  So the backend's ``auto`` path does not wait for either: ``warm_in_background``
compiles (or loads) a family -- every kernel a (layout, dtype) can reach, as ``warm_family`` calls
them -- in a thread while the NumPy path serves, and ``family_ready`` says when the fused kernels
take over (issue 26).
"""

from __future__ import annotations

import importlib.util
import math
import sys
import threading
import time
import types

import numpy as np

from numr_web.backends.cpu import numpy_path
from numr_web.backends.cpu import threads as cpu_threads
from numr_web.backends.cpu.shared import SUPERROW, channels_last_rows, empty_like_layout, refine_mean, superrow_factor
from numr_web.dtypes import BFLOAT16, dtype_name
from numr_web.memory_layout import as_channels_last
from numr_web.numerics import REFINE_MEAN_ABOVE
from numr_web.schema import schema

GROUP_NORM = schema("group_norm")

_INSTALL_HINT = "pip install 'numr-web[fast]'"

#: the kernel modules (``numr_web.backends.cpu.<name>``), imported on first use (each imports Numba)
KERNEL_MODULES = ("kernels_dtype", "kernels_common", "kernels_nchw", "kernels_nhwc")

#: NCHW groups larger than this many elements are split into pieces
GROUP_MAX = 1 << 18
#: the (n, g)-per-item NCHW path needs at least this many groups (else pieces)
MIN_GROUP_ITEMS = 8
#: target number of parallel work items for the piece paths
TARGET_ITEMS = 16
#: largest piece, in elements
PIECE_MAX = 1 << 17
#: the same two for channels-last row blocks (each block item also merges its C channels'
#: moments into groups, so fewer and longer blocks pay off: 5-10% at 2x1280x16x16)
NHWC_TARGET_ITEMS = 8
NHWC_PIECE_MAX = 1 << 18

_kernels = None
_import_error: str | None = None


_load_lock = threading.Lock()  # a background warm-up and the caller's thread may both load first


def _load_kernels():
    """The kernel modules as one namespace (``.nchw``, ``.nhwc``, ``.common``), or None without Numba."""
    if _kernels is not None:
        return _kernels
    with _load_lock:
        return _load_kernels_once()


def _load_kernels_once():
    global _kernels, _import_error
    if _kernels is not None:
        return _kernels
    if _import_error is not None:
        return None
    try:
        from numr_web.backends.cpu import kernels_common, kernels_nchw, kernels_nhwc
    except Exception as exc:  # ImportError, or a broken Numba/llvmlite install
        _import_error = f"{type(exc).__name__}: {exc}"
        return None
    _kernels = types.SimpleNamespace(nchw=kernels_nchw, nhwc=kernels_nhwc, common=kernels_common)
    cpu_threads.start_runtime()  # before any parallel kernel: the wait policy (threads.py)
    return _kernels


_available: tuple[bool, str] | None = None


def available() -> tuple[bool, str]:
    """(True, description) when Numba imports; (False, how to get it) otherwise.

    Cached: the backend asks on every call."""
    global _available
    if _available is not None:
        return _available
    k = _load_kernels()
    if k is None:
        why = "numba is not installed" if _import_error and "numba" in _import_error else _import_error
        return False, f"fused CPU kernels need Numba ({why}); {_INSTALL_HINT}"
    import numba

    _available = (True, f"numba {numba.__version__}")
    return _available


def num_threads() -> int:
    """Threads a large call may run on: Numba's setting (``NUMBA_NUM_THREADS`` or ``numba.set_num_threads``)
    capped at the cores this process may use; busy machines and small calls use fewer (``cpu.threads``)."""
    if _load_kernels() is None:
        return 0
    import numba

    return min(numba.get_num_threads(), cpu_threads.usable_cores())


def threading_layer() -> str:
    """Numba's threading layer (``omp``, ``tbb`` or ``workqueue``); runs a tiny kernel if none started yet."""
    k = _load_kernels()
    if k is None:
        return "unavailable"
    import numba

    try:
        return numba.threading_layer()
    except ValueError:
        k.common.warmup_parallel(np.zeros(4))
        return numba.threading_layer()


def _require():
    k = _load_kernels()
    if k is None:
        raise RuntimeError(f"fused CPU kernels need Numba ({_import_error}); {_INSTALL_HINT}")
    return k


# ---------------------------------------------------------------------------
# array plumbing
# ---------------------------------------------------------------------------
_KERNEL_DTYPES = {np.dtype(np.float16): np.dtype(np.uint16)}
if BFLOAT16 is not None:
    _KERNEL_DTYPES[BFLOAT16] = np.dtype(np.int16)


def _kernel_view(a):
    """The storage reinterpreted for Numba: float16 -> uint16, bfloat16 -> int16."""
    view_dtype = _KERNEL_DTYPES.get(a.dtype)
    return a if view_dtype is None else a.view(view_dtype)


_ACC_INFO = {}
_CONST64 = {}


def _acc_info(dtype):
    """(accumulation dtype, its zero as a NumPy scalar) for a storage dtype, cached."""
    info = _ACC_INFO.get(dtype)
    if info is None:
        acc = np.dtype(GROUP_NORM.compute_dtype(dtype))
        info = _ACC_INFO[dtype] = (acc, acc.type(0))
    return info


def _const64(value, C):
    """A float64 array of C copies of value (cached; the kernels only read it).

    It stays writeable on purpose: Numba types a read-only array differently,
    so a read-only constant made every call without a weight or a bias
    compile (and cache) a second copy of each kernel.
    """
    a = _CONST64.get((value, C))
    if a is None:
        a = np.full(C, value, np.float64)
        if len(_CONST64) < 64:
            _CONST64[(value, C)] = a
    return a


def _as64(a, C):
    """A contiguous float64 (C,) copy of a parameter (one astype for a plain (C,) array)."""
    if type(a) is np.ndarray and a.shape == (C,):
        return a.astype(np.float64)
    return np.ascontiguousarray(np.asarray(a, np.float64).reshape(C))


def _affine64(weight, bias, C):
    """weight and bias as float64 (C,) arrays (ones and zeros where absent)."""
    w = _const64(1.0, C) if weight is None else _as64(weight, C)
    b = _const64(0.0, C) if bias is None else _as64(bias, C)
    return w, b


def _stats_arg(a, n, acc):
    """Saved mean/rstd as a contiguous (N*G,) array of the accumulation dtype."""
    if type(a) is np.ndarray and a.dtype == acc and a.flags.c_contiguous and a.size == n:
        return a.reshape(n)
    return np.ascontiguousarray(np.asarray(a).reshape(n), dtype=acc)


def _pieces_nchw(N, C, S):
    """Spatial pieces per channel for the NCHW piece kernels, fixed by the shape."""
    pieces = max(-(-S // PIECE_MAX), -(-TARGET_ITEMS // max(N * C, 1)))
    pieces = min(pieces, max(1, S // 1024)) if S >= 1024 else 1
    return max(1, min(pieces, S))


def _pieces_nhwc(N, superrows, superrow_length):
    """Blocks of super-rows per sample for the channels-last block kernels, fixed by the shape."""
    pieces = max(-(-NHWC_TARGET_ITEMS // max(N, 1)), -(-(superrows * superrow_length) // NHWC_PIECE_MAX))
    return max(1, min(pieces, superrows))


#: channels-last samples of at most this many elements, with at least SAMPLE_ITEMS_MIN of
#: them, run one work item per sample (statistics and apply back to back, from cache)
SAMPLE_FUSE_MAX = 1 << 19
SAMPLE_ITEMS_MIN = 2

_NHWC_PLANS = {}


def _nhwc_plan(N, S, C):
    """(P, R, fused) for the channels-last kernels: R rows per super-row, P blocks of
    super-rows per sample (for the sums and for the elementwise pass); fused: one work item
    per sample (P = 1).  Fixed by the shape alone (cached)."""
    key = (N, S, C)
    plan = _NHWC_PLANS.get(key)
    if plan is None:
        R = superrow_factor(S, C, SUPERROW)
        if N >= SAMPLE_ITEMS_MIN and S * C <= SAMPLE_FUSE_MAX:
            plan = (1, R, True)
        else:
            plan = (_pieces_nhwc(N, S // R, R * C), R, False)
        if len(_NHWC_PLANS) < 256:
            _NHWC_PLANS[key] = plan
    return plan


def _piece_counts(S, P):
    """Elements in each of the P spatial pieces of a channel of S."""
    piece_len = -(-S // P)
    return np.array([max(0, min(S, (k + 1) * piece_len) - k * piece_len) for k in range(P)], np.float64)


# ---------------------------------------------------------------------------
# forward
# ---------------------------------------------------------------------------
def _use_group_path(layout, N, G, M):
    return layout == "nchw" and N * G >= MIN_GROUP_ITEMS and M <= GROUP_MAX


def _dims(x, num_groups):
    """(N, C, G, S, C/G, M) of an (N, C, *spatial) array; M = elements per group."""
    N, C = int(x.shape[0]), int(x.shape[1])
    G = int(num_groups)
    S = math.prod(x.shape[2:])
    channels_per_group = C // G
    return N, C, G, S, channels_per_group, channels_per_group * S


@cpu_threads.policy_call("forward")
def group_norm_forward(x, weight, bias, num_groups, eps, activation=None, *, layout):
    """Return ``(y, mean, rstd)`` of ``x``, dense in ``layout``; see ``numr_web.backends.base.Backend``.

    Groups whose statistics leave ``numerics.ORDINARY_RANGE`` (or are NaN) are recomputed in
    float64, scaled by a power of two (``numpy_path.careful_forward``); the check reads only
    the (N, G) statistics."""
    acc = _acc_info(x.dtype)[0]
    eps = numpy_path.compute_eps(eps, acc)
    y, mean, rstd = _forward_kernels(x, weight, bias, num_groups, eps, activation, layout=layout)
    if y.size and not _ordinary(mean, rstd, acc):
        flags = numpy_path.forward_flags(mean, rstd, acc)
        numpy_path.careful_forward(x, y, mean, rstd, weight, bias, num_groups, eps, activation, flags)
    return y, mean, rstd


_LIMITS = {}


def _ordinary(mean, rstd, acc):
    """numpy_path.ordinary in one Numba loop (a few us less than NumPy's four reductions)."""
    limits = _LIMITS.get(acc)
    if limits is None:
        limits = _LIMITS[acc] = numpy_path.ordinary_limits(acc)
    n = rstd.size if type(rstd) is np.ndarray else int(np.size(rstd))
    return _kernels.common.ordinary_stats(_stats_arg(mean, n, acc), _stats_arg(rstd, n, acc), *limits)


def _forward_kernels(x, weight, bias, num_groups, eps, activation=None, *, layout):
    N, C, G, S, channels_per_group, M = _dims(x, num_groups)
    acc, proto = _acc_info(x.dtype)
    silu = activation == "silu"
    y = empty_like_layout(x, layout)
    if x.size == 0:
        mean = np.full((N, G), np.nan, acc)
        return y, mean, mean.copy()
    k = _require()
    w64, b64 = _affine64(weight, bias, C)
    eps = float(eps)
    mean = np.empty((N, G), acc)
    rstd = np.empty((N, G), acc)

    if _use_group_path(layout, N, G, M):
        k.nchw.fwd_nchw_groups(
            _kernel_view(x.reshape(N * G, channels_per_group, S)),
            _kernel_view(y.reshape(N * G, channels_per_group, S)),
            w64,
            b64,
            G,
            eps,
            silu,
            mean.reshape(-1),
            rstd.reshape(-1),
            proto,
        )
        return y, mean, rstd

    if layout == "nhwc":
        P, R, fused = _nhwc_plan(N, S, C)
        x3, y3 = _kernel_view(channels_last_rows(x)), _kernel_view(channels_last_rows(y))
        if fused:
            k.nhwc.nhwc_forward_samples(x3, y3, G, R, eps, w64, b64, mean, rstd, silu, proto)
        else:
            k.nhwc.nhwc_forward_blocks(x3, y3, G, P, R, eps, w64, b64, mean, rstd, silu, proto)
        return y, mean, rstd

    # NCHW with few or huge groups: spatial pieces of each channel, merged per group
    P = _pieces_nchw(N, C, S)
    x3 = _kernel_view(x.reshape(N, C, S))
    pmean = np.empty(N * C * P, np.float64)
    pm2 = np.empty(N * C * P, np.float64)
    k.nchw.nchw_piece_moments(x3, P, pmean, pm2, proto)
    mean64 = np.empty((N, G), np.float64)
    m264 = np.empty((N, G), np.float64)
    k.nchw.merge_pieces(
        pmean.reshape(N * G, -1),
        pm2.reshape(N * G, -1),
        np.tile(_piece_counts(S, P), channels_per_group),
        mean64.reshape(-1),
        m264.reshape(-1),
    )
    mhi_nc = np.empty((N, C), acc)
    scale_nc = np.empty((N, C), acc)
    shift_nc = np.empty((N, C), acc)
    k.nchw.finish_forward(mean64, m264, M, eps, w64, b64, mean, rstd, mhi_nc, scale_nc, shift_nc, proto)
    k.nchw.nchw_piece_apply(x3, _kernel_view(y.reshape(N, C, S)), P, mhi_nc, scale_nc, shift_nc, silu)
    return y, mean, rstd


# ---------------------------------------------------------------------------
# backward
# ---------------------------------------------------------------------------
def _affine_out(dw64, db64, weight):
    if weight is None:
        return None, None
    weight_dtype = np.asarray(weight).dtype
    return dw64.astype(weight_dtype, copy=False), db64.astype(weight_dtype, copy=False)


def _refined_mean(x, layout, mean_flat, rstd_flat, N, G, M):
    """The saved float32 mean with its low part restored, as float64, where it matters for SiLU.

    With SiLU the kernels rebuild the pre-activation from the given mean before their own
    refinement (which comes with the sums), and a z off by mean_lo * scale (5e-4 at offset 1e4)
    cost dx 8e-4 of relative precision.  Where |mean| * rstd > REFINE_MEAN_ABOVE the low part is taken
    from sum(x - mean_hi) here, in float64, first (one extra read of x, on that rare path only);
    the kernels split a float64 mean into the same hi and lo.
    """
    mean_hi = mean_flat.reshape(N, G).astype(np.float64)
    with np.errstate(invalid="ignore"):
        need = np.abs(mean_hi) * rstd_flat.reshape(N, G) > REFINE_MEAN_ABOVE
    if not need.any():
        return mean_flat
    if layout == "nhwc":
        sums = channels_last_rows(x).sum(axis=1, dtype=np.float64).reshape(N, G, -1).sum(axis=2)
    else:
        sums = x.reshape(N, G, -1).sum(axis=2, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = refine_mean(mean_flat.reshape(N, G), sums - M * mean_hi, M, np.float32)  # the NumPy path's rule
    return (mean_hi + np.where(need, lo, 0.0)).reshape(-1)


@cpu_threads.policy_call("backward")
def group_norm_backward(dy, x, mean, rstd, weight, bias, num_groups, activation=None, *, layout):
    """Return ``(dx, dweight, dbias)`` from the saved statistics (closed form); dy and x dense in ``layout``.

    Groups whose saved statistics leave ``numerics.ORDINARY_RANGE`` get their dx recomputed in
    float64, scaled by a power of two, and dweight/dbias come from that recomputation
    (``numpy_path.careful_backward``)."""
    dx, dw, db = _backward_kernels(dy, x, mean, rstd, weight, bias, num_groups, activation, layout=layout)
    acc = _acc_info(x.dtype)[0]
    if x.size and not _ordinary(mean, rstd, acc):
        flags = numpy_path.backward_flags(mean, rstd, acc)
        if flags.any():
            dw64, db64 = numpy_path.careful_backward(
                dy, x, mean, rstd, weight, bias, num_groups, activation, acc, dx, flags
            )
            dw, db = _affine_out(dw64, db64, weight)
    return dx, dw, db


def _backward_kernels(dy, x, mean, rstd, weight, bias, num_groups, activation=None, *, layout):
    if dy.dtype != x.dtype:
        dy = dy.astype(x.dtype)  # (keeps the layout)
    N, C, G, S, channels_per_group, M = _dims(x, num_groups)
    acc, proto = _acc_info(x.dtype)
    silu = activation == "silu"
    dx = empty_like_layout(x, layout)
    if x.size == 0:
        if weight is None:
            return dx, None, None
        weight_dtype = np.asarray(weight).dtype
        return dx, np.zeros(C, weight_dtype), np.zeros(C, weight_dtype)
    k = _require()
    w64, b64 = _affine64(weight, bias, C)
    mean_flat = _stats_arg(mean, N * G, acc)
    rstd_flat = _stats_arg(rstd, N * G, acc)
    mean_ng = mean_flat.reshape(N, G)
    rstd_ng = rstd_flat.reshape(N, G)
    # Where |mean| * rstd > REFINE_MEAN_ABOVE (as on the NumPy path) the float32-saved mean's low
    # part is recovered from sum(x - mean_hi), accumulated with the other sums; elsewhere the
    # saved mean's rounding moves xhat by less than 16 * 2**-24 and that sum is skipped.
    refine = acc == np.float32
    if silu and refine:
        mean_flat = _refined_mean(x, layout, mean_flat, rstd_flat, N, G, M)
        mean_ng = mean_flat.reshape(N, G)
    dw64 = np.empty(C, np.float64)
    db64 = np.empty(C, np.float64)

    if _use_group_path(layout, N, G, M):
        ds = np.empty((N * G, channels_per_group), np.float64)
        db = np.empty((N * G, channels_per_group), np.float64)
        group_shape = (N * G, channels_per_group, S)
        k.nchw.bwd_nchw_groups(
            _kernel_view(dy.reshape(group_shape)),
            _kernel_view(x.reshape(group_shape)),
            _kernel_view(dx.reshape(group_shape)),
            mean_flat,
            rstd_flat,
            w64,
            b64,
            G,
            silu,
            refine,
            REFINE_MEAN_ABOVE,
            ds,
            db,
            dw64,
            db64,
            proto,
        )
        return (dx,) + _affine_out(dw64, db64, weight)

    if layout == "nhwc":
        P, R, fused = _nhwc_plan(N, S, C)
        args = (
            _kernel_view(channels_last_rows(dy)),
            _kernel_view(channels_last_rows(x)),
            _kernel_view(channels_last_rows(dx)),
            mean_ng,
            rstd_ng,
            w64,
            b64,
            G,
        )
        if fused:
            k.nhwc.nhwc_backward_samples(*args, R, silu, refine, REFINE_MEAN_ABOVE, dw64, db64, proto)
        else:
            k.nhwc.nhwc_backward_blocks(*args, P, R, silu, refine, REFINE_MEAN_ABOVE, dw64, db64, proto)
        return (dx,) + _affine_out(dw64, db64, weight)

    # NCHW with few or huge groups: spatial pieces of each channel, per-(n, c) coefficients
    x3 = _kernel_view(x.reshape(N, C, S))
    dy3 = _kernel_view(dy.reshape(N, C, S))
    dx3 = _kernel_view(dx.reshape(N, C, S))
    mhi = np.empty((N, C), acc)
    scale = np.empty((N, C), acc)
    shift = np.empty((N, C), acc)
    k.nchw.backward_coefficients(mean_ng, rstd_ng, w64, b64, 1, mhi, scale, shift, proto)
    P = _pieces_nchw(N, C, S)
    pds = np.empty((N, C, P), np.float64)
    pdb = np.empty((N, C, P), np.float64)
    psx = np.empty((N, C, P), np.float64)
    k.nchw.nchw_piece_bwd_sums(dy3, x3, P, mhi, scale, shift, silu, pds.reshape(-1), pdb.reshape(-1), psx.reshape(-1))
    beta = np.empty((N, C), acc)
    gamma = np.empty((N, C), acc)
    k.nchw.finish_backward(
        pds.sum(axis=2),
        pdb.sum(axis=2),
        psx.sum(axis=2),
        mean_ng,
        rstd_ng,
        refine,
        REFINE_MEAN_ABOVE,
        w64,
        M,
        1,
        beta,
        gamma,
        dw64,
        db64,
        proto,
    )
    k.nchw.nchw_piece_bwd_apply(dy3, x3, dx3, P, mhi, scale, shift, scale, beta, gamma, silu)
    return (dx,) + _affine_out(dw64, db64, weight)


# ---------------------------------------------------------------------------
# families compiled ahead of need (the auto path's background warm-up)
# ---------------------------------------------------------------------------
#: (N, C, H, W, G) calls that reach every fused kernel of a layout and dtype: many groups (one work
#: item per group), few groups (spatial pieces), and groups past the piece limit
WARMUP_SHAPES = ((2, 64, 4, 4, 32), (1, 4, 4, 4, 1), (1, 8, 512, 256, 2))

_families: dict = {}  # (layout, dtype name) -> "warming" | "ready" | "failed: why"
_families_lock = threading.Lock()
_ready: set = set()  # (layout, dtype) pairs whose family is ready, as given to family_ready


def importable() -> bool:
    """Whether Numba can be imported here, without importing it (the auto path's first call must not
    wait for Numba's import either); a failed import of the kernels counts as not importable."""
    if _kernels is not None:
        return True
    if _import_error is not None:
        return False
    if "numba" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken module spec
        return False


def _family(layout, dtype):
    return layout, dtype_name(dtype)


def family_state(layout, dtype) -> str | None:
    """``"ready"``, ``"warming"``, ``"failed: why"`` or None (not asked for yet) for the fused kernels of
    ``layout`` ("nchw" or "nhwc") and ``dtype`` in this process."""
    return _families.get(_family(layout, dtype))


def family_ready(layout, dtype) -> bool:
    if (layout, dtype) in _ready:  # every call asks: without dtype_name's call (NumPy's dtype.name costs ~3 us)
        return True
    ready = _families.get(_family(layout, dtype)) == "ready"
    if ready and len(_ready) < 64:
        _ready.add((layout, dtype))  # a family once ready stays ready
    return ready


def families() -> dict:
    """{"nchw float32": state, ...} for every family asked for in this process."""
    return {f"{layout} {name}": state for (layout, name), state in sorted(_families.items())}


def warm_family(layout, dtype) -> float:
    """Compile (or load from Numba's cache) every fused kernel ``layout`` and ``dtype`` can reach, as
    ``WARMUP_SHAPES`` call them with and without affine parameters and SiLU; marks the family ready and
    returns the seconds it took.  RuntimeError without Numba."""
    start = time.perf_counter()
    _require()
    dt = BFLOAT16 if dtype_name(dtype) == "bfloat16" else np.dtype(dtype_name(dtype))
    for *dims, groups in WARMUP_SHAPES:
        x = np.linspace(-1, 1, math.prod(dims)).reshape(dims).astype(dt)
        if layout == "nhwc":
            x = as_channels_last(x)
        ones = np.ones(dims[1], np.float32)
        for w, act in ((ones, None), (ones, "silu"), (None, None), (None, "silu")):
            _, mean, rstd = group_norm_forward(x, w, w, groups, 1e-5, act, layout=layout)
            group_norm_backward(x, x, mean, rstd, w, w, groups, act, layout=layout)
    with _families_lock:
        _families[_family(layout, dtype)] = "ready"
    return time.perf_counter() - start


def _warm_quietly(family):
    try:
        warm_family(*family)
    except Exception as exc:  # no Numba, a broken install: the NumPy path goes on serving, info says why
        with _families_lock:
            _families[family] = f"failed: {type(exc).__name__}: {exc}"


def warm_in_background(layout, dtype) -> str:
    """Start compiling ``layout`` and ``dtype``'s fused kernels in a daemon thread, once per family;
    returns the family's state ("warming", or what it already was)."""
    family = _family(layout, dtype)
    with _families_lock:
        state = _families.get(family)
        if state is not None:
            return state
        _families[family] = "warming"
    threading.Thread(target=_warm_quietly, args=(family,), name=f"numr_web warm {family}", daemon=True).start()
    return "warming"

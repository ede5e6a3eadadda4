"""CUDA backend: GroupNorm kernels from ``numr_web/kernels/cuda/group_norm.cu`` run through CuPy.

Importing this module never imports CuPy nor touches a GPU; everything device
related happens on first use.  The launch planning (vector widths, how many
blocks share one group, how the backward reduction is cut into pieces) is plain
Python in this module so that tests can check it, and an emulation of the
kernels' index math, on machines without a GPU.

Forward (2 kernels, or 1 when every group has its own block):

1. ``gn_fwd_stats``: each (n, g) group is cut into ``splits`` chunks, one block
   each; shifted sums s1, s2 in the accumulation dtype; the last block of a
   group (integer ticket) combines the partials in a fixed order in double,
   redoes the group around its mean when the shift was poor, and writes mean,
   rstd and per-(n, c) apply parameters (mean_hi, scale, shift).
2. ``gn_fwd_apply``: y = (x - mean_hi) * scale + shift [silu], 16-byte loads.

Backward (4 kernels, 3 without weight): per-(n, c) partial sums ds, db and
sum(x - mean) over pieces of the spatial extent (``gn_bwd_reduce_nchw`` /
``_nhwc``), per-group coefficients (``gn_bwd_group_coeffs``), the elementwise
``gn_bwd_dx`` and, with a weight, dweight/dbias summed over n in a fixed order
(``gn_bwd_channel_grads``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from numr_web.backends.base import Backend
from numr_web.dtypes import BFLOAT16
from numr_web.memory_layout import channels_last_perm, memory_layout
from numr_web.numerics import CUDA_BLOCK, cuda_defines, eps_as_float32
from numr_web.schema import schema

GROUP_NORM = schema("group_norm")

INSTALL_HINT = "pip install 'numr-web[cuda12]' or 'numr-web[cuda13]'"
KERNEL_PATH = Path(__file__).resolve().parent.parent / "kernels" / "cuda" / "group_norm.cu"
COMPILE_OPTIONS = ("-std=c++17", *cuda_defines())

BLOCK = CUDA_BLOCK  # threads per block (NUMR_BLOCK in group_norm.cu, from the same constant)
WARPS = BLOCK // 32
LAYOUT_CODE = {"nchw": 0, "nhwc": 1}
STORAGE_TYPES = {  # numpy dtype name -> storage type in group_norm.cu
    "float16": "numr_f16",
    "bfloat16": "numr_bf16",
    "float32": "float",
    "float64": "double",
}
ACC_TYPES = {"float32": "float", "float64": "double"}


# ---------------------------------------------------------------------------
# kernel names (one source of truth for the backend and the nvcc/NVRTC tests)
# ---------------------------------------------------------------------------
def full_vec(itemsize: int) -> int:
    """Elements per 16-byte load."""
    return 16 // int(itemsize)


def stats_kernel(storage: str, layout: str, vec: int) -> str:
    return f"gn_fwd_stats<{storage}, {LAYOUT_CODE[layout]}, {vec}>"


def fused_kernel(storage: str, layout: str, vec: int, silu: bool) -> str:
    return f"gn_fwd_fused<{storage}, {LAYOUT_CODE[layout]}, {vec}, {int(bool(silu))}>"


def apply_kernel(storage: str, layout: str, vec: int, silu: bool) -> str:
    return f"gn_fwd_apply<{storage}, {LAYOUT_CODE[layout]}, {vec}, {int(bool(silu))}>"


def reduce_kernel(storage: str, layout: str, vec: int, silu: bool) -> str:
    return f"gn_bwd_reduce_{layout}<{storage}, {vec}, {int(bool(silu))}>"


def group_coeffs_kernel(acc: str) -> str:
    return f"gn_bwd_group_coeffs<{acc}>"


def channel_grads_kernel(acc: str) -> str:
    return f"gn_bwd_channel_grads<{acc}>"


def dx_kernel(storage: str, layout: str, vec: int, silu: bool) -> str:
    return f"gn_bwd_dx<{storage}, {LAYOUT_CODE[layout]}, {vec}, {int(bool(silu))}>"


def name_expressions(dtype_name: str, layout: str) -> list[str]:
    """Every kernel instantiation the backend may launch for one (dtype, layout)."""
    storage = STORAGE_TYPES[dtype_name]
    itemsize = 8 if dtype_name == "float64" else (4 if dtype_name == "float32" else 2)
    acc = ACC_TYPES["float64" if dtype_name == "float64" else "float32"]
    names = []
    for vec in (full_vec(itemsize), 1):
        names.append(stats_kernel(storage, layout, vec))
        for silu in (False, True):
            names.append(fused_kernel(storage, layout, vec, silu))
            names.append(apply_kernel(storage, layout, vec, silu))
            names.append(reduce_kernel(storage, layout, vec, silu))
            names.append(dx_kernel(storage, layout, vec, silu))
    names.append(group_coeffs_kernel(acc))
    names.append(channel_grads_kernel(acc))
    return names


def all_name_expressions() -> list[str]:
    out = []
    for dtype_name in STORAGE_TYPES:
        for layout in LAYOUT_CODE:
            for name in name_expressions(dtype_name, layout):
                if name not in out:
                    out.append(name)
    return out


# ---------------------------------------------------------------------------
# launch planning (pure Python)
# ---------------------------------------------------------------------------
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ForwardPlan:
    stats_vec: int
    splits: int  # blocks per (n, g) group in the statistics kernel
    stats_blocks: int
    fused: bool  # one launch: statistics and apply in the group's own block
    apply_vec: int
    apply_total_vec: int
    apply_blocks: int


@dataclass(frozen=True)
class BackwardPlan:
    reduce_vec: int
    pieces: int  # P: pieces of the spatial extent per (n, c)
    piece: int  # NCHW: vectors per piece; NHWC: pixel rows per piece
    lanes_c: int  # NHWC: channel vectors per block (0 for NCHW)
    reduce_blocks: int
    coeff_blocks: int  # gn_bwd_group_coeffs: one warp per (n, g)
    channel_blocks: int  # gn_bwd_channel_grads: one warp per channel
    dx_vec: int
    dx_total_vec: int
    dx_blocks: int


def elementwise_blocks(total_vec: int, sm_count: int) -> int:
    # grid-stride loops: enough blocks to fill the device several times over
    return max(1, min(_cdiv(total_vec, BLOCK), sm_count * 32))


@functools.lru_cache(maxsize=512)
def plan_forward(
    N: int, C: int, S: int, G: int, layout: str, itemsize: int, aligned: bool, sm_count: int
) -> ForwardPlan:
    """How the forward kernels cut the work; requires N * C * S > 0."""
    full = full_vec(itemsize)
    Cg = C // G
    M = Cg * S
    if layout == "nchw":
        stats_vec = full if aligned and M % full == 0 else 1
        apply_vec = full if aligned and S % full == 0 else 1
    else:
        stats_vec = full if aligned and Cg % full == 0 else 1
        apply_vec = full if aligned and C % full == 0 else 1
    NG = N * G
    MV = M // stats_vec
    # Split a group over several blocks when there are too few groups to fill the
    # device (e.g. N*G = 32 on a 132-SM GPU), but give each block >= 4 vectors per thread.
    target_blocks = 4 * sm_count
    splits = max(1, min(_cdiv(target_blocks, NG), MV // (4 * BLOCK), 1024))
    total_vec = N * C * S // apply_vec
    # one launch when each group has its own block and its vectors stay inside a channel
    fused = splits == 1 and stats_vec == apply_vec
    return ForwardPlan(
        stats_vec, splits, NG * splits, fused, apply_vec, total_vec, elementwise_blocks(total_vec, sm_count)
    )


@functools.lru_cache(maxsize=512)
def plan_backward(
    N: int, C: int, S: int, G: int, layout: str, itemsize: int, aligned: bool, sm_count: int
) -> BackwardPlan:
    """How the backward kernels cut the work; requires N * C * S > 0."""
    full = full_vec(itemsize)
    if layout == "nchw":
        vec = full if aligned and S % full == 0 else 1
        SV = S // vec
        rows = N * C
        target_units = 32 * sm_count  # warps
        pieces = max(1, min(_cdiv(target_units, rows), _cdiv(SV, 64)))
        piece = _cdiv(SV, pieces)
        pieces = _cdiv(SV, piece)
        lanes_c = 0
        reduce_blocks = _cdiv(rows * pieces, WARPS)
    else:
        vec = full if aligned and C % full == 0 else 1
        CV = C // vec
        lanes_c = min(CV, BLOCK)
        rows_par = BLOCK // lanes_c
        c_tiles = _cdiv(CV, lanes_c)
        target_blocks = 4 * sm_count
        pieces = max(1, min(_cdiv(target_blocks, c_tiles * N), _cdiv(S, 4 * rows_par)))
        piece = _cdiv(S, pieces)
        pieces = _cdiv(S, piece)
        reduce_blocks = c_tiles * pieces * N
    total_vec = N * C * S // vec
    return BackwardPlan(
        vec,
        pieces,
        piece,
        lanes_c,
        reduce_blocks,
        _cdiv(N * G, WARPS),
        _cdiv(C, WARPS),
        vec,
        total_vec,
        elementwise_blocks(total_vec, sm_count),
    )


# ---------------------------------------------------------------------------
# the backend
# ---------------------------------------------------------------------------
_DTYPE_NAMES: dict = {}


def _dtype_name(dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        d = np.dtype(dtype)
        name = "bfloat16" if BFLOAT16 is not None and d == BFLOAT16 else d.name
        _DTYPE_NAMES[dtype] = name
    return name


@functools.lru_cache(maxsize=1024)
def _layout_of(shape, strides, itemsize) -> str:
    return memory_layout(shape, strides, itemsize)


def _layout(a) -> str:
    return _layout_of(a.shape, a.strides, a.itemsize)


class CupyBackend(Backend):
    name = "cupy"
    device = "cuda"

    def __init__(self):
        self._cupy = None
        self._lock = threading.Lock()
        self._modules: dict = {}
        self._functions: dict = {}
        self._sm_counts: dict = {}
        self._source = None
        self._tickets: dict = {}
        self._ready = None

    # -- discovery -----------------------------------------------------------
    def _import(self):
        if self._cupy is None:
            import cupy  # noqa: PLC0415 - optional dependency, imported on first use

            self._cupy = cupy
        return self._cupy

    def available(self):
        if getattr(self, "_ready", None) is not None:
            return self._ready
        try:
            cp = self._import()
        except Exception as exc:  # ImportError, or a broken CUDA install
            return False, f"CuPy is not importable ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:
            return False, f"no CUDA device ({type(exc).__name__}: {exc}); this backend needs an NVIDIA GPU and driver"
        if count == 0:
            return False, "no CUDA device; this backend needs an NVIDIA GPU and driver"
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        self._ready = (True, f"{name} (sm_{dev.compute_capability}), {count} device(s)")  # checked once
        return self._ready

    def owns(self, array) -> bool:
        return type(array).__module__.startswith("cupy")

    def info(self) -> dict:
        ok, why = self.available()
        out = {"available": ok, "detail": why}
        if not ok:
            return out
        cp = self._cupy
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        free, total = dev.mem_info
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        out.update(
            {
                "device_name": name,
                "compute_capability": f"{dev.compute_capability[:-1]}.{dev.compute_capability[-1]}",
                "multiprocessors": props["multiProcessorCount"],
                "memory_total_gib": round(total / 2**30, 2),
                "memory_free_gib": round(free / 2**30, 2),
                "cupy": cp.__version__,
                "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
                "kernels": KERNEL_PATH.name,
                "compile_options": " ".join(COMPILE_OPTIONS),
            }
        )
        return out

    @property
    def xp(self):
        return self._import()

    # -- transfers -------------------------------------------------------------
    def from_numpy(self, array):
        cp = self._import()
        array = np.asarray(array)
        try:
            if array.ndim >= 3 and memory_layout(array.shape, array.strides, array.itemsize) == "nhwc":
                perm = channels_last_perm(array.ndim)
                buf = cp.asarray(np.ascontiguousarray(array.transpose(perm)))
                return buf.transpose(np.argsort(perm))
            return cp.asarray(np.ascontiguousarray(array))
        except (TypeError, ValueError) as exc:
            if _dtype_name(array.dtype) == "bfloat16":
                raise TypeError(
                    "bfloat16 arrays on CUDA need CuPy >= 14 together with ml_dtypes "
                    f"({INSTALL_HINT}); CuPy said: {exc}"
                ) from exc
            raise

    def to_numpy(self, array):
        cp = self._import()
        if array.ndim >= 3 and memory_layout(array.shape, array.strides, array.itemsize) == "nhwc":
            perm = channels_last_perm(array.ndim)
            host = cp.asnumpy(array.transpose(perm))
            return host.transpose(np.argsort(perm))
        return cp.asnumpy(array)

    # -- helpers ---------------------------------------------------------------
    def _sm_count(self) -> int:
        cp = self._cupy
        dev = cp.cuda.Device().id
        if dev not in self._sm_counts:
            self._sm_counts[dev] = int(cp.cuda.runtime.getDeviceProperties(dev)["multiProcessorCount"])
        return self._sm_counts[dev]

    def _function(self, dtype_name: str, layout: str, name: str):
        cp = self._cupy
        dev = cp.cuda.Device().id
        key = (dev, dtype_name, layout, name)
        fn = self._functions.get(key)
        if fn is not None:
            return fn
        with self._lock:
            mkey = (dev, dtype_name, layout)
            module = self._modules.get(mkey)
            if module is None:
                if self._source is None:
                    self._source = KERNEL_PATH.read_text()
                # one module per (dtype, layout); CuPy keeps the compiled binary
                # in its on-disk kernel cache, so later processes load it.
                module = cp.RawModule(
                    code=self._source, options=COMPILE_OPTIONS, name_expressions=name_expressions(dtype_name, layout)
                )
                self._modules[mkey] = module
            try:
                fn = module.get_function(name)  # compiles the module on first use
            except Exception as exc:
                raise RuntimeError(
                    f"the CUDA kernels in {KERNEL_PATH.name} failed to compile or load for {dtype_name}/{layout} "
                    f"({type(exc).__name__}: {exc}); set CUPY_DUMP_CUDA_SOURCE_ON_ERROR=1 for the full log"
                ) from exc
            self._functions[key] = fn
        return fn

    @staticmethod
    def _address(array) -> int:
        return array.data.ptr

    def _stream_key(self):
        cp = self._cupy
        return cp.cuda.Device().id, cp.cuda.get_current_stream().ptr

    def _ticket_counters(self, n: int):
        """Zeroed int32 tickets for split groups, kept per (device, stream).

        The statistics kernel resets every ticket it uses to 0 before it
        exits, so the buffer is zero again for the next launch on the same
        stream (launches on one stream never overlap); no memset per call.
        """
        key = self._stream_key()
        buf = self._tickets.get(key)
        if buf is None or buf.size < n:
            buf = self._cupy.zeros(max(n, 1024), dtype=np.int32)
            self._tickets[key] = buf
        return buf

    @staticmethod
    def _buffer(array, layout):
        """The contiguous buffer behind ``array``, which is dense in ``layout``."""
        return array.transpose(channels_last_perm(array.ndim)) if layout == "nhwc" else array

    def as_layout(self, array, layout):
        cp = self._import()
        if _layout(array) == layout:
            return array
        if layout == "nhwc":
            perm = channels_last_perm(array.ndim)
            return cp.ascontiguousarray(array.transpose(perm)).transpose(np.argsort(perm))
        return cp.ascontiguousarray(array)

    def _empty(self, shape, dtype, layout):
        """(logical array, contiguous buffer) of a new array in ``layout``."""
        cp = self._cupy
        if layout == "nhwc":
            perm = channels_last_perm(len(shape))
            buf = cp.empty(tuple(shape[a] for a in perm), dtype=dtype)
            return buf.transpose(np.argsort(perm)), buf
        out = cp.empty(shape, dtype=dtype)
        return out, out

    def _param(self, array, acc):
        cp = self._cupy
        if array is None:
            return cp.empty(1, dtype=acc), 0
        return cp.ascontiguousarray(array.astype(acc, copy=False)).reshape(-1), 1

    # -- kernels ---------------------------------------------------------------
    @staticmethod
    def _on_device_of(array):
        """Launch on the GPU that holds ``array`` (CuPy launches on the current device)."""
        dev = getattr(array, "device", None)
        return dev if hasattr(dev, "__enter__") else contextlib.nullcontext()

    def group_norm_forward(self, x, weight, bias, num_groups, eps, activation=None, *, layout):
        with self._on_device_of(x):
            return self._forward(x, weight, bias, num_groups, eps, activation, layout)

    def group_norm_backward(self, dy, x, mean, rstd, weight, bias, num_groups, activation=None, *, layout):
        with self._on_device_of(x):
            return self._backward(dy, x, mean, rstd, weight, bias, num_groups, activation, layout)

    def _forward(self, x, weight, bias, num_groups, eps, activation, layout):
        cp = self._import()
        xbuf = self._buffer(x, layout)
        N, C = int(x.shape[0]), int(x.shape[1])
        S = math.prod(int(n) for n in x.shape[2:])
        G = int(num_groups)
        acc = np.dtype(GROUP_NORM.compute_dtype(x.dtype))
        dtype_name = _dtype_name(x.dtype)
        y, ybuf = self._empty(x.shape, x.dtype, layout)
        if N == 0 or S == 0 or C == 0:  # groups without elements have NaN statistics (every backend)
            return y, cp.full((N, G), np.nan, dtype=acc), cp.full((N, G), np.nan, dtype=acc)
        if acc == np.float32:
            eps = eps_as_float32(eps)  # as float32 arithmetic holds it: inf beyond its range (every backend)
        silu = activation == "silu"
        aligned = self._address(xbuf) % 16 == 0
        plan = plan_forward(N, C, S, G, layout, x.itemsize, aligned, self._sm_count())
        w, has_w = self._param(weight, acc)
        b, has_b = self._param(bias, acc)
        # one allocation for mean, rstd, the apply parameters and the split partials
        NG, NC = N * G, N * C
        n_part = 2 * plan.stats_blocks if plan.splits > 1 else 0
        ws = cp.empty(2 * NG + 3 * NC + n_part, dtype=acc)
        mean = ws[:NG].reshape(N, G)
        rstd = ws[NG : 2 * NG].reshape(N, G)
        params = ws[2 * NG : 2 * NG + 3 * NC]
        if plan.splits > 1:
            partials = ws[2 * NG + 3 * NC :]
            counters = self._ticket_counters(NG)
        else:  # never touched when a group has one block
            partials = params
            counters = ws
        storage = STORAGE_TYPES[dtype_name]
        i64 = np.int64
        if plan.fused:
            fused = self._function(dtype_name, layout, fused_kernel(storage, layout, plan.stats_vec, silu))
            fused(
                (plan.stats_blocks,),
                (BLOCK,),
                (
                    xbuf,
                    ybuf,
                    w,
                    b,
                    np.int32(has_w),
                    np.int32(has_b),
                    i64(N),
                    i64(C),
                    i64(S),
                    i64(G),
                    np.float64(eps),
                    mean,
                    rstd,
                    params,
                ),
            )
            return y, mean, rstd
        stats = self._function(dtype_name, layout, stats_kernel(storage, layout, plan.stats_vec))
        stats(
            (plan.stats_blocks,),
            (BLOCK,),
            (
                xbuf,
                w,
                b,
                np.int32(has_w),
                np.int32(has_b),
                i64(N),
                i64(C),
                i64(S),
                i64(G),
                np.int32(plan.splits),
                np.float64(eps),
                partials,
                counters,
                mean,
                rstd,
                params,
            ),
        )
        apply = self._function(dtype_name, layout, apply_kernel(storage, layout, plan.apply_vec, silu))
        apply(
            (plan.apply_blocks,), (BLOCK,), (xbuf, ybuf, params, i64(N * C), i64(C), i64(S), i64(plan.apply_total_vec))
        )
        return y, mean, rstd

    def _backward(self, dy, x, mean, rstd, weight, bias, num_groups, activation, layout):
        cp = self._import()
        xbuf, dybuf = self._buffer(x, layout), self._buffer(dy, layout)
        N, C = int(x.shape[0]), int(x.shape[1])
        S = math.prod(int(n) for n in x.shape[2:])
        G = int(num_groups)
        acc = np.dtype(GROUP_NORM.compute_dtype(x.dtype))
        dtype_name = _dtype_name(x.dtype)
        dx, dxbuf = self._empty(x.shape, x.dtype, layout)
        has_weight = weight is not None
        if N == 0 or S == 0 or C == 0:
            if not has_weight:
                return dx, None, None
            return dx, cp.zeros(C, dtype=weight.dtype), cp.zeros(C, dtype=weight.dtype)
        silu = activation == "silu"
        aligned = self._address(xbuf) % 16 == 0 and self._address(dybuf) % 16 == 0
        plan = plan_backward(N, C, S, G, layout, x.itemsize, aligned, self._sm_count())
        w, has_w = self._param(weight, acc)
        b, has_b = self._param(bias, acc)
        mean = cp.ascontiguousarray(mean.astype(acc, copy=False))
        rstd = cp.ascontiguousarray(rstd.astype(acc, copy=False))
        NG, NC, PS = N * G, N * C, N * plan.pieces * C
        ws = cp.empty(3 * PS + 7 * NC + NG + (2 * C if has_weight else 0), dtype=acc)
        part = ws[: 3 * PS]
        params = ws[3 * PS : 3 * PS + 7 * NC]  # mean_hi*s, rstd*w, b, beta, gamma, s, rstd/s*w per (n, c)
        mean_lo = ws[3 * PS + 7 * NC : 3 * PS + 7 * NC + NG]
        storage = STORAGE_TYPES[dtype_name]
        i64 = np.int64
        reduce = self._function(dtype_name, layout, reduce_kernel(storage, layout, plan.reduce_vec, silu))
        common = (
            dybuf,
            xbuf,
            mean,
            rstd,
            w,
            b,
            np.int32(has_w),
            np.int32(has_b),
            i64(N),
            i64(C),
            i64(S),
            i64(G),
            i64(plan.pieces),
            i64(plan.piece),
        )
        if layout == "nchw":
            reduce((plan.reduce_blocks,), (BLOCK,), common + (part,))
        else:
            reduce((plan.reduce_blocks,), (BLOCK,), common + (np.int32(plan.lanes_c), part))
        acc_type = "double" if dtype_name == "float64" else "float"
        coeffs = self._function(dtype_name, layout, group_coeffs_kernel(acc_type))
        coeffs(
            (plan.coeff_blocks,),
            (BLOCK,),
            (
                part,
                mean,
                rstd,
                w,
                b,
                np.int32(has_w),
                np.int32(has_b),
                i64(N),
                i64(C),
                i64(S),
                i64(G),
                i64(plan.pieces),
                params,
                mean_lo,
            ),
        )
        dxk = self._function(dtype_name, layout, dx_kernel(storage, layout, plan.dx_vec, silu))
        dxk(
            (plan.dx_blocks,),
            (BLOCK,),
            (dybuf, xbuf, dxbuf, params, i64(N * C), i64(C), i64(S), i64(plan.dx_total_vec)),
        )
        if not has_weight:
            return dx, None, None
        dw = ws[3 * PS + 7 * NC + NG : 3 * PS + 7 * NC + NG + C]
        db = ws[3 * PS + 7 * NC + NG + C :]
        grads = self._function(dtype_name, layout, channel_grads_kernel(acc_type))
        grads((plan.channel_blocks,), (BLOCK,), (part, rstd, mean_lo, i64(N), i64(C), i64(G), i64(plan.pieces), dw, db))
        return dx, dw.astype(weight.dtype, copy=False), db.astype(weight.dtype, copy=False)

    # -- generic ---------------------------------------------------------------
    def synchronize(self) -> None:
        if self._cupy is not None:
            self._cupy.cuda.get_current_stream().synchronize()

    def full_like(self, array, value):
        return self._import().full_like(array, value)


BACKEND = CupyBackend()

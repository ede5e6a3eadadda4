"""The CUDA backend: compiled here, emulated here, run where there is a GPU.

Four layers, so that a machine without a GPU still checks most of it:

1. The real ``.cu`` sources are compiled with nvcc for sm_80 and sm_90 (every
   kernel instantiation the backend can launch), and, where the NVRTC library
   is installed, with NVRTC exactly as ``cupy.RawModule`` does (no include
   paths, name expressions).  Under CI=true a missing nvcc fails.
2. A NumPy emulation of the kernels' block decomposition -- the same launch
   plans (imported from the backend), the same index math (including the
   magic-number division), the same per-thread accumulation order and shuffle
   trees -- checked against the independent float64 oracle and for exact
   coverage (every element read once per pass).
3. The same ``.cu`` file built for the CPU with g++ and a threading shim, and
   driven by the backend's own launch code with NumPy in place of CuPy (see
   HOST_SHIM below): the kernel bodies, the planning and the argument lists run
   for real.  Under CI=true a missing g++ fails.
4. ``@pytest.mark.cuda`` tests through the public API on a real device; they
   skip with a reason where CuPy or a device is missing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import IN_CI
from oracle import backward as oracle_backward
from oracle import channels_last, rel_err
from oracle import forward as oracle_forward

from numr_web import numerics
from numr_web.backends import cupy_
from numr_web.dtypes import BFLOAT16
from numr_web.memory_layout import channels_last_perm, memory_layout

KERNEL_DIR = cupy_.KERNEL_PATH.parent
CU_FILES = sorted(KERNEL_DIR.glob("*.cu"))
ARCHS = ("sm_80", "sm_90")


# ---------------------------------------------------------------------------
# 1. compilation
# ---------------------------------------------------------------------------
def _nvcc():
    path = shutil.which("nvcc")
    if path is None:
        for cand in sorted(glob.glob("/usr/local/cuda*/bin/nvcc")):
            path = cand
            break
    if path is None:
        msg = "nvcc not found (install the CUDA toolkit; it is on the CI machines)"
        if IN_CI:
            pytest.fail(msg + ": required under CI=true")
        pytest.skip(msg)
    return path


def _instantiation_unit(tmp_path: pathlib.Path) -> pathlib.Path:
    """A translation unit that instantiates every kernel the backend may launch."""
    names = cupy_.all_name_expressions()
    body = ",\n".join(f"    (void*)&{n}" for n in names)
    src = f'#include "{cupy_.KERNEL_PATH.as_posix()}"\nvoid* numr_web_kernels[] = {{\n{body}\n}};\n'
    path = tmp_path / "instantiate_all.cu"
    path.write_text(src)
    return path


def test_kernel_sources_exist_and_need_no_headers():
    assert CU_FILES, f"no .cu files in {KERNEL_DIR}"
    for cu in CU_FILES:
        text = cu.read_text()
        # NVRTC (CuPy) gets no include path: the sources must be self-contained
        assert not re.search(r"^\s*#\s*include", text, re.M), f"{cu.name} has an #include"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("cu", CU_FILES, ids=lambda p: p.name)
def test_each_cu_file_compiles(cu, arch, tmp_path):
    nvcc = _nvcc()
    proc = subprocess.run(
        [
            nvcc,
            *cupy_.COMPILE_OPTIONS,
            f"-arch={arch}",
            "-c",
            str(cu),
            "-o",
            str(tmp_path / "k.o"),
            "-Werror",
            "all-warnings",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_instantiation_compiles(arch, tmp_path):
    nvcc = _nvcc()
    unit = _instantiation_unit(tmp_path)
    proc = subprocess.run(
        [
            nvcc,
            *cupy_.COMPILE_OPTIONS,
            f"-arch={arch}",
            "-c",
            str(unit),
            "-o",
            str(tmp_path / "all.o"),
            "-Werror",
            "all-warnings",
            "-Xptxas",
            "-v",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    entries = re.findall(r"Compiling entry function '(\w+)' for '(\w+)'", proc.stderr)
    assert len(entries) == len(cupy_.all_name_expressions()), "one device entry per name expression"
    assert all(a == arch for _, a in entries)
    # no kernel needs more than the 255 registers __launch_bounds__(256) allows
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", proc.stderr)]
    assert regs and max(regs) <= 255


def _find_nvrtc():
    cands = []
    for base in sys.path:
        cands += glob.glob(os.path.join(base, "nvidia", "cu1*", "lib", "libnvrtc.so*"))
        cands += glob.glob(os.path.join(base, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*"))
    cands += glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*")
    found = ctypes.util.find_library("nvrtc")
    if found:
        cands.append(found)
    for c in cands:
        if "builtins" in c or ".alt." in c:
            continue
        try:
            # NVRTC dlopens its builtins library by name: load it from the same folder first
            for builtins in glob.glob(os.path.join(os.path.dirname(c), "libnvrtc-builtins.so*")):
                if ".alt." not in builtins:
                    ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(c)
        except OSError:
            continue
    return None


@pytest.mark.parametrize("arch", ARCHS)
def test_nvrtc_compiles_like_cupy(arch):
    """NVRTC with no include path and the name expressions: what cupy.RawModule does."""
    lib = _find_nvrtc()
    if lib is None:
        msg = "libnvrtc not found (pip install 'nvidia-cuda-nvrtc==13.0.*' to run this check without a GPU)"
        if IN_CI:
            pytest.fail(msg + ": .ci/run installs it, so it is required under CI=true")
        pytest.skip(msg)
    src = cupy_.KERNEL_PATH.read_bytes()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"group_norm.cu", 0, None, None) == 0
    names = cupy_.all_name_expressions()
    try:
        for n in names:
            assert lib.nvrtcAddNameExpression(prog, n.encode()) == 0, n
        # CuPy adds -ftz=true and asks NVRTC for PTX of the device's compute capability
        opts = [o.encode() for o in cupy_.COMPILE_OPTIONS] + [b"-ftz=true", f"-arch=compute_{arch[3:]}".encode()]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        assert rc == 0, log.value.decode(errors="replace")[-4000:]
        for n in names:
            lowered = ctypes.c_char_p()
            assert lib.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(lowered)) == 0, n
            assert lowered.value and lowered.value.startswith(b"_Z"), n
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, ptx)
        assert ptx.value.count(b".entry") == len(names)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def test_name_expressions_cover_every_launch_combination():
    names = cupy_.all_name_expressions()
    assert len(names) == len(set(names))
    for dtype_name, storage in cupy_.STORAGE_TYPES.items():
        for layout in ("nchw", "nhwc"):
            own = cupy_.name_expressions(dtype_name, layout)
            itemsize = {"float64": 8, "float32": 4}.get(dtype_name, 2)
            for vec in (cupy_.full_vec(itemsize), 1):
                assert cupy_.stats_kernel(storage, layout, vec) in own
                for silu in (False, True):
                    assert cupy_.apply_kernel(storage, layout, vec, silu) in own
                    assert cupy_.reduce_kernel(storage, layout, vec, silu) in own
                    assert cupy_.dx_kernel(storage, layout, vec, silu) in own


def test_block_size_and_constants_come_from_numerics():
    """group_norm.cu defines none of the shared constants itself: the compile options carry them."""
    src = cupy_.KERNEL_PATH.read_text()
    assert not re.search(r"#define NUMR_(BLOCK|POOR_SHIFT_RATIO)\b", src)
    assert cupy_.BLOCK == numerics.CUDA_BLOCK
    assert f"-DNUMR_BLOCK={numerics.CUDA_BLOCK}" in cupy_.COMPILE_OPTIONS
    assert f"-DNUMR_POOR_SHIFT_RATIO={numerics.POOR_SHIFT_RATIO!r}" in cupy_.COMPILE_OPTIONS


def test_the_source_refuses_to_compile_without_the_constants(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found") if not IN_CI else pytest.fail("g++ not found")
    proc = subprocess.run(
        [gxx, "-std=c++17", "-fsyntax-only", "-x", "c++", str(cupy_.KERNEL_PATH)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "cuda_defines" in proc.stderr


# ---------------------------------------------------------------------------
# the backend without CuPy / without a device
# ---------------------------------------------------------------------------
def _cupy_importable():
    try:
        import cupy  # noqa: F401
    except Exception:
        return False
    return True


def test_import_is_lazy_and_unavailability_says_how_to_fix():
    code = (
        "import sys, numr_web.backends.cupy_ as m; "
        "assert 'cupy' not in sys.modules, 'importing the backend imported cupy'; "
        "ok, why = m.BACKEND.available(); print(ok); print(why)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=pathlib.Path(__file__).resolve().parent.parent,
    )
    assert proc.returncode == 0, proc.stderr
    ok, why = proc.stdout.splitlines()[:2]
    if ok == "False":
        if not _cupy_importable():
            assert "numr-web[cuda12]" in why and "numr-web[cuda13]" in why
        else:
            assert "no CUDA device" in why
    assert cupy_.BACKEND.name == "cupy" and cupy_.BACKEND.device == "cuda"


def test_to_device_cuda_without_a_gpu_raises_a_clear_error():
    ok, why = cupy_.BACKEND.available()
    if ok:
        pytest.skip("a CUDA device is present")
    import numr_web
    from numr_web.errors import BackendUnavailable

    with pytest.raises(BackendUnavailable, match="cuda"):
        numr_web.to_device(np.zeros((2, 4), np.float32), "cuda")


# ---------------------------------------------------------------------------
# 2. emulation of the kernels' decomposition
# ---------------------------------------------------------------------------
U64 = np.uint64


def fastdiv(n, d):
    """FastDiv::div of group_norm.cu on a uint64 array."""
    n = np.asarray(n, dtype=U64)
    if d > 0xFFFFFFFF:
        return n // U64(d)
    shift = (d - 1).bit_length() if d > 1 else 0
    magic = ((1 << 32) * ((1 << shift) - d)) // d + 1
    assert magic < (1 << 32)
    small = n < U64(1 << 32)
    t = (np.where(small, n, 0) * U64(magic)) >> U64(32)
    q = (t + n) >> U64(shift)
    return np.where(small, q, n // U64(d))


def test_fastdiv_is_exact():
    rng = np.random.default_rng(0)
    divisors = list(range(1, 600)) + [2**k + o for k in range(10, 33) for o in (-1, 0, 1) if 0 < 2**k + o < 2**32]
    divisors += [int(v) for v in rng.integers(1, 2**32 - 1, 200)] + [2**32 - 1, 3 * 2**30, 2**32 + 5]
    for d in divisors:
        n = np.concatenate(
            [
                np.arange(0, 3000, dtype=U64),
                rng.integers(0, 2**32, 3000, dtype=U64),
                np.array([2**32 - 1, 2**32 - 2, 2**31, 2**31 - 1, 2**32, 2**40 + 7, 2**62], dtype=U64),
                (np.arange(1, 50, dtype=U64) * U64(d)) - U64(1),
                np.arange(1, 50, dtype=U64) * U64(d),
            ]
        )
        n = n[n < U64(2**63)]
        assert np.array_equal(fastdiv(n, d), n // U64(d)), d


def _acc(dtype):
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def _itemsize(dtype):
    return np.dtype(dtype).itemsize


def warp_tree(v):
    """__shfl_down_sync tree over 32 lanes (axis -1); the value lane 0 ends with."""
    v = np.array(v, copy=True)
    for o in (16, 8, 4, 2, 1):
        v[..., : 32 - o] = v[..., : 32 - o] + v[..., o:32]
    return v[..., 0]


def block_tree(per_thread):
    """block_sum2: warp trees, then warp 0's tree over the 8 warp sums."""
    warps = warp_tree(per_thread.reshape(cupy_.WARPS, 32))
    lane = np.zeros(32, dtype=per_thread.dtype)
    lane[: cupy_.WARPS] = warps
    return warp_tree(lane)


def _buffer(x):
    """Flat storage of x (NCHW or NHWC memory) and its layout."""
    layout = memory_layout(x.shape, x.strides, x.itemsize)
    assert layout in ("nchw", "nhwc")
    mem = x if layout == "nchw" else x.transpose(channels_last_perm(x.ndim))
    return np.ascontiguousarray(mem).reshape(-1), layout


def _from_buffer(flat, shape, layout):
    if layout == "nchw":
        return flat.reshape(shape)
    perm = channels_last_perm(len(shape))
    return flat.reshape(tuple(shape[a] for a in perm)).transpose(np.argsort(perm))


def group_vec_offsets(tv, n, g, C, S, Cg, vec, layout):
    base = (n * C + g * Cg) * S if layout == "nchw" else n * S * C + g * Cg
    tv = np.asarray(tv, dtype=U64)
    if layout == "nchw":
        return U64(base) + tv * U64(vec)
    cgv = Cg // vec
    s = fastdiv(tv, cgv)
    cv = tv - s * U64(cgv)
    return U64(base) + s * U64(C) + cv * U64(vec)


def accumulate_shifted(xf, n, g, C, S, Cg, vec, layout, K, v0, v1, R, touched):
    """Per-thread s1, s2 of accumulate_shifted (4-vector groups, then singles), R arithmetic."""
    tid = np.arange(cupy_.BLOCK)
    counts = np.maximum(0, -(-(v1 - v0 - tid) // cupy_.BLOCK))
    s1 = np.zeros(cupy_.BLOCK, R)
    s2 = np.zeros(cupy_.BLOCK, R)
    jmax = int(counts.max()) if counts.size else 0
    if jmax == 0:
        return s1, s2
    V = v0 + tid[:, None] + cupy_.BLOCK * np.arange(jmax)[None, :]
    mask = np.arange(jmax)[None, :] < counts[:, None]
    offs = group_vec_offsets(np.where(mask, V, 0), n, g, C, S, Cg, vec, layout)
    elem = offs[..., None] + np.arange(vec, dtype=U64)
    np.add.at(touched, elem[mask].reshape(-1).astype(np.int64), 1)
    vals = xf[elem.astype(np.int64)].astype(_acc(xf.dtype)).astype(R)  # (threads, j, vec)
    K = R(K)
    groups = counts // 4
    for j in range(0, jmax, 4):
        m = groups > j // 4
        if not m.any():
            break
        for k in range(vec):
            d = [vals[:, j + q, k] - K for q in range(4)]
            s1 = np.where(m, s1 + ((d[0] + d[1]) + (d[2] + d[3])), s1)
            s2 = np.where(m, s2 + ((d[0] * d[0] + d[1] * d[1]) + (d[2] * d[2] + d[3] * d[3])), s2)
    for j in range(jmax):
        m = (j >= 4 * groups) & (j < counts)
        for k in range(vec):
            d = vals[:, j, k] - K
            s1 = np.where(m, s1 + d, s1)
            s2 = np.where(m, s2 + d * d, s2)
    return s1, s2


def chan_of(v, C, S, vec, layout):
    v = np.asarray(v, dtype=U64)
    if layout == "nchw":
        return fastdiv(v, S // vec)
    row = fastdiv(v, C // vec)
    cv = v - row * U64(C // vec)
    nn = fastdiv(row, S)
    return nn * U64(C) + cv * U64(vec)


def silu_np(z):
    return z / (z.dtype.type(1) + np.exp(-z))


def silu_grad_np(z):
    one = z.dtype.type(1)
    s = one / (one + np.exp(-z))
    return s * (one + z * (one - s))


def emulate_forward(x, weight, bias, G, eps, silu, sm_count):
    xf, layout = _buffer(x)
    N, C = x.shape[:2]
    S = int(np.prod(x.shape[2:], dtype=np.int64))
    Cg, A = C // G, _acc(x.dtype)
    M = Cg * S
    plan = cupy_.plan_forward(N, C, S, G, layout, _itemsize(x.dtype), True, sm_count)
    w = np.ones(C) if weight is None else np.asarray(weight, np.float64)
    b = np.zeros(C) if bias is None else np.asarray(bias, np.float64)
    mean_out = np.empty((N, G), A)
    rstd_out = np.empty((N, G), A)
    params = np.empty((3, N * C), A)
    vec, splits = plan.stats_vec, plan.splits
    MV = M // vec
    chunk = -(-MV // splits)
    touched = np.zeros(xf.size, np.int64)
    for ng in range(N * G):
        n, g = divmod(ng, G)
        t = (np.arange(32, dtype=np.int64) * M) >> 5
        if layout == "nchw":
            offs = (n * C + g * Cg) * S + t
        else:
            offs = n * S * C + g * Cg + (t // Cg) * C + t % Cg
        K = warp_tree(xf[offs].astype(A) * A(0.03125))
        partial = []
        for split in range(splits):
            v0, v1 = split * chunk, min(MV, (split + 1) * chunk)
            s1, s2 = accumulate_shifted(xf, n, g, C, S, Cg, vec, layout, K, v0, v1, A, touched)
            partial.append((block_tree(s1), block_tree(s2)))
        t1 = sum(float(p[0]) for p in partial) if splits > 1 else float(partial[0][0])
        t2 = sum(float(p[1]) for p in partial) if splits > 1 else float(partial[0][1])
        d = t1 / M
        var = max(t2 / M - d * d, 0.0) if not np.isnan(t2 / M - d * d) else np.nan
        mean = float(K) + d
        if (d * d > 8.0 * var) or (np.isfinite(t1) and not np.isfinite(t2)):
            scratch = np.zeros(xf.size, np.int64)
            r1, r2 = accumulate_shifted(xf, n, g, C, S, Cg, vec, layout, mean, 0, MV, np.float64, scratch)
            r1, r2 = float(block_tree(r1)), float(block_tree(r2))
            d = r1 / M
            var = max(r2 / M - d * d, 0.0)
            mean = mean + d
        rstd = 1.0 / np.sqrt(var + eps)
        mean_hi = A(mean)
        mean_lo = float(A(mean - float(mean_hi)))
        mean_out[n, g], rstd_out[n, g] = mean_hi, A(rstd)
        for c in range(g * Cg, (g + 1) * Cg):
            scale = rstd * w[c]
            params[:, n * C + c] = (mean_hi, A(scale), A(b[c] - mean_lo * scale))
    # every element read exactly once by the statistics pass
    assert touched.min() == 1 and touched.max() == 1, (touched.min(), touched.max())
    # apply
    avec = plan.apply_vec
    v = np.arange(plan.apply_total_vec, dtype=U64)
    nc0 = chan_of(v, C, S, avec, layout).astype(np.int64)
    k = np.arange(avec)
    nc = nc0[:, None] + (0 if layout == "nchw" else k[None, :])
    elem = (v.astype(np.int64) * avec)[:, None] + k[None, :]
    assert np.array_equal(np.sort(elem.reshape(-1)), np.arange(xf.size))
    xa = xf[elem].astype(A)
    z = (xa - params[0][nc]) * params[1][nc] + params[2][nc]
    if silu:
        z = silu_np(z)
    yf = np.empty_like(xf)
    yf[elem] = z.astype(x.dtype)
    return _from_buffer(yf, x.shape, layout), mean_out, rstd_out, plan


def emulate_backward(dy, x, mean, rstd, weight, bias, G, silu, sm_count):
    xf, layout = _buffer(x)
    dyf, dlayout = _buffer(dy)
    assert dlayout == layout
    N, C = x.shape[:2]
    S = int(np.prod(x.shape[2:], dtype=np.int64))
    Cg, A = C // G, _acc(x.dtype)
    plan = cupy_.plan_backward(N, C, S, G, layout, _itemsize(x.dtype), True, sm_count)
    P, vec = plan.pieces, plan.reduce_vec
    w = np.ones(C, A) if weight is None else np.asarray(weight).astype(A)
    b = np.zeros(C, A) if bias is None else np.asarray(bias).astype(A)
    mean, rstd = np.asarray(mean, A), np.asarray(rstd, A)
    part = np.zeros((3, N, P, C), A)
    touched = np.zeros(xf.size, np.int64)

    def terms(xv, gv, mh, alpha, zs):
        xc = xv - mh
        dz = gv * silu_grad_np(xc * alpha + zs) if silu else gv
        return dz * xc, dz, xc

    if layout == "nchw":
        SV = S // vec
        unit = np.arange(N * C * P)
        row, p = unit // P, unit % P
        n, c = row // C, row % C
        ng = n * G + c // Cg
        mh, alpha, zs = mean.reshape(-1)[ng], rstd.reshape(-1)[ng] * w[c], b[c]
        v0 = p * plan.piece
        v1 = np.minimum(SV, v0 + plan.piece)
        J = -(-plan.piece // 32)
        acc = np.zeros((3, unit.size, 32), A)
        for j in range(J):
            vv = v0[:, None] + np.arange(32)[None, :] + 32 * j
            m = vv < v1[:, None]
            for k in range(vec):
                e = row[:, None] * S + vv * vec + k
                e = np.where(m, e, 0)
                np.add.at(touched, e[m], 1)
                t = terms(xf[e].astype(A), dyf[e].astype(A), mh[:, None], alpha[:, None], zs[:, None])
                for q in range(3):
                    acc[q] = np.where(m, acc[q] + t[q], acc[q])
        sums = warp_tree(acc)  # (3, units)
        part[:, n, p, c] = sums
    else:
        CV = C // vec
        lanes_c = plan.lanes_c
        rows_par = cupy_.BLOCK // lanes_c
        c_tiles = -(-CV // lanes_c)
        blk = np.arange(c_tiles * P * N)
        ct, rest = blk % c_tiles, blk // c_tiles
        p, n = rest % P, rest // P
        tx = np.arange(lanes_c)
        cv = ct[:, None] * lanes_c + tx[None, :]  # (B, lanes)
        ok = cv < CV
        s0 = p * plan.piece
        s1 = np.minimum(S, s0 + plan.piece)
        J = -(-plan.piece // rows_par)
        red = np.zeros((3, blk.size, rows_par, lanes_c, vec), A)
        for k in range(vec):
            c = np.where(ok, cv * vec + k, 0)
            ng = n[:, None] * G + c // Cg
            mh, alpha, zs = mean.reshape(-1)[ng], rstd.reshape(-1)[ng] * w[c], b[c]
            for j in range(J):
                s = s0[:, None] + np.arange(rows_par)[None, :] + rows_par * j  # (B, ty)
                m = (s < s1[:, None])[:, :, None] & ok[:, None, :]
                e = (n[:, None, None] * S + s[:, :, None]) * C + c[:, None, :]
                e = np.where(m, e, 0)
                np.add.at(touched, e[m], 1)
                t = terms(xf[e].astype(A), dyf[e].astype(A), mh[:, None, :], alpha[:, None, :], zs[:, None, :])
                for q in range(3):
                    red[q, ..., k] = np.where(m, red[q, ..., k] + t[q], red[q, ..., k])
        tot = np.zeros((3, blk.size, lanes_c, vec), A)
        for r in range(rows_par):  # fixed order, as thread ty == 0 sums
            tot = tot + red[:, :, r]
        for bi in range(blk.size):
            for ti in range(lanes_c):
                if ok[bi, ti]:
                    part[:, n[bi], p[bi], cv[bi, ti] * vec : cv[bi, ti] * vec + vec] = tot[:, bi, ti]
    assert touched.min() == 1 and touched.max() == 1, (touched.min(), touched.max())

    # gn_bwd_group_coeffs
    params = np.empty((5, N * C), A)
    mean_lo = np.empty((N, G), A)
    M = Cg * S
    for ng in range(N * G):
        n, g = divmod(ng, G)
        r = float(rstd[n, g])
        lanes = np.zeros((3, 32))
        for cc in range(Cg):
            c = g * Cg + cc
            ds = db = sx = 0.0
            for p in range(P):
                ds += float(part[0, n, p, c])
                db += float(part[1, n, p, c])
                sx += float(part[2, n, p, c])
            wc = float(w[c]) if weight is not None else 1.0
            lanes[:, cc % 32] += (wc * db, wc * ds, sx)
        sg, sgx, sxs = warp_tree(lanes)
        mh = mean[n, g]
        lo = 0.0
        if A == np.float32:
            rm = sxs / M
            ulp = float(np.spacing(np.abs(np.float32(mh))))
            lo = float(np.float32(rm)) if abs(rm) <= ulp else 0.0
        a = sg / M
        bcoef = r * (sgx - lo * sg) / M
        beta = r * r * bcoef
        gamma = beta * lo - r * a
        mean_lo[n, g] = lo
        for c in range(g * Cg, (g + 1) * Cg):
            wc = float(w[c]) if weight is not None else 1.0
            params[:, n * C + c] = (mh, A(r * wc), b[c] if bias is not None else 0, A(beta), A(gamma))
    # gn_bwd_dx
    dvec = plan.dx_vec
    v = np.arange(plan.dx_total_vec, dtype=U64)
    nc0 = chan_of(v, C, S, dvec, layout).astype(np.int64)
    k = np.arange(dvec)
    nc = nc0[:, None] + (0 if layout == "nchw" else k[None, :])
    elem = (v.astype(np.int64) * dvec)[:, None] + k[None, :]
    xc = xf[elem].astype(A) - params[0][nc]
    alpha = params[1][nc]
    dz = dyf[elem].astype(A)
    if silu:
        dz = dz * silu_grad_np(xc * alpha + params[2][nc])
    dxf = np.empty_like(xf)
    dxf[elem] = (alpha * dz - params[3][nc] * xc + params[4][nc]).astype(x.dtype)
    dx = _from_buffer(dxf, x.shape, layout)
    if weight is None:
        return dx, None, None, plan
    # gn_bwd_channel_grads
    dw = np.empty(C, A)
    dbias = np.empty(C, A)
    for c in range(C):
        g = c // Cg
        lanes = np.zeros((2, 32))
        for n in range(N):
            ds = sum(float(part[0, n, p, c]) for p in range(P))
            db = sum(float(part[1, n, p, c]) for p in range(P))
            lanes[:, n % 32] += (float(rstd[n, g]) * (ds - float(mean_lo[n, g]) * db), db)
        dw[c], dbias[c] = warp_tree(lanes)
    return dx, dw, dbias, plan


EMU_CASES = [
    # (shape, G, dtype, channels_last, affine, silu, sm_count)
    ((2, 8, 16, 16), 4, np.float32, False, True, False, 132),
    ((2, 8, 16, 16), 4, np.float32, True, True, False, 132),
    ((1, 8, 64, 64), 2, np.float32, False, True, True, 132),  # splits > 1
    ((1, 8, 64, 64), 2, np.float32, True, False, False, 132),  # splits > 1, NHWC
    ((2, 6, 5, 7), 3, np.float32, False, True, False, 8),  # odd sizes: scalar paths
    ((2, 6, 5, 7), 3, np.float32, True, True, True, 8),
    ((2, 16, 8, 8), 4, np.float16, False, True, False, 132),
    ((2, 16, 8, 8), 4, np.float16, True, True, True, 132),
    ((2, 16, 4, 8), 2, "bf16", False, True, False, 132),
    ((2, 16, 4, 8), 2, "bf16", True, True, False, 132),
    ((2, 4, 9, 10), 2, np.float64, False, True, True, 132),
    ((2, 4, 9, 10), 2, np.float64, True, False, False, 132),
    ((3, 12), 3, np.float32, False, True, False, 132),  # rank 2
    ((2, 4, 3, 4, 5), 2, np.float32, True, True, False, 132),  # rank 5 channels-last
    ((1, 32, 2, 2), 1, np.float32, True, True, False, 2),  # C/VEC = 8 < 256 lanes; Cg > 32 lanes
]


def _make(shape, dtype, cl, affine, rng, offset=0.0):
    dt = BFLOAT16 if dtype == "bf16" else np.dtype(dtype)
    x = (offset + rng.standard_normal(shape)).astype(dt)
    dy = rng.standard_normal(shape).astype(dt)
    C = shape[1]
    wdt = np.float64 if dt == np.float64 else np.float32  # float32 weights with 16-bit storage
    w = (1 + 0.5 * rng.standard_normal(C)).astype(wdt) if affine else None
    b = (0.3 * rng.standard_normal(C)).astype(wdt) if affine else None
    if cl:
        x, dy = channels_last(x), channels_last(dy)
    return x, dy, w, b


def _tols(dtype, offset=0.0):
    if dtype == "bf16":
        return 4e-2, 6e-2
    if np.dtype(dtype) == np.float16:
        return 1.5e-2, 2e-2
    if np.dtype(dtype) == np.float64:
        return 1e-10, 1e-9
    if offset > 100:
        return 3e-3, 1e-2
    return 1e-4, 3e-4


@pytest.mark.parametrize(
    "case",
    EMU_CASES,
    ids=lambda c: (
        f"{c[0]}-G{c[1]}-{np.dtype(c[2]).name if c[2] != 'bf16' else 'bf16'}"
        f"-{'nhwc' if c[3] else 'nchw'}{'-affine' if c[4] else ''}{'-silu' if c[5] else ''}-sm{c[6]}"
    ),
)
def test_emulated_kernels_match_the_oracle(case):
    shape, G, dtype, cl, affine, silu, sms = case
    rng = np.random.default_rng(7)
    x, dy, w, b = _make(shape, dtype, cl, affine, rng)
    act = "silu" if silu else None
    y, mean, rstd, plan = emulate_forward(x, w, b, G, 1e-5, silu, sms)
    assert memory_layout(y.shape, y.strides, y.itemsize) == memory_layout(x.shape, x.strides, x.itemsize)
    y_ref, m_ref, r_ref = oracle_forward(x, G, w, b, 1e-5, act)
    ty, tdx = _tols(dtype)
    assert rel_err(y, y_ref) < ty
    assert rel_err(mean, m_ref) < ty
    assert rel_err(rstd, r_ref) < ty
    dx, dw, db, _ = emulate_backward(dy, x, mean, rstd, w, b, G, silu, sms)
    dx_ref, dw_ref, db_ref = oracle_backward(dy, x, G, w, b, 1e-5, act)
    assert rel_err(dx, dx_ref) < tdx
    if affine:
        assert rel_err(dw, dw_ref) < tdx
        assert rel_err(db, db_ref) < tdx
    else:
        assert dw is None and db is None


def test_emulated_split_groups_really_split():
    p = cupy_.plan_forward(1, 8, 64 * 64, 2, "nchw", 4, True, 132)
    assert p.splits > 1
    # N*G = 32 groups of 2^20 elements on a 132-SM device: about 4 blocks per SM
    p = cupy_.plan_forward(1, 256, 1024 * 1024, 32, "nchw", 2, True, 132)
    assert p.stats_blocks >= 4 * 132 and p.splits == -(-4 * 132 // 32)
    # plenty of groups: one block each
    p = cupy_.plan_forward(16, 1280, 64, 32, "nchw", 4, True, 132)
    assert p.splits == 1
    b = cupy_.plan_backward(2, 320, 64 * 64, 32, "nchw", 4, True, 132)
    assert b.pieces > 1 and b.pieces * b.piece >= 64 * 64 // 4
    b = cupy_.plan_backward(2, 320, 64 * 64, 32, "nhwc", 4, True, 132)
    assert b.pieces > 1 and b.pieces * b.piece >= 64 * 64


@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "nhwc"])
def test_emulated_offset_1e4_stays_at_the_float32_floor(cl):
    rng = np.random.default_rng(3)
    x, dy, w, b = _make((2, 8, 32, 32), np.float32, cl, True, rng, offset=1e4)
    y, mean, rstd, _ = emulate_forward(x, w, b, 4, 1e-5, False, 132)
    y_ref, _, _ = oracle_forward(x, 4, w, b, 1e-5)
    assert rel_err(y, y_ref) < 2e-5  # E[x^2]-E[x]^2 gives NaN here, two-pass float32 ~2e-4
    dx, dw, db, _ = emulate_backward(dy, x, mean, rstd, w, b, 4, False, 132)
    dx_ref, dw_ref, db_ref = oracle_backward(dy, x, 4, w, b, 1e-5)
    assert rel_err(dx, dx_ref) < 1e-2
    assert rel_err(dw, dw_ref) < 1e-2


def test_emulated_poor_shift_and_float16_near_300():
    rng = np.random.default_rng(5)
    # a spike in every sampled position of group 0 makes the sampled shift useless
    x = rng.standard_normal((1, 4, 16, 16)).astype(np.float32)
    flat = x.reshape(1, 2, -1)
    M = flat.shape[2]
    flat[0, 0, (np.arange(32) * M) >> 5] = 1e4
    y, mean, rstd, _ = emulate_forward(x, None, None, 2, 1e-5, False, 132)
    y_ref, m_ref, r_ref = oracle_forward(x, 2, eps=1e-5)
    assert rel_err(y, y_ref) < 1e-4 and rel_err(rstd, r_ref) < 1e-4
    x16 = (300 + 30 * rng.standard_normal((2, 8, 8, 8))).astype(np.float16)
    y, mean, rstd, _ = emulate_forward(x16, None, None, 2, 1e-5, False, 132)
    y_ref, _, _ = oracle_forward(x16, 2, eps=1e-5)
    assert np.isfinite(y.astype(np.float32)).all() and rel_err(y, y_ref) < 1.5e-2


def test_emulated_nan_stays_in_its_group():
    x = np.random.default_rng(9).standard_normal((2, 4, 8, 8)).astype(np.float32)
    x[1, 2, 3, 3] = np.nan  # sample 1, group 1
    y, mean, rstd, _ = emulate_forward(x, None, None, 2, 1e-5, False, 132)
    assert np.isnan(mean[1, 1]) and np.isfinite(np.delete(mean.reshape(-1), 3)).all()
    assert np.isnan(y[1, 2:]).all() and np.isfinite(y[0]).all() and np.isfinite(y[1, :2]).all()


# ---------------------------------------------------------------------------
# 3. on a real GPU
# ---------------------------------------------------------------------------
def _require_gpu():
    ok, why = cupy_.BACKEND.available()
    if not ok:
        pytest.skip(f"no usable CUDA device here: {why}")
    return cupy_.BACKEND.xp


DEVICE_CASES = [c for c in EMU_CASES if c[6] == 132] + [
    ((2, 320, 16, 16), 32, np.float32, True, True, True, 132),
    ((1, 64, 128, 128), 32, np.float16, False, True, True, 132),
]


@pytest.mark.cuda
@pytest.mark.parametrize("case", DEVICE_CASES, ids=str)
def test_device_matches_oracle_and_emulation(case):
    import numr_web

    _require_gpu()
    shape, G, dtype, cl, affine, silu, _ = case
    rng = np.random.default_rng(11)
    x, dy, w, b = _make(shape, dtype, cl, affine, rng)
    act = "silu" if silu else None
    put = lambda a: None if a is None else numr_web.to_device(a, "cuda")  # noqa: E731
    xd, dyd, wd, bd = put(x), put(dy), put(w), put(b)
    assert memory_layout(xd.shape, xd.strides, xd.itemsize) == memory_layout(x.shape, x.strides, x.itemsize)
    y, mean, rstd = numr_web.ops.group_norm_forward(xd, wd, bd, G, 1e-5, activation=act)
    assert type(y).__module__.startswith("cupy") and y.dtype == xd.dtype
    assert memory_layout(y.shape, y.strides, y.itemsize) == memory_layout(x.shape, x.strides, x.itemsize)
    y_ref, m_ref, r_ref = oracle_forward(x, G, w, b, 1e-5, act)
    ty, tdx = _tols(dtype)
    assert rel_err(numr_web.to_numpy(y), y_ref) < ty
    assert rel_err(numr_web.to_numpy(mean), m_ref) < ty
    assert rel_err(numr_web.to_numpy(rstd), r_ref) < ty
    dx, dw, db = numr_web.ops.group_norm_backward(dyd, xd, mean, rstd, wd, G, bias=bd, activation=act)
    dx_ref, dw_ref, db_ref = oracle_backward(dy, x, G, w, b, 1e-5, act)
    assert rel_err(numr_web.to_numpy(dx), dx_ref) < tdx
    if affine:
        assert rel_err(numr_web.to_numpy(dw), dw_ref) < tdx
        assert rel_err(numr_web.to_numpy(db), db_ref) < tdx
    # same numbers as the emulation of the same decomposition, to rounding
    sms = cupy_.BACKEND._sm_count()
    ye, _, _, _ = emulate_forward(x, w, b, G, 1e-5, silu, sms)
    assert rel_err(numr_web.to_numpy(y), ye) < ty


@pytest.mark.cuda
@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "nhwc"])
def test_device_offset_1e4(cl):
    import numr_web

    _require_gpu()
    rng = np.random.default_rng(2)
    x, dy, w, b = _make((2, 320, 64, 64), np.float32, cl, True, rng, offset=1e4)
    y, mean, rstd = numr_web.ops.group_norm_forward(
        numr_web.to_device(x, "cuda"), numr_web.to_device(w, "cuda"), numr_web.to_device(b, "cuda"), 32, 1e-5
    )
    y_ref, _, _ = oracle_forward(x, 32, w, b, 1e-5)
    assert rel_err(numr_web.to_numpy(y), y_ref) < 2e-5


@pytest.mark.cuda
def test_device_is_deterministic_with_split_groups():
    import numr_web

    cp = _require_gpu()
    rng = np.random.default_rng(4)
    x = numr_web.to_device(rng.standard_normal((1, 64, 256, 256)).astype(np.float32), "cuda")
    dy = numr_web.to_device(rng.standard_normal((1, 64, 256, 256)).astype(np.float32), "cuda")
    w = numr_web.to_device(rng.standard_normal(64).astype(np.float32), "cuda")
    outs = []
    for _ in range(3):
        y, mean, rstd = numr_web.ops.group_norm_forward(x, w, None, 8, 1e-5)
        dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, 8)
        outs.append([cp.asnumpy(a) for a in (y, mean, rstd, dx, dw, db)])
    for other in outs[1:]:
        for a, b in zip(outs[0], other):
            assert np.array_equal(a, b)


@pytest.mark.cuda
def test_device_empty_batch_and_nan_group():
    import numr_web

    _require_gpu()
    x = numr_web.to_device(np.zeros((0, 8, 4, 4), np.float32), "cuda")
    y, mean, rstd = numr_web.ops.group_norm_forward(x, None, None, 2, 1e-5)
    assert y.shape == (0, 8, 4, 4) and mean.shape == (0, 2)
    xh = np.random.default_rng(1).standard_normal((2, 4, 8, 8)).astype(np.float32)
    xh[1, 2, 3, 3] = np.nan
    y, mean, rstd = numr_web.ops.group_norm_forward(numr_web.to_device(xh, "cuda"), None, None, 2, 1e-5)
    y = numr_web.to_numpy(y)
    assert np.isnan(y[1, 2:]).all() and np.isfinite(y[0]).all() and np.isfinite(y[1, :2]).all()


@pytest.mark.cuda
def test_device_autograd_and_double_backward():
    import numr_web

    cp = _require_gpu()
    rng = np.random.default_rng(6)
    shape, G = (2, 8, 5, 6), 4
    x = rng.standard_normal(shape)
    w = 1 + 0.3 * rng.standard_normal(8)
    b = 0.2 * rng.standard_normal(8)
    v = rng.standard_normal(shape)
    dy = rng.standard_normal(shape)
    xt = numr_web.Tensor(numr_web.to_device(x, "cuda"), requires_grad=True)
    wt = numr_web.Tensor(numr_web.to_device(w, "cuda"), requires_grad=True)
    bt = numr_web.Tensor(numr_web.to_device(b, "cuda"), requires_grad=True)
    dyt = numr_web.Tensor(numr_web.to_device(dy, "cuda"), requires_grad=True)
    y = numr_web.group_norm(xt, G, wt, bt)
    gx, gw, gb = numr_web.autograd.grad([y], [xt, wt, bt], grad_outputs=[dyt], create_graph=True)
    assert type(gx.data).__module__.startswith("cupy")
    dx_ref, dw_ref, db_ref = oracle_backward(dy, x, G, w, b, 1e-5)
    assert rel_err(cp.asnumpy(gx.data), dx_ref) < 1e-9
    assert rel_err(cp.asnumpy(gw.data), dw_ref) < 1e-9
    loss = (gx * numr_web.Tensor(numr_web.to_device(v, "cuda"))).sum()
    ddx, ddw, ddy = numr_web.autograd.grad([loss], [xt, wt, dyt])
    # check d/d(dy) of sum(dx * v) against finite differences of the oracle (linear in dy: exact)
    h = 1e-6
    e = np.zeros(shape)
    e[1, 3, 2, 4] = 1
    fd = (
        (oracle_backward(dy + h * e, x, G, w, b)[0] * v).sum() - (oracle_backward(dy - h * e, x, G, w, b)[0] * v).sum()
    ) / (2 * h)
    assert abs(float(numr_web.to_numpy(ddy)[1, 3, 2, 4]) - fd) < 1e-6 * max(1, abs(fd))
    e = np.zeros(shape)
    e[0, 1, 1, 2] = 1
    h = 1e-5
    fd = (
        (oracle_backward(dy, x + h * e, G, w, b)[0] * v).sum() - (oracle_backward(dy, x - h * e, G, w, b)[0] * v).sum()
    ) / (2 * h)
    assert abs(float(numr_web.to_numpy(ddx)[0, 1, 1, 2]) - fd) < 1e-5 * max(1, abs(fd))


@pytest.mark.cuda
def test_device_over_2_to_the_31_elements():
    import numr_web

    cp = _require_gpu()
    n_elem = 2**31 + 2**20
    free, _ = cp.cuda.Device().mem_info
    need = n_elem * (4 + 2 * 3) + 2**30  # float32 draw, float16 x, y, dx (dy reuses x), slack
    if free < need:
        pytest.skip(f"needs about {need / 2**30:.1f} GiB of free device memory, {free / 2**30:.1f} GiB free")
    shape = (2, 64, n_elem // (2 * 64))  # rank 3, N*C*L = n_elem
    x = cp.random.standard_normal(shape, dtype=cp.float32).astype(cp.float16)
    y, mean, rstd = numr_web.ops.group_norm_forward(x, None, None, 4, 1e-5)
    # check the last group against a float64 formula on the host
    tail = cp.asnumpy(x[1, 48:]).astype(np.float64)
    mu, var = tail.mean(), tail.var()
    ref = (tail - mu) / np.sqrt(var + 1e-5)
    assert abs(float(mean[1, 3]) - mu) < 1e-3
    assert np.abs(cp.asnumpy(y[1, 48:]).astype(np.float64) - ref).max() < 1.5e-2 * max(1, np.abs(ref).max())
    dx, _, _ = numr_web.ops.group_norm_backward(x, x, mean, rstd, None, 4)
    assert bool(cp.isfinite(dx[1, 63, -1024:]).all())


# ---------------------------------------------------------------------------
# scripts/cuda-check
# ---------------------------------------------------------------------------
CUDA_CHECK = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "cuda-check"


def test_cuda_check_without_a_gpu_fails_with_one_line():
    if cupy_.BACKEND.available()[0]:
        pytest.skip("a CUDA device is present")
    assert os.access(CUDA_CHECK, os.X_OK), "scripts/cuda-check must be executable"
    proc = subprocess.run([sys.executable, str(CUDA_CHECK)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuda-check: cannot run:") and "CUDA" in lines[0]


def test_cuda_check_harness_passes_on_the_cpu_backend():
    """The script's reference-case harness, pointed at the CPU backend: all pass, and a broken result is caught."""
    import importlib.machinery
    import importlib.util

    import numr_web

    loader = importlib.machinery.SourceFileLoader("cuda_check", str(CUDA_CHECK))
    spec = importlib.util.spec_from_loader("cuda_check", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    summary = mod.run_reference_cases(numr_web, np, BFLOAT16, device="cpu")
    assert summary["double backward"][0] >= 1
    for check, (n, failed, worst, _, first) in summary.items():
        assert n > 0 and failed == 0 and worst < 1.0, (check, first)
    # the harness must be able to fail: perturb the forward output
    real = numr_web.ops.group_norm_forward
    try:
        numr_web.ops.group_norm_forward = lambda *a, **k: (lambda y, m, r: (y * 1.01, m, r))(*real(*a, **k))
        bad = mod.run_reference_cases(numr_web, np, BFLOAT16, device="cpu")
    finally:
        numr_web.ops.group_norm_forward = real
    assert bad["forward"][1] > 0


# ---------------------------------------------------------------------------
# 4. the real .cu kernels executed on the CPU
# ---------------------------------------------------------------------------
# group_norm.cu is compiled with g++ against this shim: one std::thread per CUDA
# thread of a 256-thread block (blocks run one after another), std::barrier for
# __syncthreads and for warp shuffles, __shared__ as block-wide statics.  The
# backend's own Python launch code (CupyBackend.group_norm_forward/backward) then
# drives these host builds with NumPy arrays in place of CuPy, so the planning,
# the argument lists (checked against the kernels' C++ parameter types) and the
# kernel bodies all run for real.  What it cannot show: GPU memory-model, timing
# and NVRTC/driver behaviour.
HOST_SHIM = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
using std::isfinite;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
struct numr_dim3 { unsigned int x = 0, y = 1, z = 1; };
static thread_local numr_dim3 threadIdx, blockIdx;
static numr_dim3 gridDim, blockDim;
struct alignas(16) uint4 { unsigned int x, y, z, w; };
inline unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned int)(((unsigned long long)a * b) >> 32); }
inline int __clzll(long long v) { return v == 0 ? 64 : __builtin_clzll((unsigned long long)v); }
inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline float numr_host_half_to_float(unsigned short h) { _Float16 f; std::memcpy(&f, &h, 2); return (float)f; }
inline unsigned short numr_host_float_to_half(float x) { _Float16 f = (_Float16)x; unsigned short h; std::memcpy(&h, &f, 2); return h; }
static std::barrier<>* numr_block_bar = nullptr;
static std::barrier<>* numr_warp_bar[8];
static double numr_lane_buf[8][32];
inline void __syncthreads() { numr_block_bar->arrive_and_wait(); }
template <class V> inline V numr_exchange(V v, int src) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    static_assert(sizeof(V) <= sizeof(double), "lane value too wide");
    std::memcpy(&numr_lane_buf[warp][lane], &v, sizeof(V));
    numr_warp_bar[warp]->arrive_and_wait();
    V r = v;
    if (src >= 0 && src < 32) std::memcpy(&r, &numr_lane_buf[warp][src], sizeof(V));
    numr_warp_bar[warp]->arrive_and_wait();
    return r;
}
template <class V> inline V __shfl_down_sync(unsigned int, V v, int o) { return numr_exchange(v, (int)(threadIdx.x & 31) + o); }
template <class V> inline V __shfl_sync(unsigned int, V v, int src) { return numr_exchange(v, src); }
template <class F> void numr_launch(unsigned int grid, F body) {
    std::barrier<> block_bar(256), end_bar(256);
    std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
    for (int w = 0; w < 8; ++w) { warp_bars.emplace_back(new std::barrier<>(32)); numr_warp_bar[w] = warp_bars.back().get(); }
    numr_block_bar = &block_bar;
    gridDim.x = grid; blockDim.x = 256;
    std::vector<std::thread> threads;
    for (unsigned int t = 0; t < 256; ++t) {
        threads.emplace_back([&, t] {
            threadIdx.x = t;
            for (unsigned int b = 0; b < grid; ++b) {
                blockIdx.x = b;
                body();
                end_bar.arrive_and_wait();
            }
        });
    }
    for (auto& th : threads) th.join();
}
template <class... P, std::size_t... I>
void numr_call(void (*f)(P...), void** a, std::index_sequence<I...>) { f(*static_cast<std::remove_cv_t<P>*>(a[I])...); }
template <class... P> void numr_invoke(void (*f)(P...), void** a) { numr_call(f, a, std::index_sequence_for<P...>{}); }
template <class P> char numr_kind() { return std::is_pointer_v<P> ? 'p' : (std::is_floating_point_v<P> ? 'f' : 'i'); }
template <class... P> void numr_signature(void (*)(P...), char* out) {
    std::size_t i = 0;
    ((out[i++] = numr_kind<std::remove_cv_t<P>>(), out[i++] = (char)('0' + sizeof(P))), ...);
    out[i] = 0;
}
"""


def _host_wrappers():
    lines = [f'#include "{cupy_.KERNEL_PATH.as_posix()}"']
    ids = {}
    for name in cupy_.all_name_expressions():
        ident = "host_" + re.sub(r"\W+", "_", name).strip("_")
        ids[name] = ident
        lines.append(
            f'extern "C" void {ident}(unsigned int grid, void** a) '
            f"{{ numr_launch(grid, [&] {{ numr_invoke(&{name}, a); }}); }}"
        )
        lines.append(f'extern "C" void {ident}_sig(char* out) {{ numr_signature(&{name}, out); }}')
    return "\n".join(lines) + "\n", ids


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None:
        msg = "g++ not found: the host build of the CUDA kernels needs it"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    d = tmp_path_factory.mktemp("cuda_host")
    (d / "shim.h").write_text(HOST_SHIM)
    src, ids = _host_wrappers()
    (d / "wrappers.cpp").write_text(src)
    lib = d / "libgn_host.so"
    proc = subprocess.run(
        [
            gxx,
            "-std=c++20",
            "-O1",
            "-shared",
            "-fPIC",
            "-pthread",
            "-DNUMR_WEB_HOST_EMULATION",
            *numerics.cuda_defines(),
            "-include",
            str(d / "shim.h"),
            "-x",
            "c++",
            str(d / "wrappers.cpp"),
            "-o",
            str(lib),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    dll = ctypes.CDLL(str(lib))
    sigs = {}
    for name, ident in ids.items():
        buf = ctypes.create_string_buffer(128)
        getattr(dll, ident + "_sig")(buf)
        raw = buf.value.decode()
        sigs[name] = [(raw[i], int(raw[i + 1])) for i in range(0, len(raw), 2)]
    return dll, ids, sigs


class HostLaunch:
    """Stands in for a CuPy RawKernel: checks the arguments against the kernel's C++ parameters."""

    launches: list = []

    def __init__(self, dll, ident, name, sig):
        self.fn = getattr(dll, ident)
        self.name, self.sig = name, sig

    def __call__(self, grid, block, args):
        assert tuple(block) == (cupy_.BLOCK,), block
        assert len(args) == len(self.sig), (self.name, len(args), len(self.sig))
        boxes = []
        for i, (a, (kind, size)) in enumerate(zip(args, self.sig)):
            where = f"{self.name} argument {i}"
            if isinstance(a, np.ndarray):
                assert kind == "p", f"{where}: array passed for a {kind}{size} parameter"
                assert a.flags.c_contiguous or a.size <= 1, f"{where}: not contiguous"
                boxes.append(ctypes.c_void_p(a.ctypes.data))
            elif isinstance(a, np.integer):
                assert kind == "i" and a.dtype.itemsize == size, f"{where}: {a.dtype} for {kind}{size}"
                boxes.append((ctypes.c_int32 if size == 4 else ctypes.c_int64)(int(a)))
            elif isinstance(a, np.floating):
                assert kind == "f" and a.dtype.itemsize == size, f"{where}: {a.dtype} for {kind}{size}"
                boxes.append((ctypes.c_float if size == 4 else ctypes.c_double)(float(a)))
            else:
                raise TypeError(f"{where}: {type(a).__name__} is not something CuPy passes as a kernel argument")
        ptrs = (ctypes.c_void_p * len(boxes))(*[ctypes.addressof(b) for b in boxes])
        HostLaunch.launches.append((self.name, int(grid[0])))
        self.fn(ctypes.c_uint(int(grid[0])), ptrs)


class HostBackend(cupy_.CupyBackend):
    """The CUDA backend's Python code with NumPy for CuPy and the host build for the GPU."""

    def __init__(self, kernels, sm_count):
        super().__init__()
        self._kernels = kernels
        self._sms = sm_count
        self._cupy = np

    def _import(self):
        return np

    def _sm_count(self):
        return self._sms

    @staticmethod
    def _address(array):
        return array.ctypes.data

    def _stream_key(self):
        return 0, 0

    def _function(self, dtype_name, layout, name):
        assert name in cupy_.name_expressions(dtype_name, layout), name
        dll, ids, sigs = self._kernels
        return HostLaunch(dll, ids[name], name, sigs[name])


def _layout(a):
    return memory_layout(a.shape, a.strides, a.itemsize) if a.ndim >= 3 else "nchw"


def host_forward(be, x, *args):
    """The backend's forward with the layout the op layer would pass (x is NCHW or channels-last)."""
    return be.group_norm_forward(x, *args, layout=_layout(x))


def host_backward(be, dy, x, *args):
    return be.group_norm_backward(dy, x, *args, layout=_layout(x))


def test_host_kernel_signatures_match_the_backend_plan(host_kernels):
    _, _, sigs = host_kernels
    stats = sigs[cupy_.stats_kernel("float", "nchw", 4)]
    assert stats[9] == ("i", 4) and stats[10] == ("f", 8)  # splits, eps
    assert all(k == "p" and s == 8 for k, s in sigs[cupy_.dx_kernel("numr_f16", "nhwc", 8, True)][:4])


HOST_CASES = [
    # (shape, G, dtype, channels_last, affine, silu, sm_count)
    ((2, 8, 16, 16), 4, np.float32, False, True, False, 4),
    ((2, 8, 16, 16), 4, np.float32, True, True, True, 4),
    ((1, 8, 32, 64), 2, np.float32, False, True, False, 8),  # several blocks per group
    ((1, 8, 32, 64), 2, np.float32, True, False, True, 8),
    ((2, 6, 5, 7), 3, np.float32, False, True, False, 2),  # scalar paths
    ((2, 6, 5, 7), 3, np.float32, True, True, False, 2),
    ((2, 16, 8, 8), 4, np.float16, False, True, True, 4),
    ((2, 16, 8, 8), 4, np.float16, True, True, False, 4),
    ((2, 16, 4, 8), 2, "bf16", False, True, False, 4),
    ((2, 16, 4, 8), 2, "bf16", True, False, True, 4),
    ((2, 4, 9, 10), 2, np.float64, False, True, True, 4),
    ((2, 4, 9, 10), 2, np.float64, True, True, False, 4),
    ((3, 12), 3, np.float32, False, True, False, 4),
    ((2, 4, 3, 4, 5), 2, np.float32, True, True, False, 4),
    ((1, 40, 2, 2), 1, np.float32, True, True, False, 2),  # Cg > 32 lanes
]


@pytest.mark.parametrize(
    "case",
    HOST_CASES,
    ids=lambda c: (
        f"{c[0]}-G{c[1]}-{c[2] if c[2] == 'bf16' else np.dtype(c[2]).name}"
        f"-{'nhwc' if c[3] else 'nchw'}{'-affine' if c[4] else ''}{'-silu' if c[5] else ''}"
    ),
)
def test_host_built_kernels_match_the_oracle(host_kernels, case):
    shape, G, dtype, cl, affine, silu, sms = case
    be = HostBackend(host_kernels, sms)
    rng = np.random.default_rng(17)
    x, dy, w, b = _make(shape, dtype, cl, affine, rng)
    act = "silu" if silu else None
    HostLaunch.launches.clear()
    y, mean, rstd = host_forward(be, x, w, b, G, 1e-5, act)
    assert y.dtype == x.dtype
    assert memory_layout(y.shape, y.strides, y.itemsize) == memory_layout(x.shape, x.strides, x.itemsize)
    y_ref, m_ref, r_ref = oracle_forward(x, G, w, b, 1e-5, act)
    ty, tdx = _tols(dtype)
    assert rel_err(y, y_ref) < ty
    assert rel_err(mean, m_ref) < ty and rel_err(rstd, r_ref) < ty
    # the emulation of the same decomposition agrees to rounding
    ye, me, re_, plan = emulate_forward(x, w, b, G, 1e-5, silu, sms)
    assert rel_err(y, ye) < ty and rel_err(mean, me) < ty
    dx, dw, db = host_backward(be, dy, x, mean, rstd, w, b, G, act)
    dx_ref, dw_ref, db_ref = oracle_backward(dy, x, G, w, b, 1e-5, act)
    assert memory_layout(dx.shape, dx.strides, dx.itemsize) == memory_layout(x.shape, x.strides, x.itemsize)
    assert rel_err(dx, dx_ref) < tdx
    if affine:
        assert dw.dtype == w.dtype and rel_err(dw, dw_ref) < tdx and rel_err(db, db_ref) < tdx
    else:
        assert dw is None and db is None
    kinds = [n.split("<")[0] for n, _ in HostLaunch.launches]
    if plan.fused:
        assert plan.splits == 1 and kinds[0] == "gn_fwd_fused"
        kinds = kinds[1:]
    else:
        assert kinds[:2] == ["gn_fwd_stats", "gn_fwd_apply"]
        kinds = kinds[2:]
    assert HostLaunch.launches[0][1] == plan.stats_blocks
    assert kinds[0].startswith("gn_bwd_reduce_") and kinds[1:3] == ["gn_bwd_group_coeffs", "gn_bwd_dx"]
    assert ("gn_bwd_channel_grads" in kinds) == affine


def test_host_cases_cover_fused_and_split_forwards():
    plans = [
        cupy_.plan_forward(
            c[0][0],
            c[0][1],
            int(np.prod(c[0][2:], dtype=np.int64)),
            c[1],
            "nhwc" if c[3] else "nchw",
            2 if c[2] == "bf16" else np.dtype(c[2]).itemsize,
            True,
            c[6],
        )
        for c in HOST_CASES
    ]
    assert any(p.fused and p.stats_vec > 1 for p in plans) and any(p.fused and p.stats_vec == 1 for p in plans)
    assert any(not p.fused and p.splits > 1 for p in plans) and any(not p.fused and p.splits == 1 for p in plans)


def test_host_built_kernels_hard_inputs(host_kernels):
    be = HostBackend(host_kernels, 8)
    rng = np.random.default_rng(21)
    for cl in (False, True):
        x, dy, w, b = _make((1, 8, 32, 32), np.float32, cl, True, rng, offset=1e4)
        y, mean, rstd = host_forward(be, x, w, b, 2, 1e-5)
        assert rel_err(y, oracle_forward(x, 2, w, b, 1e-5)[0]) < 2e-5
        dx, dw, _ = host_backward(be, dy, x, mean, rstd, w, b, 2)
        dx_ref, dw_ref, _ = oracle_backward(dy, x, 2, w, b, 1e-5)
        assert rel_err(dx, dx_ref) < 1e-3 and rel_err(dw, dw_ref) < 1e-3
    # spikes at every sampled index of group 0: the shift is poor and the redo path runs
    x = rng.standard_normal((1, 4, 16, 16)).astype(np.float32)
    flat = x.reshape(1, 2, -1)
    flat[0, 0, (np.arange(32) * flat.shape[2]) >> 5] = 1e4
    y, mean, rstd = host_forward(be, x, None, None, 2, 1e-5)
    y_ref, _, r_ref = oracle_forward(x, 2)
    assert rel_err(y, y_ref) < 1e-4 and rel_err(rstd, r_ref) < 1e-4
    # the same with groups split over several blocks: the combining block redoes it
    x = rng.standard_normal((1, 8, 32, 64)).astype(np.float32)
    flat = x.reshape(1, 2, -1)
    flat[0, 1, (np.arange(32) * flat.shape[2]) >> 5] = -3e3
    assert cupy_.plan_forward(1, 8, 32 * 64, 2, "nchw", 4, True, 8).splits > 1
    y, mean, rstd = host_forward(be, x, None, None, 2, 1e-5)
    y_ref, _, r_ref = oracle_forward(x, 2)
    assert rel_err(y, y_ref) < 1e-4 and rel_err(rstd, r_ref) < 1e-4
    # float32 squares overflow (|x| ~ 1e20): redone in double
    x = (1e20 * rng.standard_normal((1, 4, 8, 8))).astype(np.float32)
    y, mean, rstd = host_forward(be, x, None, None, 2, 1e-5)
    y_ref, _, r_ref = oracle_forward(x, 2)
    assert rel_err(y, y_ref) < 1e-4 and np.isfinite(rstd).all() and rel_err(rstd * 1e20, r_ref * 1e20) < 1e-4
    # float16 near 300 does not overflow; a NaN stays in its group
    x16 = (300 + 30 * rng.standard_normal((2, 8, 8, 8))).astype(np.float16)
    y, _, _ = host_forward(be, x16, None, None, 2, 1e-5)
    assert np.isfinite(y.astype(np.float32)).all() and rel_err(y, oracle_forward(x16, 2)[0]) < 1.5e-2
    xn = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    xn[1, 2, 3, 3] = np.nan
    y, mean, _ = host_forward(be, xn, None, None, 2, 1e-5)
    assert np.isnan(y[1, 2:]).all() and np.isfinite(y[0]).all() and np.isfinite(y[1, :2]).all()
    # empty batch
    y, mean, rstd = host_forward(be, np.zeros((0, 8, 4, 4), np.float32), None, None, 2, 1e-5)
    assert y.shape == (0, 8, 4, 4) and mean.shape == (0, 2)


def test_host_built_kernels_are_deterministic(host_kernels):
    be = HostBackend(host_kernels, 8)
    rng = np.random.default_rng(8)
    x, dy, w, b = _make((1, 8, 32, 64), np.float32, False, True, rng)
    runs = []
    for _ in range(2):
        y, mean, rstd = host_forward(be, x, w, b, 2, 1e-5)
        runs.append([y, mean, rstd, *host_backward(be, dy, x, mean, rstd, w, b, 2)])
    for a, c in zip(*runs):
        assert np.array_equal(a, c)
    # the split-group tickets are handed back zeroed (the buffer is reused without a memset)
    assert be._tickets and not be._tickets[(0, 0)].any()


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize(
    ("scale", "dtype", "groups", "eps"),
    [("3e38", np.float32, 2, 1e-5), (1e160, np.float64, 2, 1e-5), (1e200, np.float64, 2, 1e-5)]
    + [(1e300, np.float64, 2, 1e-5), (1e-300, np.float64, 2, 0.0), (1e-20, np.float32, 4, 0.0)],
)
def test_host_built_kernels_at_the_ends_of_the_range(host_kernels, scale, dtype, groups, eps, layout):
    """Against tests/test_hard_inputs.py's exact-rational oracle: float32 values near +-3e38 of both
    signs (x - mean passes the largest float), float64 far beyond the square root of its range
    either way, and eps = 0 with a float32 spread of 1e-20."""
    from oracle import channels_last
    from test_hard_inputs import exact

    rng = np.random.default_rng(1234)
    if scale == "3e38":
        x = np.where(rng.random((2, 8, 4, 4)) < 0.7, 3e38, -3e38) * rng.uniform(0.5, 1.0, (2, 8, 4, 4))
    else:
        x = rng.uniform(-3.0, 3.0, (2, 4, 3, 3) if dtype == np.float64 else (2, 8, 4, 4)) * scale
    x = x.astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    y_ref, _, rstd_ref, dx_ref, _, _ = exact(x, groups, eps, dy)
    be = HostBackend(host_kernels, 8)
    xl, dyl = (channels_last(x), channels_last(dy)) if layout == "nhwc" else (x, dy)
    y, mean, rstd = host_forward(be, xl, None, None, groups, eps)
    dx, _, _ = host_backward(be, dyl, xl, mean, rstd, None, None, groups)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    for name, got, want in (("y", y, y_ref), ("rstd", rstd, rstd_ref), ("dx", dx, dx_ref)):
        got = np.asarray(got, np.float64)
        assert np.isfinite(got).all(), f"{name}: not finite"
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1.0 if name == "y" else 0.0)
        assert err < tol, f"{name}: error {err:.2e}"

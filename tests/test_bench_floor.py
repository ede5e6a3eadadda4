"""The WebGPU floor kernels (numr_web/bench/floor.py, kernels/wgsl/floor.wgsl): they compute what
they say (so their timings are of that work), refuse what they cannot walk, and ``numr-web bench
--floor`` puts them beside the op and the copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import require_target
from webgpu_support import wg  # noqa: F401  (fixture)

from numr_web.dtypes import BFLOAT16


def _groups(a, groups):
    a = np.asarray(a, np.float64)
    return a.reshape(a.shape[0] * groups, -1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape,groups", [((2, 8, 4, 4), 4), ((3, 6, 2, 6), 3), ((1, 16, 8, 8), 8), ((2, 6, 2, 2), 2)])
def test_floor_kernels_compute_their_formulas(wg, dtype, shape, groups):  # noqa: F811
    """floor_fwd: (x - mean) / sqrt(var + 1e-5) per group; floor_bwd: 0.5 dy + mean(dy x) x + mean(dy)
    (NumPy in float64 from the same stored values; 9 groups and more than one workgroup of 8; 16-bit
    groups of a multiple of 8 elements in 16-byte loads, of 12 elements in 8-byte ones)."""
    from numr_web.bench import floor

    np_dtype = BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32).astype(np_dtype)
    dy = rng.standard_normal(shape).astype(np.float32).astype(np_dtype)
    fns = floor.timed_callables(wg.from_numpy(x), wg.from_numpy(dy), groups)
    assert list(fns) == list(floor.NAMES)
    tol = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 2e-2}[dtype]

    y = _groups(wg.to_numpy(fns["floor_fwd"]()), groups)
    xg = _groups(x.astype(np.float32), groups)
    want = (xg - xg.mean(1, keepdims=True)) / np.sqrt(xg.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol * 4)

    dx = _groups(wg.to_numpy(fns["floor_bwd"]()), groups)
    dyg = _groups(dy.astype(np.float32), groups)
    want = 0.5 * dyg + (dyg * xg).mean(1, keepdims=True) * xg + dyg.mean(1, keepdims=True)
    np.testing.assert_allclose(dx, want, rtol=tol, atol=tol * 4)


def test_floor_kernels_refuse_what_they_cannot_walk(wg):  # noqa: F811
    from numr_web.backends.webgpu.group_norm_launch import STEP_CAP
    from numr_web.bench import floor

    x = wg.from_numpy(np.zeros((1, 4, 4, 4), np.float32))
    with pytest.raises(ValueError, match=r"groups: expected a positive divisor of C=4, got 3"):
        floor.timed_callables(x, x, 3)
    odd = wg.from_numpy(np.zeros((1, 4, 3, 3), np.float32))
    with pytest.raises(ValueError, match=r"H\*W=9 must be a positive multiple of 4"):
        floor.timed_callables(odd, odd, 2)
    last = wg.as_layout(wg.from_numpy(np.zeros((1, 4, 4, 4), np.float32)), "nhwc")
    with pytest.raises(ValueError, match=r"C-ordered \(NCHW\)"):
        floor.timed_callables(last, last, 2)
    with pytest.raises(ValueError, match=r"one shape and dtype"):
        floor.timed_callables(x, wg.from_numpy(np.zeros((1, 4, 4, 4), np.float16)), 2)
    long = wg.from_numpy(np.zeros((1, 1, 4 * STEP_CAP + 4), np.float32))
    with pytest.raises(ValueError, match=r"longer than one invocation may walk"):
        floor.timed_callables(long, long, 1)
    with pytest.raises(TypeError, match=r"x: expected a WebGPU array"):
        floor.timed_callables(np.zeros((1, 4, 4, 4), np.float32), x, 2)


def test_bench_floor_rows_put_the_floor_beside_the_op(wg, tmp_path):  # noqa: F811
    """``numr-web bench --floor``: each row has the floor kernels' ms and their throughput over the
    copy's, the op's over theirs, ranges over runs, and the table prints them."""
    dest = tmp_path / "rows.json"
    argv = ["bench", "--backend", "webgpu", "--floor", "--shapes", "2,64,16,16,8", "--repeat", "3", "--runs", "2"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out = subprocess.run(
        [sys.executable, "-m", "numr_web.cli", *argv, "--json", str(dest)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(dest.read_text())
    for rows in doc["runs"]:
        (row,) = rows
        assert row["floor_fwd_ms"] > 0 and row["floor_bwd_ms"] > 0, row
        for key in ("floor_fwd_of_copy", "floor_bwd_of_copy", "fwd_of_floor", "bwd_of_floor"):
            assert 0 < row[key] < 20, (key, row)
        assert row["floor_forms"] == {"floor_fwd": "groups", "floor_bwd": "groups"}, row  # NCHW has one form
    (entry,) = doc["ranges"]
    vals = [rows[0]["floor_bwd_of_copy"] for rows in doc["runs"]]
    assert entry["floor_bwd_of_copy"] == [min(vals), max(vals)]
    head = next(ln for ln in out.stdout.splitlines() if ln.startswith("| shape | fwd ms"))
    assert "| floor fwd/copy | floor bwd/copy | fwd/floor | bwd/floor |" in head, head
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("| 2x64x16x16 G8 | "))
    assert line.rstrip().endswith(f"| {doc['rows'][0]['bwd_of_floor']:.2f} |"), line


def test_bench_floor_names_what_it_needs():
    proc = subprocess.run(
        [sys.executable, "-m", "numr_web.cli", "bench", "--floor", "--backend", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "argument --floor: needs --backend webgpu" in proc.stderr


def test_bench_floor_times_the_channels_last_floor_beside_the_op(tmp_path):
    """`numr-web bench --floor --layout nhwc` times floor_nhwc.wgsl's kernels in the op's rounds."""
    require_target("webgpu")
    out = tmp_path / "nhwc.json"
    cmd = [sys.executable, "-m", "numr_web.cli", "bench", "--backend", "webgpu", "--layout", "nhwc", "--floor"]
    cmd += ["--shapes", "2,16,8,8,4", "--repeat", "2", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["layout"] == "nhwc" and row["floor_fwd_of_copy"] > 0 and row["bwd_of_floor"] > 0, row
    # which of the channels-last forms was the faster at setup, per direction (float32: a window or the split)
    assert set(row["floor_forms"]) == {"floor_fwd", "floor_bwd"}, row
    assert set(row["floor_forms"].values()) <= {"window", "split"}, row

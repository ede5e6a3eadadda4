"""The console script: info, demo, warmup and bench run and print what they promise; the environment
variables README.md and docs/*.md document (CI, NUMR_WEB_CPU_PATH, NUMBA_NUM_THREADS, NUMBA_CACHE_DIR) do
what they say."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import require_torch

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def run(*args, timeout=600):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "numr_web.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_info_lists_every_backend_with_a_reason():
    out = run("info")
    assert out.returncode == 0, out.stderr
    for device in ("cpu", "cuda", "webgpu"):
        assert f"] {device}:" in out.stdout
    assert "[yes] cpu" in out.stdout
    assert "cpu path:" in out.stdout


def test_demo_prints_statistics_and_gradients():
    out = run("demo")
    assert out.returncode == 0, out.stderr
    assert "loss =" in out.stdout and "dL/dweight" in out.stdout
    # six (n, g) rows whose std column is positive and whose gradient sums are ~0
    rows = [ln for ln in out.stdout.splitlines() if ln.count("|") == 3 and ln.split("|")[0].split()[0].isdigit()]
    assert len(rows) == 6
    for r in rows:
        _, stats, _, grads = r.split("|")
        assert float(stats.split()[1]) > 0
        assert abs(float(grads.split()[1])) < 1e-5


@pytest.mark.parametrize("path", ["numpy", "fused"])
def test_bench_quick_writes_json_rows(tmp_path, path):
    from conftest import require_target

    require_target(f"cpu-{path}")
    dest = tmp_path / "rows.json"
    out = run("bench", "--quick", "--cpu-path", path, "--json", str(dest))
    assert out.returncode == 0, out.stderr
    data = json.loads(dest.read_text())
    assert len(data["rows"]) == 2
    for row in data["rows"]:
        assert row["cpu_path"] == path
        assert row["fwd_ms"] > 0 and row["bwd_ms"] > 0 and row["copy_ms"] > 0
        assert 0 < row["fwd_of_copy"] and 0 < row["bwd_of_copy"]
    assert "OPENBLAS_NUM_THREADS=1" in out.stdout
    assert "| shape |" in out.stdout


def test_bench_runs_report_ranges(tmp_path):
    dest = tmp_path / "rows.json"
    out = run("bench", "--quick", "--cpu-path", "numpy", "--runs", "2", "--json", str(dest))
    assert out.returncode == 0, out.stderr
    data = json.loads(dest.read_text())
    assert len(data["runs"]) == 2 and data["rows"] == data["runs"][0]
    assert len(data["ranges"]) == 2
    for i, entry in enumerate(data["ranges"]):
        for key in ("fwd_of_copy", "bwd_of_copy"):
            vals = [rows[i][key] for rows in data["runs"]]
            assert entry[key] == [min(vals), max(vals)]
    assert "ranges over the 2 runs" in out.stdout and " to " in out.stdout


@pytest.mark.parametrize(
    "dtype,timing", [("float32", None), ("float16", None), ("bfloat16", None), ("float32", "device")]
)
def test_bench_webgpu_rows_name_the_fastest_copy_and_the_timing(tmp_path, dtype, timing):
    """WebGPU rows: end-to-end timing by default, the yardstick the fastest of all three WGSL
    copies (named), and the bytes the ratios count (a 16-bit copy moves the input's bytes)."""
    from conftest import require_target

    require_target("webgpu")
    dest = tmp_path / "rows.json"
    argv = ["bench", "--backend", "webgpu", "--dtype", dtype, "--layout", "nhwc", "--shapes", "1,64,16,16,8"]
    argv += ["--repeat", "2", "--json", str(dest)] + (["--timing", timing] if timing else [])
    env = dict(os.environ, PYTHONUNBUFFERED="1", NUMR_WEB_WEBGPU_PLAN="auto")
    out = subprocess.run(
        [sys.executable, "-m", "numr_web.cli", *argv], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(dest.read_text())
    expected = timing or "end-to-end"
    assert doc["timing"] == expected and doc["dtype"] == dtype and doc["layout"] == "nhwc", doc
    assert doc["adapter"] and doc["command"].startswith("numr-web bench --backend webgpu"), doc
    assert doc["webgpu_plan"] == "auto", doc
    (row,) = doc["rows"]
    itemsize = 4 if dtype == "float32" else 2
    assert row["timing"] == expected and row["dtype"] == dtype and row["webgpu_plan"] == "auto", row
    assert set(row["copy_variants_ms"]) == {"copy_vec4", "copy_ranges", "copy_grid"}, row
    assert row["copy_variant"] == min(row["copy_variants_ms"], key=row["copy_variants_ms"].get), row
    assert row["copy_ms"] == row["copy_variants_ms"][row["copy_variant"]], row
    assert row["x_bytes"] == 64 * 16 * 16 * itemsize
    assert [row[k] / row["x_bytes"] for k in ("fwd_bytes", "bwd_bytes", "copy_bytes")] == [2, 3, 2], row
    assert row["yardstick"].startswith(row["copy_variant"] + ": the fastest of"), row
    assert f"{row['x_bytes']} bytes ({dtype})" in row["yardstick"], row
    assert 0 < row["fwd_of_copy"] < 10 and 0 < row["bwd_of_copy"] < 10, row
    # the GB/s figures count those bytes
    assert abs(row["copy_gbps"] - row["copy_bytes"] / row["copy_ms"] / 1e6) < 1e-9 * row["copy_gbps"] + 1e-12
    assert f"timing {expected}" in out.stdout and f"copy yardstick: {row['copy_variant']}" in out.stdout


def test_bench_webgpu_refuses_a_bad_plan_in_one_line():
    from conftest import require_target

    require_target("webgpu")
    env = dict(os.environ, NUMR_WEB_WEBGPU_PLAN="bogus")
    argv = [sys.executable, "-m", "numr_web.cli", "bench", "--backend", "webgpu", "--shapes", "1,8,4,4,2"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "NUMR_WEB_WEBGPU_PLAN='bogus'" in errors[0], out.stderr
    assert "Traceback" not in out.stderr and "|" not in out.stdout  # nothing timed


def test_end_to_end_timer_reads_back_after_every_call():
    """``--timing end-to-end`` on WebGPU: one small read-back of the call's output per call (it is what
    waits for the GPU); ``device`` queues calls and waits once per figure."""
    from types import SimpleNamespace

    from numr_web.bench.timing import READ_BACK_BYTES, WEBGPU_BATCH, timer_for

    log = []

    class Transport:
        @staticmethod
        def read_buffer(dev, buf, offset, size):
            log.append(("read", buf, offset, size))
            return bytes(size)

    # submit_recorded: what an open batch recorded is submitted before the read (as the array's read does)
    ctx = SimpleNamespace(transport=Transport, dev="dev", submit_recorded=lambda: log.append("submit"))
    out = SimpleNamespace(device="webgpu", ctx=ctx, buffer="y-buffer", nbytes=4096)

    def call():
        log.append("call")
        return out, "mean", "rstd"  # forward's tuple: the first array is read

    backend = SimpleNamespace(device="webgpu", synchronize=lambda: log.append("sync"))
    times = timer_for(backend)(call, 3, 1)
    assert len(times) == 3 and all(t >= 0 for t in times)
    assert log == ["call", "submit", ("read", "y-buffer", 0, READ_BACK_BYTES)] * 4, log
    log.clear()
    timer_for(backend, "device")(call, 2, 1)
    assert log == ["call", "sync"] + (["call"] * WEBGPU_BATCH + ["sync"]) * 2, log


@pytest.mark.parametrize("flag", ["--runs", "--repeat"])
def test_bench_rejects_no_samples(flag):
    out = run("bench", "--quick", flag, "0")
    assert out.returncode == 2 and flag in out.stderr and "Traceback" not in out.stderr


def test_bench_rejects_bad_shapes():
    out = run("bench", "--shapes", "2,3")
    assert out.returncode == 2 and "--shapes" in out.stderr and "Traceback" not in out.stderr


COUNT_COMPILES = r"""
import sys
import numpy as np
import numr_web
from numr_web.backends import get_backend
from numr_web.backends.cpu import kernels_common, kernels_dtype, kernels_nchw, kernels_nhwc

get_backend("cpu").path = "fused"
rng = np.random.default_rng(0)
# shapes unlike the warm-up's: a bench shape, odd sizes, a single sample, rank 3 and 5
for shape, groups in [((2, 320, 16, 16), 32), ((3, 6, 5, 7), 3), ((1, 12, 40), 4), ((2, 8, 3, 4, 5), 2)]:
    for layout in ("nchw", "nhwc"):
        x = rng.standard_normal(shape).astype(np.float32)
        if layout == "nhwc":
            x = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)
        w = rng.standard_normal(shape[1]).astype(np.float32)
        for wt, bs in ((w, w), (None, None), (w, None), (None, w)):
            _, mean, rstd = numr_web.ops.group_norm_forward(x, wt, bs, groups)
            numr_web.ops.group_norm_backward(x, x, mean, rstd, wt, groups, bias=bs)
misses = {
    name: sum(f.stats.cache_misses.values())
    for k in (kernels_dtype, kernels_common, kernels_nchw, kernels_nhwc)
    for name, f in vars(k).items()
    if hasattr(f, "stats")
}
print({n: m for n, m in misses.items() if m})
sys.exit(1 if any(misses.values()) else 0)
"""


def test_warmup_fills_the_kernel_cache_for_later_processes(tmp_path):
    from conftest import require_target

    require_target("cpu-fused")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    warm = subprocess.run(
        [sys.executable, "-m", "numr_web.cli", "warmup"], capture_output=True, text=True, timeout=900, env=env
    )
    assert warm.returncode == 0, warm.stderr
    assert "float32   nchw" in warm.stdout and "float32   nhwc" in warm.stdout
    later = subprocess.run([sys.executable, "-c", COUNT_COMPILES], capture_output=True, text=True, timeout=900, env=env)
    assert later.returncode == 0, f"kernels compiled after the warm-up: {later.stdout}{later.stderr}"
    # docs/cpu.md: NUMBA_CACHE_DIR moves the cache (the package's __pycache__ would also serve `later`)
    assert list(tmp_path.rglob("*.nbi")) and list(tmp_path.rglob("*.nbc")), sorted(tmp_path.rglob("*"))[:10]


def test_warmup_compiles_only_the_dtypes_and_layouts_asked_for():
    """docs/cpu.md: `numr-web warmup [--dtype D ...] [--layout nchw|nhwc|both]`: one line per family it compiled."""
    from conftest import require_target

    require_target("cpu-fused")
    out = run("warmup", "--dtype", "float32", "--dtype", "float64", "--layout", "nchw")
    assert out.returncode == 0, out.stderr
    families = [line.split(":")[0].split() for line in out.stdout.splitlines() if re.match(r"\w+ +n(ch|hw)[wc]:", line)]
    assert families == [["float32", "nchw"], ["float64", "nchw"]], out.stdout


# -- bad flags: one argparse line naming the flag and what it takes, exit 2, before any work (issue 16)
BAD_FLAGS = [
    (("bench", "--json", "/missing/dir/x.json"), "--json", "does not exist"),
    (("demo", "--groups", "0"), "--groups", "1, 2, 3 or 6"),
    (("demo", "--groups", "4"), "--groups", "1, 2, 3 or 6"),
    (("bench", "--threads", "-1"), "--threads", "positive integer"),
    (("bench", "--threads", "0"), "--threads", "positive integer"),
    (("bench", "--shapes", "garbage"), "--shapes", "N,C,H,W,G"),
    (("bench", "--shapes", "2,6,4,4,4"), "--shapes", "must divide"),
    (("bench", "--contend", "-1"), "--contend", "0 or more"),
    (("bench", "--timing", "wall"), "--timing", "invalid choice"),
    (("bench", "--timing", "device"), "--timing", "needs --backend webgpu or cuda"),
    (("bench", "--backend", "webgpu", "--dtype", "float64"), "--dtype", "no float64"),
    (("bench", "--floor"), "--floor", "needs --backend webgpu"),
    (("bench", "--ideal", "--backend", "webgpu"), "--ideal", "needs --backend cpu"),
    # issue 26: a shape is five integers, and an empty --shapes is no shape (not the defaults)
    (("bench", "--shapes", "1,32,8,8"), "--shapes", "five positive integers N,C,H,W,G"),
    (("bench", "--shapes", "1,32,8,8,8,8"), "--shapes", "five positive integers N,C,H,W,G"),
    (("bench", "--shapes", "1,,32,8,8,8"), "--shapes", "five positive integers N,C,H,W,G"),
    (("bench", "--shapes", ""), "--shapes", "at least one shape"),
    (("bench", "--shapes", " ; "), "--shapes", "at least one shape"),
    (("bench", "--threads", str(CORES + 1)), "--threads", f"at most the {CORES} cores"),
]


@pytest.mark.parametrize("argv,flag,what", BAD_FLAGS, ids=[" ".join(a) for a, _, _ in BAD_FLAGS])
def test_bad_flag_is_one_line_naming_it(argv, flag, what):
    out = run(*argv, timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""  # nothing ran
    errors = [ln for ln in out.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and f"argument {flag}:" in errors[0] and what in errors[0], out.stderr
    assert out.stderr.startswith(f"usage: numr-web {argv[0]} "), out.stderr  # the subcommand's usage
    assert "Traceback" not in out.stderr


def test_bench_compare_torch_without_torch_is_one_line():
    code = "import sys; sys.modules['torch'] = None; from numr_web.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "bench", "--quick", "--compare", "torch"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    errors = [ln for ln in out.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "argument --compare: torch is not installed" in errors[0]
    assert out.stderr.startswith("usage: numr-web bench "), out.stderr
    assert "Traceback" not in out.stderr


# -- a closed pipe (issue 26) ------------------------------------------------------------------------
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("command", ["info", "demo"])
def test_a_closed_pipe_ends_the_command_quietly(command, buffered):
    """``numr-web demo | head -1``: the reader is gone before the output is; no traceback, exit 0
    (whether the write that fails is a print or the flush of a buffered stdout)."""
    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write that reaches the pipe fails
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    try:
        out = subprocess.run(
            [sys.executable, "-m", "numr_web.cli", command],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            env=env,
        )
    finally:
        os.close(write)
    assert out.returncode == 0 and out.stderr == "", out.stderr


# -- NUMR_WEB_CPU_PATH and --cpu-path (issue 29) -----------------------------------------------------
@pytest.mark.parametrize(
    "env_path,flag,expected", [("numpy", None, "numpy"), ("fused", "numpy", "numpy"), ("numpy", "fused", "fused")]
)
def test_bench_honours_the_cpu_path_variable_unless_the_flag_is_given(tmp_path, env_path, flag, expected):
    """README: NUMR_WEB_CPU_PATH forces a path; --cpu-path, given, wins over it."""
    from conftest import require_target

    require_target("cpu-fused")
    dest = tmp_path / "rows.json"
    argv = ["bench", "--shapes", "1,8,4,4,2", "--repeat", "1", "--json", str(dest)]
    argv += ["--cpu-path", flag] if flag else []
    env = dict(os.environ, NUMR_WEB_CPU_PATH=env_path)
    out = subprocess.run(
        [sys.executable, "-m", "numr_web.cli", *argv], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, out.stderr
    assert f"backend cpu ({expected} path)" in out.stdout, out.stdout
    assert [row["cpu_path"] for row in json.loads(dest.read_text())["rows"]] == [expected]


# -- --compare torch, with torch (issue 29) -----------------------------------------------------------
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_bench_compare_torch_runs_for_every_dtype(tmp_path, dtype, layout):
    """float64 gave torch float32 weight and bias beside float64 x ("mixed dtype (CPU)", exit 1).
    torch is not in the dev extra (README's tests paragraph: pip install torch==2.13.0; .ci/run adds it)."""
    require_torch()
    dest = tmp_path / "rows.json"
    argv = ["bench", "--compare", "torch", "--cpu-path", "numpy", "--dtype", dtype, "--layout", layout]
    out = run(*argv, "--shapes", "2,32,8,8,8", "--repeat", "2", "--json", str(dest))
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(dest.read_text())["rows"]
    assert row["dtype"] == dtype and row["layout"] == layout, row
    assert row["torch_fwd_ms"] > 0 and row["torch_bwd_ms"] > 0 and row["total_vs_torch"] > 0, row
    assert "compared with torch" in out.stdout


# -- the environment variables README.md and docs/*.md document (issue 29) ------------------------------
def _python(code, **env):
    """A child Python in the repository root, with ``env`` (None: removed) over this environment."""
    full = dict(os.environ)
    for key, value in env.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=full, cwd=root)


INFO = "import sys; from numr_web.cli import main; sys.exit(main(['info']))"
REQUIRE_FUSED_WITHOUT_NUMBA = """
import sys
sys.modules["numba"] = None  # Numba cannot be imported: the fused path is missing
sys.path.insert(0, "tests")
import conftest
try:
    conftest.require_target("cpu-fused")
except BaseException as exc:
    print(type(exc).__name__)
else:
    print("usable")
"""


CI_VALUES = [("true", "Failed"), ("TRUE", "Failed"), (None, "Skipped"), ("1", "Skipped")]


@pytest.mark.parametrize("value, outcome", CI_VALUES)
def test_ci_makes_a_missing_component_fail_instead_of_skip(value, outcome):
    """README: under CI=true (any case) a missing adapter, browser or Numba fails the run instead of skipping."""
    out = _python(REQUIRE_FUSED_WITHOUT_NUMBA, CI=value)
    assert out.returncode == 0 and out.stdout.strip() == outcome, out.stdout + out.stderr


@pytest.mark.parametrize("value, path", [("numpy", "numpy"), ("fused", "fused"), (" NumPy ", "numpy")])
def test_the_cpu_path_variable_sets_the_path_of_every_call(value, path):
    """README: NUMR_WEB_CPU_PATH sets the CPU path (docs/cpu.md: numpy|fused|auto), and `numr-web info` says
    which path is active."""
    from conftest import require_target

    require_target("cpu-fused")
    code = "from numr_web.backends import get_backend; print(get_backend('cpu').active_path())"
    out = _python(code, NUMR_WEB_CPU_PATH=value)
    assert out.returncode == 0 and out.stdout.strip() == path, out.stdout + out.stderr
    info = _python(INFO, NUMR_WEB_CPU_PATH=value)
    assert info.returncode == 0 and f"cpu path: {path}\n" in info.stdout, info.stdout


def test_a_bad_cpu_path_variable_is_named_in_the_error():
    code = "import numpy as np, numr_web\nnumr_web.group_norm(np.ones((1, 2, 2), np.float32), 1)"
    out = _python(code, NUMR_WEB_CPU_PATH="quick")
    assert out.returncode != 0
    assert "ValueError: NUMR_WEB_CPU_PATH: expected one of ('auto', 'numpy', 'fused'), got 'quick'" in out.stderr


@pytest.mark.parametrize("threads", ["1", "2"])
def test_numba_num_threads_sets_the_fused_path_threads(threads):
    """docs/cpu.md: the fused kernels run on Numba's threads, all cores unless NUMBA_NUM_THREADS (or
    numba.set_num_threads) says otherwise; `numr-web info` reports them."""
    from conftest import require_target

    require_target("cpu-fused")
    if int(threads) > CORES:
        pytest.fail(f"this test needs {threads} cores, the machine has {CORES}")
    out = _python(INFO, NUMBA_NUM_THREADS=threads)
    assert out.returncode == 0 and f"numba threads: {threads}\n" in out.stdout, out.stdout


def test_bench_threads_sets_numba_and_torch_threads():
    """`numr-web bench --threads N` (README, docs/benchmarks.md): numr_web's fused kernels and torch both
    run on N threads (torch's part where torch is installed; it is not in the dev extra)."""
    import importlib.util

    from conftest import require_target

    require_target("cpu-fused")
    compare = ["--compare", "torch"] if importlib.util.find_spec("torch") else []
    argv = ["bench", "--quick", "--cpu-path", "fused", "--threads", "1", "--shapes", "1,8,4,4,2", "--repeat", "1"]
    code = (
        "import sys\nfrom numr_web.cli import main\n"
        f"rc = main({argv + compare!r})\n"
        "import numba\nprint('numba threads', numba.get_num_threads())\nsys.exit(rc)"
    )
    # OPENBLAS_NUM_THREADS=1: no re-execution, so the threads asked for are this process's
    out = _python(code, OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS=None, NUMR_WEB_BENCH_NO_REEXEC="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("numba threads 1"), out.stdout
    if compare:
        assert ", 1 threads" in out.stdout, out.stdout

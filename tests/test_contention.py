"""``numr-web bench --contend K``: it starts K busy-loop processes and always stops them.

No timing is asserted here (the contention figures are a benchmark, in README and
docs/reports/2026-12-01-contention.md); these tests check the processes' lifetimes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from numr_web.bench.contend import BusyLoops


def alive(pid: int) -> bool:
    """True while ``pid`` is a live process (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_gone(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to see processes")


def test_busy_loops_run_inside_the_block_and_stop_after():
    with BusyLoops(2, settle=0.1) as loops:
        pids = loops.pids
        assert len(pids) == 2 and all(alive(p) for p in pids)
    assert wait_gone(pids) == []


def test_busy_loops_stop_on_an_error():
    with pytest.raises(KeyboardInterrupt):
        with BusyLoops(2, settle=0.1) as loops:
            pids = loops.pids
            raise KeyboardInterrupt
    assert wait_gone(pids) == []


def test_busy_loops_exit_by_themselves_when_their_parent_is_killed():
    # a parent that starts two loops and is then SIGKILLed: no finally runs, the loops see it
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from numr_web.bench.contend import BusyLoops\n"
            "import time\n"
            "b = BusyLoops(2, settle=0.1).start()\n"
            "print(*b.pids, flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    parent.kill()
    parent.wait()
    assert wait_gone(pids) == []


def _bench(*extra):
    # SIGINT at its default in the bench (a shell's background job inherits it ignored, and Python then never
    # raises KeyboardInterrupt): the Ctrl-C test then tests the bench, not how the test run was started
    return subprocess.Popen(
        [sys.executable, "-m", "numr_web.cli", "bench", "--cpu-path", "numpy", "--shapes", "1,4,8,8,2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _started_pids(stream):
    for line in stream:
        m = re.match(r"started (\d+) busy-loop processes: pids ([\d ]+)", line)
        if m:
            return [int(p) for p in m.group(2).split()]
    return None


def test_bench_contend_starts_and_stops_its_processes():
    proc = _bench("--repeat", "2", "--contend", "2")
    pids = _started_pids(proc.stderr)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert pids is not None and len(pids) == 2
    assert "stopped the 2 busy-loop processes" in err
    assert "contended: 2 busy-loop processes" in out
    assert wait_gone(pids, timeout=2.0) == []


def test_bench_contend_stops_its_processes_on_ctrl_c():
    proc = _bench("--repeat", "100000", "--contend", "2")  # runs until interrupted
    pids = _started_pids(proc.stderr)
    assert pids is not None and all(alive(p) for p in pids)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert wait_gone(pids, timeout=5.0) == []


def test_bench_contend_leaves_no_orphans_when_killed():
    proc = _bench("--repeat", "100000", "--contend", "2")
    pids = _started_pids(proc.stderr)
    assert pids is not None
    proc.kill()
    proc.communicate(timeout=60)
    assert wait_gone(pids) == []


# -- the fused path's threads on a shared machine (numr_web/backends/cpu/threads.py) ----------------
def _fused_or_skip():
    from conftest import require_target

    require_target("cpu-fused")


def _python(code, **env):
    full = dict(os.environ, **env)
    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "NUMR_WEB_CPU_THREADS"):
        if k not in env:
            full.pop(k, None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=full)
    assert out.returncode == 0, out.stderr
    return out.stdout


POLICY = """
import os
import numpy as np
import numr_web
from numr_web.backends import get_backend
from numr_web.backends.cpu import fused, threads
get_backend("cpu").path = "fused"
numr_web.group_norm(np.ones((2, 64, 32, 32), np.float32), 32)
print(repr(threads.policy()))
print(repr(os.environ.get("OMP_WAIT_POLICY")))
print(repr(fused.threading_layer()))
"""


def test_the_wait_policy_is_reported_and_the_environment_left_alone():
    _fused_or_skip()
    policy, env_after, layer = _python(POLICY + 'print(repr(os.environ.get("GOMP_SPINCOUNT")))\n').splitlines()[:3]
    if layer != "'omp'":
        pytest.skip(f"Numba's threading layer here is {layer}, not OpenMP")
    from numr_web.backends.cpu import threads

    assert f"spin {threads.SPIN_COUNT} times" in policy and "serial" in policy
    assert env_after == "None"
    spin_after = _python(POLICY + 'print(repr(os.environ.get("GOMP_SPINCOUNT")))\n').splitlines()[3]
    assert spin_after == "None"  # set only while Numba's OpenMP runtime started


#: CPU time (ns) Numba's worker threads spend in the 0.3 s after a parallel call: spinning, then asleep
SPIN_PROBE = """
import os, threading, time
import numpy as np
import numr_web
from numr_web.backends import get_backend
get_backend("cpu").path = "fused"
x = np.ones((2, 64, 64, 64), np.float32)  # above threads.SERIAL_BELOW
numr_web.group_norm(x, 32)
me = threading.get_native_id()


def workers_ns():
    total = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != me:
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
    return total


spins = []
for _ in range(5):
    numr_web.group_norm(x, 32)
    t0 = workers_ns()
    time.sleep(0.3)
    spins.append(workers_ns() - t0)
print(min(spins))
"""


def test_waiting_threads_spin_briefly_unless_the_user_says_otherwise():
    # GNU OpenMP's default (300000 spins) keeps a waiting thread on a core for milliseconds; numr_web
    # starts Numba's runtime with threads.SPIN_COUNT; a user's GOMP_SPINCOUNT still wins
    _fused_or_skip()
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"):
        pytest.skip("needs /proc/<pid>/task/<tid>/schedstat (Linux schedstats)")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores (on one, every call runs on one thread: nothing waits)")
    layer = _python(POLICY).splitlines()[2]
    if layer != "'omp'":
        pytest.skip(f"Numba's threading layer here is {layer}, not OpenMP")
    ours = int(_python(SPIN_PROBE, NUMR_WEB_CPU_THREADS="parallel"))
    theirs = int(_python(SPIN_PROBE, NUMR_WEB_CPU_THREADS="parallel", GOMP_SPINCOUNT="300000"))
    assert ours * 3 < theirs, (ours, theirs)


def test_a_users_wait_policy_is_reported():
    _fused_or_skip()
    policy, env_after, layer = _python(POLICY, OMP_WAIT_POLICY="passive").splitlines()
    if layer != "'omp'":
        pytest.skip(f"Numba's threading layer here is {layer}, not OpenMP")
    assert "OMP_WAIT_POLICY=passive" in policy and env_after == "'passive'"


def test_threads_are_capped_at_the_usable_cores():
    _fused_or_skip()
    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        pytest.skip("needs CPU affinity and two cores")
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from numr_web.backends.cpu import fused, threads\n"
        "import numba\n"
        "print(fused.num_threads(), numba.get_num_threads(), threads.usable_cores())\n"
    )
    ours, numbas, cores = map(int, _python(code).split())
    assert cores == 1 and ours == 1 and numbas >= 1


@pytest.fixture
def recorded_thread_counts(monkeypatch):
    """The thread counts the fused entry points set (through threads._set)."""
    _fused_or_skip()
    from numr_web.backends.cpu import fused, threads

    fused.available()
    threads.start_runtime()
    seen = []
    original = threads._set

    def recording(n):
        seen.append(n)
        original(n)

    monkeypatch.setattr(threads, "_set", recording)
    monkeypatch.setattr(threads, "_stats", {})
    return seen


def _fwd_bwd(shape, groups=4):
    import numpy as np

    import numr_web
    from numr_web.backends import get_backend

    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with get_backend("cpu").using_path("fused"):
        y, mean, rstd = numr_web.ops.group_norm_forward(x, None, None, groups)
        dx = numr_web.ops.group_norm_backward(x, x, mean, rstd, None, groups)[0]
    return y, dx


def test_small_calls_run_on_one_thread(recorded_thread_counts):
    from numr_web.backends.cpu import threads

    if min(threads._get(), threads.usable_cores()) < 2:
        pytest.skip("one thread here anyway")
    _fwd_bwd((2, 8, 8, 8))  # 1024 elements
    assert recorded_thread_counts and recorded_thread_counts[0] == 1  # set to 1, then restored


def test_serial_and_parallel_give_bitwise_equal_results(monkeypatch):
    _fused_or_skip()
    import numpy as np

    shape = (2, 64, 48, 48)  # above SERIAL_BELOW
    monkeypatch.setenv("NUMR_WEB_CPU_THREADS", "serial")
    y1, dx1 = _fwd_bwd(shape, 32)
    monkeypatch.setenv("NUMR_WEB_CPU_THREADS", "parallel")
    y2, dx2 = _fwd_bwd(shape, 32)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(dx1, dx2)


def test_a_bad_thread_mode_names_the_variable(monkeypatch):
    _fused_or_skip()
    monkeypatch.setenv("NUMR_WEB_CPU_THREADS", "many")
    with pytest.raises(ValueError, match="NUMR_WEB_CPU_THREADS: expected one of"):
        _fwd_bwd((2, 64, 48, 48), 32)


def test_the_chooser_follows_the_faster_mode_and_probes_with_backoff(monkeypatch):
    from numr_web.backends.cpu import threads

    monkeypatch.setattr(threads, "_stats", {})
    key = ("forward", "nchw", 21)
    cost = {threads._PAR: 1.0, threads._SER: 2.0}  # seconds per element, made up
    picks = []
    for _ in range(200):
        which, entry, probe = threads._choose(key)
        picks.append((which, probe))
        if entry is not None:
            threads._record(entry, which, cost[which], probe)
    probes = [i for i, (w, p) in enumerate(picks) if p]  # the last call of each probe run
    in_probe = {j for i in probes for j in range(i - threads.PROBE_RUN + 1, i + 1)}
    assert all(picks[j][0] == threads._SER for j in in_probe)  # a probe runs the losing mode
    steady = [w for i, (w, p) in enumerate(picks) if i >= 10 and i not in in_probe]
    assert set(steady) == {threads._PAR}  # parallel is faster: it runs
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]  # the losing mode is probed less and less
    # the machine gets busy: parallel now costs 10, serial 3; the next probe of serial switches
    cost = {threads._PAR: 10.0, threads._SER: 3.0}
    for _ in range(3 * threads.PROBE_MAX):
        which, entry, probe = threads._choose(key)
        if entry is not None:
            threads._record(entry, which, cost[which], probe)
    tail = []
    for _ in range(6):
        which, entry, probe = threads._choose(key)
        tail.append(which)
        threads._record(entry, which, cost[which], probe)
    assert set(tail) == {threads._SER}  # within the window (and probes are far apart by now)


# -- the ideal streaming passes beside the fused calls (numr_web/bench/ideal.py) ---------------------
def test_ideal_passes_compute_what_they_say_in_both_thread_modes():
    _fused_or_skip()
    import numpy as np

    from numr_web.bench import ideal

    rng = np.random.default_rng(3)
    for dt in (np.float32, np.float64):
        x = rng.standard_normal((2, 8, 33, 17)).astype(dt)
        dy = rng.standard_normal(x.shape).astype(dt)
        fwd, bwd, fwd_s, bwd_s = ideal._kernels()
        a, b = dt(0.75), dt(0.25)
        flat_x, flat_dy = x.ravel(), dy.ravel()
        for f in (fwd, fwd_s):
            y = np.full_like(flat_x, np.nan)
            f(flat_x, y, a, b)
            np.testing.assert_array_equal(y, flat_x * a + b)
        for f in (bwd, bwd_s):
            dx = np.full_like(flat_x, np.nan)
            f(flat_dy, flat_x, dx, a, b)
            np.testing.assert_array_equal(dx, flat_dy * a + flat_x * b)
        assert set(ideal.timed_callables(x, dy)) == set(ideal.NAMES)


def test_ideal_passes_refuse_what_they_cannot_time():
    _fused_or_skip()
    import numpy as np

    from numr_web.bench import ideal

    with pytest.raises(ValueError, match="x, dy: expected arrays of one dtype and size"):
        ideal.timed_callables(np.zeros(8, np.float32), np.zeros(9, np.float32))
    with pytest.raises(ValueError, match="x: expected float16, float32 or float64"):
        ideal.timed_callables(np.zeros(8, np.int32), np.zeros(8, np.int32))


def test_bench_ideal_rows_carry_the_passes_beside_the_op(tmp_path):
    _fused_or_skip()
    import json

    out = tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "numr_web.cli", "bench", "--shapes", "2,64,16,16,32", "--repeat", "3"]
    proc = subprocess.run([*cmd, "--ideal", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out.read_text())["rows"]
    for name in ("ideal_fwd", "ideal_bwd", "ideal_fwd_serial", "ideal_bwd_serial"):
        assert row[f"{name}_ms"] > 0
    par = row["ideal_fwd_ms"] + row["ideal_bwd_ms"]
    ser = row["ideal_fwd_serial_ms"] + row["ideal_bwd_serial_ms"]
    assert row["ideal_fb_parallel_ms"] == pytest.approx(par)
    assert row["ideal_fb_serial_ms"] == pytest.approx(ser)
    assert row["ideal_fb_ms"] == pytest.approx(min(par, ser))


@pytest.mark.parametrize(
    "flags", [["--backend", "webgpu"], ["--dtype", "float16"], ["--dtype", "bfloat16"]], ids=["webgpu", "f16", "bf16"]
)
def test_bench_ideal_names_what_it_needs(flags):
    proc = subprocess.run(
        [sys.executable, "-m", "numr_web.cli", "bench", "--ideal", *flags], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "argument --ideal: needs --backend cpu and --dtype float32 or float64" in proc.stderr


def test_contention_harness_prints_the_ideal_floor_beside_the_fused_path(tmp_path):
    _fused_or_skip()
    import json

    out = tmp_path / "c.json"
    cmd = [sys.executable, "-m", "numr_web.bench.contention", "--processes", "1", "--repeat", "2"]
    cmd += ["--shapes", "2,64,16,16,32", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "ideal contended / idle" in proc.stdout
    doc = json.loads(out.read_text())
    (entry,) = doc["table"]
    idle = doc["runs"]["idle"][0]["ideal"]["2x64x16x16 G32"]
    busy = doc["runs"]["contended"][0]["ideal"]["2x64x16x16 G32"]
    assert entry["ideal_ratio"] == pytest.approx(busy / idle)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("| 2x64x16x16 G32"))
    assert line.rstrip().endswith(f"| {busy / idle:.2f} |")


def test_contention_summary_gives_median_and_range_over_runs(tmp_path):
    import json

    paths = []
    ratios = [3.0, 2.0, 5.0]
    for i, r in enumerate(ratios):
        row = {"shape": "2x8x4x4 G2", "idle_ms": 1.0 + i, "contended_ms": r * (1.0 + i), "ratio": r}
        row["ideal_ratio"] = r / 2
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps({"table": [row]}))
        paths.append(str(path))
    cmd = [sys.executable, "-m", "numr_web.bench.contention", "--summarize", *paths]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("| 2x8x4x4 G2"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    med = sorted(ratios)[1]
    assert cells[3] == f"{med:.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    assert cells[4] == f"{med / 2:.2f} ({min(ratios) / 2:.2f}-{max(ratios) / 2:.2f})"
    assert cells[1] == "2.000 (1.000-3.000)"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    out = subprocess.run([*cmd, str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "argument --summarize:" in out.stderr and "bad.json" in out.stderr

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
    return subprocess.Popen(
        [sys.executable, "-m", "numr_web.cli", "bench", "--cpu-path", "numpy", "--shapes", "1,4,8,8,2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
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

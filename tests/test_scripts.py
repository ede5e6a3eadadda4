"""The measurement scripts behind docs/cpu.md run and print the rows they promise."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

SCRIPTS = pathlib.Path(__file__).resolve().parent.parent / "scripts"
NUMBER = r"\d+\.\d+"


def _run(name, *args):
    path = SCRIPTS / name
    assert os.access(path, os.X_OK), f"scripts/{name} must be executable"
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=600)


def test_channels_last_loops_prints_every_form():
    out = _run("channels-last-loops")
    assert out.returncode == 0, out.stderr
    bwd = [line for line in out.stdout.splitlines() if line.startswith("backward dx")]
    fwd = [line for line in out.stdout.splitlines() if line.startswith("forward y")]
    assert len(bwd) == 2 and len(fwd) == 2, out.stdout
    for line in bwd:
        for label in ("1 row/load", "2 rows/load", "4 rows/load", "scalars", "dy + x", "copy of x"):
            assert re.search(re.escape(label) + r" " + NUMBER, line), (label, line)


def test_bench_settling_prints_each_call():
    args = ("--rounds", "2", "--calls", "3", "--shape", "2,32,32,32,8")
    out = _run("bench-settling", *args)
    if importlib.util.find_spec("torch") is None:
        # without torch it says what to install instead of failing somewhere inside
        assert out.returncode != 0 and "pip install torch" in out.stderr
        return
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines()[1:]:
        name, *values = re.split(r"\s{2,}|\s(?=\d)", line.strip())
        rows[name.strip()] = [float(v) for v in values]
    assert set(rows) == {"fwd", "bwd", "copy", "torch fwd", "torch bwd"}, out.stdout
    assert all(len(v) == 3 and min(v) >= 0 and max(v) > 0 for v in rows.values()), out.stdout


def test_call_overhead_prints_both_paths_and_layouts():
    out = _run("call-overhead")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.split()[:1] in (["numpy"], ["fused"])]
    assert {(r[0], r[1]) for r in rows} == {(p, lay) for p in ("numpy", "fused") for lay in ("nchw", "nhwc")}
    for r in rows:
        op_fwd, be_fwd, op_bwd, be_bwd = (float(v) for v in r[2:6])
        assert 0 < be_fwd and 0 < be_bwd and 0 < op_fwd and 0 < op_bwd, r

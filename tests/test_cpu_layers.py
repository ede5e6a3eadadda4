"""``python -m numr_web.bench.cpu_layers`` (issue 26): a CPU call's time layer by layer beside PyTorch's."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from conftest import require_target, require_torch

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(*argv, timeout=600):
    argv = [sys.executable, "-m", "numr_web.bench.cpu_layers", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_prints_each_layer_and_what_it_adds(layout):
    require_torch()
    require_target("cpu-fused")
    done = _run("--shapes", "2,64,8,8,8;1,32,4,4,4", "--layout", layout, "--rounds", "3", "--calls", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"float32, {layout}" in lines[0] and "1-minute load at start" in lines[0], lines[0]
    head = [c.strip() for c in lines[1].strip("|").split("|")]
    assert head[1:6] == ["backend us", "op us", "autograd us", "torch us", "torch autograd us"], head
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[3:5]]
    assert [r[0] for r in rows] == ["2x64x8x8 G8", "1x32x4x4 G4"], done.stdout
    for r in rows:
        backend, op, autograd, torch_us, torch_ag = (float(c) for c in r[1:6])
        assert min(backend, op, autograd, torch_us, torch_ag) > 0, r
        # the derived columns follow from the printed medians (which are rounded to 1 us)
        assert abs(float(r[6]) - (op - backend)) <= 1.5 and abs(float(r[7]) - (autograd - op)) <= 1.5, r
        assert float(r[8]) == pytest.approx(op / torch_us, rel=0.1, abs=0.02), r
        assert float(r[9]) == pytest.approx(autograd / torch_ag, rel=0.1, abs=0.02), r
    assert lines[-1].startswith("1-minute load at the end"), lines[-1]


@pytest.mark.parametrize(
    ("argv", "names"),
    [(["--rounds", "0"], "--rounds"), (["--threads", "0"], "--threads"), (["--shapes", "1,32,8,8"], "--shapes")],
)
def test_bad_arguments_are_named(argv, names):
    done = _run(*argv, timeout=120)
    assert done.returncode == 2 and names in done.stderr and "Traceback" not in done.stderr, done.stderr

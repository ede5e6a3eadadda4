"""The two measuring commands of issue 27: scripts/webgpu-snapshot (the launcher's output bits, to compare
revisions) and ``python -m numr_web.bench.webgpu_host`` (a call's host time against the floor's)."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

from webgpu_support import wg  # noqa: F401  (fixture: fails under CI=true without an adapter)

ROOT = pathlib.Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "scripts" / "webgpu-snapshot"
ONLY = "2x8x4x4/G2/float32/nchw"


def _run(*argv, timeout=300):
    return subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_snapshot_finds_a_changed_case_and_no_other(wg, tmp_path):  # noqa: F811
    out = tmp_path / "bits.json"
    done = _run(SNAPSHOT, "--out", out, "--only", ONLY)
    assert done.returncode == 0, done.stderr
    digests = json.loads(out.read_text())
    assert len(digests) == 32 and all(ONLY in k for k in digests), sorted(digests)[:3]
    assert all(re.fullmatch(r"[0-9a-f]{64}", v) for v in digests.values())
    same = _run(SNAPSHOT, "--compare", out, "--only", ONLY)
    assert same.returncode == 0 and "0 of 32 cases differ" in same.stdout, same.stdout + same.stderr
    name = sorted(digests)[5]
    digests[name] = "0" * 64  # as if that case's bits had changed
    out.write_text(json.dumps(digests))
    changed = _run(SNAPSHOT, "--compare", out, "--only", ONLY)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert f"differs: {name}\n" in changed.stdout and "1 of 32 cases differ" in changed.stdout, changed.stdout
    refused = _run(SNAPSHOT, "--out", out, "--only", "no such case")
    assert refused.returncode == 2 and "--only: no case name holds 'no such case'" in refused.stderr


def test_host_time_prints_the_op_the_backend_and_the_floor(wg):  # noqa: F811
    done = _run("-m", "numr_web.bench.webgpu_host", "--shapes", "2,64,8,8,8;1,32,4,4,4", "--calls", "5")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "host time of a call without its wait" in lines[0] and "1-minute load" in lines[0]
    rows = [line for line in lines if line.startswith("| 2x64x8x8") or line.startswith("| 1x32x4x4")]
    assert len(rows) == 2, done.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 11, row
        assert all(float(c) > 0 for c in cells[1:]), row  # us of op, backend, floor, and their ratios
    # channels-last has its floor kernels too; a shape they do not take prints "-" for the floor and ratios
    nhwc = _run(
        "-m", "numr_web.bench.webgpu_host", "--shapes", "2,64,8,8,8;1,30,5,5,3", "--layout", "nhwc", "--calls", "5"
    )
    assert nhwc.returncode == 0, nhwc.stderr
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in nhwc.stdout.splitlines() if row.startswith("| ")]
    (full,) = [r for r in rows if r[0] == "2x64x8x8 G8"]
    (bare,) = [r for r in rows if r[0] == "1x30x5x5 G3"]
    assert all(float(c) > 0 for c in full[1:]), full
    assert all(float(c) > 0 for c in bare[1:5]) and set(bare[5:]) == {"-"}, bare
    bad = _run("-m", "numr_web.bench.webgpu_host", "--calls", "0")
    assert bad.returncode == 2 and "--calls" in bad.stderr


def test_host_time_floor_is_one_dispatch_a_call(wg, monkeypatch):  # noqa: F811
    """The host-work floor is the least call's: channels-last too, it offers only the one-dispatch forms (not the
    split shape's three dispatches, which the throughput floor may pick)."""
    import numpy as np
    from webgpu_support import floor_candidates

    from numr_web.bench import floor, webgpu_host
    from numr_web.memory_layout import as_channels_last

    x = wg.from_numpy(as_channels_last(np.ones((2, 64, 8, 8), np.float32)))
    w = wg.from_numpy(np.ones(64, np.float32))
    host = webgpu_host.callables(x, x, w, w, 8, "nhwc")
    assert {floor.form_name(host[name]) for name in floor.NAMES} == {"window"}
    # the throughput floor at the same shape: the split shape is a candidate
    assert "split" in [floor.form_name(r) for r in floor_candidates(monkeypatch, x, x, 8, "nhwc")]


def test_host_time_summarizes_saved_runs(tmp_path):
    """--summarize: per table heading and shape, the median of the runs' cells and their range; '-' cells
    (no floor for the shape) stay out; a missing file is a usage error naming --summarize."""
    head = "| shape | " + " | ".join(["a"] * 10) + " |\n|" + "---|" * 11 + "\n"
    runs = []
    for k, (ratio, us) in enumerate([(1.2, 300), (1.6, 310), (1.4, 280)]):
        text = f"adapter: lavapipe; nchw, float32; host time ...\n{head}"
        text += f"| 2x8x4x4 G2 | {us} | 1 | {us + 10} | 1 | 200 | 210 | {ratio} | 1 | {ratio + 0.1:.2f} | 1 |\n"
        text += "| 1x30x5x5 G3 | 50 | 40 | 60 | 50 | - | - | - | - | - | - |\n"
        text += f"\nnhwc, float32\n{head}| 2x8x4x4 G2 | 9 | 9 | 9 | 9 | 9 | 9 | {k} | 9 | 9 | 9 |\n"
        path = tmp_path / f"run{k}.txt"
        path.write_text(text)
        runs.append(path)
    done = _run("-m", "numr_web.bench.webgpu_host", "--summarize", *runs)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("nchw, float32 (3 runs") and any(
        line.startswith("nhwc, float32 (3 runs") for line in lines
    )
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| 2x8x4x4")]
    first, nhwc = rows
    # columns: op fwd, floor fwd, op/floor fwd, op bwd, floor bwd, op/floor bwd, ...
    assert first[1] == "300 (280-310)" and first[3] == "1.40 (1.20-1.60)" and first[6] == "1.50 (1.30-1.70)"
    assert first[2] == "200 (200-200)"
    assert nhwc[3] == "1.00 (0.00-2.00)"
    (bare,) = [line for line in lines if line.startswith("| 1x30x5x5")]
    assert "| - |" in bare and "50 (50-50)" in bare
    bad = _run("-m", "numr_web.bench.webgpu_host", "--summarize", tmp_path / "missing.txt")
    assert bad.returncode == 2 and "--summarize" in bad.stderr

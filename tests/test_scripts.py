"""The measurement scripts behind docs/cpu.md run and print the rows they promise."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parent.parent / "scripts"
NUMBER = r"\d+\.\d+"
IN_CI = os.environ.get("CI", "").lower() == "true"


def _run(name, *args):
    path = SCRIPTS / name
    assert os.access(path, os.X_OK), f"scripts/{name} must be executable"
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=600)


def test_channels_last_loops_prints_every_form():
    out = _run("channels-last-loops", "--rounds", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    shapes = [line for line in lines if re.match(r"\(\d+, \d+, \d+\) ", line)]
    assert len(shapes) == 3, out.stdout
    forms = [
        f"{loop}, {tiles}"
        for loop in ("3-D index, 2 rows/load", "3-D index", "row views")
        for tiles in ("tiles +32 B", "tiles aligned")
    ]
    forms += ["scalar coefficients (NCHW-like)", "copy of x"]
    for form in forms:
        rows = [line for line in lines if line.strip().startswith(form + " ")]
        assert len(rows) == 3, (form, out.stdout)
        for row in rows:
            assert re.fullmatch(r"\s+" + re.escape(form) + r"\s+" + NUMBER + r"\s+" + NUMBER, row), row


def test_channels_last_loops_refuses_zero_rounds():
    out = _run("channels-last-loops", "--rounds", "0")
    assert out.returncode == 2
    assert "--rounds" in out.stderr


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


def test_two_pass_floor_prints_the_three_timings():
    # a small shape of each channels-last plan: one work item per sample, and row blocks
    for shape in ("4,64,8,8,8", "1,64,64,64,8"):
        out = _run("two-pass-floor", "--shape", shape, "--rounds", "2")
        assert out.returncode == 0, out.stderr
        plan = "one item per sample" if shape.startswith("4,") else "row blocks per sample"
        assert plan in out.stdout, out.stdout
        rows = {}
        for line in out.stdout.splitlines()[1:]:
            m = re.fullmatch(r"\s+(.+?)\s+(" + NUMBER + r") ms\s+1\.5\*copy/time\s+(" + NUMBER + ")", line)
            assert m, line
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
        assert set(rows) == {
            "copy of x (NumPy, 1 thread)",
            "bare two passes (sum dy*x; dx = dy + x)",
            "fused channels-last backward",
        }, out.stdout
        assert rows["copy of x (NumPy, 1 thread)"][1] == 1.5
        assert all(ms > 0 and ratio > 0 for ms, ratio in rows.values()), out.stdout


def test_two_pass_floor_refuses_a_bad_shape():
    out = _run("two-pass-floor", "--shape", "2,320,64")
    assert out.returncode == 2 and "--shape" in out.stderr


def test_process_spread_prints_each_process_and_the_range():
    out = _run("process-spread", "--shape", "2,32,8,8,8", "--processes", "2", "--repeat", "2")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if re.match(r"\s+\d+\s", line)]
    assert [r[0] for r in rows] == ["1", "2"], out.stdout
    for r in rows:
        assert len(r) == 6 and all(float(v) > 0 for v in r[1:]), r
    fwd = [float(r[4]) for r in rows]
    m = re.search(
        r"forward (" + NUMBER + ") to (" + NUMBER + r") of the copy, backward (" + NUMBER + ") to (" + NUMBER + ")",
        out.stdout,
    )
    assert m and float(m.group(1)) == min(fwd) and float(m.group(2)) == max(fwd), out.stdout


def test_process_spread_refuses_two_shapes():
    out = _run("process-spread", "--shape", "2,32,8,8,8;2,32,8,8,8")
    assert out.returncode == 2 and "--shape" in out.stderr


def test_numpy_loops_prints_its_three_tables():
    out = _run("numpy-loops")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("3. channels-last") for line in lines), out.stdout
    rows = [line for line in lines if re.match(r"\s+\d+ x \d+ x \d+ ", line)]
    assert len(rows) == 4, out.stdout
    for line in rows:
        m = re.search(r"(" + NUMBER + r")\s+(" + NUMBER + r") \(R=\s*(\d+)\)\s+(" + NUMBER + ")$", line)
        assert m, line
        assert all(float(m.group(i)) > 0 for i in (1, 2, 4)) and int(m.group(3)) >= 1, line


def test_numpy_floor_prints_path_floor_and_torch_where_installed():
    out = _run("numpy-floor", "--shapes", "2,32,8,8,8;1,16,32,32,4", "--layout", "nhwc", "--rounds", "2", "--runs", "2")
    assert out.returncode == 0, out.stderr
    has_torch = importlib.util.find_spec("torch") is not None
    table, ranges = out.stdout.split("ranges over the 2 runs")
    rows = [line.strip("|").split("|") for line in table.splitlines() if re.match(r"\| \d+x", line)]
    assert [r[0].strip() for r in rows] == ["2x32x8x8 G8", "1x16x32x32 G4"] * 2, out.stdout
    per_run = {}
    for r in rows:
        per_run.setdefault(r[0].strip(), []).append(float(r[-1]))
        cells = [c.strip() for c in r[1:]]
        assert all(float(c) > 0 for c in cells[:4]), r  # path and floor, ms
        assert float(cells[8]) > 0, r  # path/floor
        torch_cells = cells[4:8]
        if has_torch:
            assert all(float(c) > 0 for c in torch_cells), r
        else:
            assert torch_cells == ["n/a"] * 4, r
    # the range table spans each shape's two path/floor ratios
    for line in ranges.splitlines():
        if re.match(r"\| \d+x", line):
            label, *cells = [c.strip() for c in line.strip("|").split("|")]
            lo, hi = (float(v) for v in cells[-1].split(" to "))
            assert (lo, hi) == (min(per_run[label]), max(per_run[label])), line


def test_numpy_floor_refuses_bad_arguments():
    out = _run("numpy-floor", "--rounds", "0")
    assert out.returncode == 2 and "--rounds" in out.stderr
    out = _run("numpy-floor", "--runs", "0")
    assert out.returncode == 2 and "--runs" in out.stderr
    out = _run("numpy-floor", "--shapes", "2,32")
    assert out.returncode == 2 and "--shapes" in out.stderr


def test_bench_ab_summary_takes_medians_and_ranges_per_side(tmp_path):
    def doc(ratios):
        runs = [[{"shape": [2, 8, 4, 4], "fwd_of_copy": f, "bwd_of_copy": b}] for f, b in ratios]
        return json.dumps({"rows": runs[0], "runs": runs})

    (tmp_path / "A-cpu-1.json").write_text(doc([(0.5, 0.2), (0.7, 0.4)]))
    (tmp_path / "A-cpu-2.json").write_text(doc([(0.9, 0.3)]))
    (tmp_path / "B-cpu-1.json").write_text(doc([(0.6, 0.1)]))
    out = _run("bench-ab-summary", str(tmp_path))
    assert out.returncode == 0, out.stderr
    row = [line for line in out.stdout.splitlines() if line.startswith("| cpu |")]
    cells = "0.70 (0.50-0.90, n=3) | 0.60 (0.60-0.60, n=1) | 0.30 (0.20-0.40, n=3) | 0.10 (0.10-0.10, n=1)"
    assert row == [f"| cpu | 2x8x4x4 | {cells} |"], out.stdout


def test_browser_bench_refuses_a_bad_dtype_in_one_line():
    out = _run("browser-bench", "--dtype", "float32,float64")
    assert out.returncode == 2 and out.stdout == "", out.stderr
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "argument --dtype:" in errors[0] and "'float32,float64'" in errors[0], out.stderr


def _bench_doc(layout, dtype, per_run, copy_variant="copy_ranges", timing="end-to-end", shapes=None):
    """A ``numr-web bench --json`` document: per run, (fwd, bwd) ratios for each shape."""
    shapes = shapes or [[2, 320, 64, 64], [2, 640, 32, 32]]
    runs = [
        [
            {"shape": s, "groups": 32, "layout": layout, "dtype": dtype, "fwd_of_copy": f, "bwd_of_copy": b}
            | {"copy_variant": copy_variant, "timing": timing}
            for s in shapes
        ]
        for f, b in per_run
    ]
    return json.dumps(
        {"header": ["numr_web bench"], "rows": runs[0], "runs": runs, "layout": layout, "dtype": dtype}
        | {
            "timing": timing,
            "adapter": "llvmpipe (test)",
            "command": f"numr-web bench --backend webgpu --dtype {dtype}",
        }
    )


def test_bench_table_prints_one_table_per_adapter(tmp_path):
    cpu_rows = [{"shape": [2, 320, 64, 64], "fwd_of_copy": 0.9, "bwd_of_copy": 0.8, "total_vs_torch": 0.7}]
    (tmp_path / "cpu-fused-nchw.json").write_text(json.dumps({"header": ["cpu"], "rows": cpu_rows}))
    # lavapipe: medians over three runs; a float16 file; an old float32 channels-last file without timing
    lava = json.loads(_bench_doc("nchw", "float32", [(0.5, 0.4), (0.9, 0.2), (0.7, 0.3)]))
    lava["runs"][0][0]["copy_variant"] = "copy_vec4"  # one run of three: the note names the copy of most runs
    (tmp_path / "webgpu-lavapipe-nchw.json").write_text(json.dumps(lava))
    (tmp_path / "webgpu-lavapipe-nchw-float16.json").write_text(_bench_doc("nchw", "float16", [(0.25, 0.35)]))
    old = json.loads(_bench_doc("nhwc", "float32", [(0.11, 0.12)], copy_variant=None, timing=None))
    old["header"].append("copy yardstick: copy_vec4")
    for key in ("timing", "dtype", "layout", "command"):
        old.pop(key)
    (tmp_path / "webgpu-lavapipe-nhwc.json").write_text(json.dumps(old))
    browser_rows = [
        {"shape": [2, 320, 64, 64], "groups": 32, "layout": layout, "dtype": dtype, "forward_of_copy": f}
        | {"backward_of_copy": b, "copy_variant": "copy_grid"}
        for layout, dtype, f, b in [("nhwc", "bfloat16", 0.61, 0.62), ("nchw", "float32", 0.41, 0.42)]
    ]
    browser_rows.append({"shape": [8, 64, 56, 56], "groups": 32, "layout": "nchw", "dtype": "float32"})
    browser_rows[-1] |= {"forward_of_copy": 0.43, "backward_of_copy": None, "copy_variant": "copy_vec4"}
    # three runs: the table shows each cell's median over them, not the first run's
    runs = [[dict(r) for r in browser_rows] for _ in range(3)]
    for run, f in zip(runs, (0.50, 0.65, 0.61)):
        run[0]["forward_of_copy"] = f
    browser = {"chromium": "156", "pyodide": "314", "repeat": 7, "timing": "end-to-end", "rows": runs[0]}
    browser["runs"] = runs
    (tmp_path / "webgpu-browser-swiftshader.json").write_text(
        json.dumps(browser | {"command": "scripts/browser-bench"})
    )

    out = _run("bench-table", "--dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    blocks = out.stdout.split("\n\n")
    titles = [b for b in blocks if b.startswith("**")]
    assert [t.split("**")[1] for t in titles] == ["CPU", "WebGPU on lavapipe", "WebGPU in headless Chromium"], titles
    assert "llvmpipe (test)" in titles[1] and "Chromium 156, Pyodide 314" in titles[2], titles
    tables = [b.splitlines() for b in blocks if b.startswith("| ")]
    assert len(tables) == 3, out.stdout
    head = "| 2x320x64x64 | 2x640x32x32 | 2x1280x16x16 | 8x64x56x56 | 16x1280x8x8 |"
    assert tables[0][0] == "| fwd / bwd of copy " + head
    assert tables[1][0] == tables[2][0] == "| fwd / bwd of fastest copy " + head
    assert tables[0][2:] == [
        "| CPU fused, NCHW | 0.90 / 0.80 | - | - | - | - |",
        "| CPU fused, NCHW: (f+b) time / torch's | 0.70 | - | - | - | - |",
    ]
    assert tables[1][2:] == [  # rows per layout and dtype; cells the medians over runs
        "| NCHW, float32 | 0.70 / 0.30 | 0.70 / 0.30 | - | - | - |",
        "| NCHW, float16 | 0.25 / 0.35 | 0.25 / 0.35 | - | - | - |",
        "| channels-last, float32 | 0.11 / 0.12 | 0.11 / 0.12 | - | - | - |",
    ]
    assert tables[2][2:] == [  # a shape whose backward failed has no cell
        "| NCHW, float32 | 0.41 / 0.42 | - | - | - | - |",
        "| channels-last, bfloat16 | 0.61 / 0.62 | - | - | - | - |",
    ]
    notes = [line for line in out.stdout.splitlines() if line.startswith("- ")]
    lava = [n for n in notes if "webgpu-lavapipe" in n]
    assert [n.split(":")[0] for n in lava] == ["- NCHW, float32", "- NCHW, float16", "- channels-last, float32"]
    assert (
        "3 runs, timing end-to-end, yardstick copy_ranges, `numr-web bench --backend webgpu --dtype float32`" in lava[0]
    )
    assert "timing device (4 calls per wait" in lava[2] and "yardstick copy_vec4 (the faster of" in lava[2], lava[2]
    (browser_note,) = [n for n in notes if "webgpu-browser" in n]  # one per file, the yardstick per row
    assert "3 runs of 7 rounds (medians), timing end-to-end, `scripts/browser-bench`" in browser_note, browser_note
    which = "NCHW, float32: copy_grid at 1 shape, copy_vec4 at 1 shape; channels-last, bfloat16: copy_grid"
    assert browser_note.endswith("; yardstick (first run): " + which), browser_note
    spread = _run("bench-table", "--dir", str(tmp_path), "--spread")
    assert "| NCHW, float32 | 0.70 (0.50-0.90) / 0.30 (0.20-0.40) | 0.70 (0.50-0.90)" in spread.stdout, spread.stdout
    assert "| channels-last, bfloat16 | 0.61 (0.50-0.65) / 0.62 |" in spread.stdout, spread.stdout
    # --summary: README's one table, the rows a user compares first, with only their files' notes
    summary = _run("bench-table", "--dir", str(tmp_path), "--summary")
    assert summary.returncode == 0, summary.stderr
    table = [line for line in summary.stdout.splitlines() if line.startswith("| ")]
    assert table[0] == "| float32, G=32 " + head
    assert table[1:] == [  # (the separator row starts with "|---")
        "| CPU (fused), NCHW: f+b time / PyTorch's | 0.70 | - | - | - | - |",
        "| CPU (fused), NCHW: fwd / bwd of a copy | 0.90 / 0.80 | - | - | - | - |",
        "| WebGPU, lavapipe (wgpu-py), NCHW: fwd / bwd of a copy | 0.70 / 0.30 | 0.70 / 0.30 | - | - | - |",
        "| WebGPU, SwiftShader (Chromium, Pyodide), NCHW: fwd / bwd of a copy | 0.41 / 0.42 | - | - | - | - |",
    ], table
    notes = [line[:40] for line in summary.stdout.splitlines() if line.startswith("- ")]
    assert notes == [
        "- CPU fused, NCHW: `docs/bench/cpu-fused",
        "- NCHW, float32: `docs/bench/webgpu-lava",
        "- `docs/bench/webgpu-browser-swiftshader",
    ], notes
    assert _run("bench-table", "--dir", str(tmp_path), "--summary", "--spread").returncode == 2


def _tables(text):
    """The Markdown tables of ``text``: runs of lines starting with "|", each as one string."""
    found, run = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            run.append(line)
        elif run:
            found.append("\n".join(run))
            run = []
    return found


def test_readme_and_docs_speed_tables_are_what_bench_table_prints():
    """README's speed table and its notes, and every table of docs/benchmarks.md's throughput and floor sections,
    are what ``scripts/bench-table`` prints from docs/bench/ now: a file measured again without its tables copied
    (or tables edited by hand) fails here."""
    root = SCRIPTS.parent
    summary = _run("bench-table", "--summary")
    assert summary.returncode == 0, summary.stderr
    block = summary.stdout.split("\n\n", 1)[1].strip()  # the table and its notes, without the title
    assert block in (root / "README.md").read_text(), block
    docs = _tables((root / "docs" / "benchmarks.md").read_text())
    for args in ((), ("--of-floor",)):
        out = _run("bench-table", *args)
        assert out.returncode == 0, out.stderr
        for table in _tables(out.stdout):
            assert table in docs, f"bench-table {' '.join(args)} prints a table docs/benchmarks.md lacks:\n{table}"


def test_bench_table_takes_the_busy_machine_runs_from_one_file_each(tmp_path):
    """The contended CPU row's runs come from one file per process (each started on an idle machine):
    the cells are the medians over the files' runs, and --spread gives the ranges, torch's ratio too."""
    for i, (f, total) in enumerate([(0.5, 0.9), (0.7, 1.6), (0.4, 0.2)], 1):
        row = {"shape": [2, 1280, 16, 16], "fwd_of_copy": f, "bwd_of_copy": 0.3, "total_vs_torch": total}
        doc = {"header": ["numr_web bench"], "rows": [row], "command": "numr-web bench --contend 2"}
        (tmp_path / f"cpu-fused-nchw-contend2-{i}.json").write_text(json.dumps(doc))
    out = _run("bench-table", "--dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    table = [line for line in out.stdout.splitlines() if line.startswith("| CPU")]
    assert table == [
        "| CPU fused, NCHW, 2 busy processes | - | - | 0.50 / 0.30 | - | - |",
        "| CPU fused, NCHW, 2 busy processes: (f+b) time / torch's | - | - | 0.90 | - | - |",
    ], out.stdout
    assert "`docs/bench/cpu-fused-nchw-contend2-*.json` (3 files, a process each), 3 runs" in out.stdout, out.stdout
    spread = _run("bench-table", "--dir", str(tmp_path), "--spread").stdout
    assert "| - | - | 0.50 (0.40-0.70) / 0.30 | - | - |" in spread, spread
    assert "torch's | - | - | 0.90 (0.20-1.60) | - | - |" in spread, spread


def test_bench_table_puts_floor_rows_under_their_layout_and_dtype(tmp_path):
    """Files measured with --floor get a row of the floor kernels' ratios (medians over the runs)
    under their own row; files without the floor get none."""
    lava = json.loads(_bench_doc("nchw", "float32", [(0.5, 0.4), (0.6, 0.5), (0.7, 0.3)]))
    for run, (f, b) in zip(lava["runs"], [(0.81, 0.7), (0.9, 0.72), (0.85, 0.74)]):
        for row in run:
            row |= {"floor_fwd_of_copy": f, "floor_bwd_of_copy": b}
    (tmp_path / "webgpu-lavapipe-nchw.json").write_text(json.dumps(lava))
    (tmp_path / "webgpu-lavapipe-nchw-float16.json").write_text(_bench_doc("nchw", "float16", [(0.25, 0.35)]))
    rows = [
        {"shape": [2, 320, 64, 64], "groups": 32, "layout": "nchw", "dtype": "float32", "forward_of_copy": 0.6}
        | {"backward_of_copy": 0.5, "copy_variant": "copy_grid", "floor_forward_of_copy": fl}
        | {"floor_backward_of_copy": 0.66}
        for fl in (0.7, 0.75, 0.65)
    ]
    browser = {"chromium": "156", "pyodide": "314", "repeat": 7, "timing": "end-to-end", "rows": [rows[0]]}
    browser["runs"] = [[r] for r in rows]
    (tmp_path / "webgpu-browser-swiftshader.json").write_text(json.dumps(browser | {"command": "b"}))
    out = _run("bench-table", "--dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    tables = [b.splitlines() for b in out.stdout.split("\n\n") if b.startswith("| ")]
    assert tables[0][2:] == [
        "| NCHW, float32 | 0.60 / 0.40 | 0.60 / 0.40 | - | - | - |",
        "| NCHW, float32: floor kernels | 0.85 / 0.72 | 0.85 / 0.72 | - | - | - |",
        "| NCHW, float16 | 0.25 / 0.35 | 0.25 / 0.35 | - | - | - |",
    ], tables[0]
    assert tables[1][2:] == [
        "| NCHW, float32 | 0.60 / 0.50 | - | - | - | - |",
        "| NCHW, float32: floor kernels | 0.70 / 0.66 | - | - | - | - |",
    ], tables[1]
    # --of-floor: per run op/copy over floor/copy, the median over the runs; rows without the floor left out
    of = _run("bench-table", "--dir", str(tmp_path), "--of-floor")
    assert of.returncode == 0, of.stderr
    assert "**CPU**" not in of.stdout
    tables = [b.splitlines() for b in of.stdout.split("\n\n") if b.startswith("| ")]
    head = "| fwd / bwd of the floor kernels | 2x320x64x64 | 2x640x32x32 | 2x1280x16x16 | 8x64x56x56 | 16x1280x8x8 |"
    assert [t[0] for t in tables] == [head, head], tables
    # lavapipe runs: 0.5/0.81, 0.6/0.9, 0.7/0.85 forward; 0.4/0.7, 0.5/0.72, 0.3/0.74 backward
    fwd = sorted(f / fl for f, fl in ((0.5, 0.81), (0.6, 0.9), (0.7, 0.85)))[1]
    bwd = sorted(b / fl for b, fl in ((0.4, 0.7), (0.5, 0.72), (0.3, 0.74)))[1]
    assert tables[0][2:] == [f"| NCHW, float32 | {fwd:.2f} / {bwd:.2f} | {fwd:.2f} / {bwd:.2f} | - | - | - |"], tables
    fwd = sorted(0.6 / fl for fl in (0.7, 0.75, 0.65))[1]
    assert tables[1][2:] == [f"| NCHW, float32 | {fwd:.2f} / {0.5 / 0.66:.2f} | - | - | - | - |"], tables


def test_bench_table_refuses_a_folder_without_rows(tmp_path):
    out = _run("bench-table", "--dir", str(tmp_path))
    assert out.returncode == 2 and out.stdout == "" and "argument --dir:" in out.stderr, out.stderr


def _cpu_adapter():
    from numr_web.backends.webgpu import device

    return device.context().cpu_adapter


def test_webgpu_plans_prints_every_plan_per_shape():
    from conftest import require_target

    require_target("webgpu")
    out = _run("webgpu-plans", "--shapes", "16,64,8,8,32;2,8,3,3,4", "--rounds", "1")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if re.match(r"\| \d+x", line)]
    rows = {c[0]: c for c in ([v.strip() for v in line.strip().strip("|").split("|")] for line in lines)}
    assert set(rows) == {"16x64x8x8 G32", "2x8x3x3 G4"}
    big, odd = rows["16x64x8x8 G32"], rows["2x8x3x3 G4"]
    # per direction: fused, split and thread ms, then split/fused and thread/fused
    assert len(big) == len(odd) == 12
    assert big[1] == ("thread" if _cpu_adapter() else "fused")  # many small float32 groups
    assert all(re.fullmatch(NUMBER, v) for v in big[2:])
    # HW = 9 is no multiple of 4: neither split nor thread takes it, and the cells say what ran
    assert odd[1] == "fused"
    for i in (5, 6, 10, 11):
        plan = ("split", "thread")[i % 5]
        assert odd[i].endswith(f"({plan}=fused)"), odd
    bad = _run("webgpu-plans", "--shapes", "2,3,4")
    assert bad.returncode == 2 and "--shapes" in bad.stderr


def test_webgpu_plans_times_the_dtype_asked_for():
    """docs/webgpu.md: `scripts/webgpu-plans --dtype float16 ...` times float16 storage."""
    from conftest import require_target

    require_target("webgpu")
    out = _run("webgpu-plans", "--shapes", "2,16,8,8,4", "--dtype", "float16", "--rounds", "1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].endswith("; nchw, float16; 1 rounds"), out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 2x16x8x8 G4 |")]
    assert len(rows) == 1 and len(rows[0].strip("|").split("|")) == 12, out.stdout
    bad = _run("webgpu-plans", "--dtype", "float64")
    assert bad.returncode == 2 and "--dtype" in bad.stderr


def _require_playground():
    """What the playground test needs (Chromium, the npm Pyodide, playwright, the site extra): a skip without
    them, a failure under CI=true."""
    import importlib.util

    sys.path.insert(0, str(SCRIPTS.parent / "tests" / "browser"))
    import pyodide_browser as pb

    missing = [m for m in ("jupyterlite_core", "jupyter_server") if importlib.util.find_spec(m) is None]
    why = pb.prerequisites(npm_ci=True)
    if missing and not why:
        why = f"{', '.join(missing)} missing (pip install -e '.[site]')"
    if why:
        if IN_CI:
            pytest.fail(f"required under CI=true: {why}")
        pytest.skip(why)


def test_playground_cold_start_times_a_run_of_each_notebook(tmp_path):
    """README's cold start comes from scripts/playground-cold-start (docs/benchmarks.md: --runs, --json):
    one run of notebook 04 to the Explorer drawn and of the one-cell floor, printed and written as JSON.
    Needs what the playground test needs (Chromium, the npm Pyodide, playwright, the site extra): skipped
    without them, except under CI=true."""
    _require_playground()
    dest = tmp_path / "cold.json"
    out = _run("playground-cold-start", "--runs", "1", "--max-load", "1000", "--wait-s", "0", "--json", str(dest))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    doc = json.loads(dest.read_text())
    assert doc["chromium"] and doc["pyodide"] and doc["goal_s"] == 10.0, doc
    (run,) = doc["runs"]
    assert run["run"] == 1 and run["explorer"] > 0 and run["floor"] > 0, run
    assert abs(run["ours"] - (run["explorer"] - run["floor"])) < 1e-9, run
    assert f"Chromium {doc['chromium']}, 1 runs (median, min to max)" in out.stdout, out.stdout
    assert f"Run All -> Explorer drawn: {run['explorer']:5.1f} s" in out.stdout, out.stdout
    bad = _run("playground-cold-start", "--runs", "0")
    assert bad.returncode == 2 and "--runs" in bad.stderr, bad.stderr


def test_explorer_latency_times_each_view_in_the_playground():
    """scripts/explorer-latency --playground (README's playground latency): notebook 04's Explorer, each view after
    a G change and the first and second switches, with the playground's goals."""
    _require_playground()
    out = _run("explorer-latency", "--playground", "--changes", "2", "--groups", "32,16", "--read", "1")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    rows = {
        m[1]: float(m[2])
        for m in re.finditer(r"^playground \(Pyodide, Chromium [^)]+\): (.+?)\s+median\s+([\d.]+) ms", out.stdout, re.M)
    }
    for name in (
        "control change -> redrawn table",
        "control change -> every view redrawn",
        "first dtype switch -> statistics redrawn",
        "second layout switch -> every view redrawn",
        "  view 'images' shows the new results",
    ):
        assert rows.get(name, 0) > 0, (name, out.stdout)
    assert rows["control change -> every view redrawn"] >= rows["control change -> redrawn table"], out.stdout
    assert "goal: the statistics < 150 ms and every view < 250 ms" in out.stdout, out.stdout
    bad = _run("explorer-latency", "--changes", "0")
    assert bad.returncode == 2 and "--changes" in bad.stderr, bad.stderr
    bad = _run("explorer-latency", "--read", "-1")
    assert bad.returncode == 2 and "--read" in bad.stderr, bad.stderr


def test_explorer_latency_summarizes_saved_runs(tmp_path):
    """--summarize: per row of saved runs, the median of the runs' medians, their range and count (how README and
    docs/benchmarks.md quote several runs); rows only some runs have are counted as such; a missing file is refused."""
    head = "playground (Pyodide, Chromium): "
    runs = [(120.0, 40.0), (80.0, 60.0), (100.0, None)]
    paths = []
    for i, (switch, change) in enumerate(runs):
        lines = [
            "notebook 04's Explorer",
            "",
            f"{head}first dtype switch -> statistics redrawn   median {switch:7.1f} ms  min",
        ]
        if change is not None:
            lines.append(f"{head}control change -> redrawn table   median {change:7.1f} ms  min {change:7.1f}  max")
        lines.append("goal: the statistics < 150 ms")
        paths.append(tmp_path / f"run-{i}.txt")
        paths[-1].write_text("\n".join(lines) + "\n")
    out = _run("explorer-latency", "--summarize", *map(str, paths))
    assert out.returncode == 0, out.stderr
    rows = {line.split("  ")[0].strip(): line for line in out.stdout.splitlines()}
    assert "median of 3 runs   100.0 ms  (80.0 to 120.0)" in rows[f"{head}first dtype switch -> statistics redrawn"]
    assert "median of 2 runs    50.0 ms  (40.0 to 60.0)" in rows[f"{head}control change -> redrawn table"]
    assert len(rows) == 2, out.stdout
    bad = _run("explorer-latency", "--summarize", str(tmp_path / "none.txt"))
    assert bad.returncode != 0 and "none.txt is not a file" in bad.stderr, bad.stderr


# -- scripts/gpu-check: what a lent GPU machine runs first (tested here up to the GPU) -------------------
def test_gpu_check_runs_every_webgpu_step_on_an_allowed_cpu_adapter(tmp_path):
    """On lavapipe with --allow-cpu-adapter --quick: the reference cases (double backward too, float64 inputs in
    float32), the hard inputs, the bench per layout with its floor rows, and the plans side by side, each passed,
    the bench JSON written; CUDA named with the reason it did not run."""
    from conftest import require_target

    require_target("webgpu")
    out = _run("gpu-check", "--out", str(tmp_path), "--quick", "--runs", "1", "--allow-cpu-adapter")
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.finditer(r"^\| ([^|]+?) \| (passed|FAILED|not run) \|", out.stdout, re.M)
    rows = {m.group(1): m.group(2) for m in found}
    steps = ["webgpu reference cases", "webgpu hard inputs", "bench nchw float32", "bench nhwc float32"]
    assert all(rows.get(s) == "passed" for s in steps + ["plans nchw", "plans nhwc"]), rows
    assert re.search(r"double backward 1/1", out.stdout), out.stdout
    for layout in ("nchw", "nhwc"):
        report = json.loads((tmp_path / f"webgpu-{layout}-float32.json").read_text())
        assert report["rows"] and all(r["layout"] == layout and r["floor_fwd_of_copy"] > 0 for r in report["rows"])
    from numr_web.backends import get_backend

    if not get_backend("cuda", require=False).available()[0]:
        assert rows.get("cuda-check") == "not run" and "CuPy" in out.stdout, out.stdout


def test_gpu_check_refuses_a_cpu_adapter_by_default(tmp_path):
    """Without a GPU: nothing runs, exit 2, and the summary says the adapter is a CPU one and how to run anyway."""
    from conftest import require_target

    from numr_web.backends import get_backend

    require_target("webgpu")
    if get_backend("cuda", require=False).available()[0]:
        pytest.skip("a CUDA GPU is here: gpu-check runs cuda-check")
    out = _run("gpu-check", "--out", str(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "the adapter is a CPU one" in out.stdout and "--allow-cpu-adapter" in out.stdout, out.stdout
    assert "nothing could run here" in out.stdout

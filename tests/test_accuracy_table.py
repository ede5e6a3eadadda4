"""README's Accuracy table and docs/accuracy.md's tables are what ``scripts/accuracy`` prints.

Each table names the command that prints it (in backticks before it); the test runs that command and
requires the table to be its output, figure for figure (the figures are deterministic here: the same from
run to run and with one thread or two).  The numr_web rows are compared always.  The PyTorch rows are
compared where torch is installed: torch 2.13.0 is not in the dev extra (README's tests paragraph names it,
and .ci/run installs it), so under CI=true its absence fails the run; elsewhere its rows go unchecked.
A numr_web row the command cannot print here (no Numba, no WebGPU adapter) skips, except under CI=true,
where it fails (conftest.require_target).  The figures docs/numerics.md quotes from these tables in its
prose are held to the tables.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys

import claims
import pytest
from conftest import IN_CI, require_target, require_torch

HAS_TORCH = importlib.util.find_spec("torch") is not None
README_COMMAND = "scripts/accuracy --offsets 1e4,1e5 --markdown"
COMMANDS = [README_COMMAND, *claims.TABLES]
TARGET_OF_ROW = {"numr_web cpu, fused path": "cpu-fused", "numr_web webgpu": "webgpu", "numr_web cuda": "cuda"}
FUSED_LABEL = "numr_web cpu, fused path"
#: the rows whose figures follow the CPU they run on (claims.FUSED_CPU)
CPU_LABELS = (FUSED_LABEL, "numr_web cpu, NumPy path")


def _host_cpu():
    """The CPU as LLVM (Numba's compiler) names it, or None without llvmlite."""
    if importlib.util.find_spec("llvmlite") is None:
        return None
    from llvmlite import binding

    return binding.get_host_cpu_name()


def _same_figures(label, want, got):
    """Whether a printed row is the docs' row: exactly, except the CPU paths' rows on another CPU than the one
    they were measured on (claims.FUSED_CPU), each figure within FUSED_OTHER_CPU_FACTOR."""
    if want == got:
        return True
    if label not in CPU_LABELS or _host_cpu() == claims.FUSED_CPU or len(want) != len(got):
        return False
    k = claims.FUSED_OTHER_CPU_FACTOR
    for w, g in zip(want, got):
        if w == g:
            continue
        try:
            wv, gv = claims.figure_value(w), claims.figure_value(g)
        except (ValueError, TypeError):
            return False
        if wv is None or gv is None or not (wv / k <= gv <= wv * k):
            return False
    return True


def _accuracy(*args):
    script = claims.ROOT / "scripts" / "accuracy"
    assert os.access(script, os.X_OK), "scripts/accuracy must be executable"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=900)


KEY = ("implementation", "layout", "dtype", "activation", "offset")


def _rows(header, rows):
    """{(implementation, layout, dtype, activation, offset): cells} in the table's order (a table
    without one of those columns has None there)."""
    out = {}
    for row in rows:
        cells = dict(zip(header, row))
        key = tuple(cells.get(k) for k in KEY)
        assert key not in out, f"two rows for {key}"
        out[key] = row
    return out


def test_every_accuracy_table_names_its_command():
    """README's Accuracy section has one table, printed by README_COMMAND; docs/accuracy.md has the three
    tests/claims.py reads."""
    section = claims.accuracy_section(claims.README.read_text())
    assert [command for command, _ in claims.markdown_tables(section)] == [README_COMMAND]
    assert sorted(claims.docs_tables()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=["readme", "float32", "float64", "silu", "far", "eps"])
def test_table_is_what_its_command_prints(command):
    header, rows = claims.docs_tables()[command]
    out = _accuracy(*shlex.split(command)[1:])
    assert out.returncode == 0, out.stderr
    printed = claims.markdown_tables(out.stdout)
    assert len(printed) == 1 and out.stdout.strip() == "\n".join(printed[0][1]), out.stdout
    got_header, got_rows = claims.parse_table(printed[0][1])
    assert got_header == header, f"{command}: the header changed:\n{got_header}\n{header}"
    want, got = _rows(header, rows), _rows(got_header, got_rows)
    # CUDA rows: no GPU has been available to this project, so the docs carry none
    got = {k: v for k, v in got.items() if not (k[0] == "numr_web cuda" and k not in want)}
    if not HAS_TORCH:
        if IN_CI:
            require_torch()
        want = {k: v for k, v in want.items() if not k[0].startswith("torch ")}
    assert not set(got) - set(want), f"{command}: rows the docs lack: {sorted(set(got) - set(want))}"
    differ = [k for k in want if k in got and not _same_figures(k[0], want[k], got[k])]
    wrong = [f"docs {want[k]}\n   printed {got[k]}" for k in differ]
    assert not wrong, f"{command}: the docs' figures are not what it prints:\n" + "\n".join(wrong)
    assert [k for k in want if k in got] == list(got), f"{command}: rows in another order"
    for label, _, _ in set(want) - set(got):  # a backend not usable here: fails under CI=true
        target = next((t for prefix, t in TARGET_OF_ROW.items() if label.startswith(prefix)), None)
        assert target, f"{command}: the command printed no row {label!r}"
        require_target(target)


def test_readme_names_the_torch_it_measured():
    section = claims.accuracy_section(claims.README.read_text())
    version = re.search(r"torch (\d+\.\d+\.\d+) CPU", section)
    assert version, "README's Accuracy section names no torch version"
    header, rows = claims.docs_tables()[README_COMMAND]
    labels = {row[0] for row in rows if row[0].startswith("torch ")}
    assert labels == {"torch " + ".".join(version.group(1).split(".")[:2])}, labels
    if HAS_TORCH:
        import torch

        assert torch.__version__.split("+")[0] == version.group(1), (torch.__version__, version.group(1))


def test_default_output_agrees_with_the_markdown():
    """Without --markdown the command prints the same figures as plain columns (here at offset 1e5)."""
    out = _accuracy("--offsets", "1e5")
    assert out.returncode == 0, out.stderr
    header, rows = claims.docs_tables()[README_COMMAND]
    columns = [header.index("y @1e5"), header.index("dx @1e5")]
    want = {(row[0], row[1]): [claims.figure_value(row[i]) for i in columns] for row in rows}
    seen = 0
    for line in out.stdout.splitlines()[2:]:
        m = re.fullmatch(r"(.+?)\s{2,}(NCHW|channels-last)\s+(\S+)\s+(\S+)", line)
        assert m, line
        key = (m.group(1), m.group(2))
        if key in want:
            seen += 1
            printed = [f"{float(v):.1e}" for v in m.group(3, 4)]
            assert _same_figures(key[0], [f"{v:.1e}" for v in want[key]], printed), (line, want[key])
    assert seen >= 2, out.stdout  # the NumPy path's rows at least


def test_numerics_prose_quotes_the_tables():
    """docs/numerics.md's figures for PyTorch and SiLU are the tables' (README's, docs/accuracy.md's SiLU one)."""
    text = " ".join((claims.ROOT / "docs" / "numerics.md").read_text().split())
    header, rows = claims.docs_tables()[README_COMMAND]
    cell = {(r[0], r[1]): dict(zip(header, r)) for r in rows}
    torch_label = next(r[0] for r in rows if r[0].startswith("torch "))
    nchw, cl = cell[(torch_label, "NCHW")]["y @1e4"], cell[(torch_label, "channels-last")]["y @1e4"].split()[0]
    assert f"CPU error is {nchw} on NCHW, and its channels-last path returns {cl}" in text
    header, rows = claims.docs_tables()[claims.TABLE_SILU]
    at_1e4 = [dict(zip(header, r)) for r in rows if dict(zip(header, r))["offset"] == "1e4"]
    best = max((r["dx"] for r in at_1e4 if r["implementation"].startswith("numr_web")), key=claims.figure_value)
    torch_nchw = next(r["dx"] for r in at_1e4 if r["implementation"].startswith("torch ") and r["layout"] == "NCHW")
    assert f"dx at offset 1e4 is {best} or better on every numr_web row, where torch 2.13's is {torch_nchw}" in text


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--offsets", "1e4,x"], "--offsets"),
        (["--offsets", "1e4,"], "--offsets"),
        (["--outputs", "y,dz"], "--outputs"),
        (["--dtype", "float16"], "--dtype"),
        (["--activation", "relu"], "--activation"),
    ],
)
def test_accuracy_refuses_a_bad_argument_before_any_work(args, flag):
    out = _accuracy(*args)
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"argument {flag}:" in errors[0], out.stderr

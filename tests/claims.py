"""The accuracy the docs claim, as the bounds the numerics tests hold each output to.

The figures are read from the tables README.md (Accuracy) and docs/accuracy.md print, which
tests/test_accuracy_table.py holds equal to what ``scripts/accuracy`` prints.  Each output is
measured as the script measures it: max |got - ref| / max |ref|, the mean's / max |x|.

A test's bound for an output is ``FACTOR`` times the claim for its backend, layout, dtype and
case, where the case picks the table: SiLU (docs/accuracy.md, SiLU at offset 1e4), offset 0
(x = randn), or any other offset (the larger of the offset-0 figure and the largest over
offsets 7 to 1e5).  16-bit inputs compute in float32 and round y and dx once to their dtype:
their bound adds that rounding, one unit roundoff of the dtype, to the float32 bound.  The
browser's WebGPU (SwiftShader) is held to lavapipe's figures; CUDA, which has no rows (no GPU
here), to the largest of every numr_web row.
"""

from __future__ import annotations

import math
import pathlib
import re

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ACCURACY_DOC = ROOT / "docs" / "accuracy.md"

#: the bound over the claimed figure (the issue's ceiling is 10)
FACTOR = 10

OUTPUTS = ("y", "dx", "mean", "rstd", "dw", "db")
COLUMN = {"y": "y", "dx": "dx", "mean": "mean", "rstd": "rstd", "dw": "dweight", "db": "dbias"}
LAYOUT = {"NCHW": "nchw", "channels-last": "nhwc"}
ROW = {"cpu-numpy": "numr_web cpu, NumPy path", "cpu-fused": "numr_web cpu, fused path", "webgpu": "numr_web webgpu"}
#: unit roundoff of the 16-bit storage dtypes (float16: 11 significant bits, bfloat16: 8)
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}

# the tables' commands, as the docs give them (test_accuracy_table runs each)
TABLE_OFFSET_0 = "scripts/accuracy --offsets 0 --outputs all --dtype float32,float64 --markdown"
TABLE_OFFSETS = "scripts/accuracy --offsets 7,15,1e2,1e4,1e5 --outputs all --dtype float32,float64 --worst --markdown"
TABLE_SILU = "scripts/accuracy --activation silu --offsets 1e4 --outputs all --markdown"


# -- reading the tables ----------------------------------------------------------------------------


def markdown_tables(text):
    """[(command, lines)] for every markdown table in ``text``: the table's lines and the last
    ``scripts/accuracy ...`` command in backticks before it (None if there is none)."""
    found, command, table = [], None, []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            found.append((command, table))
            table = []
        for cmd in re.findall(r"`(scripts/accuracy[^`]*)`", line):
            command = cmd
    return found


def accuracy_section(text):
    """README's ``## Accuracy`` section."""
    m = re.search(r"^## Accuracy\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README.md has no ## Accuracy section"
    return m.group(1)


def parse_table(lines):
    """(header cells, [row cells]) of a markdown table (its separator line left out)."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    assert len(rows) >= 2 and set("".join(rows[1])) <= set("-: "), lines
    return rows[0], rows[2:]


def figure_value(text):
    """A figure as the tables print it (``9.6e-8``, ``3.0e+2 (wrong)``, ``-``) as a float (None for -)."""
    text = text.replace("(wrong)", "").strip()
    return None if text == "-" else float(text)


def docs_tables():
    """{command: (header, rows)}: README's Accuracy table and docs/accuracy.md's, by their commands."""
    out = {}
    section = accuracy_section(README.read_text())
    for path, text in ((README, section), (ACCURACY_DOC, ACCURACY_DOC.read_text())):
        for command, lines in markdown_tables(text):
            assert command, f"{path.name}: a table without the scripts/accuracy command that prints it"
            out[command] = parse_table(lines)
    return out


def _claims(command):
    """{(row label, layout, dtype): {output: figure}} of one table of docs/accuracy.md."""
    header, rows = docs_tables()[command]
    claims = {}
    for row in rows:
        cells = dict(zip(header, row))
        key = (cells["implementation"], LAYOUT[cells["layout"]], cells.get("dtype", "float32"))
        figures = {}
        for out in OUTPUTS:
            values = [figure_value(v) for k, v in cells.items() if k.split(" @")[0] == COLUMN[out]]
            figures[out] = max(values)
        claims[key] = figures
    return claims


_CACHE = {}


def _table(command):
    if command not in _CACHE:
        _CACHE[command] = _claims(command)
    return _CACHE[command]


def claim(target, output, *, layout="nchw", dtype="float32", offset=0.0, activation=None):
    """The docs' figure for one output of one backend in one case (see the module's docstring).

    ``target``: cpu-numpy, cpu-fused, webgpu, browser or cuda; ``layout``: nchw, nhwc or None (either);
    ``dtype``: the input's; ``offset``: the data's offset (0: centred data)."""
    compute = "float64" if dtype == "float64" else "float32"
    if activation == "silu":
        commands = [TABLE_SILU]
    elif offset == 0:
        commands = [TABLE_OFFSET_0]
    else:
        commands = [TABLE_OFFSET_0, TABLE_OFFSETS]
    layouts = ("nchw", "nhwc") if layout is None else (layout,)
    row = ROW.get("webgpu" if target == "browser" else target)
    values = []
    for command in commands:
        for (label, lay, dt), figures in _table(command).items():
            if lay not in layouts or dt != compute or not label.startswith("numr_web"):
                continue
            if row is None or label.startswith(row):  # CUDA: every numr_web row
                values.append(figures[output])
    assert values, f"no claim for {target} {output} {layout} {dtype} in {commands}"
    return max(values)


def bound(target, output, **case):
    """FACTOR times the claim; for 16-bit y and dx, plus the rounding to the dtype."""
    dtype = case.get("dtype", "float32")
    extra = UNIT_ROUNDOFF.get(dtype, 0.0) if output in ("y", "dx") else 0.0
    return FACTOR * claim(target, output, **case) + extra


# -- measuring as scripts/accuracy does ----------------------------------------------------------------


def error(got, ref, scale=None):
    """max |got - ref| / scale (default max |ref|), NaN-aware: NaN must stand where ref has NaN."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), f"NaN positions differ: {np.isnan(got).sum()} vs {nan.sum()}"
    if got.size == 0 or nan.all():
        return 0.0
    if scale is None:
        scale = float(np.abs(np.where(nan, 0.0, ref)).max())
    diff = float(np.abs(np.where(nan, 0.0, got - ref)).max())
    if diff == 0:
        return 0.0
    return diff / scale if scale > 0 else math.inf


def errors(got, ref, x):
    """{output: error} for the outputs present in both dicts (the mean against max |x|)."""
    x_scale = float(np.nanmax(np.abs(np.asarray(x, dtype=np.float64)), initial=0.0))
    return {
        k: error(got[k], ref[k], x_scale if k == "mean" else None)
        for k in OUTPUTS
        if got.get(k) is not None and ref.get(k) is not None
    }


def check(target, got, ref, x, *, label="", **case):
    """Asserts every output in ``got`` within its bound; returns the errors."""
    errs = errors(got, ref, x)
    limits = {k: bound(target, k, **case) for k in errs}
    bad = {k: f"{errs[k]:.2e} > {limits[k]:.2e}" for k in errs if not errs[k] <= limits[k]}
    assert not bad, f"{target} {label} {case}: {bad} (all: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()) + ")"
    return errs

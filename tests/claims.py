"""The accuracy the docs claim, as the bounds the numerics tests hold each output to.

The figures are read from the tables README.md (Accuracy) and docs/accuracy.md print, which
tests/test_accuracy_table.py holds equal to what ``scripts/accuracy`` prints.  Each output is
measured as the script measures it: max |got - ref| / max |ref|, the mean's / max |x| (the
magnitude it is computed at).

A test's bound for an output is ``FACTOR`` times the claim for its backend, layout, dtype,
activation and offset: the table's row at that offset, or, between two of the table's offsets,
the larger figure of the two (beyond the last, the last).  float32 data far from unit scale take
the larger of that and a table's for their regime: a std beyond 7e16, where the float32 sums
overflow and every backend rescales (docs/numerics.md), the table at 1e35 (TABLE_FAR); eps above a
group's variance, the table at 1e-10 (TABLE_EPS).  16-bit inputs compute in float32 and
round y and dx once to their dtype: their bound adds that rounding, one unit roundoff of the
dtype, to the float32 bound, and the mean's bound adds the rounding of the stored mean (one unit
roundoff of float32 or float64), which the figures, taken on large groups of centred data whose
means are near zero, do not show but small groups do.  The browser's WebGPU (SwiftShader) is held to lavapipe's
figures; CUDA, which has no rows (no GPU here), to the largest of every numr_web row.
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
#: unit roundoff of the storage dtypes (float16: 11 significant bits, bfloat16: 8, float32: 24, float64: 53)
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}

# the tables' commands, as docs/accuracy.md gives them (test_accuracy_table runs each)
TABLE_FLOAT32 = "scripts/accuracy --offsets 0,7,15,1e2,1e4,1e5 --outputs all --long --markdown"
TABLE_FLOAT64 = (
    "scripts/accuracy --offsets 0,1e3,1e4 --outputs all --dtype float64 --activation none,silu"
    " --shape 256,32,1,2,16 --long --markdown"
)
TABLE_SILU = "scripts/accuracy --activation silu --offsets 0,1e4 --outputs all --long --markdown"
TABLE_FAR = "scripts/accuracy --scale 1e35 --shape 2,64,32,32,16 --offsets 0 --outputs all --long --markdown"
TABLE_EPS = "scripts/accuracy --scale 1e-10 --offsets 0,1e3 --no-bias --outputs all --long --markdown"
TABLES = (TABLE_FLOAT32, TABLE_FLOAT64, TABLE_SILU, TABLE_FAR, TABLE_EPS)
#: the CPU (as LLVM names it) the CPU paths' rows were measured on: Numba vectorizes the fused path's
#: reductions for the host, and NumPy picks its SIMD loops (AVX2, AVX-512) at run time, so the order of their
#: sums, and their figures, follow the CPU (seen: fused NCHW figures up to 2x apart between an AVX-512 machine
#: and this AVX2 one; the NumPy path's NCHW figures up to 1.4x on an AVX-512 znver4, 2026-12-03); elsewhere
#: those rows are held within FUSED_OTHER_CPU_FACTOR of the table
FUSED_CPU = "znver3"
FUSED_OTHER_CPU_FACTOR = 4
#: a float32 std above this is beyond numerics.ORDINARY_RANGE (docs/numerics.md): every backend rescales
ORDINARY_STD = 7e16


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
    """{(row label, layout, dtype, activation, offset): {output: figure}} of one table, wide or --long."""
    header, rows = docs_tables()[command]
    dtype = re.search(r"--dtype (\S+)", command)
    activation = re.search(r"--activation (\S+)", command)
    claims = {}
    for row in rows:
        cells = dict(zip(header, row))
        base = (
            cells["implementation"],
            LAYOUT[cells["layout"]],
            cells.get("dtype", dtype.group(1) if dtype else "float32"),
            cells.get("activation", activation.group(1) if activation else "none"),
        )
        if "offset" in cells:  # --long: a row per offset
            claims[base + (float(cells["offset"]),)] = {
                out: figure_value(cells[COLUMN[out]]) for out in OUTPUTS if COLUMN[out] in cells
            }
            continue
        for name, value in cells.items():  # a column per output and offset ("y @1e4")
            if " @" in name:
                out, off = name.split(" @")
                key = next(k for k, v in COLUMN.items() if v == out)
                claims.setdefault(base + (float(off),), {})[key] = figure_value(value)
    return claims


_CACHE = {}


def _table(command):
    if command not in _CACHE:
        _CACHE[command] = _claims(command)
    return _CACHE[command]


def claim(target, output, *, layout="nchw", dtype="float32", offset=0.0, activation=None, spread=None, eps=1e-5):
    """The docs' figure for one output of one backend in one case (see the module's docstring).

    ``target``: cpu-numpy, cpu-fused, webgpu, browser or cuda; ``layout``: nchw, nhwc or None (either);
    ``dtype``: the input's; ``offset``: the data's offset in units of its std (below 1: centred data);
    ``spread``: (smallest, largest) std of its groups, None for ordinary data near unit scale; ``eps``."""
    compute = "float64" if dtype == "float64" else "float32"
    command = TABLE_FLOAT64 if compute == "float64" else TABLE_SILU if activation == "silu" else TABLE_FLOAT32
    act = activation or "none"
    value = _claim(command, target, output, layout, compute, act, offset)
    if compute == "float32" and spread is not None and spread[1] > ORDINARY_STD:
        value = max(value, _claim(TABLE_FAR, target, output, layout, compute, act, 0.0))
    if compute == "float32" and spread is not None and spread[0] ** 2 < eps:  # eps dwarfs a group's variance
        value = max(value, _claim(TABLE_EPS, target, output, layout, compute, act, offset))
    return value


def worst_claim(target, output, dtype="float32"):
    """The largest figure any table gives the backend's output in the dtype's computation: what data
    drawn from every regime at once (tests/test_hard_inputs.py's property) is held to."""
    compute = "float64" if dtype == "float64" else "float32"
    row = ROW.get("webgpu" if target == "browser" else target, "numr_web")
    values = [
        figures[output]
        for command in TABLES
        for (label, _, dt, _, _), figures in _table(command).items()
        if dt == compute and label.startswith(row)
    ]
    assert values, f"no claim for {target} {output} {dtype}"
    return max(values)


def _claim(command, target, output, layout, compute, act, offset):
    table = _table(command)
    if act not in {key[3] for key in table}:  # a table of another activation's regime: its figures hold
        act = None
    offsets = sorted({key[4] for key in table})
    o = abs(offset) if abs(offset) >= 1 else 0.0  # a centred sample's mean is within ~1/sqrt(M) std of 0
    below = [t for t in offsets if t <= o]
    above = [t for t in offsets if t >= o]
    # a tabulated offset, or the larger figure of the two around it (beyond the last: the last)
    chosen = {below[-1]} if below and below[-1] == o else {t for t in (below[-1:] + above[:1])}
    layouts = ("nchw", "nhwc") if layout is None else (layout,)
    row = ROW.get("webgpu" if target == "browser" else target)
    values = []
    for (label, lay, dt, a, off), figures in table.items():
        if lay not in layouts or dt != compute or off not in chosen or not label.startswith("numr_web"):
            continue
        if act is not None and a != act:
            continue
        if row is None or label.startswith(row):  # CUDA: every numr_web row
            values.append(figures[output])
    assert values, f"no claim for {target} {output} {layout} {compute} offset {offset} in {command}"
    return max(values)


def reference_case(fields, layout=None):
    """The case of a reference case of tests/data (its npz fields): layout, dtype, offset (the largest
    |mean| * rstd of its groups) and activation."""
    return {
        "layout": layout or ("nhwc" if int(fields["channels_last"]) else "nchw"),
        "dtype": "bfloat16" if int(fields.get("bf16", 0)) else np.dtype(fields["x"].dtype).name,
        "offset": float(np.abs(np.asarray(fields["mean"]) * np.asarray(fields["rstd"])).max()),
        "activation": "silu" if int(fields["silu"]) else None,
    }


def bound(target, output, **case):
    """FACTOR times the claim; plus, for 16-bit y and dx, the rounding to the dtype and, for the mean,
    the rounding of the stored mean."""
    dtype = case.get("dtype", "float32")
    extra = 0.0
    if output in ("y", "dx") and dtype in ("float16", "bfloat16"):
        extra = UNIT_ROUNDOFF[dtype]
    elif output == "mean":
        extra = UNIT_ROUNDOFF["float64" if dtype == "float64" else "float32"]
    return FACTOR * claim(target, output, **case) + extra


# -- measuring as scripts/accuracy does ----------------------------------------------------------------


def named(arrays):
    """The six outputs in the order the ops return them (y, mean, rstd, dx, dw, db), by name."""
    return dict(zip(("y", "mean", "rstd", "dx", "dw", "db"), arrays))


def reference(x, groups, weight=None, bias=None, dy=None, eps=1e-5, activation=None):
    """tests/oracle.py's float64 outputs, as the dict check() takes (the backward's where dy is given)."""
    from oracle import backward, forward

    y, mean, rstd = forward(x, groups, weight, bias, eps, activation)
    out = {"y": y, "mean": mean, "rstd": rstd}
    if dy is not None:
        out["dx"], out["dw"], out["db"] = backward(dy, x, groups, weight, bias, eps, activation)
    return out


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


def errors(got, ref, x, scales=None):
    """{output: error} for the outputs present in both dicts: against max |ref|, the mean against max |x|,
    or against ``scales[output]`` where given."""
    scales = dict(scales or {})
    if "mean" not in scales:
        scales["mean"] = float(np.nanmax(np.abs(np.asarray(x, dtype=np.float64)), initial=0.0))
    present = [k for k in OUTPUTS if got.get(k) is not None and ref.get(k) is not None]
    return {k: error(got[k], ref[k], scales.get(k)) for k in present}


def check(target, got, ref, x, *, label="", scales=None, **case):
    """Asserts every output in ``got`` within its bound; returns the errors."""
    errs = errors(got, ref, x, scales)
    limits = {k: bound(target, k, **case) for k in errs}
    bad = {k: f"{errs[k]:.2e} > {limits[k]:.2e}" for k in errs if not errs[k] <= limits[k]}
    assert not bad, f"{target} {label} {case}: {bad} (all: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()) + ")"
    return errs

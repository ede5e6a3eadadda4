"""``numr-web bench``: forward and backward against a same-size copy (and torch), interleaved in one process.

Every figure is a median over interleaved samples taken in one process:
forward, backward, a same-size device copy and (with ``--compare torch``)
PyTorch's forward and backward, one after the other in each round, so that a
noisy neighbour slows all of them alike.  Each sample starts with untimed
calls lasting about half as long as the sample: the contender that ran before
leaves its thread pool spinning and the caches full of its own arrays (on 2
cores torch's OpenMP workers and Numba's compete for a millisecond or two),
and a sample should time the op, not that hand-over.  Ratios are medians of
per-round ratios.  Effective GB/s counts the bytes a kernel must move at the
least: forward reads x and writes y, backward reads dy and x and writes dx,
the copy reads and writes the array once; the ratios are of those throughputs
(bytes per second, not elements: a float16 copy moves half a float32 one's).

WebGPU calls are timed end to end by default (``--timing end-to-end``): each
call's host work and dispatches, then a 4-byte read-back of its output that
waits for the GPU, one call per wait; ``--timing device`` queues four calls
per wait instead (close to device time, hiding per-call costs).  The WebGPU
yardstick is the fastest of the WGSL copy kernels (``copies.YARDSTICK_COPIES``,
all timed in every round; the one with the lowest median is the yardstick and
the row names it).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

from numr_web.bench.contend import BusyLoops
from numr_web.bench.copies import copy_candidates
from numr_web.bench.timing import (
    default_timing,
    median_ratio,
    median_throughput_ratio,
    plan_samples,
    run_rounds,
    timer_for,
)
from numr_web.bench.torch_side import TorchSide

#: (N, C, H, W, G): the standard shapes (diffusion UNet stages and a ResNet stage)
BENCH_SHAPES = [
    (2, 320, 64, 64, 32),
    (2, 640, 32, 32, 32),
    (2, 1280, 16, 16, 32),
    (8, 64, 56, 56, 32),
    (16, 1280, 8, 8, 32),
]


def parse_shapes(text):
    """``"N,C,H,W,G;..."`` (``x`` works as a separator too) as (N, C, H, W, G) tuples; None gives the
    standard shapes; ValueError naming ``--shapes`` for anything else (a text without a shape too)."""
    if text is None:
        return list(BENCH_SHAPES)
    shapes = []
    for part in text.split(";"):
        if not part.strip():
            continue
        try:
            nums = tuple(int(v) for v in part.replace("x", ",").split(","))
        except ValueError:
            nums = ()
        if len(nums) != 5 or min(nums) < 1:
            raise ValueError(
                f"--shapes: expected five positive integers N,C,H,W,G per shape, shapes separated by ';' "
                f"(e.g. 2,320,64,64,32), got {part.strip()!r}"
            )
        if nums[1] % nums[-1]:
            raise ValueError(f"--shapes: the group count G={nums[-1]} must divide C={nums[1]} in {part.strip()!r}")
        shapes.append(nums)
    if not shapes:
        raise ValueError(f"--shapes: expected at least one shape N,C,H,W,G, got {text!r}")
    return shapes


def _progress(msg):
    print(msg, file=sys.stderr, flush=True)


def run_bench(args) -> int:
    import numr_web
    from numr_web.backends import get_backend
    from numr_web.dtypes import BFLOAT16

    shapes = parse_shapes(args.shapes)
    repeat = args.repeat
    if repeat < 1:
        raise ValueError(f"--repeat: expected at least 1 sample, got {repeat}")
    if args.runs < 1:
        raise ValueError(f"--runs: expected at least 1 run, got {args.runs}")
    if args.quick:
        shapes = sorted(shapes, key=lambda s: math.prod(s[:-1]))[:2]
        repeat = min(repeat, 3)
    if args.threads:
        os.environ["NUMBA_NUM_THREADS"] = str(args.threads)  # before Numba loads (the CLI re-execs first)
    contend = getattr(args, "contend", 0) or 0
    if args.cpu_path is not None:  # else the backend's own choice: NUMR_WEB_CPU_PATH, or auto
        get_backend("cpu").path = args.cpu_path
    device = args.backend
    be = get_backend(device)
    dt = BFLOAT16 if args.dtype == "bfloat16" else np.dtype(args.dtype)
    torch_side = TorchSide(args.threads, args.layout, device) if args.compare == "torch" else None
    timing = getattr(args, "timing", None) or default_timing(device)

    label = be.name
    adapter = None
    if device == "cpu":
        # a benchmark times one path from its first round: auto would serve NumPy while the fused kernels
        # compile in the background, so it settles on the path auto ends with (compiling now, if need be)
        be.path = be.active_path()
        label = f"cpu ({be.path} path)"
    elif device == "webgpu":
        info = be.info()
        adapter = ", ".join(str(info[k]) for k in ("adapter", "backend", "adapter type") if info.get(k))
        plan = webgpu_plan()
        label = f"webgpu ({adapter}; work plan {plan}, {PLAN_ENV}={os.environ.get(PLAN_ENV) or 'unset'})"
    header = [
        f"numr_web {numr_web.__version__} bench: backend {label}, {args.dtype}, {args.layout}, "
        f"timing {timing}, "
        f"{repeat} interleaved samples (each after untimed settling calls), medians; "
        f"{platform.machine()} {os.cpu_count()} cores; "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}"
    ]
    if torch_side is not None:
        header.append(f"compared with {torch_side.version()}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if contend:
        header.append(
            f"contended: {contend} busy-loop processes run while timing (--contend {contend}); "
            f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores usable"
        )
    if load is not None:
        header.append(f"1-minute load average at start: {load:.2f}")
        if load > 1.0 and not contend:
            header.append(
                "warning: other processes are busy; parallel timings (ours and torch's) inflate "
                "and ratios drift -- rerun on an idle machine"
            )
    for line in header:
        print(line)

    rng = np.random.default_rng(0)
    cases = [_prepare(shape, args, be, device, dt, torch_side, rng, timing) for shape in shapes]
    runs = []
    with BusyLoops(contend) as loops:  # stopped on leaving, on an error or Ctrl-C too
        if contend:
            _progress(f"started {contend} busy-loop processes: pids {' '.join(map(str, loops.pids))}")
        for run in range(args.runs):
            rows = []
            label = f"run {run + 1}/{args.runs}, " if args.runs > 1 else ""
            for si, case in enumerate(cases):
                _progress(f"[{label}{si + 1}/{len(cases)}] shape {tuple(case['dims'])} G={case['groups']} ...")
                row = _measure(case, repeat, args, be, device, torch_side)
                row["contend"] = contend
                rows.append(row)
                _progress("    " + _format_row(row, torch_side is not None))
            runs.append(rows)
        if load is not None:
            header.append(f"1-minute load average at the end: {os.getloadavg()[0]:.2f}")
            print(header[-1])
    if contend:
        _progress(f"stopped the {contend} busy-loop processes")

    print(_table(runs[0], torch_side is not None))
    ranges = _ranges(runs, torch_side is not None) if len(runs) > 1 else None
    if ranges:
        print(f"\nranges over the {len(runs)} runs (the table above is the first):")
        print(_ranges_table(ranges))
    copy_name = ", ".join(sorted({row["copy_variant"] for rows in runs for row in rows}))
    fastest_of = ", ".join(cases[0]["copy_names"].values())
    yard = f"copy yardstick: {copy_name}" + (
        f" (the fastest of {fastest_of} per shape)" if len(cases[0]["copies"]) > 1 else ""
    )
    print(yard)
    header.append(yard)
    if args.json:
        doc = {
            "header": header,
            "rows": runs[0],
            "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "backend": device,
            "adapter": adapter,
            "webgpu_plan": webgpu_plan() if device == "webgpu" else None,
            "dtype": args.dtype,
            "layout": args.layout,
            "timing": timing,
            "repeat": repeat,
            "command": "numr-web " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None,
        }
        if ranges:
            doc["runs"] = runs
            doc["ranges"] = ranges
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)
        print(f"wrote {len(runs[0])} rows to {args.json}")
    return 0


#: the environment variable choosing the WebGPU GroupNorm work plan (recorded in the rows)
PLAN_ENV = "NUMR_WEB_WEBGPU_PLAN"


def webgpu_plan():
    """The WebGPU GroupNorm work plan the calls ask for ("auto", "fused" or "split": ``PLAN_ENV``
    or ``group_norm_launch.PLAN``; ValueError for a bad value); the variable's raw value where
    the backend has no ``plan_name``."""
    try:
        from numr_web.backends.webgpu.group_norm_launch import plan_name
    except ImportError:
        return os.environ.get(PLAN_ENV) or None
    return plan_name()


def _prepare(shape, args, be, device, dt, torch_side, rng, timing=None):
    """Arrays, the timed callables and their sample sizes for one bench shape."""
    import numr_web

    *dims, groups = shape
    dims = tuple(dims)
    x = rng.standard_normal(dims).astype(dt)
    dy = rng.standard_normal(dims).astype(dt)
    if args.layout == "nhwc":
        from numr_web.memory_layout import as_channels_last

        x, dy = as_channels_last(x), as_channels_last(dy)
    w = rng.standard_normal(dims[1]).astype(np.float32)
    b = rng.standard_normal(dims[1]).astype(np.float32)
    X, DY, W, B = (numr_web.to_device(a, device) for a in (x, dy, w, b))
    _, mean, rstd = numr_web.ops.group_norm_forward(X, W, B, groups, 1e-5)

    timing = timing or default_timing(device)
    timer = timer_for(be, timing)
    copies = copy_candidates(be, X)
    if len(copies) == 1:  # the CPU's and CUDA's one copy: timed as "copy"
        copy_names = {"copy": next(iter(copies))}
        copies = {"copy": next(iter(copies.values()))}
    else:
        copy_names = {k: k for k in copies}
    fns = {
        "fwd": lambda: numr_web.ops.group_norm_forward(X, W, B, groups, 1e-5),
        "bwd": lambda: numr_web.ops.group_norm_backward(DY, X, mean, rstd, W, groups),
        **copies,
    }
    if torch_side is not None:
        fns["torch_fwd"], fns["torch_bwd"] = torch_side.setup(x, w, b, dy, groups, 1e-5)
    if getattr(args, "ideal", False):
        from numr_web.bench import ideal

        fns.update(ideal.timed_callables(x, dy))
    if getattr(args, "floor", False):
        from numr_web.bench import floor

        fns.update(floor.timed_callables(X, DY, groups, layout=args.layout))
    timers = {k: (torch_side.timer if k.startswith("torch") else timer) for k in fns}
    per_sample, settle = plan_samples(fns, timers)
    return {
        "dims": dims,
        "groups": groups,
        "nbytes": x.nbytes,
        "fns": fns,
        "timers": timers,
        "per_sample": per_sample,
        "settle": settle,
        "copies": list(copies),
        "copy_names": copy_names,
        "timing": timing,
    }


def _measure(case, repeat, args, be, device, torch_side):
    """One row: ``repeat`` interleaved rounds over the case's timed callables, medians and ratios."""
    samples = run_rounds(case["fns"], case["timers"], case["per_sample"], case["settle"], repeat)
    med = {k: statistics.median(v) for k, v in samples.items()}
    copies = case["copies"]
    key = min(copies, key=lambda k: med[k])  # the fastest copy (lowest median) is the yardstick
    samples["copy"], med["copy"] = samples[key], med[key]
    names = case["copy_names"]
    yard = names[key]
    nbytes = case["nbytes"]
    row = {
        "shape": list(case["dims"]),
        "groups": case["groups"],
        "dtype": args.dtype,
        "layout": args.layout,
        "backend": be.name,
        "cpu_path": be.active_path() if device == "cpu" else None,
        "fwd_ms": med["fwd"] * 1e3,
        "bwd_ms": med["bwd"] * 1e3,
        "copy_ms": med["copy"] * 1e3,
        "fwd_gbps": 2 * nbytes / med["fwd"] / 1e9,
        "bwd_gbps": 3 * nbytes / med["bwd"] / 1e9,
        "copy_gbps": 2 * nbytes / med["copy"] / 1e9,
        "timing": case["timing"],
        "copy_variant": yard,
        "copy_variants_ms": {names[k]: med[k] * 1e3 for k in copies},
        # bytes moved at the least (the ratios are of bytes per second): the copy moves x's bytes
        # (read and written once), so for 16-bit dtypes it is a copy of the same number of bytes
        "x_bytes": nbytes,
        "fwd_bytes": 2 * nbytes,
        "bwd_bytes": 3 * nbytes,
        "copy_bytes": 2 * nbytes,
        "yardstick": (
            f"{yard}: the fastest of {', '.join(names[k] for k in copies)} (same adapter, lowest median), copying x's "
            f"{nbytes} bytes ({args.dtype}), timed {case['timing']} like the op"
            if len(copies) > 1
            else f"{yard} of x's {nbytes} bytes ({args.dtype})"
        ),
    }
    if device == "webgpu":
        row["webgpu_plan"] = webgpu_plan()
    if "ideal_fwd" in med:
        from numr_web.bench import ideal

        row.update(ideal.row_fields(med))
    if "floor_fwd" in samples:
        from numr_web.bench import floor

        row.update(floor.row_fields(samples, row))
        row["floor_forms"] = {name: floor.form_name(case["fns"][name]) for name in floor.NAMES}
    # fraction of the copy's throughput (bytes per second), per round: forward moves 2 x-sizes
    # of bytes, backward 3, the copy 2
    row["fwd_of_copy"] = median_throughput_ratio(samples, "fwd", row["fwd_bytes"], "copy", row["copy_bytes"])
    row["bwd_of_copy"] = median_throughput_ratio(samples, "bwd", row["bwd_bytes"], "copy", row["copy_bytes"])
    if torch_side is not None:
        row["torch_fwd_ms"] = med["torch_fwd"] * 1e3
        row["torch_bwd_ms"] = med["torch_bwd"] * 1e3
        row["fwd_vs_torch"] = median_ratio(samples, ("fwd",), ("torch_fwd",))
        row["bwd_vs_torch"] = median_ratio(samples, ("bwd",), ("torch_bwd",))
        row["total_vs_torch"] = median_ratio(samples, ("fwd", "bwd"), ("torch_fwd", "torch_bwd"))
    return row


#: the ratios whose spread over runs ``--runs`` reports
_RANGE_KEYS = ("fwd_of_copy", "bwd_of_copy", "total_vs_torch", "floor_fwd_of_copy", "floor_bwd_of_copy")


def _ranges(runs, torch):
    """Per shape, (min, max) of each ratio over the runs."""
    keys = [k for k in _RANGE_KEYS if k in runs[0][0] and (torch or k != "total_vs_torch")]
    out = []
    for i, row in enumerate(runs[0]):
        entry = {"shape": row["shape"], "groups": row["groups"]}
        for k in keys:
            vals = [rows[i][k] for rows in runs]
            entry[k] = [min(vals), max(vals)]
        out.append(entry)
    return out


def _ranges_table(ranges):
    keys = [k for k in _RANGE_KEYS if k in ranges[0]]
    names = {
        "fwd_of_copy": "fwd/copy",
        "bwd_of_copy": "bwd/copy",
        "total_vs_torch": "(f+b)/torch",
        "floor_fwd_of_copy": "floor fwd/copy",
        "floor_bwd_of_copy": "floor bwd/copy",
    }
    lines = ["| shape | " + " | ".join(names[k] for k in keys) + " |", "|" + "---|" * (len(keys) + 1)]
    for e in ranges:
        lines.append(f"| {_shape_label(e)} | " + " | ".join(f"{e[k][0]:.2f} to {e[k][1]:.2f}" for k in keys) + " |")
    return "\n".join(lines)


def _shape_label(r):
    """A row's shape as the tables print it, e.g. ``2x320x64x64 G32``."""
    return "x".join(map(str, r["shape"])) + f" G{r['groups']}"


def _format_row(r, torch):
    s = (
        f"fwd {r['fwd_ms']:.3f} ms ({r['fwd_of_copy']:.2f} of copy), "
        f"bwd {r['bwd_ms']:.3f} ms ({r['bwd_of_copy']:.2f} of copy)"
    )
    if torch:
        s += f", vs torch fwd {r['fwd_vs_torch']:.2f}x bwd {r['bwd_vs_torch']:.2f}x"
    if "floor_fwd_of_copy" in r:
        s += f"; floor fwd {r['floor_fwd_of_copy']:.2f} bwd {r['floor_bwd_of_copy']:.2f} of copy"
    return s


def _table(rows, torch):
    cols = [
        ("shape", _shape_label),
        ("fwd ms", lambda r: f"{r['fwd_ms']:.3f}"),
        ("bwd ms", lambda r: f"{r['bwd_ms']:.3f}"),
        ("copy ms", lambda r: f"{r['copy_ms']:.3f}"),
        ("fwd GB/s", lambda r: f"{r['fwd_gbps']:.1f}"),
        ("bwd GB/s", lambda r: f"{r['bwd_gbps']:.1f}"),
        ("fwd/copy", lambda r: f"{r['fwd_of_copy']:.2f}"),
        ("bwd/copy", lambda r: f"{r['bwd_of_copy']:.2f}"),
    ]
    if "floor_fwd_of_copy" in rows[0]:
        cols += [
            ("floor fwd/copy", lambda r: f"{r['floor_fwd_of_copy']:.2f}"),
            ("floor bwd/copy", lambda r: f"{r['floor_bwd_of_copy']:.2f}"),
            ("fwd/floor", lambda r: f"{r['fwd_of_floor']:.2f}"),
            ("bwd/floor", lambda r: f"{r['bwd_of_floor']:.2f}"),
        ]
    if torch:
        cols += [
            ("torch fwd ms", lambda r: f"{r['torch_fwd_ms']:.3f}"),
            ("torch bwd ms", lambda r: f"{r['torch_bwd_ms']:.3f}"),
            ("fwd/torch", lambda r: f"{r['fwd_vs_torch']:.2f}"),
            ("bwd/torch", lambda r: f"{r['bwd_vs_torch']:.2f}"),
            ("(f+b)/torch", lambda r: f"{r['total_vs_torch']:.2f}"),
        ]
    lines = ["| " + " | ".join(c for c, _ in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f(r) for _, f in cols) + " |")
    return "\n".join(lines)

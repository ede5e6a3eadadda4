"""Idle against contended: ``python -m numr_web.bench.contention``.

Runs ``numr-web bench`` in fresh processes, alternately on the machine as it is
("idle") and with ``--contend K`` busy-loop processes started first
("contended"), and prints, per bench shape, the median over the processes of
forward+backward time (each process's own figure is the median of its
interleaved samples) and the ratio contended / idle.  Every process's 1-minute
load average at start is printed too: on a shared machine "idle" is only as
idle as the neighbours leave it.

    python -m numr_web.bench.contention --processes 5 --contend 2            # the fused CPU path, NCHW
    python -m numr_web.bench.contention --processes 5 --layout nhwc
    python -m numr_web.bench.contention --env NUMR_WEB_CPU_THREADS=parallel  # a variant, for comparison

Beside the fused calls each process times ideal streaming passes that move
GroupNorm's bytes and do nothing else (``numr-web bench --ideal``,
``numr_web/bench/ideal.py``), in two threads and in one: their contended/idle
ratio is what the machine gives any pass of that size, the floor under the
fused path's (``--no-ideal`` leaves them out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def _run_bench(args, contend, env, path):
    cmd = [sys.executable, "-m", "numr_web.cli", "bench", "--cpu-path", args.cpu_path, "--layout", args.layout]
    cmd += ["--repeat", str(args.repeat), "--json", path]
    if args.ideal:
        cmd += ["--ideal"]
    if args.shapes:
        cmd += ["--shapes", args.shapes]
    if contend:
        cmd += ["--contend", str(contend)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr}")
    with open(path) as fh:
        doc = json.load(fh)
    load = next((h.split(": ")[1] for h in doc["header"] if h.startswith("1-minute load average at start")), "?")
    rows = {_label(r): r["fwd_ms"] + r["bwd_ms"] for r in doc["rows"]}
    ideal = {_label(r): r["ideal_fb_ms"] for r in doc["rows"] if "ideal_fb_ms" in r}
    return float(load) if load != "?" else None, rows, ideal


def _label(row):
    return "x".join(map(str, row["shape"])) + f" G{row['groups']}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m numr_web.bench.contention", description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=int, default=5, help="fresh processes per condition (default 5)")
    p.add_argument("--contend", type=int, default=2, help="busy-loop processes in the contended runs (default 2)")
    p.add_argument("--cpu-path", default="fused", choices=["auto", "numpy", "fused"])
    p.add_argument("--layout", default="nchw", choices=["nchw", "nhwc"])
    p.add_argument("--repeat", type=int, default=9, help="interleaved samples per shape in each process (default 9)")
    p.add_argument("--shapes", default=None, help="as numr-web bench --shapes (default: the bench shapes)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set in the bench processes")
    p.add_argument("--json", default=None, metavar="PATH", help="write every process's figures as JSON")
    p.add_argument(
        "--no-ideal",
        dest="ideal",
        action="store_false",
        help="leave out the ideal streaming passes (numr-web bench --ideal) timed beside the fused calls",
    )
    p.add_argument(
        "--summarize",
        nargs="+",
        default=None,
        metavar="JSON",
        help="print nothing new: the median and range over earlier runs' --json files, per shape",
    )
    args = p.parse_args(argv)
    if args.summarize:
        return summarize(p, args.summarize)
    if args.processes < 1 or args.contend < 1:
        p.error("--processes and --contend: expected positive integers")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    for kv in args.env:
        key, sep, value = kv.partition("=")
        if not sep:
            p.error(f"argument --env: expected KEY=VALUE, got {kv!r}")
        env[key] = value

    runs = {"idle": [], "contended": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.processes):  # alternate, so that the neighbours' drift hits both alike
            for cond, k in (("idle", 0), ("contended", args.contend)):
                load, rows, ideal = _run_bench(args, k, env, os.path.join(tmp, f"{cond}{i}.json"))
                runs[cond].append({"load": load, "rows": rows, "ideal": ideal})
                figures = ", ".join(f"{v:.3f}" for v in rows.values())
                print(f"{cond:9s} process {i + 1}: load {load}, f+b ms {figures}", file=sys.stderr, flush=True)

    shapes = list(runs["idle"][0]["rows"])
    loads = {c: [r["load"] for r in v] for c, v in runs.items()}
    print(
        f"fused forward+backward, {args.layout}, {args.cpu_path} path: median over {args.processes} fresh processes "
        f"per condition (each the median of {args.repeat} interleaved samples); contended = {args.contend} "
        f"busy-loop processes; {os.cpu_count()} cores" + (f"; env {' '.join(args.env)}" if args.env else "")
    )
    for cond in ("idle", "contended"):
        print(f"1-minute load at each {cond} process's start: " + ", ".join(f"{x:.2f}" for x in loads[cond]))
    ideal = all(r["ideal"] for rs in runs.values() for r in rs)
    if ideal:
        print(
            "ideal: streaming passes with GroupNorm's bytes and nothing else (numr-web bench --ideal), "
            "timed in the same rounds; per process the faster of two threads and one"
        )
    head = "| shape | idle f+b ms | contended f+b ms | contended / idle |"
    print(head + (" ideal idle ms | ideal contended ms | ideal contended / idle |" if ideal else ""))
    print("|---|---|---|---|" + ("---|---|---|" if ideal else ""))
    table = []
    for s in shapes:
        idle = statistics.median(r["rows"][s] for r in runs["idle"])
        busy = statistics.median(r["rows"][s] for r in runs["contended"])
        entry = {"shape": s, "idle_ms": idle, "contended_ms": busy, "ratio": busy / idle}
        line = f"| {s} | {idle:.3f} | {busy:.3f} | {busy / idle:.2f} |"
        if ideal:
            i_idle = statistics.median(r["ideal"][s] for r in runs["idle"])
            i_busy = statistics.median(r["ideal"][s] for r in runs["contended"])
            entry.update(ideal_idle_ms=i_idle, ideal_contended_ms=i_busy, ideal_ratio=i_busy / i_idle)
            line += f" {i_idle:.3f} | {i_busy:.3f} | {i_busy / i_idle:.2f} |"
        table.append(entry)
        print(line)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "runs": runs, "table": table}, fh, indent=1)
    return 0


def summarize(parser, paths) -> int:
    """Median and range over several runs' tables (``--json`` files), per shape and figure: the
    issue's rule judges a ratio by its median over at least 5 runs, each started on an idle machine."""
    tables = []
    for path in paths:
        try:
            with open(path) as fh:
                doc = json.load(fh)
            tables.append({row["shape"]: row for row in doc["table"]})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parser.error(f"argument --summarize: {path}: not a contention --json file ({exc})")
    keys = ["idle_ms", "contended_ms", "ratio", "ideal_ratio"]
    keys = [k for k in keys if all(k in row for t in tables for row in t.values())]
    print(f"median (range) over {len(tables)} runs: " + ", ".join(paths))
    names = {
        "idle_ms": "idle f+b ms",
        "contended_ms": "contended f+b ms",
        "ratio": "contended / idle",
        "ideal_ratio": "ideal contended / idle",
    }
    print("| shape | " + " | ".join(names[k] for k in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for shape in tables[0]:
        cells = []
        for k in keys:
            vals = [t[shape][k] for t in tables if shape in t]
            digits = 3 if k.endswith("_ms") else 2
            cells.append(f"{statistics.median(vals):.{digits}f} ({min(vals):.{digits}f}-{max(vals):.{digits}f})")
        print(f"| {shape} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The host work of a WebGPU GroupNorm call, without its wait, against the floor kernels' call.

    python -m numr_web.bench.webgpu_host [--shapes "N,C,H,W,G;..."] [--layout nchw|nhwc]
                                         [--dtype float32] [--calls 200]
    python -m numr_web.bench.webgpu_host --summarize FILE [FILE ...]

What a call costs the host before the GPU does anything: ``perf_counter`` around the call alone,
then a wait outside the timed span (so the queue never grows and no call pays for another's
GPU work).  Timed, interleaved call by call in shuffled rounds: the public op (``numr_web.ops.group_norm_forward``
/ ``group_norm_backward``: validation, layout, dispatch), the backend's call under it (the
launcher: plan, outputs, parameters, bind groups, the recorded dispatches and their submit)
and the floor kernels' call (``numr_web.bench.floor``: its pipeline, parameters and bind group made
once, then one transport call, ``submit_dispatches``, that records the dispatch and submits it: the
least any call can do; channels-last too, where ``floor.timed_callables`` takes the shape).  Printed
per shape: medians in microseconds and op / floor, backend / floor; the machine's 1-minute load before
and after.  ``scripts/browser-bench --host`` prints the same table from Pyodide in Chromium.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

DEFAULT_SHAPES = "2,320,64,64,32;2,640,32,32,32;2,1280,16,16,32;8,64,56,56,32;16,1280,8,8,32"


def _load():
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - not on this platform
        return float("nan")


def host_seconds(fns: dict, calls: int, synchronize, seed: int = 0) -> dict:
    """``{name: [seconds per call]}``: each callable timed alone, ``calls`` times, interleaved
    (one call of each per round, in an order shuffled each round), with a wait after every call,
    untimed.  The order is shuffled because the call before sets how cold the caches are and
    whether the driver's threads are still awake: with a rotating order each callable nearly always
    followed the same one, and on lavapipe that moved a callable's median by up to 60 us."""
    names = list(fns)
    out = {k: [] for k in names}
    for f in fns.values():  # settle: pipelines, pooled outputs, kept bind groups
        for _ in range(3):
            f()
        synchronize()
    order = random.Random(seed)
    for _ in range(calls):
        order.shuffle(names)
        for name in names:
            t0 = time.perf_counter()
            fns[name]()
            t1 = time.perf_counter()
            synchronize()
            out[name].append(t1 - t0)
    return out


def callables(x, dy, w, b, groups, layout="nchw") -> dict:
    """``{name: callable}`` on WebGPU arrays x, dy (N, C, *S) and w, b (C,): the op's and the backend's
    forward and backward, and the floor kernels' call where ``numr_web.bench.floor`` has one for the
    shape (``floor_fwd``, ``floor_bwd``; NCHW and channels-last).  NumPy-free: the browser runs it too."""
    import numr_web
    from numr_web.backends.webgpu import BACKEND as be
    from numr_web.bench import floor

    _, mean, rstd = be.group_norm_forward(x, w, b, groups, 1e-5, layout=layout)
    fns = {
        "op_fwd": lambda: numr_web.ops.group_norm_forward(x, w, b, groups, 1e-5),
        "backend_fwd": lambda: be.group_norm_forward(x, w, b, groups, 1e-5, layout=layout),
        "op_bwd": lambda: numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, groups, bias=b),
        "backend_bwd": lambda: be.group_norm_backward(dy, x, mean, rstd, w, b, groups, layout=layout),
    }
    try:
        # one dispatch a call (channels-last: not the split form's three): the least host work any call has
        fns.update(floor.timed_callables(x, dy, groups, layout, split=False))
    except ValueError:  # a shape the floor kernels do not take: the row has no ratios
        pass
    return fns


def measure_arrays(x, dy, w, b, groups, layout="nchw", calls=200, seed=0) -> dict:
    """Medians (seconds) of the host time of each of ``callables(...)``."""
    from numr_web.backends.webgpu import BACKEND as be

    samples = host_seconds(callables(x, dy, w, b, groups, layout), calls, be.synchronize, seed)
    return {k: statistics.median(v) for k, v in samples.items()}


def measure(shape, groups, layout="nchw", dtype="float32", calls=200, seed=0) -> dict:
    """Medians (seconds) of the host time of forward and backward calls and of the floor's, on NumPy-made inputs."""
    import numpy as np

    import numr_web
    from numr_web.backends.webgpu import BACKEND as be
    from numr_web.memory_layout import as_channels_last

    rng = np.random.default_rng(seed)
    dt = numr_web.dtypes.numpy_dtype(dtype)
    x = rng.standard_normal(shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape).astype(np.float32).astype(dt)
    if layout == "nhwc":
        x, dy = as_channels_last(x), as_channels_last(dy)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    X, DY, W, B = (be.from_numpy(a) for a in (x, dy, w, w))
    return measure_arrays(X, DY, W, B, groups, layout, calls, seed)


HEAD = ["shape", "op fwd", "backend fwd", "op bwd", "backend bwd", "floor fwd", "floor bwd"]
HEAD += ["op/floor fwd", "backend/floor fwd", "op/floor bwd", "backend/floor bwd"]


def header() -> str:
    """The table's header and rule (markdown)."""
    return "| " + " | ".join(HEAD) + " |\n|" + "---|" * len(HEAD)


def row(shape, groups, m) -> str:
    """One table row from ``measure``'s medians (microseconds; ratios; "-" where the shape has no floor)."""
    cells = ["x".join(map(str, shape)) + f" G{groups}"]
    names = ("op_fwd", "backend_fwd", "op_bwd", "backend_bwd", "floor_fwd", "floor_bwd")
    cells += [f"{m[k] * 1e6:.0f}" if k in m else "-" for k in names]
    for num, den in (
        ("op_fwd", "floor_fwd"),
        ("backend_fwd", "floor_fwd"),
        ("op_bwd", "floor_bwd"),
        ("backend_bwd", "floor_bwd"),
    ):
        cells.append(f"{m[num] / m[den]:.2f}" if den in m else "-")
    return "| " + " | ".join(cells) + " |"


def summarize(texts) -> str:
    """Markdown tables of op / floor per shape over several runs' printed tables (this command's output, or
    ``scripts/browser-bench --host``'s): the median of the runs' medians and their range, per table
    heading (adapter line or layout line) in order of first appearance."""
    runs = {}  # heading -> shape -> column -> [values]
    for text in texts:
        heading = None
        for line in text.splitlines():
            if line.startswith("adapter:"):
                heading = line.split(";")[1].strip() if ";" in line else line
            elif line.startswith(("nchw,", "nhwc,")):
                heading = line.strip()
            elif line.startswith("| ") and not line.startswith("| shape") and heading is not None:
                cells = [c.strip() for c in line.strip("| \n").split("|")]
                table = runs.setdefault(heading, {}).setdefault(cells[0], {})
                for name, cell in zip(HEAD[1:], cells[1:]):
                    if cell != "-":
                        table.setdefault(name, []).append(float(cell))
    cols = ["op fwd", "floor fwd", "op/floor fwd", "op bwd", "floor bwd", "op/floor bwd", "backend/floor fwd"]
    cols.append("backend/floor bwd")
    out = []
    for heading, shapes in runs.items():
        n = max(len(v) for cols_ in shapes.values() for v in cols_.values())
        out += [f"{heading} ({n} runs: median of the runs' medians, range)", ""]
        out += ["| shape | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for shape, table in shapes.items():
            cells = []
            for c in cols:
                v = table.get(c)
                digits = 2 if "/" in c else 0
                cells.append(
                    "-" if not v else f"{statistics.median(v):.{digits}f} ({min(v):.{digits}f}-{max(v):.{digits}f})"
                )
            out.append(f"| {shape} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv=None):
    from numr_web.bench.runner import parse_shapes

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--layout", choices=("nchw", "nhwc"), default="nchw")
    ap.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    ap.add_argument("--calls", type=int, default=200, help="timed calls of each callable per shape (default 200)")
    ap.add_argument(
        "--summarize",
        nargs="+",
        metavar="FILE",
        help="instead, summarize saved outputs of this command or of scripts/browser-bench --host: op / floor "
        "per shape, the median of the runs' medians and their range",
    )
    args = ap.parse_args(argv)
    if args.summarize:
        import pathlib

        try:
            texts = [pathlib.Path(f).read_text() for f in args.summarize]
        except OSError as exc:
            ap.error(f"--summarize: {exc}")
        print(summarize(texts))
        return
    if args.calls < 1:
        ap.error("--calls: expected a positive integer")
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as exc:
        ap.error(str(exc))
    from numr_web.backends.webgpu import BACKEND as be

    load0 = _load()
    print(
        f"adapter: {be.info().get('adapter', '?')}; {args.layout}, {args.dtype}; host time of a call without its "
        f"wait, medians of {args.calls} calls each, interleaved in shuffled rounds, microseconds; "
        f"1-minute load {load0:.2f}"
    )
    print(header())
    for nums in shapes:
        shape, groups = tuple(nums[:-1]), nums[-1]
        print(row(shape, groups, measure(shape, groups, args.layout, args.dtype, args.calls)), flush=True)
    print(f"1-minute load after: {_load():.2f}")


if __name__ == "__main__":
    main()

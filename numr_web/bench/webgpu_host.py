"""The host work of a WebGPU GroupNorm call, without its wait, against the floor kernels' call.

    python -m numr_web.bench.webgpu_host [--shapes "N,C,H,W,G;..."] [--layout nchw|nhwc]
                                         [--dtype float32] [--calls 200]

What a call costs the host before the GPU does anything: ``perf_counter`` around the call alone,
then a wait outside the timed span (so the queue never grows and no call pays for another's
GPU work).  Timed, interleaved call by call in shuffled rounds: the public op (``numr_web.ops.group_norm_forward``
/ ``group_norm_backward``: validation, layout, dispatch), the backend's call under it (the
launcher: plan, outputs, parameters, bind groups, the recorded dispatches and their submit)
and the floor kernels' call (``numr_web.bench.floor``: one kept launch and its submit, the
least any call can do).  Printed per shape: medians in microseconds and op / floor, backend /
floor; the machine's 1-minute load before and after.
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


def measure(shape, groups, layout="nchw", dtype="float32", calls=200, seed=0) -> dict:
    """Medians (seconds) of the host time of forward and backward calls and of the floor's."""
    import numpy as np

    import numr_web
    from numr_web.backends.webgpu import BACKEND as be
    from numr_web.bench import floor
    from numr_web.memory_layout import as_channels_last

    rng = np.random.default_rng(seed)
    dt = numr_web.dtypes.numpy_dtype(dtype)
    x = rng.standard_normal(shape).astype(np.float32).astype(dt)
    dy = rng.standard_normal(shape).astype(np.float32).astype(dt)
    if layout == "nhwc":
        x, dy = as_channels_last(x), as_channels_last(dy)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    X, DY, W, B = (be.from_numpy(a) for a in (x, dy, w, w))
    _, mean, rstd = be.group_norm_forward(X, W, B, groups, 1e-5, layout=layout)
    fns = {
        "op_fwd": lambda: numr_web.ops.group_norm_forward(X, W, B, groups, 1e-5),
        "backend_fwd": lambda: be.group_norm_forward(X, W, B, groups, 1e-5, layout=layout),
        "op_bwd": lambda: numr_web.ops.group_norm_backward(DY, X, mean, rstd, W, groups, bias=B),
        "backend_bwd": lambda: be.group_norm_backward(DY, X, mean, rstd, W, B, groups, layout=layout),
    }
    if layout == "nchw":
        fns.update(floor.timed_callables(X, DY, groups))
    samples = host_seconds(fns, calls, be.synchronize)
    return {k: statistics.median(v) for k, v in samples.items()}


def main(argv=None):
    from numr_web.bench.runner import parse_shapes

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--layout", choices=("nchw", "nhwc"), default="nchw")
    ap.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    ap.add_argument("--calls", type=int, default=200, help="timed calls of each callable per shape (default 200)")
    args = ap.parse_args(argv)
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
    head = ["shape", "op fwd", "backend fwd", "op bwd", "backend bwd"]
    floor = args.layout == "nchw"
    if floor:
        head += ["floor fwd", "floor bwd", "op/floor fwd", "backend/floor fwd", "op/floor bwd", "backend/floor bwd"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for nums in shapes:
        shape, groups = tuple(nums[:-1]), nums[-1]
        m = measure(shape, groups, args.layout, args.dtype, args.calls)
        cells = ["x".join(map(str, shape)) + f" G{groups}"]
        cells += [f"{m[k] * 1e6:.0f}" for k in ("op_fwd", "backend_fwd", "op_bwd", "backend_bwd")]
        if floor:
            cells += [f"{m[k] * 1e6:.0f}" for k in ("floor_fwd", "floor_bwd")]
            cells += [
                f"{m['op_fwd'] / m['floor_fwd']:.2f}",
                f"{m['backend_fwd'] / m['floor_fwd']:.2f}",
                f"{m['op_bwd'] / m['floor_bwd']:.2f}",
                f"{m['backend_bwd'] / m['floor_bwd']:.2f}",
            ]
        print("| " + " | ".join(cells) + " |", flush=True)
    print(f"1-minute load after: {_load():.2f}")


if __name__ == "__main__":
    main()

"""Where a CPU GroupNorm call's time goes above its kernels, layer by layer, beside PyTorch's (issue 26).

    python -m numr_web.bench.cpu_layers [--shapes "N,C,H,W,G;..."] [--layout nchw|nhwc]
                                        [--rounds 40] [--calls 10] [--threads 2]

Forward then backward, float32, G as given, on the fused CPU path, each way timed as a user calls it:

* ``backend``: the fused backend's forward and backward (``get_backend("cpu")``), the kernels and the host
  work right around them (outputs, parameters, the thread chooser, the range check);
* ``op``: the public array functions (``numr_web.ops.group_norm_forward`` / ``group_norm_backward``), which add
  the argument checks and the layout;
* ``autograd``: ``numr_web.group_norm`` on Tensors that require grad, then ``y.backward(dy)``: the
  graph, its saved values and the version checks on top;
* ``torch``: ``aten.native_group_norm`` and ``native_group_norm_backward`` (what ``numr-web bench
  --compare torch`` times against ``op``);
* ``torch autograd``: ``F.group_norm`` on tensors that require grad, then ``y.backward(dy)``.

Each way runs ``--calls`` forward+backward pairs per sample, after half as many untimed ones (the way
before leaves its thread pool spinning: on 2 cores torch's OpenMP workers and Numba's compete).  Samples
are interleaved in an order shuffled every round, in one process, so a noisy neighbour slows all of them
alike.  Printed per shape: medians in microseconds per forward+backward, ``op - backend`` and
``autograd - op`` (the layers' own cost), and ``op / torch`` and ``autograd / torch autograd``; the
1-minute load before and after.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import numpy as np

DEFAULT_SHAPES = "2,320,64,64,32;2,640,32,32,32;2,1280,16,16,32;8,64,56,56,32;16,1280,8,8,32"
WAYS = ("backend", "op", "autograd", "torch", "torch autograd")


def callables(x, dy, w, b, groups, torch) -> dict:
    """``{way: callable}``, each one forward+backward at ``x``'s shape and layout (see the module doc)."""
    import numr_web
    from numr_web.backends import get_backend
    from numr_web.ops.group_norm import layout_of

    be = get_backend("cpu")
    layout = layout_of(x)
    xt, wt, bt = (numr_web.Tensor(a, requires_grad=True) for a in (x, w, b))
    dyt = numr_web.Tensor(dy)

    def backend():
        _, mean, rstd = be.group_norm_forward(x, w, b, groups, 1e-5, layout=layout)
        be.group_norm_backward(dy, x, mean, rstd, w, b, groups, layout=layout)

    def op():
        _, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, groups, 1e-5)
        numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, groups)

    def autograd():
        numr_web.group_norm(xt, groups, wt, bt).backward(dyt)
        xt.grad = wt.grad = bt.grad = None

    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    tx, tdy = (torch.from_numpy(np.ascontiguousarray(a)).contiguous(memory_format=fmt) for a in (x, dy))
    tw, tb = torch.from_numpy(w), torch.from_numpy(b)
    n, c = x.shape[:2]
    hw = x[0, 0].size

    def torch_native():
        _, mean, rstd = torch.ops.aten.native_group_norm(tx, tw, tb, n, c, hw, groups, 1e-5)
        torch.ops.aten.native_group_norm_backward(tdy, tx, mean, rstd, tw, n, c, hw, groups, [True, True, True])

    gx, gw, gb = (t.detach().clone().requires_grad_() for t in (tx, tw, tb))

    def torch_autograd():
        torch.nn.functional.group_norm(gx, groups, gw, gb, 1e-5).backward(tdy)
        gx.grad = gw.grad = gb.grad = None

    return dict(zip(WAYS, (backend, op, autograd, torch_native, torch_autograd), strict=True))


def sample_seconds(fns: dict, rounds: int, calls: int, seed: int = 0) -> dict:
    """``{way: [seconds per call]}``: ``rounds`` samples of ``calls`` calls each, ways in an order
    shuffled every round, each sample after ``calls // 2`` untimed calls of its own way."""
    names = list(fns)
    settle = calls // 2
    for f in fns.values():  # settle: compiled kernels, the thread chooser's first timings, allocator
        for _ in range(20):
            f()
    out = {k: [] for k in names}
    order = random.Random(seed)
    for _ in range(rounds):
        order.shuffle(names)
        for name in names:
            f = fns[name]
            for _ in range(settle):  # untimed: the way before leaves its threads spinning (torch's or Numba's)
                f()
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            out[name].append((time.perf_counter() - t0) / calls)
    return out


def measure(shape, groups, layout="nchw", rounds=40, calls=10, seed=0) -> dict:
    """One row: ``{"shape", "groups", "layout", "us": {way: median us}}`` plus the differences and ratios."""
    import torch

    from numr_web.memory_layout import as_channels_last

    rng = np.random.default_rng(seed)
    x, dy = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    if layout == "nhwc":
        x, dy = as_channels_last(x), as_channels_last(dy)
    w, b = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2))
    times = sample_seconds(callables(x, dy, w, b, groups, torch), rounds, calls, seed)
    us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    return {
        "shape": list(shape),
        "groups": groups,
        "layout": layout,
        "us": us,
        "op - backend": us["op"] - us["backend"],
        "autograd - op": us["autograd"] - us["op"],
        "op / torch": us["op"] / us["torch"],
        "autograd / torch autograd": us["autograd"] / us["torch autograd"],
    }


def table(rows) -> str:
    head = ["shape", *(f"{w} us" for w in WAYS), "op - backend", "autograd - op", "op / torch", "autograd / torch ag"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        dims = "x".join(map(str, r["shape"])) + f" G{r['groups']}"
        cells = [dims, *(f"{r['us'][w]:.0f}" for w in WAYS)]
        cells += [f"{r['op - backend']:.0f}", f"{r['autograd - op']:.0f}"]
        cells += [f"{r['op / torch']:.2f}", f"{r['autograd / torch autograd']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from numr_web.bench.runner import parse_shapes

    ap = argparse.ArgumentParser(prog="python -m numr_web.bench.cpu_layers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="semicolon-separated N,C,H,W,G")
    ap.add_argument("--layout", choices=("nchw", "nhwc"), default="nchw")
    ap.add_argument("--rounds", type=int, default=40, help="interleaved samples per way (medians are reported)")
    ap.add_argument("--calls", type=int, default=10, help="forward+backward pairs per sample")
    ap.add_argument("--threads", type=int, default=2, help="torch's and Numba's threads (default 2)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        ap.error(f"--rounds and --calls: expected at least 1, got {args.rounds} and {args.calls}")
    if args.threads < 1:
        ap.error(f"--threads: expected at least 1, got {args.threads}")
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as exc:
        ap.error(str(exc))
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    import torch

    from numr_web.backends import get_backend

    torch.set_num_threads(args.threads)
    be = get_backend("cpu")
    be.path = "fused"
    print(
        f"numr_web fused CPU path against torch {torch.__version__} ({args.threads} threads each), float32, "
        f"{args.layout}; {args.rounds} rounds of {args.calls} forward+backward pairs; "
        f"1-minute load at start {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    rows = [measure(s[:4], s[4], args.layout, args.rounds, args.calls) for s in shapes]
    print(table(rows))
    print(f"1-minute load at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

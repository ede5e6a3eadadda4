"""WebGPU forward and backward against every WGSL copy kernel, interleaved in one process.

    python -m numr_web.bench.webgpu_copies [N,C,H,W,G] [--layout nhwc] [--dtype float16] [--rounds 9]
                                           [--timing device|end-to-end]

Each round times forward, backward and the three copies one after another
(by default queued calls, one wait: device time; ``--timing end-to-end``: each
call then a 4-byte read-back, as ``numr-web bench`` does), so a noisy neighbour
slows all alike; the ratios are medians of per-round ratios.  Throughput counts the bytes a
kernel must move: forward reads x and writes y (2 x bytes), backward reads x
and dy and writes dx (3 x bytes), a copy reads and writes once (2 x bytes).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", nargs="?", default="8,320,64,64,32")
    ap.add_argument("--layout", choices=["nchw", "nhwc"], default="nchw")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--timing", choices=["device", "end-to-end"], default="device")
    ap.add_argument(
        "--no-shader-f16",
        action="store_true",
        help="store float16 as u32 pairs (pack2x16float) even where shader-f16 exists",
    )
    args = ap.parse_args(argv)
    if args.no_shader_f16:
        from numr_web.backends.webgpu import configure

        configure(want_f16=False)

    import numr_web
    from numr_web.backends.webgpu import BACKEND as be
    from numr_web.backends.webgpu import array_kernels
    from numr_web.backends.webgpu.array import as_dtype
    from numr_web.bench.copies import COPY_VARIANTS, YARDSTICK_COPIES, device_copy
    from numr_web.bench.timing import timer_for
    from numr_web.memory_layout import as_channels_last

    *dims, G = (int(v) for v in args.shape.split(","))
    dt = as_dtype(args.dtype)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(dims).astype(dt)
    dy = rng.standard_normal(dims).astype(dt)
    if args.layout == "nhwc":
        x, dy = as_channels_last(x), as_channels_last(dy)
    w = rng.standard_normal(dims[1]).astype(np.float32)
    X, DY, W = (numr_web.to_device(a, "webgpu") for a in (x, dy, w))
    _, mean, rstd = be.group_norm_forward(X, W, W, G, 1e-5, layout=args.layout)
    out = array_kernels.empty_like(X)
    fns = {
        "forward": lambda: be.group_norm_forward(X, W, W, G, 1e-5, layout=args.layout),
        "backward": lambda: be.group_norm_backward(DY, X, mean, rstd, W, W, G, layout=args.layout),
    }
    for v in COPY_VARIANTS:
        fns[v] = lambda v=v: device_copy(X, v, out)
    timer = timer_for(be, args.timing)
    samples = {k: [] for k in fns}
    for f in fns.values():
        timer(f, 1, 1)
    for _ in range(args.rounds):
        for k, f in fns.items():
            samples[k].append(min(timer(f, 1, 0)))
    med = {k: statistics.median(v) for k, v in samples.items()}
    nb = x.nbytes
    info = be.info()
    print(
        f"adapter: {info['adapter']} ({info['backend']}, {info['adapter type']}); shape {tuple(dims)} G={G} "
        f"{dt.name} {args.layout}; float16 storage: {info['float16 storage']}; "
        f"{args.rounds} interleaved rounds, timing {args.timing}, medians"
    )
    for k in fns:
        moved = 3 * nb if k == "backward" else 2 * nb
        print(f"  {k:12s} {med[k] * 1e3:8.3f} ms  {moved / med[k] / 1e9:6.2f} GB/s")
    yard = min(YARDSTICK_COPIES, key=lambda v: med[v])
    for ref in COPY_VARIANTS:
        f = statistics.median((2 * nb / a) / (2 * nb / c) for a, c in zip(samples["forward"], samples[ref]))
        b = statistics.median((3 * nb / a) / (2 * nb / c) for a, c in zip(samples["backward"], samples[ref]))
        tag = " (the yardstick: the fastest copy)" if ref == yard else ""
        print(f"  of {ref} throughput{tag}: forward {f:.2f}, backward {b:.2f}")


if __name__ == "__main__":
    main()

"""``numr-web``: info, demo and bench."""
from __future__ import annotations

import argparse
import os
import sys


def _cmd_info(args) -> int:
    from numr_web import __version__
    from numr_web.backends import DEVICES, get_backend

    print(f"numr_web {__version__}")
    for device in DEVICES:
        try:
            be = get_backend(device, require=False)
            info = be.info()
        except Exception as exc:  # info must report, never crash
            info = {"available": False, "detail": f"{type(exc).__name__}: {exc}"}
        mark = "yes" if info.get("available") else "no "
        print(f"\n[{mark}] {device}: {info.get('detail', '')}")
        for key, value in info.items():
            if key in ("available", "detail"):
                continue
            if isinstance(value, (list, tuple)):
                value = ", ".join(map(str, value)) or "-"
            elif isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            print(f"      {key}: {value}")
    return 0


def _cmd_demo(args) -> int:
    from numr_web.demo import run_demo

    return run_demo(device=args.device, num_groups=args.groups, seed=args.seed)


def _cmd_bench(args) -> int:
    # NumPy's OpenBLAS starting its own threads next to torch's oversubscribes a
    # 2-core machine (timings 5-20x slower and erratic): pin it to one thread.
    # It must be set before NumPy loads OpenBLAS, hence the re-exec.
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1" and not os.environ.get("NUMR_WEB_BENCH_NO_REEXEC"):
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", NUMR_WEB_BENCH_NO_REEXEC="1")
        os.execve(sys.executable, [sys.executable, "-m", "numr_web.cli"] + sys.argv[1:], env)
    from numr_web.bench import run_bench

    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="numr-web", description="GroupNorm on NumPy, CUDA and WebGPU")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("info", help="backends, whether each is usable here, and why not").set_defaults(fn=_cmd_info)

    d = sub.add_parser("demo", help="per-group statistics and gradients of a sample tensor")
    d.add_argument("--device", default="cpu", help="cpu, cuda or webgpu (default cpu)")
    d.add_argument("--groups", type=int, default=3)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(fn=_cmd_demo)

    b = sub.add_parser("bench", help="forward/backward medians, GB/s, ratio to a same-size copy (and to torch)")
    b.add_argument("--backend", default="cpu", choices=["cpu", "cuda", "webgpu"])
    b.add_argument("--cpu-path", default="auto", choices=["auto", "numpy", "fused"],
                   help="CPU kernels: fused (Numba) or pure NumPy (default: fused when Numba imports)")
    b.add_argument("--dtype", default="float32", choices=["float16", "bfloat16", "float32", "float64"])
    b.add_argument("--layout", default="nchw", choices=["nchw", "nhwc"])
    b.add_argument("--repeat", type=int, default=15, help="interleaved samples per shape (medians are reported)")
    b.add_argument("--shapes", default=None,
                   help="semicolon-separated N,C,H,W,G (default: the standard bench shapes)")
    b.add_argument("--quick", action="store_true", help="3 samples and the two smallest shapes")
    b.add_argument("--compare", choices=["torch"], default=None, help="time torch side by side")
    b.add_argument("--threads", type=int, default=None, help="torch/Numba threads (default: all cores)")
    b.add_argument("--json", default=None, metavar="PATH", help="write the rows as JSON")
    b.set_defaults(fn=_cmd_bench)
    return p


def main(argv=None) -> int:
    from numr_web.errors import BackendUnavailable

    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (ValueError, BackendUnavailable) as exc:
        print(f"numr-web {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

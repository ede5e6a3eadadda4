"""``numr-web``: info, demo, bench, warmup and site."""

from __future__ import annotations

import argparse
import functools
import importlib.util
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


# -- argument types: a bad value is one argparse error line naming the flag (exit 2), before any work


def _int_at_least(low, what):
    """An argparse type: an int of at least ``low``, else one line saying ``what`` it takes."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_count = _int_at_least(0, "a number of processes (0 or more)")


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _threads(text):
    """``--threads``: 1 up to the usable cores.  More is refused, not just said: the extra threads
    would time the scheduler sharing cores among them, not the op (a busy machine is ``--contend``)."""
    cores = usable_cores()
    value = _positive_int(text)
    if value > cores:
        raise argparse.ArgumentTypeError(
            f"expected at most the {cores} cores this process may use, got {value} "
            "(more threads than cores time their sharing of the cores; --contend K times a busy machine)"
        )
    return value


#: the demo's sample tensor has this many channels
DEMO_CHANNELS = 6


def _demo_groups(text):
    divisors = [g for g in range(1, DEMO_CHANNELS + 1) if DEMO_CHANNELS % g == 0]
    try:
        value = int(text)
    except ValueError:
        value = None
    if value not in divisors:
        choices = ", ".join(map(str, divisors[:-1])) + f" or {divisors[-1]}"
        raise argparse.ArgumentTypeError(
            f"expected a number of groups dividing the demo's {DEMO_CHANNELS} channels ({choices}), got {text!r}"
        )
    return value


def _shapes(text):
    from numr_web.bench.runner import parse_shapes

    try:
        parse_shapes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--shapes: ")) from None
    return text


def _json_path(text):
    folder = os.path.dirname(os.path.abspath(text)) or "."
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"expected a file to write, got the folder {text!r}")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"expected a file in an existing folder, but {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"expected a file in a writable folder, but {folder!r} is not writable")
    return text


def _check_bench(parser, args):
    """Checks that need more than one flag's value or the environment (parser.error: exit 2)."""
    if args.timing == "device" and args.backend == "cpu":
        parser.error("argument --timing: 'device' needs --backend webgpu or cuda (CPU calls are timed end to end)")
    if args.backend == "webgpu" and args.dtype == "float64":
        parser.error("argument --dtype: WebGPU has no float64 (WGSL); use float32, float16 or bfloat16")
    if args.ideal and (args.backend != "cpu" or args.dtype not in ("float32", "float64")):
        parser.error("argument --ideal: needs --backend cpu and --dtype float32 or float64")
    if args.floor and args.backend != "webgpu":
        parser.error("argument --floor: needs --backend webgpu (the floor kernels are WGSL)")
    needs = {"--ideal": ("numba", args.ideal), "--compare": ("torch", args.compare == "torch")}
    for flag, (module, wanted) in needs.items():
        if wanted and importlib.util.find_spec(module) is None:
            parser.error(f"argument {flag}: {module} is not installed here (pip install {module}), or leave {flag} out")


def _cmd_warmup(args) -> int:
    """Compile the fused CPU kernels into Numba's on-disk cache (a later process loads them)."""
    import time

    from numr_web.backends import get_backend
    from numr_web.backends.cpu import fused

    cpu = get_backend("cpu")
    cpu.path = "fused"
    cpu.active_path()  # BackendUnavailable (reported, exit 2) without Numba
    layouts = ["nchw", "nhwc"] if args.layout == "both" else [args.layout]
    total = time.perf_counter()
    for name in args.dtype or ["float32"]:
        for layout in layouts:
            print(f"{name:9s} {layout}: {fused.warm_family(layout, name):6.1f} s")
    print(f"fused CPU kernels compiled and cached in {time.perf_counter() - total:.1f} s")
    return 0


def _cmd_site(args) -> int:
    from numr_web import site

    if args.action == "build":
        site.build(args.output)
        return 0
    return site.serve(args.output, args.port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="numr-web", description="GroupNorm on NumPy, CUDA and WebGPU")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("info", help="backends, whether each is usable here, and why not").set_defaults(fn=_cmd_info)

    d = sub.add_parser("demo", help="per-group statistics and gradients of a sample tensor")
    d.add_argument("--device", default="cpu", help="cpu, cuda or webgpu (default cpu)")
    d.add_argument("--groups", type=_demo_groups, default=3, help="groups of the 6 channels: 1, 2, 3 or 6 (default 3)")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(fn=_cmd_demo)

    b = sub.add_parser("bench", help="forward/backward medians, GB/s, ratio to a same-size copy (and to torch)")
    b.add_argument("--backend", default="cpu", choices=["cpu", "cuda", "webgpu"])
    b.add_argument(
        "--cpu-path",
        default=None,
        choices=["auto", "numpy", "fused"],
        help="CPU kernels: fused (Numba) or pure NumPy (default: NUMR_WEB_CPU_PATH where set, else auto: "
        "fused when Numba imports)",
    )
    b.add_argument(
        "--dtype",
        default="float32",
        choices=["float16", "bfloat16", "float32", "float64"],
        help="storage dtype of x and dy (WebGPU: float32, float16 or bfloat16); the copy yardstick copies "
        "x's bytes, so a 16-bit run is measured against a copy of the same number of bytes",
    )
    b.add_argument("--layout", default="nchw", choices=["nchw", "nhwc"])
    b.add_argument(
        "--repeat", type=_positive_int, default=15, help="interleaved samples per shape (medians are reported)"
    )
    b.add_argument(
        "--shapes",
        type=_shapes,
        default=None,
        help="semicolon-separated N,C,H,W,G (default: the standard bench shapes)",
    )
    b.add_argument(
        "--runs",
        type=_positive_int,
        default=1,
        help="measure every shape this many times, one pass over the shapes after another, "
        "and report each ratio's range (the table shows the first run)",
    )
    b.add_argument(
        "--timing",
        choices=["end-to-end", "device"],
        default=None,
        help="end-to-end (default on WebGPU): each call's host work and dispatches, then a 4-byte read-back of "
        "its output, one call per wait, as a user meets it; device: WebGPU calls 4 per wait (CUDA: events, its "
        "default), hiding per-call costs.  CPU calls are always timed end to end",
    )
    b.add_argument("--quick", action="store_true", help="3 samples and the two smallest shapes")
    b.add_argument("--compare", choices=["torch"], default=None, help="time torch side by side")
    b.add_argument(
        "--threads",
        type=_threads,
        default=None,
        help="torch/Numba threads, 1 up to the usable cores (default: all cores)",
    )
    b.add_argument("--json", type=_json_path, default=None, metavar="PATH", help="write the rows as JSON")
    b.add_argument(
        "--contend",
        type=_count,
        default=0,
        metavar="K",
        help="start K busy-loop processes before timing and stop them after: a busy machine (default 0)",
    )
    b.add_argument(
        "--ideal",
        action="store_true",
        help="also time ideal streaming passes with GroupNorm's bytes (Numba, parallel and one thread): "
        "the floor under the fused path's figures on a busy machine (CPU backend, float32 or float64)",
    )
    b.add_argument(
        "--floor",
        action="store_true",
        help="also time the floor kernels (WGSL, one invocation per group, plain sums): the least work of any "
        "kernel that reads a group twice, beside the op and the copy (WebGPU backend, either layout)",
    )
    # refusals that need more than one flag print bench's usage, not the top-level one
    b.set_defaults(fn=_cmd_bench, check=functools.partial(_check_bench, b))

    w = sub.add_parser("warmup", help="compile the fused CPU kernels now (first calls otherwise wait for it)")
    w.add_argument(
        "--dtype",
        action="append",
        choices=["float16", "bfloat16", "float32", "float64"],
        help="storage dtype to compile for (repeatable; default float32)",
    )
    w.add_argument("--layout", default="both", choices=["nchw", "nhwc", "both"])
    w.set_defaults(fn=_cmd_warmup)

    s = sub.add_parser("site", help="the playground: a JupyterLite site with the notebooks (build, or serve locally)")
    s.add_argument("action", choices=["build", "serve"], help="build the site, or serve it (building it when stale)")
    s.add_argument("--output", default="build/site", metavar="DIR", help="the site's folder (default build/site)")
    s.add_argument("--port", default="8000", help="serve: the port on 127.0.0.1 (default 8000; 0 picks a free one)")
    s.set_defaults(fn=_cmd_site)
    return p


def main(argv=None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught below
        return code
    except BrokenPipeError:
        # The reader went away (`numr-web info | head -1`): it asked for no more, so stop quietly
        # with success.  stdout now points at devnull, so the interpreter's last flush of what is
        # still buffered does not fail again on exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0


def _run(argv) -> int:
    from numr_web.errors import BackendUnavailable

    args = build_parser().parse_args(argv)
    check = getattr(args, "check", None)
    if check is not None:
        check(args)
    try:
        return int(args.fn(args) or 0)
    except (ValueError, BackendUnavailable) as exc:
        print(f"numr-web {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

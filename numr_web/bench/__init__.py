"""Measurement: the benchmark behind ``numr-web bench``, its one timer and the copy yardsticks.

``runner`` (the benchmark), ``timing`` (the timer, interleaved rounds, per-round
ratios), ``copies`` (a same-size copy per device), ``torch_side`` (PyTorch beside
numr_web) and ``webgpu_copies`` (``python -m numr_web.bench.webgpu_copies``:
forward and backward against every WGSL copy kernel).  Importing this package
imports none of them: ``copies`` and ``timing`` run without NumPy (in the
browser), the runner needs it.
"""

__all__ = ["BENCH_SHAPES", "parse_shapes", "run_bench"]


def __getattr__(name):
    if name in __all__:
        from numr_web.bench import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

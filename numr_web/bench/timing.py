"""The one timer of the benchmarks, and the interleaved rounds and per-round ratios built on it.

``seconds_per_call`` times a callable the way its device needs: on the wall
clock with a wait after each call (the CPU, or a device whose ``synchronize``
is given), with ``batch`` calls queued per wait, or with CUDA events around
each call (``events``).  ``timer_for`` picks that for a numr_web backend and a
timing mode (``TIMINGS``):

* ``"end-to-end"`` (the default but on CUDA): each call as a user meets it --
  the call's host work and dispatches, then a small read-back (the first 4
  bytes of its output) that waits for the GPU; one call per wait.  Per-call
  costs (argument checks, pipeline and bind-group look-ups, submits, the wait)
  count.  On the CPU every call is timed this way (it returns when done).
* ``"device"``: WebGPU calls queued ``WEBGPU_BATCH`` at a time per wait (close
  to device time: the wait's cost is spread over the batch), CUDA calls between
  events.  It hides the per-call costs a user pays.
"""

from __future__ import annotations

import statistics
import time


def seconds_per_call(fn, repeat: int, warmup: int = 1, *, synchronize=None, batch: int = 1, events=None):
    """``repeat`` figures of seconds per call of ``fn()``, after ``warmup`` untimed calls.

    ``synchronize``: waits for the device after each figure's calls; ``batch``: calls per
    figure (the figure is their mean); ``events``: a factory of ``(start, stop, elapsed)``
    where ``start()``/``stop()`` record device events and ``elapsed()`` gives seconds
    between them (CUDA).
    """
    for _ in range(warmup):
        fn()
    if synchronize is not None:
        synchronize()
    out = []
    for _ in range(repeat):
        if events is not None:
            start, stop, elapsed = events()
            start()
            for _ in range(batch):
                fn()
            stop()
            out.append(elapsed() / batch)
            continue
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        if synchronize is not None:
            synchronize()
        out.append((time.perf_counter() - t0) / batch)
    return out


def wall_timer(fn, repeat, warmup=1):
    """Host wall-clock seconds per call (the CPU, and torch on the CPU)."""
    return seconds_per_call(fn, repeat, warmup)


def cuda_events(cuda):
    """An ``events`` factory for ``seconds_per_call`` from CuPy's ``cupy.cuda`` module."""

    def make():
        start, end = cuda.Event(), cuda.Event()

        def elapsed():
            end.synchronize()
            return cuda.get_elapsed_time(start, end) / 1e3

        return start.record, end.record, elapsed

    return make


#: WebGPU calls queued per wait in ``"device"`` timing: one read-back wait costs about 0.15 ms on lavapipe
WEBGPU_BATCH = 4
#: the timing modes of ``timer_for`` (and ``numr-web bench --timing``)
TIMINGS = ("end-to-end", "device")
#: bytes of a call's output read back after it in ``"end-to-end"`` timing
READ_BACK_BYTES = 4


def default_timing(device: str) -> str:
    """``"device"`` on CUDA (events), ``"end-to-end"`` elsewhere."""
    return "device" if device == "cuda" else "end-to-end"


def first_array(result):
    """A call's first output array (forward and backward return tuples, a copy its array)."""
    while isinstance(result, (tuple, list)):
        result = result[0]
    return result


def read_back_small(result, nbytes: int = READ_BACK_BYTES) -> bytes:
    """The first ``nbytes`` of the call's (first) output, read back to the host the way the
    array's own read-back does (``WebGPUArray.physical_bytes``: the transport's
    ``read_buffer``, after submitting what a ``batch()`` recorded), so it waits for every
    queued dispatch.  CUDA: the first element."""
    a = first_array(result)
    if getattr(a, "device", None) == "webgpu":
        ctx = a.ctx
        ctx.submit_recorded()
        return ctx.transport.read_buffer(ctx.dev, a.buffer, 0, min(nbytes, a.nbytes)) if a.nbytes else b""
    if hasattr(a, "get"):  # CuPy
        return a[(0,) * a.ndim].get().tobytes() if a.size else b""
    return b""


def end_to_end(fn):
    """``fn`` followed by a small read-back of its output: one call per wait, as a user meets it."""
    return lambda: read_back_small(fn())


def timer_for(backend, timing: str | None = None):
    """A ``timer(fn, repeat, warmup)`` for calls on ``backend`` (a numr_web backend object),
    in ``timing`` mode (one of ``TIMINGS``; default ``default_timing(backend.device)``)."""
    timing = timing or default_timing(backend.device)
    if timing not in TIMINGS:
        raise ValueError(f"--timing: expected one of {', '.join(TIMINGS)}, got {timing!r}")
    if backend.device in ("cuda", "webgpu") and timing == "end-to-end":
        return lambda fn, repeat, warmup=1: wall_timer(end_to_end(fn), repeat, warmup)
    if backend.device == "cuda":
        events = cuda_events(backend.xp.cuda)
        return lambda fn, repeat, warmup=1: seconds_per_call(
            fn, repeat, warmup, synchronize=backend.synchronize, events=events
        )
    if backend.device == "webgpu":
        return lambda fn, repeat, warmup=1: seconds_per_call(
            fn, repeat, warmup, synchronize=backend.synchronize, batch=WEBGPU_BATCH
        )
    return wall_timer


def samples_per_timing(fn, timer, budget=0.004):
    """How many calls one sample should hold so it lasts about ``budget`` seconds."""
    t = min(timer(fn, 1, 1))
    return max(1, min(50, int(budget / max(t, 1e-7))))


def plan_samples(fns, timers):
    """Per timed callable: calls per sample (about 4 ms of them) and the untimed settling calls
    before each sample (half as many)."""
    per_sample = {k: samples_per_timing(fn, timers[k]) for k, fn in fns.items()}
    return per_sample, {k: max(1, n // 2) for k, n in per_sample.items()}


def run_rounds(fns, timers, per_sample, settle, repeat):
    """``repeat`` interleaved rounds over the timed callables: per callable, its mean call time
    in each round."""
    samples = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            ts = timers[k](fn, per_sample[k], settle[k])
            samples[k].append(sum(ts) / len(ts))
    return samples


def median_throughput_ratio(samples, key, moved, ref, ref_moved):
    """Median over the rounds of ``key``'s throughput over ``ref``'s: (``moved`` bytes / its
    time) / (``ref_moved`` bytes / ``ref``'s time).  Bytes, not elements: a float16 array's
    copy moves half the bytes of a float32 one of the same shape."""
    return statistics.median((moved / t) / (ref_moved / r) for t, r in zip(samples[key], samples[ref]))


def median_ratio(samples, num, den):
    """Median over the rounds of (sum of the ``num`` callables' times) / (sum of the ``den``
    callables' times)."""
    rounds = zip(*(samples[k] for k in (*num, *den)))
    return statistics.median(sum(t[: len(num)]) / sum(t[len(num) :]) for t in rounds)

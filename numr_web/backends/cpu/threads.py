"""The fused CPU kernels' threads on a machine whose cores are shared (issue 16).

A notebook shares its machine with other kernels, builds and browsers.  With
GNU OpenMP's default wait policy (a thread that reaches the end of a parallel
region spins for milliseconds before it sleeps) and two busy-loop processes on
two cores, a 0.16 ms forward took 8 ms: the spinning thread holds a core while
the thread it waits for is off the CPU.  Three decisions keep the slowdown
graceful:

* **Wait policy.**  ``start_runtime`` sets ``OMP_WAIT_POLICY=passive`` for the
  moment Numba loads its OpenMP runtime (GNU OpenMP reads it then, once) and
  restores the environment after, so other OpenMP runtimes and child processes
  see the user's.  A user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` wins;
  so does a runtime that something else started first (``policy()`` says
  which).  Numba's ``tbb`` and ``workqueue`` layers never spin for long.
* **How many threads.**  At most the cores this process may run on
  (``os.sched_getaffinity``) and at most Numba's own setting
  (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``).
* **When to go parallel.**  Below ``SERIAL_BELOW`` elements a call runs on one
  thread (waking a sleeping thread costs more than the work).  Above it, each
  kind of call (direction, layout, size octave) runs on the faster of "parallel"
  and "serial" as timed here (the median of each one's last ``WINDOW`` calls):
  the first calls try both, then the loser is timed again now and then (every
  ``PROBE_MIN`` calls, backing off to ``PROBE_MAX`` while it keeps losing).
  On an idle machine parallel wins; when the other cores are busy, the one
  that holds up better.  The kernels' splits are fixed
  by the shape, not the thread count, so results are bitwise the same either way.

``NUMR_WEB_CPU_THREADS=parallel|serial`` pins the choice (``auto`` by default).
"""

from __future__ import annotations

import functools
import os
import threading
import time

#: calls on fewer elements always run on one thread
SERIAL_BELOW = 1 << 16
#: a losing mode is timed again after this many calls, doubling while it keeps losing, up to PROBE_MAX
PROBE_MIN = 8
PROBE_MAX = 256
#: the environment variable that pins the choice
MODE_ENV = "NUMR_WEB_CPU_THREADS"
MODES = ("auto", "parallel", "serial")

_PAR, _SER = 0, 1
_lock = threading.Lock()
_started = False
_policy = "not started"
_cores = None
_stats: dict = {}  # (kind, layout, size octave) -> _Entry
_get = _set = None


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    global _cores
    if _cores is None:
        try:
            _cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            _cores = os.cpu_count() or 1
    return max(1, _cores)


def start_runtime() -> str:
    """Load Numba's threading layer with a passive OpenMP wait policy (unless the user chose one).

    Called once, before the first parallel kernel; returns the policy in force (``policy()``)."""
    global _started, _policy, _get, _set
    if _started:
        return _policy
    with _lock:
        if _started:
            return _policy
        import numba
        from numba.np.ufunc import parallel

        already = bool(getattr(parallel, "_is_initialized", False))
        user = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ}
        ours = not already and not user
        if ours:
            os.environ["OMP_WAIT_POLICY"] = "passive"
        try:
            numba.get_num_threads()  # launches the threading layer: GNU OpenMP reads its environment now
        finally:
            if ours:
                del os.environ["OMP_WAIT_POLICY"]
        layer = numba.threading_layer()
        if layer != "omp":
            _policy = f"{layer} layer (no spinning wait)"
        elif user:
            _policy = "the user's " + ", ".join(f"{k}={v}" for k, v in user.items())
        elif already:
            _policy = "OpenMP's as started before numr_web (OMP_WAIT_POLICY not applied)"
        else:
            _policy = "OMP_WAIT_POLICY=passive (set while Numba's OpenMP runtime loaded)"
        # the raw thread-count calls (a few microseconds cheaper per call than the checked public ones)
        _get = getattr(parallel, "_get_num_threads", None) or numba.get_num_threads
        _set = getattr(parallel, "_set_num_threads", None) or numba.set_num_threads
        _started = True
    return _policy


def policy() -> str:
    """The wait policy in force, in words (``"not started"`` before the first parallel call)."""
    return _policy


def mode() -> str:
    value = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}: expected one of {MODES}, got {value!r}")
    return value


#: timings kept per mode; a mode's estimate is the median of its last WINDOW timings
WINDOW = 3
#: timings each mode gets before the first choice
EXPLORE = 2


class _Entry:
    """Per kind of call: recent seconds-per-element of each mode, and when to probe the loser."""

    __slots__ = ("times", "calls", "since_probe", "interval")

    def __init__(self):
        self.times = ([], [])  # parallel, serial
        self.calls = 0
        self.since_probe = 0
        self.interval = PROBE_MIN

    def estimate(self, which):
        t = sorted(self.times[which])
        return t[len(t) // 2]


def _choose(key):
    """(mode, entry or None when the call is not timed, whether this call is a probe of the losing mode)."""
    e = _stats.get(key)
    if e is None:
        e = _stats[key] = _Entry()
    e.calls += 1
    if e.calls == 1:
        return _PAR, None, False  # the first call may compile: not timed
    for which in (_PAR, _SER):
        if len(e.times[which]) < EXPLORE:
            return which, e, False
    best = _PAR if e.estimate(_PAR) <= e.estimate(_SER) else _SER
    e.since_probe += 1
    if e.since_probe >= e.interval:
        e.since_probe = 0
        return 1 - best, e, True
    return best, e, False


def _record(e, which, seconds_per_element, probe):
    times = e.times[which]
    times.append(seconds_per_element)
    if len(times) > WINDOW:
        del times[0]
    if probe:  # the probed mode still loses: probe less often; it wins: it is the choice from now on
        e.interval = PROBE_MIN if e.estimate(which) < e.estimate(1 - which) else min(2 * e.interval, PROBE_MAX)


def policy_call(kind):
    """Decorator for a fused entry point ``f(x_or_dy, ..., *, layout)``: runs it on the thread count
    chosen above (``kind`` names the direction in the statistics)."""

    def wrap(fn):
        @functools.wraps(fn)
        def call(first, *args, layout, **kwargs):
            size = first.size
            if not _started:
                start_runtime()
            current = _get()
            cap = min(current, usable_cores())
            how = mode()
            if cap <= 1 or size < SERIAL_BELOW or how == "serial":
                which, st, probe = _SER, None, False
            elif how == "parallel":
                which, st, probe = _PAR, None, False
            else:
                which, st, probe = _choose((kind, layout, size.bit_length()))
            want = cap if which == _PAR else 1
            if want != current:
                _set(want)
            try:
                start = time.perf_counter()
                out = fn(first, *args, layout=layout, **kwargs)
                elapsed = time.perf_counter() - start
            finally:
                if want != current:
                    _set(current)
            if st is not None:
                _record(st, which, elapsed / size, probe)
            return out

        return call

    return wrap


def choices() -> dict:
    """What the chooser has learnt: ``{(kind, layout, size octave): (parallel, serial)}`` in ns per element."""
    out = {}
    for key, e in list(_stats.items()):
        out[key] = tuple(round(e.estimate(w) * 1e9, 3) if e.times[w] else None for w in (_PAR, _SER))
    return out


def reset() -> None:
    """Forget the timings (tests, or after the machine's load changed for good)."""
    _stats.clear()

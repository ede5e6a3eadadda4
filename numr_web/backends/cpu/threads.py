"""The fused CPU kernels' threads on a machine whose cores are shared (issue 16).

A notebook shares its machine with other kernels, builds and browsers.  With
two busy-loop processes on two cores, two OpenMP threads collapse: GNU
OpenMP's threads spin for milliseconds at the end of a parallel region before
they sleep, and the spinning one holds a core while the thread it waits for is
off the CPU (a 0.16 ms forward took 8 ms).  The decisions made here:

* **When to go parallel.**  Below ``SERIAL_BELOW`` elements a call runs on one
  thread.  Above it, each kind of call (direction, layout, shape, dtype) runs on
  the faster of "parallel" and "serial" as timed here (the second best of
  each one's last ``WINDOW`` calls): the first calls try both, then the loser is
  timed again now and then (``PROBE_RUN`` calls in a row, every ``PROBE_MIN``
  calls, backing off to ``PROBE_MAX`` while it keeps losing).  On an idle
  machine parallel wins; once other processes take the cores, a few calls later
  serial does where it is faster, and a probe brings parallel back.  The kernels' splits are fixed by the
  shape, not the thread count, so results are bitwise the same either way.
* **How many threads.**  At most the cores this process may run on
  (``os.sched_getaffinity``) and at most Numba's own setting
  (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``).
* **Wait policy.**  A waiting OpenMP thread spins ``SPIN_COUNT`` times before
  it sleeps, not GNU OpenMP's default 300000 (milliseconds of spinning: on a
  shared machine a spinning thread holds a core that another process, or the
  thread it waits for, needs).  Some spinning stays: it is what makes two
  threads pay on an idle machine (with ``OMP_WAIT_POLICY=passive`` two threads
  were no faster than one on this project's 2-core VM: waking a sleeping thread
  cost about as much as the work).  The count is set in the environment only
  while Numba's OpenMP runtime starts (GNU OpenMP reads it then) and removed
  after, so nothing else in the process sees it; a user's ``OMP_WAIT_POLICY`` or
  ``GOMP_SPINCOUNT`` applies instead; ``policy()`` says which policy is in force.
  (Measurements: docs/reports/2026-12-01-contention.md.)

``NUMR_WEB_CPU_THREADS=parallel|serial`` pins the choice (``auto`` by default).
"""

from __future__ import annotations

import functools
import os
import threading
import time

from numr_web.host import environ_reader

#: calls on fewer elements always run on one thread
SERIAL_BELOW = 1 << 16
#: a losing mode is timed again (PROBE_RUN calls in a row) after this many calls, doubling while it
#: keeps losing, up to PROBE_MAX
PROBE_MIN = 8
PROBE_MAX = 256
PROBE_RUN = 3
#: the environment variable that pins the choice
MODE_ENV = "NUMR_WEB_CPU_THREADS"
MODES = ("auto", "parallel", "serial")
_read_mode_env = environ_reader(MODE_ENV)  # read on every call

#: GNU OpenMP spins of a waiting thread before it sleeps, when the user chose no wait policy
SPIN_COUNT = 20000
_SPIN_ENV = "GOMP_SPINCOUNT"
_USER_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

_PAR, _SER = 0, 1
_lock = threading.Lock()
_started = False
_policy = "not started"
_cores = None
_stats: dict = {}  # (kind, layout, shape, dtype) or (kind, layout, size octave) -> _Entry
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
    """Start Numba's threading layer (once, before the first parallel kernel) and note its wait policy."""
    global _started, _policy, _get, _set
    if _started:
        return _policy
    with _lock:
        if _started:
            return _policy
        import numba
        from numba.np.ufunc import parallel

        user = [f"{k}={os.environ[k]}" for k in _USER_ENV if k in os.environ]
        preloaded = _gomp_loaded()  # an OpenMP runtime already running read its environment before
        ours = not user and not preloaded
        if ours:
            os.environ[_SPIN_ENV] = str(SPIN_COUNT)
        try:
            numba.get_num_threads()  # launches the threading layer (GNU OpenMP reads its environment)
        finally:
            if ours:
                os.environ.pop(_SPIN_ENV, None)
        layer = numba.threading_layer()
        if layer != "omp":
            _policy = f"the {layer} layer's"
        elif user:
            _policy = "OpenMP with " + ", ".join(user)
        elif preloaded:
            _policy = "OpenMP as started before numr_web (its own spin count); busy machine: calls go serial"
        else:
            _policy = (
                f"OpenMP, threads spin {SPIN_COUNT} times before they sleep (numr_web's {_SPIN_ENV}); "
                "busy machine: calls go serial"
            )
        # the raw thread-count calls (a few microseconds cheaper per call than the checked public ones)
        _get = getattr(parallel, "_get_num_threads", None) or numba.get_num_threads
        _set = getattr(parallel, "_set_num_threads", None) or numba.set_num_threads
        _started = True
    return _policy


def _gomp_loaded() -> bool:
    """Whether a GNU OpenMP runtime is mapped into this process already (Linux; False elsewhere)."""
    try:
        with open("/proc/self/maps") as fh:
            return any("libgomp" in line for line in fh)
    except OSError:
        return False


def policy() -> str:
    """The wait policy in force, in words (``"not started"`` before the first parallel call)."""
    return _policy


def mode() -> str:
    value = (_read_mode_env() or "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}: expected one of {MODES}, got {value!r}")
    return value


#: timings kept per mode; a mode's estimate is the second smallest of them (the smallest while it has
#: fewer than 4): a call the scheduler interrupted (a busy core's time slice, several milliseconds) or
#: one lucky call does not move it
WINDOW = 5
#: kinds of call (direction, layout, shape, dtype) timed separately; past this many, by size octave
MAX_KINDS = 256
#: timings each mode gets before the first choice
EXPLORE = 2


class _Entry:
    """Per kind of call: recent seconds-per-element of each mode, and when to probe the loser."""

    __slots__ = ("times", "calls", "since_probe", "interval", "probing")

    def __init__(self):
        self.times = ([], [])  # parallel, serial
        self.calls = 0
        self.since_probe = 0
        self.interval = PROBE_MIN
        self.probing = 0  # calls left in the current probe run

    def estimate(self, which):
        t = sorted(self.times[which])
        return t[1] if len(t) >= 4 else t[0]


def _choose(key):
    """(mode, entry or None when the call is not timed, whether this call ends a probe run of the losing mode)."""
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
    if e.probing:
        # a probe is a short run of calls: the first parallel call after serial ones wakes sleeping
        # threads, the next ones show what parallel costs now
        e.probing -= 1
        return 1 - best, e, e.probing == 0
    e.since_probe += 1
    if e.since_probe >= e.interval:
        e.since_probe = 0
        e.probing = PROBE_RUN - 1
        return 1 - best, e, e.probing == 0
    return best, e, False


def _record(e, which, seconds_per_element, probe_done):
    times = e.times[which]
    times.append(seconds_per_element)
    if len(times) > WINDOW:
        del times[0]
    if probe_done:  # the probed mode still loses: probe less often; it wins: it is the choice from now on
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
                key = (kind, layout, first.shape, first.dtype)
                if key not in _stats and len(_stats) >= MAX_KINDS:
                    key = (kind, layout, size.bit_length())  # many shapes: by size octave
                which, st, probe = _choose(key)
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
    """What the chooser has learnt: ``{(kind, layout, shape, dtype): (parallel, serial)}`` in ns per element."""
    out = {}
    for key, e in list(_stats.items()):
        out[key] = tuple(round(e.estimate(w) * 1e9, 3) if e.times[w] else None for w in (_PAR, _SER))
    return out


def reset() -> None:
    """Forget the timings (tests, or after the machine's load changed for good)."""
    _stats.clear()

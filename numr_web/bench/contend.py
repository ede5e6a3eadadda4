"""Busy-loop processes for ``numr-web bench --contend K``: a machine whose cores are shared.

``BusyLoops(k)`` starts ``k`` Python processes that spin on the CPU (what a
notebook's neighbours -- other kernels, a build, a browser -- do to it) and
stops them on leaving the ``with`` block, on an error or a KeyboardInterrupt
too.  Each loop also watches its parent: if the benchmark dies without
cleaning up (SIGKILL), the loops notice within a few tens of milliseconds
and exit, so none is left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

#: a loop that spins, and exits when its parent process is gone (reparented)
LOOP = """
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(200000):
        pass
"""


class BusyLoops:
    """``k`` busy-loop processes while the ``with`` block runs; ``pids`` lists them."""

    def __init__(self, k: int, *, settle: float = 0.5):
        if k < 0:
            raise ValueError(f"--contend: expected a number of processes (0 or more), got {k}")
        self.k = int(k)
        self.settle = settle
        self.procs: list[subprocess.Popen] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> BusyLoops:
        try:
            for _ in range(self.k):
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", LOOP, str(os.getpid())],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        except BaseException:
            self.stop()
            raise
        if self.procs and self.settle:
            time.sleep(self.settle)  # let them start spinning before anything is timed
        return self

    def stop(self) -> None:
        procs, self.procs = self.procs, []
        for p in procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 5.0
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> BusyLoops:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

"""The CPU backend: the NumPy and the fused Numba paths behind one ``CpuBackend``; ``BACKEND`` is the registered one."""

from __future__ import annotations

from numr_web.backends.cpu.backend import CpuBackend

#: the backend ``numr_web.backends.get_backend("cpu")`` returns; its path comes from NUMR_WEB_CPU_PATH
BACKEND = CpuBackend.from_environment()

__all__ = ["BACKEND", "CpuBackend"]

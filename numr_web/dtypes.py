"""The storage dtypes numr_web accepts and their names; the compute dtype comes from an op's schema."""

from __future__ import annotations

import numpy as np

try:  # bfloat16 for NumPy: a declared dependency, still imported defensively
    import ml_dtypes as _ml_dtypes

    BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    BFLOAT16 = None

#: every floating-point storage dtype the ops take
FLOAT_DTYPES = tuple(
    d for d in (np.dtype(np.float16), BFLOAT16, np.dtype(np.float32), np.dtype(np.float64)) if d is not None
)


def is_supported_dtype(dtype) -> bool:
    return np.dtype(dtype) in FLOAT_DTYPES


def dtype_name(dtype) -> str:
    """``"bfloat16"``, ``"float32"``...: the name users and error messages see."""
    return "bfloat16" if BFLOAT16 is not None and np.dtype(dtype) == BFLOAT16 else str(np.dtype(dtype))

"""The GroupNorm Explorer: an anywidget whose kernel side computes GroupNorm through numr_web.

    >>> from numr_web import Explorer
    >>> Explorer()                              # a generated (2, 32, 16, 16) input, G=32
    >>> Explorer(x, num_groups=4, device="cpu") # your own (N, C, *spatial) array or Tensor

numr_web computes, the front-end (widget/, built into numr_web/static) draws.  The package's modules:
``widget`` (the Explorer, its traits and the recompute driver), ``inputs`` (the generated input and the
controls' checks, NumPy-free), ``pipeline`` (forward, backward and the extras on the device), ``codec``
(the results as Bytes traits).  What travels between kernel and view is docs/explorer-contract.md.
"""

from .codec import INPUTS, RESULTS, SAMPLE_BUDGET, decode_results
from .inputs import DEFAULT_SHAPE, DTYPES, GRAD_MODES, LAYOUTS, MAX_BATCH, PATTERNS
from .widget import RECOMPUTE, STATIC, Explorer, default_device

__all__ = [
    "DEFAULT_SHAPE",
    "DTYPES",
    "GRAD_MODES",
    "INPUTS",
    "LAYOUTS",
    "MAX_BATCH",
    "PATTERNS",
    "RECOMPUTE",
    "RESULTS",
    "SAMPLE_BUDGET",
    "STATIC",
    "Explorer",
    "decode_results",
    "default_device",
]

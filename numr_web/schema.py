"""Op schemas, declared in one table: name, version, amp policy (which decides the compute dtype), produces_grad.

Every op numr_web records for autograd has a row in ``SCHEMAS``, next to the
others, the way PyTorch keeps its derivatives in one file.  The table imports
nothing from the rest of the package: the ops and autograd functions look
their schema up here, never the other way round.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


def _norm(s: str) -> str:
    return "".join(ch for ch in str(s).lower() if ch.isalnum())


class AmpPolicy(str, enum.Enum):
    """How an op treats low-precision inputs."""

    #: compute and accumulate in float32 whatever the storage dtype (float64 stays float64)
    FORCE_FP32 = "force_fp32"
    #: compute in the storage dtype (the usual type promotion of the inputs)
    PROMOTE = "promote"

    def __eq__(self, other):
        # "force-fp32", "force_fp32", "ForceFP32" all name the same policy.
        if isinstance(other, str):
            return _norm(self.value) == _norm(other)
        return NotImplemented

    __hash__ = str.__hash__

    def __str__(self):
        return self.value


@dataclass(frozen=True)
class OpSchema:
    name: str
    version: int
    amp_policy: AmpPolicy
    produces_grad: bool

    def compute_dtype(self, dtype) -> str:
        """The name of the dtype the op computes and accumulates in for storage ``dtype``.

        ``dtype`` is anything whose ``str`` is a dtype name (a NumPy dtype, a
        name).  FORCE_FP32: float32, except that float64 stays float64;
        PROMOTE: the storage dtype itself.
        """
        name = str(dtype)
        if self.amp_policy == AmpPolicy.FORCE_FP32:
            return "float64" if name == "float64" else "float32"
        return name


def _row(name, amp_policy=AmpPolicy.PROMOTE, produces_grad=True, version=1):
    return name, OpSchema(name, version, amp_policy, produces_grad)


#: every op's schema.  group_norm's two helpers stand for the saved (N, G)
#: statistics as functions of x in the differentiable backward (ops/composite.py).
SCHEMAS: dict[str, OpSchema] = dict(
    [
        _row("group_norm", AmpPolicy.FORCE_FP32),
        _row("group_norm_saved_mean", AmpPolicy.FORCE_FP32),
        _row("group_norm_saved_rstd", AmpPolicy.FORCE_FP32),
        _row("add"),
        _row("sub"),
        _row("mul"),
        _row("div"),
        _row("neg"),
        _row("pow"),
        _row("sum"),
        _row("broadcast_to"),
        _row("reshape"),
        _row("cast"),
        _row("exp"),
        _row("sigmoid"),
    ]
)


def schema(name: str) -> OpSchema:
    """The schema of op ``name`` (e.g. ``"group_norm"``)."""
    try:
        return SCHEMAS[name]
    except KeyError:
        known = ", ".join(sorted(SCHEMAS))
        raise KeyError(f"schema: no op named {name!r}; known ops: {known}") from None

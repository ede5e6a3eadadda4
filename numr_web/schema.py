"""Op schemas: one per op, read by the autograd engine and the dispatcher.

A schema says what an op is (name, version), how mixed precision treats it
(``amp_policy``) and whether autograd records it (``produces_grad``).
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
    #: follow the usual type promotion of the inputs
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
    doc: str = ""


_REGISTRY: dict[str, OpSchema] = {}


def register(schema: OpSchema) -> OpSchema:
    old = _REGISTRY.get(schema.name)
    if old is not None and old != schema:
        raise ValueError(f"op {schema.name!r} is already registered with a different schema: {old}")
    _REGISTRY[schema.name] = schema
    return schema


def schema(name: str) -> OpSchema:
    """The registered schema of op ``name`` (e.g. ``"group_norm"``)."""
    import numr_web.ops  # noqa: F401  (registers the ops)
    import numr_web.autograd.functions  # noqa: F401

    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"schema: no op named {name!r}; registered ops: {known}") from None


def registered() -> dict[str, OpSchema]:
    schema("group_norm")
    return dict(_REGISTRY)

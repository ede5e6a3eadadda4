"""Differentiable functions and the graph nodes they leave behind.

A ``Function`` has a ``forward`` over raw arrays and a ``backward`` written
with ``Tensor`` operations.  Because the backward is itself made of recorded
operations, running it with the graph enabled (``create_graph=True``) gives a
graph of the gradient, and so gradients of gradients to any order.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from numr_web.host import is_numpy_scalar
from numr_web.schema import OpSchema

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def set_grad_enabled(mode: bool):
    prev = is_grad_enabled()
    _state.enabled = bool(mode)
    try:
        yield
    finally:
        _state.enabled = prev


def no_grad():
    """Context manager: operations inside record no graph."""
    return set_grad_enabled(False)


def enable_grad():
    return set_grad_enabled(True)


class Context:
    """What a forward leaves for its backward."""

    def __init__(self, inputs, needs_input_grad):
        #: the positional arguments of ``apply``; Tensors stay Tensors so the
        #: backward can build on their graph
        self.inputs = inputs
        self.needs_input_grad = needs_input_grad
        self.saved = ()

    def save(self, *values):
        self.saved = values

    @property
    def output(self):
        """The Tensor this call produced (alive whenever its backward runs)."""
        out = self.output_ref()
        if out is None:  # pragma: no cover - the engine always holds it
            raise RuntimeError("the output of this node was freed before its backward ran")
        return out


class Node:
    """One recorded call: the function, its context and its output's metadata."""

    __slots__ = ("fn", "ctx", "output_shape", "output_dtype", "__weakref__")

    def __init__(self, fn, ctx, output_shape, output_dtype):
        self.fn = fn
        self.ctx = ctx
        self.output_shape = output_shape
        self.output_dtype = output_dtype

    @property
    def name(self):
        return self.fn.__name__

    def __repr__(self):
        return f"<{self.name} node>"


class Function:
    #: every Function registers a schema; ``produces_grad=False`` ops record no graph
    schema: OpSchema

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad_output):
        """Gradients (Tensors or None), one per positional input of ``apply``."""
        raise NotImplementedError

    @classmethod
    def apply(cls, *args):
        from numr_web.autograd.tensor import Tensor

        raw = tuple(a.data if isinstance(a, Tensor) else a for a in args)
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        record = is_grad_enabled() and cls.schema.produces_grad and any(needs)
        ctx = Context(args if record else (), needs)
        out = cls.forward(ctx, *raw)
        if is_numpy_scalar(out):  # NumPy reductions return scalars
            out = out.__array__()
        result = Tensor(out, requires_grad=record)
        if record:
            result.grad_fn = Node(cls, ctx, tuple(out.shape), out.dtype)
            # A weak reference: a backward that needs its own output (sigmoid,
            # rstd) reads it, without the output keeping itself alive.
            ctx.output_ref = weakref.ref(result)
        return result

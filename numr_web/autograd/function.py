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
    """What a forward leaves for its backward.

    Besides the inputs and ``saved`` values, it records the version of every
    tensor whose values the backward reads (``Function.saved_inputs``, and the
    output where ``Function.saves_output``): ``check`` raises if an in-place
    operation changed one since, and after a backward without
    ``retain_graph`` the saved values are released and ``check`` raises on a
    second pass (PyTorch's rules).
    """

    def __init__(self, inputs, needs_input_grad):
        #: the positional arguments of ``apply``; Tensors stay Tensors so the
        #: backward can build on their graph
        self.inputs = inputs
        self.needs_input_grad = needs_input_grad
        self.saved = ()
        self._watched = ()  # (what, tensor's version counter, version at the forward, tensor's description)
        self._freed = False

    def save(self, *values):
        self.saved = values

    def watch(self, fn, args, result):
        """Record the versions of the tensors ``fn``'s backward will read."""
        watched = []
        for i in fn.saved_inputs(self.needs_input_grad):
            t = args[i]
            if hasattr(t, "_versions"):
                watched.append((f"input {i}", t._versions, t._versions[0], _metadata(t)))
        if fn.saves_output:
            watched.append(("its output", result._versions, result._versions[0], _metadata(result)))
        self._watched = tuple(watched)

    def check(self, name):
        """Raise if the values this node's backward needs were released or changed in place."""
        if self._freed and (self._watched or self.saved is None):
            raise RuntimeError(
                f"{name}: trying to backward through the graph a second time (or to read its saved values "
                "after they were freed): backward() and autograd.grad() free them; pass retain_graph=True "
                "to the first call if you need to backward through the graph again"
            )
        for what, counter, version, meta in self._watched:
            if counter[0] != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [{_describe(*meta)}], {what} of {name}, is at version {counter[0]}; expected version "
                    f"{version} instead. Make the in-place change after the backward, or on a copy"
                )

    def release(self):
        """Free the saved values (after a backward without retain_graph)."""
        self._freed = True
        self.saved = None if (self.saved or self._watched) else ()

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


def _metadata(t):
    """What the in-place check's message says of a tensor, kept at the forward and put in words only when
    it raises (formatting a NumPy dtype costs microseconds on every recorded call)."""
    return t.dtype, t.shape, t.device


def _describe(dtype, shape, device):
    return f"{dtype} Tensor of shape {tuple(shape)} on {device!r}"


class Function:
    #: every Function registers a schema; ``produces_grad=False`` ops record no graph
    schema: OpSchema
    #: whether the backward reads the output's values (``ctx.output``)
    saves_output = False

    @staticmethod
    def saved_inputs(needs_input_grad):
        """Positions of the inputs whose values the backward reads (default: all of them)."""
        return range(len(needs_input_grad))

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

        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        record = is_grad_enabled() and cls.schema.produces_grad and any(needs)
        if record:
            _own_saved(cls, args, needs)
        raw = tuple(a.data if isinstance(a, Tensor) else a for a in args)
        ctx = Context(args if record else (), needs)
        out = cls.forward(ctx, *raw)
        if is_numpy_scalar(out):  # NumPy reductions return scalars
            out = out.__array__()
        result = Tensor._of(out, requires_grad=record)
        if record:
            result.grad_fn = Node(cls, ctx, tuple(out.shape), out.dtype)
            # A weak reference: a backward that needs its own output (sigmoid,
            # rstd) reads it, without the output keeping itself alive.
            ctx.output_ref = weakref.ref(result)
            ctx.watch(cls, args, result)
        return result


def _own_saved(fn, args, needs):
    """Copy the borrowed operands (raw arrays the caller still holds) whose values ``fn``'s backward
    reads, before the graph keeps them: a change to the caller's array must not reach the backward."""
    from numr_web.autograd.tensor import own_copy

    for i in fn.saved_inputs(needs):
        t = args[i]
        if getattr(t, "_borrowed", False):
            t.data = own_copy(t.data)
            t._borrowed = False

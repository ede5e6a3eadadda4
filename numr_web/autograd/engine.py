"""The graph walk: reverse topological order, gradient accumulation, ``grad``."""

from __future__ import annotations

import numbers

from numr_web.autograd.function import set_grad_enabled
from numr_web.autograd.tensor import Tensor, operand
from numr_web.backends import backend_for


def _seed(output: Tensor, grad):
    if grad is None:
        if output.size != 1:
            raise RuntimeError(
                f"grad can be omitted only for a single-element output; this output has shape {output.shape}"
            )
        return Tensor._of(backend_for(output.data).full_like(output.data, 1))
    if isinstance(grad, numbers.Number):
        return Tensor._of(backend_for(output.data).full_like(output.data, grad))
    g = operand(grad)  # a graph built from it (create_graph) copies it if it keeps it
    if g.shape != output.shape:
        raise ValueError(f"grad: expected shape {output.shape} (the output's), got {g.shape}")
    if g.device != output.device:
        raise ValueError(f"grad: expected an array on {output.device!r}, got one on {g.device!r}")
    return g


def _topological(roots):
    """Tensors with a grad_fn reachable from ``roots``, producers after consumers."""
    order, seen = [], set()
    for root in roots:
        if root.grad_fn is None or id(root) in seen:
            continue
        stack = [(root, False)]
        while stack:
            t, done = stack.pop()
            if done:
                order.append(t)
                continue
            if id(t) in seen:
                continue
            seen.add(id(t))
            stack.append((t, True))
            for inp in t.grad_fn.ctx.inputs:
                if isinstance(inp, Tensor) and inp.grad_fn is not None and inp.requires_grad and id(inp) not in seen:
                    stack.append((inp, False))
    order.reverse()  # post-order reversed: every consumer before its producers
    return order


def _accumulate(store: dict, keep: dict, t: Tensor, g: Tensor):
    key = id(t)
    keep[key] = t
    prev = store.get(key)
    store[key] = g if prev is None else prev + g


def run_backward(outputs, grads, *, retain_graph=None, create_graph=False, inputs=None):
    """Propagate ``grads`` from ``outputs``.

    With ``inputs`` (a list of Tensors) returns their gradients and leaves
    ``.grad`` alone; otherwise accumulates into every reachable leaf's ``.grad``.
    Each node checks first that the tensors its backward reads were not changed
    in place since the forward, and, unless ``retain_graph`` (default:
    ``create_graph``), releases its saved values after.
    """
    if retain_graph is None:
        retain_graph = create_graph
    outputs = list(outputs)
    for o in outputs:
        if not isinstance(o, Tensor):
            raise TypeError(f"outputs: expected Tensors, got {type(o).__name__}")
        if not o.requires_grad:
            raise RuntimeError(
                "element of outputs does not require grad and has no grad_fn: "
                "make an input a Tensor with requires_grad=True"
            )
    store, keep = {}, {}
    for o, g in zip(outputs, grads):
        _accumulate(store, keep, o, _seed(o, g))

    wanted = None if inputs is None else {id(t): t for t in inputs}
    captured = {}
    with set_grad_enabled(create_graph):
        for t in _topological(outputs):
            g = store.pop(id(t), None)
            if g is None:
                continue
            if wanted is not None and id(t) in wanted:
                captured[id(t)] = g
            node = t.grad_fn
            node.ctx.check(node.name)
            in_grads = node.fn.backward(node.ctx, g)
            if not retain_graph:
                node.ctx.release()
            for inp, ig in zip(node.ctx.inputs, in_grads):
                if ig is None or not isinstance(inp, Tensor) or not inp.requires_grad:
                    continue
                if ig.shape != inp.shape:  # a bug in a backward, never the user's
                    raise RuntimeError(f"{node.name}: gradient of shape {ig.shape} for an input of shape {inp.shape}")
                _accumulate(store, keep, inp, ig if create_graph else ig.detach())

    if wanted is not None:
        for key in wanted:
            if key not in captured and key in store:
                captured[key] = store[key]
        return captured

    for key, g in store.items():
        t = keep[key]
        if t.grad_fn is None and t.requires_grad:  # a leaf
            g = g if create_graph else g.detach()
            t.grad = g if t.grad is None else (t.grad + g if create_graph else (t.grad + g).detach())
    return None


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
):
    """Gradients of ``outputs`` with respect to ``inputs``, as a list.

    ``grad_outputs`` are the upstream gradients (one per output; may be None
    for single-element outputs).  With ``create_graph=True`` the returned
    Tensors carry a graph, so they can be differentiated again.  The graph's
    saved values are freed unless ``retain_graph=True`` (default:
    ``create_graph``), as in PyTorch.
    """
    single_out = isinstance(outputs, Tensor)
    outputs = [outputs] if single_out else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"inputs[{i}]: expected a Tensor, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError(f"inputs[{i}] does not require grad: create it with requires_grad=True")
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, Tensor) or not isinstance(grad_outputs, (list, tuple)):
        grad_outputs = [grad_outputs]
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad_outputs: expected {len(outputs)} entries (one per output), got {len(grad_outputs)}")
    found = run_backward(outputs, grad_outputs, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)
    result = []
    for i, t in enumerate(inputs):
        g = found.get(id(t))
        if g is None and not allow_unused:
            raise RuntimeError(
                f"inputs[{i}] was not used to compute outputs; pass allow_unused=True to get None for it"
            )
        result.append(g if (g is None or create_graph) else g.detach())
    return result

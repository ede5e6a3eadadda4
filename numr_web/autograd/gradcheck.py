"""Finite-difference checks of first and second derivatives (float64, CPU)."""

from __future__ import annotations

from numr_web.autograd.engine import grad as _grad
from numr_web.autograd.tensor import Tensor
from numr_web.host import require_numpy


class GradcheckError(AssertionError):
    """Analytical and numerical derivatives disagree."""


def _as_outputs(out):
    return [out] if isinstance(out, Tensor) else list(out)


def _check_inputs(inputs):
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"inputs[{i}]: expected a Tensor, got {type(t).__name__}")
        if t.device != "cpu" or t.dtype != "float64":
            raise TypeError(
                f"inputs[{i}]: gradcheck needs float64 CPU tensors (finite differences), got {t.dtype} on {t.device!r}"
            )
    return inputs


def gradcheck(
    fn,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    seed: int = 0,
) -> bool:
    """Compare ``fn``'s autograd gradients with central finite differences.

    ``fn(*inputs)`` returns a Tensor or a sequence of Tensors.  Each output is
    contracted with a fixed random weight ``v`` and the gradient of
    ``sum(v * out)`` with respect to every input that requires grad is compared,
    element by element, with ``(f(x + eps) - f(x - eps)) / (2 eps)``.
    Returns True, or raises ``GradcheckError`` naming the worst element.
    """
    np = require_numpy("gradcheck")
    inputs = _check_inputs(inputs)
    rng = np.random.default_rng(seed)
    outs = _as_outputs(fn(*inputs))
    weights = [rng.standard_normal(o.shape) for o in outs]

    def scalar(*xs):
        # grad mode stays on: fn may itself differentiate (gradgradcheck)
        return sum(float(np.sum(w * o.numpy())) for w, o in zip(weights, _as_outputs(fn(*xs))))

    targets = [t for t in inputs if t.requires_grad]
    if not targets:
        raise ValueError("inputs: at least one input must have requires_grad=True")
    diffs = [o for o in outs if o.requires_grad]
    analytic = (
        _grad(
            diffs,
            targets,
            grad_outputs=[Tensor(w) for w, o in zip(weights, outs) if o.requires_grad],
            allow_unused=True,
        )
        if diffs
        else [None] * len(targets)
    )

    for k, t in enumerate(targets):
        ana = np.zeros(t.shape) if analytic[k] is None else analytic[k].numpy()
        num = np.zeros(t.shape)
        base = t.data
        flat = num.reshape(-1)
        for i in range(base.size):
            idx = np.unravel_index(i, base.shape)
            orig = base[idx]
            base[idx] = orig + eps
            plus = scalar(*inputs)
            base[idx] = orig - eps
            minus = scalar(*inputs)
            base[idx] = orig
            flat[i] = (plus - minus) / (2 * eps)
        bad = np.abs(ana - num) > atol + rtol * np.abs(num)
        if np.any(bad):
            i = int(np.argmax(np.abs(ana - num) - rtol * np.abs(num)))
            idx = np.unravel_index(i, t.shape)
            msg = (
                f"gradcheck: input {inputs.index(t)} element {idx}: analytical {ana[idx]!r} "
                f"vs numerical {num[idx]!r} (max |diff| {np.max(np.abs(ana - num)):.3e}, "
                f"{int(bad.sum())} of {bad.size} elements outside atol={atol}, rtol={rtol})"
            )
            if raise_exception:
                raise GradcheckError(msg)
            return False
    return True


def gradgradcheck(
    fn,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    seed: int = 0,
) -> bool:
    """Check second derivatives: gradcheck of ``x -> d sum(v * fn(x)) / dx`` built with create_graph."""
    np = require_numpy("gradgradcheck")
    inputs = _check_inputs(inputs)
    rng = np.random.default_rng(seed + 1)
    outs = _as_outputs(fn(*inputs))
    weights = [Tensor(rng.standard_normal(o.shape)) for o in outs]
    targets_idx = [i for i, t in enumerate(inputs) if t.requires_grad]

    def first_grads(*xs):
        outs = [o for o in _as_outputs(fn(*xs))]
        ts = [xs[i] for i in targets_idx]
        gs = _grad(outs, ts, grad_outputs=weights, create_graph=True, allow_unused=True)
        return [g if g is not None else Tensor(np.zeros(t.shape)) for g, t in zip(gs, ts)]

    return gradcheck(first_grads, inputs, eps=eps, atol=atol, rtol=rtol, raise_exception=raise_exception, seed=seed + 2)

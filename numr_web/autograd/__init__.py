"""Reverse-mode autograd over NumPy, CuPy and WebGPU arrays, to any order."""

from numr_web.autograd.engine import grad
from numr_web.autograd.function import Function, enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from numr_web.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck
from numr_web.autograd.tensor import Tensor

__all__ = [
    "Tensor",
    "Function",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "GradcheckError",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
]

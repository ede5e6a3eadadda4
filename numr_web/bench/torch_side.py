"""PyTorch's GroupNorm forward and backward, timed beside numr_web's on the same device (``--compare torch``)."""

from __future__ import annotations

import math

import numpy as np

from numr_web.bench.timing import seconds_per_call, wall_timer


class TorchSide:
    """PyTorch on the same device as the backend under test (CPU, or the GPU for --backend cuda)."""

    def __init__(self, threads, layout, device="cpu"):
        import torch

        self.torch = torch
        if threads:
            torch.set_num_threads(threads)
        self.layout = layout
        self.device = "cuda" if device == "cuda" else "cpu"
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--compare torch with --backend cuda needs a CUDA build of torch and a GPU")

    def timer(self, fn, repeat, warmup=1):
        if self.device == "cpu":
            return wall_timer(fn, repeat, warmup)
        return seconds_per_call(fn, repeat, warmup, synchronize=self.torch.cuda.synchronize, events=self._cuda_events)

    def _cuda_events(self):
        cuda = self.torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)

        def elapsed():
            end.synchronize()
            return start.elapsed_time(end) / 1e3

        return start.record, end.record, elapsed

    def setup(self, x, w, b, dy, groups, eps):
        torch = self.torch
        fmt = torch.channels_last if self.layout == "nhwc" and x.ndim == 4 else torch.contiguous_format

        def to(a):
            from numr_web.dtypes import BFLOAT16

            if a.dtype == BFLOAT16:  # torch cannot read ml_dtypes' bfloat16
                return torch.from_numpy(np.ascontiguousarray(a.astype(np.float32))).to(self.device, torch.bfloat16)
            return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

        tx = to(x).contiguous(memory_format=fmt)
        tdy = to(dy).contiguous(memory_format=fmt)
        tw, tb = to(self.params_like(w, x)), to(self.params_like(b, x))
        n, c = x.shape[:2]
        hw = math.prod(x.shape[2:])
        _, mean, rstd = torch.ops.aten.native_group_norm(tx, tw, tb, n, c, hw, groups, eps)

        def fwd():
            torch.nn.functional.group_norm(tx, groups, tw, tb, eps)

        def bwd():
            torch.ops.aten.native_group_norm_backward(tdy, tx, mean, rstd, tw, n, c, hw, groups, [True, True, True])

        return fwd, bwd

    def params_like(self, param, x):
        """``param`` (numr_web's float32 weight or bias) in the dtype torch takes beside ``x``: float32
        where torch mixes it with 16-bit x (its CPU kernels), else x's dtype (float64 x refuses float32
        parameters: "mixed dtype (CPU): all inputs must share same datatype")."""
        if param.dtype == x.dtype or (self.device == "cpu" and x.dtype.itemsize == 2):
            return param
        return param.astype(x.dtype)

    def version(self):
        return f"torch {self.torch.__version__}, {self.torch.get_num_threads()} threads"

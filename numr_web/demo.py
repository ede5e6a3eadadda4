"""``numr-web demo``: GroupNorm's per-group statistics and gradients on a sample tensor."""

from __future__ import annotations

import numpy as np


def run_demo(device: str = "cpu", num_groups: int = 3, seed: int = 0) -> int:
    import numr_web

    rng = np.random.default_rng(seed)
    n, c, h, w = 2, 6, 4, 4
    # each group gets its own offset and spread, so the statistics differ visibly
    scale = np.repeat(np.linspace(0.5, 3.0, num_groups), c // num_groups) if c % num_groups == 0 else np.ones(c)
    shift = np.repeat(np.linspace(-5.0, 5.0, num_groups), c // num_groups) if c % num_groups == 0 else np.zeros(c)
    x_np = rng.standard_normal((n, c, h, w)) * scale[None, :, None, None] + shift[None, :, None, None]
    x_np = x_np.astype(np.float32)
    weight_np = np.linspace(0.5, 1.5, c).astype(np.float32)
    bias_np = np.linspace(-0.2, 0.2, c).astype(np.float32)
    target_np = rng.standard_normal((n, c, h, w)).astype(np.float32)

    x = numr_web.Tensor(numr_web.to_device(x_np, device), requires_grad=True)
    weight = numr_web.Tensor(numr_web.to_device(weight_np, device), requires_grad=True)
    bias = numr_web.Tensor(numr_web.to_device(bias_np, device), requires_grad=True)
    target = numr_web.Tensor(numr_web.to_device(target_np, device))

    y = numr_web.group_norm(x, num_groups, weight, bias, eps=1e-5)
    _, mean, rstd = numr_web.ops.group_norm_forward(x.data, weight.data, bias.data, num_groups, 1e-5)
    loss = ((y - target) ** 2).mean()
    loss.backward()

    mean, rstd = numr_web.to_numpy(mean), numr_web.to_numpy(rstd)
    y_np = numr_web.to_numpy(y)
    dx = numr_web.to_numpy(x.grad)
    print(
        f"GroupNorm of x{tuple(x.shape)} float32 on {device!r}, {num_groups} groups of "
        f"{c // num_groups} channels, eps=1e-5"
    )
    print(f"loss = mean((y - target)^2) = {loss.item():.6f}\n")
    print(" n  g | mean        std (1/rstd) | y mean   y std  | |dL/dx| group  sum dL/dx")
    cpg = c // num_groups
    for i in range(n):
        for g in range(num_groups):
            ys = y_np[i, g * cpg : (g + 1) * cpg]
            gs = dx[i, g * cpg : (g + 1) * cpg]
            print(
                f"{i:2d} {g:2d} | {mean[i, g]:+10.5f}  {1 / rstd[i, g]:10.5f}  | {ys.mean():+7.4f} {ys.std():7.4f} "
                f"| {np.sqrt((gs**2).sum()):10.6f}   {gs.sum():+.2e}"
            )
    print("\nper channel:   weight   bias    dL/dweight   dL/dbias")
    dw, db = numr_web.to_numpy(weight.grad), numr_web.to_numpy(bias.grad)
    for ch in range(c):
        print(f"  channel {ch}: {weight_np[ch]:7.3f} {bias_np[ch]:+7.3f}   {dw[ch]:+10.6f}  {db[ch]:+10.6f}")
    print("\nThe gradient of each group sums to ~0: GroupNorm's output does not move when a group's inputs shift.")
    return 0

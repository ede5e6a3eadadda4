"""The Explorer's generated input and the checks of its controls, NumPy-free (Python's ``random`` and ``array``).

Sample ``n`` of a generated x depends on (seed, n) and the distribution controls only, so a batch change keeps
the first samples' values.  Every channel has its own offset and scale (``channel_spread``), so normalization
visibly changes something; the spatial pattern is noise or a structure a learner can recognise in the images:
smooth blobs, edges or stripes.
"""

from __future__ import annotations

import array
import math
import numbers
import random

DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("nchw", "nhwc")
GRAD_MODES = ("ones", "random", "loss", "painted")
PATTERNS = ("blobs", "edges", "stripes", "noise")
CHOICES = {"dtype": DTYPES, "memory_layout": LAYOUTS, "grad_mode": GRAD_MODES, "pattern": PATTERNS}
DEFAULT_SHAPE = (2, 32, 16, 16)
MAX_BATCH = 32
#: how much of a structured pattern is noise
GRAIN = 0.15


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def plane(spatial) -> tuple[int, int]:
    """The (rows, columns) a sample's channel is drawn as: the last spatial axis across, the others down."""
    if not spatial:
        return 1, 1
    return math.prod(spatial[:-1]), spatial[-1]


def channel_params(count, spread, seed):
    """Per channel (offset shift, scale factor): offsets spread * N(0, 1), scales exp(0.35 * spread * N(0, 1))."""
    rng = random.Random(seed * 1_000_003 + 999_983)
    return [(spread * rng.gauss(0.0, 1.0), math.exp(0.35 * spread * rng.gauss(0.0, 1.0))) for _ in range(count)]


def _pattern_values(kind, rng, rows, cols):
    """One channel's values of unit size in ``kind``'s pattern, row-major over rows x cols."""
    gauss = rng.gauss
    if kind == "noise":
        return [gauss(0.0, 1.0) for _ in range(rows * cols)]
    size = max(rows, cols)
    if kind == "blobs":
        bumps = [
            (rng.uniform(0, rows), rng.uniform(0, cols), rng.uniform(0.12, 0.3) * size, rng.choice((-1.0, 1.0)))
            for _ in range(3)
        ]
        out = []
        for i in range(rows):
            for j in range(cols):
                v = 0.0
                for ci, cj, r, a in bumps:
                    v += a * math.exp(-((i - ci) ** 2 + (j - cj) ** 2) / (2 * r * r))
                out.append(1.5 * v + GRAIN * gauss(0.0, 1.0))
        return out
    theta = rng.uniform(0, math.pi)
    ct, st = math.cos(theta), math.sin(theta)
    if kind == "edges":
        ci, cj = rng.uniform(0.25, 0.75) * rows, rng.uniform(0.25, 0.75) * cols
        return [
            (1.0 if (i - ci) * ct + (j - cj) * st > 0 else -1.0) + GRAIN * gauss(0.0, 1.0)
            for i in range(rows)
            for j in range(cols)
        ]
    period = rng.uniform(3.0, 8.0)
    phase = rng.uniform(0, 2 * math.pi)
    w = 2 * math.pi / period
    return [
        math.sqrt(2.0) * math.sin(w * (i * ct + j * st) + phase) + GRAIN * gauss(0.0, 1.0)
        for i in range(rows)
        for j in range(cols)
    ]


def sample(n, shape, *, offset, scale, spread, outlier, seed, pattern):
    """Sample ``n`` of the generated x, ``shape`` = (C, *spatial), as float32 values in C order."""
    c_count = shape[0]
    rows, cols = plane(shape[1:])
    params = channel_params(c_count, spread, seed)
    rng = random.Random(seed * 1_000_003 + n)
    out = array.array("f")
    for c in range(c_count):
        shift, factor = params[c]
        mu, sd = offset + shift, scale * factor
        if c == outlier:
            mu, sd = mu + 8.0 * scale, 10.0 * scale
        out.extend(mu + sd * v for v in _pattern_values(pattern, rng, rows, cols))
    return out


# ---- checks: every message names the argument ------------------------------------------------------------
def real(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return value


def num_groups_type(num_groups):
    if isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral):
        raise TypeError(f"num_groups: expected a positive integer, got {num_groups!r}")
    if num_groups <= 0:
        raise ValueError(f"num_groups: expected a positive integer, got {num_groups}")
    return int(num_groups)


def choice(name, value):
    choices = CHOICES[name]
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}, got {value!r}")


def check_controls(w, base_shape, device):
    """Raises ValueError naming the first control of ``w`` (the Explorer) out of range."""
    c = base_shape[1]
    g = w.num_groups
    if g <= 0 or c % g:
        raise ValueError(f"num_groups: {g} does not divide the {c} channels; choose one of {divisors(c)}")
    if not (w.eps >= 0 and math.isfinite(w.eps)):
        raise ValueError(f"eps: expected a non-negative finite number, got {w.eps}")
    if not (w.scale > 0 and math.isfinite(w.scale)):
        raise ValueError(f"scale: expected a positive finite number, got {w.scale}")
    if not (w.channel_spread >= 0 and math.isfinite(w.channel_spread)):
        raise ValueError(f"channel_spread: expected a non-negative number, got {w.channel_spread}")
    if not math.isfinite(w.offset):
        raise ValueError(f"offset: expected a finite number, got {w.offset}")
    if not -1 <= w.outlier_channel < c:
        raise ValueError(f"outlier_channel: expected -1 (none) or a channel in 0..{c - 1}, got {w.outlier_channel}")
    top = max(MAX_BATCH, base_shape[0])
    if not 1 <= w.batch <= top:
        raise ValueError(f"batch: expected 1..{top}, got {w.batch}")
    for name in CHOICES:
        choice(name, getattr(w, name))
    if w.memory_layout == "nhwc" and len(base_shape) < 3:
        raise ValueError("memory_layout: 'nhwc' needs an input with spatial axes (N, C, *spatial)")
    if w.grad_mode == "painted" and w.dy_paint:
        per_sample = math.prod(base_shape[1:])
        if len(w.dy_paint) != 4 * per_sample:
            raise ValueError(
                f"dy_paint: expected {4 * per_sample} bytes (float32 of shape {tuple(base_shape[1:])}), "
                f"got {len(w.dy_paint)}"
            )
    if device == "webgpu" and w.dtype not in DTYPES:
        raise ValueError(f"dtype: WebGPU holds {', '.join(DTYPES)}")

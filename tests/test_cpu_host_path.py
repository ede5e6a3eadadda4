"""The op layer's glance at plain NumPy calls (issue 26: the per-call host work in front of the CPU kernels).

A call on plain float NumPy arrays whose every argument passes at a glance goes straight to the backend; any
other call takes the full checks.  The glance must change nothing a user sees: the same numbers, bitwise, and
for anything it does not accept, the full checks' error.  Each case below runs with the glance and with it
switched off, and the two must agree.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import numr_web
from numr_web.dtypes import dtype_name
from numr_web.memory_layout import as_channels_last

gn = importlib.import_module("numr_web.ops.group_norm")

N, C, H, W, G = 2, 8, 5, 5, 4


@pytest.fixture(params=["cpu-numpy", "cpu-fused"])
def path(request, cpu_runner):
    return cpu_runner


def _both(monkeypatch, call):
    """(result or exception with the glance, the same without it)."""
    outcomes = []
    for glance in (True, False):
        with monkeypatch.context() as m:
            if not glance:
                m.setattr(gn, "_numpy_layout", lambda *a, **k: None)
            try:
                outcomes.append(call())
            except Exception as exc:  # noqa: BLE001 - the point is to compare what each way raises
                outcomes.append(exc)
    return outcomes


def _same(a, b):
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b) and str(a) == str(b), (a, b)
        return
    for u, v in zip(a, b, strict=True):
        if u is None or v is None:
            assert u is None and v is None
            continue
        assert u.dtype == v.dtype and u.shape == v.shape and u.strides == v.strides
        assert np.array_equal(u, v, equal_nan=True) and u.tobytes() == v.tobytes()


def _arrays(rng, dtype=np.float32):
    x = (rng.standard_normal((N, C, H, W)) * 3 + 1).astype(dtype)
    dy = rng.standard_normal((N, C, H, W)).astype(dtype)
    w = rng.standard_normal(C).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    return x, dy, w, b


def _accepted_calls(rng):
    x, dy, w, b = _arrays(rng)
    x_cl, dy_cl = as_channels_last(x), as_channels_last(dy)
    x16 = x.astype(np.float16)
    return {
        "nchw": (x, dy, w, b, G, 1e-5, None),
        "channels-last": (x_cl, dy_cl, w, b, G, 1e-5, None),
        "dy in the other layout": (x, dy_cl, w, b, G, 1e-5, None),
        "no affine": (x, dy, None, None, G, 1e-5, None),
        "float64 weight": (x, dy, w.astype(np.float64), b, G, 1e-5, None),
        "float16": (x16, dy.astype(np.float16), w, b, G, 1e-5, None),
        "silu": (x, dy, w, b, G, 1e-5, "silu"),
        "SiLU spelled in capitals": (x, dy, w, b, G, 1e-5, "SiLU"),
        "strided x": (x[:, :, ::1, ::-1], dy, w, b, G, 1e-5, None),
        "eps an int": (x, dy, w, b, G, 0, None),
        "num_groups a NumPy int": (x, dy, w, b, np.int64(G), 1e-5, None),
        "weight as a list": (x, dy, list(map(float, w)), b, G, 1e-5, None),
    }


@pytest.mark.parametrize("case", list(_accepted_calls(np.random.default_rng(0))))
def test_glance_gives_the_full_checks_numbers(path, rng, monkeypatch, case):
    x, dy, w, b, g, eps, act = _accepted_calls(rng)[case]
    fwd = _both(monkeypatch, lambda: numr_web.ops.group_norm_forward(x, w, b, g, eps, activation=act))
    _same(*fwd)
    _, mean, rstd = fwd[0]
    bwd = _both(monkeypatch, lambda: numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, g, bias=b, activation=act))
    _same(*bwd)


def _refused_calls(rng):
    x, dy, w, b = _arrays(rng)
    _, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, G, 1e-5)
    return {
        "weight of C+1": ("fwd", (x, np.ones(C + 1, np.float32), b, G, 1e-5, None)),
        "bias of shape (C, 1)": ("fwd", (x, w, np.ones((C, 1), np.float32), G, 1e-5, None)),
        "groups not dividing C": ("fwd", (x, w, b, 3, 1e-5, None)),
        "groups zero": ("fwd", (x, w, b, 0, 1e-5, None)),
        "groups a bool": ("fwd", (x, w, b, True, 1e-5, None)),
        "eps negative": ("fwd", (x, w, b, G, -1.0, None)),
        "eps NaN": ("fwd", (x, w, b, G, float("nan"), None)),
        "eps infinite": ("fwd", (x, w, b, G, float("inf"), None)),
        "activation relu": ("fwd", (x, w, b, G, 1e-5, "relu")),
        "x integer": ("fwd", (x.astype(np.int32), w, b, G, 1e-5, None)),
        "x big-endian": ("fwd", (x.astype(">f4"), w, b, G, 1e-5, None)),
        "x one-dimensional": ("fwd", (x.reshape(-1), w, b, G, 1e-5, None)),
        "weight integer": ("fwd", (x, np.ones(C, np.int64), b, G, 1e-5, None)),
        "dy of another shape": ("bwd", (dy[:1], x, mean, rstd, w, b, G, None)),
        "mean of (N*G,)": ("bwd", (dy, x, mean.reshape(-1), rstd, w, b, G, None)),
        "rstd of (G, N)": ("bwd", (dy, x, mean, rstd.T.copy(), w, b, G, None)),
        "mean integer": ("bwd", (dy, x, mean.astype(np.int32), rstd, w, b, G, None)),
        "dy big-endian": ("bwd", (dy.astype(">f4"), x, mean, rstd, w, b, G, None)),
    }


@pytest.mark.parametrize("case", list(_refused_calls(np.random.default_rng(0))))
def test_what_the_glance_refuses_gets_the_full_checks_error(path, rng, monkeypatch, case):
    kind, args = _refused_calls(rng)[case]
    if kind == "fwd":
        x, w, b, g, eps, act = args
        outcomes = _both(monkeypatch, lambda: numr_web.ops.group_norm_forward(x, w, b, g, eps, activation=act))
    else:
        dy, x, mean, rstd, w, b, g, act = args
        outcomes = _both(
            monkeypatch,
            lambda: numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, g, bias=b, activation=act),
        )
    assert isinstance(outcomes[1], Exception), f"{case}: the full checks accept it"
    _same(*outcomes)


def test_the_glance_takes_the_common_calls(rng, monkeypatch):
    """The glance is taken where it should be (else it saves nothing): dense NCHW and channels-last
    NumPy calls with or without affine parameters, forward and backward."""
    seen = []
    real = gn._numpy_layout

    def spy(*args):
        seen.append(real(*args))
        return seen[-1]

    monkeypatch.setattr(gn, "_numpy_layout", spy)
    x, dy, w, b = _arrays(rng)
    for xs, dys in ((x, dy), (as_channels_last(x), as_channels_last(dy))):
        for ws, bs in ((w, b), (None, None)):
            _, mean, rstd = numr_web.ops.group_norm_forward(xs, ws, bs, G, 1e-5)
            numr_web.ops.group_norm_backward(dys, xs, mean, rstd, ws, G, bias=bs)
    assert seen == ["nchw"] * 4 + ["nhwc"] * 4


def test_dtype_names_stay_right_when_remembered():
    """dtype_name remembers the names of dtype objects: asked twice, each gives its own name, byte order
    included, and equal objects of other kinds (a scalar type, Python's float) give theirs."""
    cases = [
        (np.dtype(np.float32), "float32"),
        (np.dtype(">f4"), "float32 (non-native byte order)"),
        (np.float32, "float32"),
        (np.dtype(np.float64), "float64"),
        (float, "float64"),
        (np.dtype(np.int64), "int64"),
        ("Float", "float64"),
    ]
    for _ in range(2):
        assert [dtype_name(d) for d in cases for d in [d[0]]] == [name for _, name in cases]

"""Shared fixtures: which backends run, and how a missing one is treated.

Under CI=true a component this machine can have (Numba, a WebGPU adapter on
lavapipe) FAILS the test when missing; only a missing CUDA GPU skips.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import numr_web
from numr_web.backends import get_backend

IN_CI = os.environ.get("CI", "").lower() == "true"

# device parameter -> (device, cpu path)
TARGETS = {
    "cpu-numpy": ("cpu", "numpy"),
    "cpu-fused": ("cpu", "fused"),
    "webgpu": ("webgpu", None),
    "cuda": ("cuda", None),
}


def require_torch():
    """torch, or a skip where it is not installed (README: `pip install torch==2.13.0`); under CI=true,
    where .ci/run installs it, a failure."""
    try:
        import torch
    except ImportError as e:
        msg = f"torch is not importable ({e}); pip install torch==2.13.0 (README, the tests)"
        if IN_CI:
            pytest.fail(msg + "; .ci/run installs it, so it is required under CI=true")
        pytest.skip(msg)
    return torch


def require_target(target: str):
    device, path = TARGETS[target]
    if path == "fused":
        ok, why = get_backend("cpu").fused_available()
    else:
        be = get_backend(device, require=False)
        ok, why = be.available()
    if ok:
        return
    if device == "cuda":
        pytest.skip(f"no usable CUDA device here: {why}")
    if IN_CI:
        pytest.fail(f"{target} is required under CI=true but is not usable: {why}")
    pytest.skip(f"{target} not usable here: {why}")


class Runner:
    """Runs the public API on one target and brings results back to NumPy."""

    def __init__(self, target):
        self.target = target
        self.device, self.path = TARGETS[target]

    def put(self, a):
        return None if a is None else numr_web.to_device(a, self.device)

    def get(self, a):
        return None if a is None else numr_web.to_numpy(a)

    def __repr__(self):
        return f"Runner({self.target})"


@pytest.fixture(params=list(TARGETS))
def runner(request):
    require_target(request.param)
    r = Runner(request.param)
    if r.path is None:
        yield r
        return
    with get_backend("cpu").using_path(r.path):  # the CPU path for this test only
        yield r


@pytest.fixture(params=["cpu-numpy", "cpu-fused"])
def cpu_runner(request):
    require_target(request.param)
    with get_backend("cpu").using_path(TARGETS[request.param][1]):
        yield Runner(request.param)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)

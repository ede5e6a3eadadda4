"""The same WGSL on a second WebGPU implementation: Dawn (Chromium's), with Tint.

Every WGSL variant a set of GroupNorm, elementwise, sum and copy calls makes on
the native adapter (dtypes, layouts, SiLU, affine, both work-shape planners) is
recorded and compiled in Node through the npm ``webgpu`` package (Dawn + Tint,
on SwiftShader, the browser's software adapter): shader module plus compute
pipeline with the backend's bind group layout.  Tint is stricter than wgpu's
naga (it rejected a constant inf that naga took), and the browser runs these
same sources.

Needs Node, ``npm install --prefix tests/dawn`` and SwiftShader's Vulkan driver
(Debian's chromium package ships it); skipped when they are missing, except
under CI=true, where .ci/run installs them and their absence fails.  (Running
the kernels there too was tried: dawn.node aborted in SwiftShader's thread pool
on this machine, so only compilation is checked.)
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
from webgpu_support import nhwc, wg  # noqa: F401

HERE = pathlib.Path(__file__).parent / "dawn"
ICD_CANDIDATES = [os.environ.get("NUMR_WEB_SWIFTSHADER_ICD", ""), "/usr/lib/chromium/vk_swiftshader_icd.json"]


def _dawn_env():
    node = shutil.which("node")
    icd = next((p for p in ICD_CANDIDATES if p and os.path.exists(p)), None)
    if node is None or icd is None or not (HERE / "node_modules" / "webgpu").is_dir():
        msg = "Dawn check needs node, `npm ci --prefix tests/dawn` and SwiftShader's ICD (apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg + "; .ci/run installs them, so they are required under CI=true")
        pytest.skip(msg)
    return node, dict(os.environ, VK_ICD_FILENAMES=icd)


class Recorder:
    """A transport that forwards to wgpu-py and records every pipeline's WGSL."""

    def __init__(self, inner):
        self.inner = inner
        self.variants = {}
        for name in dir(inner):
            if not name.startswith("_") and name != "create_pipeline":
                setattr(self, name, getattr(inner, name))

    def create_pipeline(self, dev, code, entry, kinds):
        self.variants[(code, entry)] = {"name": f"v{len(self.variants)}", "code": code, "entry": entry, "kinds": kinds}
        return self.inner.create_pipeline(dev, code, entry, kinds)


def _scenarios(be, rng):
    from numr_web.backends.webgpu import device
    from numr_web.bench.copies import COPY_VARIANTS, device_copy
    from numr_web.dtypes import BFLOAT16

    ctx = device.context()
    for shapes in ("cpu", "gpu"):
        ctx.cpu_adapter = shapes == "cpu"
        cases = [
            ((2, 16, 8, 8), 4, "nchw"),
            ((2, 12, 5, 5), 4, "nchw"),
            ((2, 16, 6, 6), 4, "nhwc"),
            ((2, 6, 5, 3), 3, "nhwc"),
            ((3, 10), 5, "nchw"),
        ]
        for dtype in (np.float32, np.float16, BFLOAT16):
            for shape, G, layout in cases:
                for act in (None, "silu"):
                    for affine in (True, False):
                        x = rng.standard_normal(shape).astype(dtype)
                        if layout == "nhwc":
                            x = nhwc(x)
                        xd = be.from_numpy(x)
                        w = be.from_numpy(np.ones(shape[1], np.float32)) if affine else None
                        y, m, r = be.group_norm_forward(xd, w, w, G, 1e-5, act, layout=layout)
                        be.group_norm_backward(xd, xd, m, r, w, w, G, act, layout=layout)
            a = be.from_numpy(rng.standard_normal((3, 4, 5)).astype(dtype))
            b = be.from_numpy(rng.uniform(1, 2, (4, 1)).astype(dtype))
            _ = (
                ((a + b) * 2.0 - a / b) ** 2 + (-a) + 2.0**a,
                a.sum(axis=(0, 2)),
                a.mean(),
                a.astype(np.float32),
                a.astype(BFLOAT16),
                a.astype(np.float16),
                be.full_like(a, 1.0),
                a + a,
            )
    big = be.from_numpy(rng.standard_normal(300_000).astype(np.float32))
    big.sum()
    for v in COPY_VARIANTS:
        device_copy(big, v)
    from numr_web.bench import floor

    for dtype in (np.float32, np.float16, BFLOAT16):  # the benchmark's floor kernels, every storage format
        f = be.from_numpy(rng.standard_normal((2, 8, 4, 4)).astype(dtype))
        for fn in floor.timed_callables(f, f, 4).values():
            fn()


def test_every_wgsl_variant_compiles_on_dawn(wg, tmp_path):
    node, env = _dawn_env()
    from numr_web.backends.webgpu import configure, transport_wgpu

    rec = Recorder(transport_wgpu)
    configure(transport=rec, want_f16=False)  # SwiftShader has no shader-f16: the packed path
    try:
        _scenarios(wg, np.random.default_rng(5))
    finally:
        configure()
    path = tmp_path / "variants.json"
    path.write_text(json.dumps(list(rec.variants.values())))
    out = subprocess.run(
        [node, str(HERE / "compile.mjs"), str(path)], capture_output=True, text=True, timeout=300, env=env, cwd=HERE
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "swiftshader" in result["adapter"].lower(), result["adapter"]
    assert result["compiled"] == len(rec.variants) > 150
    assert result["problems"] == [], "\n".join(result["problems"][:20])


def test_pipeline_compile_times_command(wg):  # noqa: F811
    """scripts/pipeline-compile-times: a row per dtype, layout and activation, each pipeline's Dawn/SwiftShader compile
    time, totals that add up; a small channels-last sample compiles the fused plan's two pipelines, not six."""
    _dawn_env()
    script = HERE.parents[1] / "scripts" / "pipeline-compile-times"
    out = subprocess.run(
        [sys.executable, str(script), "--shape", "2,8,4,4", "--groups", "2", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "swiftshader" in out.stdout.lower()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.stdout.splitlines()[3:] if line[:2] == "| "]
    assert [r[0] for r in rows] == [
        f"{dt} {lay}{act}"
        for dt in ("float32", "float16", "bfloat16")
        for lay in ("nchw", "nhwc")
        for act in ("", " silu")
    ]
    for name, count, each, total in rows:
        times = [float(t.rsplit(" ", 1)[1]) for t in each.split(", ")] if int(count) else []
        assert len(times) == int(count) and all(t > 0 for t in times), name
        assert abs(sum(times) - float(total)) <= len(times) * 0.5 + 1, name  # rounded per pipeline
    nhwc = dict((r[0], r[2]) for r in rows)["float32 nhwc"]
    assert "group_norm_nhwc:forward" in nhwc and "group_norm_nhwc:backward" in nhwc and "split" not in nhwc
    bad = subprocess.run(
        [sys.executable, str(script), "--shape", "2,8,4,4", "--groups", "3"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--groups: 3 does not divide the 8 channels" in bad.stderr

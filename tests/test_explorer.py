"""The Explorer's Python side (no browser): its results buffer decodes to numr_web's own values."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

if os.environ.get("CI", "").lower() == "true":
    import anywidget  # noqa: F401  (under CI=true a missing anywidget fails: it is in the dev extra)
else:
    pytest.importorskip("anywidget", reason="the Explorer needs anywidget: pip install 'numr-web[widget]'")

from conftest import require_target  # noqa: E402

import numr_web  # noqa: E402
from numr_web import explorer as explorer_module  # noqa: E402
from numr_web.errors import ShapeMismatch  # noqa: E402
from numr_web.explorer import Explorer  # noqa: E402
from numr_web.explorer import widget as widget_module  # noqa: E402

DEVICES = {"cpu": "cpu-numpy", "webgpu": "webgpu"}


@pytest.fixture(params=list(DEVICES))
def device(request):
    require_target(DEVICES[request.param])
    return request.param


def decoded(e):
    out = {}
    for name, (shape, vals) in e.decode().items():
        out[name] = np.frombuffer(vals.tobytes(), dtype=np.float32).reshape(shape)
    return out


def f32(a):
    return np.ascontiguousarray(numr_web.to_numpy(a), dtype=np.float32)


def check_against_numr_web(e):
    """The results equal numr_web's forward and backward on the Explorer's own inputs, bit for bit."""
    r = decoded(e)
    x, dy, w, b = e.inputs()
    g = e.num_groups
    act = "silu" if e.silu else None
    y, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, g, e.eps, activation=act)
    dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, g, bias=b, activation=act)
    for name, want in dict(x=x, y=y, dy=dy, mean=mean, rstd=rstd, dx=dx, dweight=dw, dbias=db).items():
        np.testing.assert_array_equal(r[name], f32(want), err_msg=name)
    s_mean, s_rstd = e.stats()
    np.testing.assert_array_equal(f32(s_mean), r["mean"])
    np.testing.assert_array_equal(f32(s_rstd), r["rstd"])
    for got, name in zip(e.grads(), ("dx", "dweight", "dbias")):
        np.testing.assert_array_equal(f32(got), r[name], err_msg=name)
        assert numr_web.backends.device_of(got) == e._dev
    # the extras, against float64 NumPy on the same float32 values
    n, c = r["x"].shape[:2]
    x64, dx64 = r["x"].astype(np.float64), r["dx"].astype(np.float64)
    xg, dxg = x64.reshape(n, g, -1), dx64.reshape(n, g, -1)
    xhat = (xg - r["mean"][..., None]) * r["rstd"][..., None]
    scale = max(1.0, float(np.abs(dxg).sum(axis=2).max()))
    np.testing.assert_allclose(r["dx_sum"], dxg.sum(axis=2), rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(r["dx_norm"], np.sqrt((dxg * dxg).sum(axis=2)), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(
        r["dx_dot_xhat"], (dxg * xhat).sum(axis=2), rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(dxg * xhat).max()))
    )
    xc = x64.reshape(n, c, -1)
    np.testing.assert_allclose(r["bn_mean"], xc.mean(axis=(0, 2)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r["bn_var"], xc.var(axis=(0, 2)), rtol=1e-4, atol=1e-6)
    return r


CASES = [
    dict(num_groups=32),
    dict(num_groups=4, dtype="float16"),
    dict(num_groups=8, dtype="bfloat16", memory_layout="nhwc"),
    dict(num_groups=1, memory_layout="nhwc", silu=True),
    dict(num_groups=16, silu=True, grad_mode="loss"),
    dict(num_groups=2, grad_mode="ones", dtype="float16", memory_layout="nhwc"),
    dict(num_groups=32, offset=1e3, channel_spread=2.0, outlier_channel=3, grad_mode="loss"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_generated_input_matches_numr_web(device, case):
    e = Explorer(device=device, **case)
    assert e.status == "ok", e.status
    assert e.shape == [2, 32, 16, 16]
    r = check_against_numr_web(e)
    assert r["mean"].shape == (2, case["num_groups"])
    assert e.results_meta["version"] == 1
    # the controls after construction give the same values as at construction
    e2 = Explorer(device=device, num_groups=case["num_groups"])
    with e2.hold_trait_notifications():
        for k, v in case.items():
            setattr(e2, k, v)
    assert e2.status == "ok", e2.status
    for name, a in decoded(e2).items():
        np.testing.assert_array_equal(a, r[name], err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_given_input(device, dtype, layout):
    rng = np.random.default_rng(5)
    x = (3.0 + rng.standard_normal((2, 8, 4, 4))).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    e = Explorer(
        x, num_groups=4, weight=w, bias=b, device=device, dtype=dtype, memory_layout=layout, grad_mode="random"
    )
    assert e.status == "ok", e.status
    r = check_against_numr_web(e)
    want_x = x.astype(np.float16).astype(np.float32) if dtype == "float16" else x
    np.testing.assert_array_equal(r["x"], want_x)
    host = want_x.astype(dtype)
    if layout == "nhwc":
        host = numr_web.memory_layout.as_channels_last(host)
    xin = numr_web.to_device(host, device)  # the same layout: the same summation order
    _, mean, rstd = numr_web.ops.group_norm_forward(xin, numr_web.to_device(w, device), None, 4)
    np.testing.assert_array_equal(r["mean"], f32(mean))
    np.testing.assert_array_equal(r["rstd"], f32(rstd))


def test_given_device_arrays_and_tensor(device):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 8, 3, 5)).astype(np.float32)
    xd = numr_web.to_device(numr_web.memory_layout.as_channels_last(x), device)
    e = Explorer(numr_web.Tensor(xd), num_groups=2)
    assert e._dev == device and e.memory_layout == "nhwc"
    check_against_numr_web(e)
    np.testing.assert_array_equal(decoded(e)["x"], x)


def test_float64_input_is_rounded_to_float32(device):
    x = np.random.default_rng(3).standard_normal((2, 4, 5))
    e = Explorer(x, num_groups=2, weight=np.ones(4), device=device)
    assert e.status == "ok" and e.dtype == "float32"
    np.testing.assert_array_equal(decoded(e)["x"], x.astype(np.float32))
    check_against_numr_web(e)


def test_num_groups_change_recomputes(device):
    e = Explorer(device=device, num_groups=32)
    v = e.results_meta["version"]
    seen = []
    e.observe(lambda ch: seen.append(ch["new"]["version"]), "results_meta")
    e.num_groups = 4
    assert e.status == "ok" and e.results_meta["version"] == v + 1 and seen == [v + 1]
    assert decoded(e)["mean"].shape == (2, 4)
    check_against_numr_web(e)
    e.sample = 1  # draws only: no recompute
    e.selected = [1, 2]
    assert e.results_meta["version"] == v + 1


def test_what_is_kept_between_recomputes_never_goes_stale(device):
    e = Explorer(device=device, num_groups=8)
    first = decoded(e)
    steps = [("seed", 1), ("num_groups", 4), ("dtype", "float16"), ("memory_layout", "nhwc"), ("grad_mode", "loss")]
    steps += [("grad_mode", "ones"), ("offset", 5.0), ("silu", True), ("eps", 0.1)]
    for name, value in steps:
        setattr(e, name, value)
        assert e.status == "ok", (name, e.status)
        check_against_numr_web(e)
        fresh = Explorer(
            device=device, num_groups=e.num_groups, **{k: getattr(e, k) for k in _CONTROLS if k != "num_groups"}
        )
        for k, a in decoded(fresh).items():
            np.testing.assert_array_equal(decoded(e)[k], a, err_msg=f"{k} after {name}={value}")
    e2 = Explorer(device=device, num_groups=8)
    for k, a in decoded(e2).items():
        np.testing.assert_array_equal(a, first[k])


#: the controls a fresh Explorer is given to compare with one whose controls moved
_CONTROLS = tuple(name for name in explorer_module.RECOMPUTE if name != "max_samples")


def test_batch_keeps_first_samples_gn_stats_not_bn(device):
    e = Explorer(device=device, num_groups=8, channel_spread=1.0)
    before = decoded(e)
    e.batch = 5
    after = decoded(e)
    assert e.shape[0] == 5 and after["mean"].shape == (5, 8)
    np.testing.assert_array_equal(after["x"][:2], before["x"])
    np.testing.assert_array_equal(after["mean"][:2], before["mean"])
    np.testing.assert_array_equal(after["rstd"][:2], before["rstd"])
    assert not np.array_equal(after["bn_mean"], before["bn_mean"])
    assert not np.array_equal(after["bn_var"], before["bn_var"])
    e.batch = 1
    np.testing.assert_array_equal(decoded(e)["mean"], before["mean"][:1])


def test_batch_of_a_given_input(device):
    x = np.random.default_rng(1).standard_normal((2, 4, 3, 3)).astype(np.float32)
    e = Explorer(numr_web.to_device(x, device), num_groups=2)
    m2 = decoded(e)["mean"]
    e.batch = 3  # the given samples again in turn
    r = decoded(e)
    np.testing.assert_array_equal(r["x"], x[[0, 1, 0]])
    np.testing.assert_array_equal(r["mean"][:2], m2)
    check_against_numr_web(e)


def test_max_samples_limits_the_tensors_sent():
    e = Explorer(device="cpu", num_groups=4, batch=6, max_samples=2)
    r = decoded(e)
    assert r["x"].shape[0] == 2 and r["dx"].shape[0] == 2 and r["mean"].shape == (6, 4)
    assert e.shape[0] == 6
    e.max_samples = 0  # auto: as many samples as fit in SAMPLE_BUDGET elements per tensor
    assert decoded(e)["x"].shape[0] == 6  # (32, 16, 16): 8192 elements a sample
    big = Explorer(np.zeros((4, 64, 32, 32), np.float32), num_groups=8, device="cpu")
    r = decoded(big)
    assert r["x"].shape == (1, 64, 32, 32) and r["mean"].shape == (4, 8) and big.shape == [4, 64, 32, 32]


def test_results_layout_is_the_contract():
    e = Explorer(device="cpu", num_groups=4, eps=1e-3, silu=True)
    meta = e.results_meta
    assert set(meta) == {"version", "arrays", "eps", "dtype", "silu", "grad_mode"}
    assert (meta["eps"], meta["dtype"], meta["silu"]) == (1e-3, "float32", True)
    assert isinstance(e.results, bytes) and isinstance(e.input_data, bytes)
    changing = {"y", "mean", "rstd", "dx", "dweight", "dbias", "dx_norm", "dx_sum", "dx_dot_xhat"}
    fixed = {"x", "dy", "bn_mean", "bn_var", "weight", "bias"}
    assert set(meta["arrays"]) == changing | fixed
    ends = {"results": 0, "input_data": 0}
    for name, info in meta["arrays"].items():
        trait = info["trait"]
        assert trait == ("input_data" if name in fixed else "results"), name
        assert info["offset"] == ends[trait] and info["offset"] % 4 == 0
        ends[trait] += 4 * int(np.prod(info["shape"]))
    assert ends == {"results": len(e.results), "input_data": len(e.input_data)}
    state = e.get_state()
    assert isinstance(state["results"], (bytes, memoryview)) and isinstance(state["results_meta"], dict)


def test_a_g_change_sends_the_inputs_buffer_no_more():
    """x, dy and what depends on them alone travel in ``input_data``, which a G, eps or SiLU change leaves equal:
    traitlets (and so the comm) sees no change there; a seed change does."""
    e = Explorer(device="cpu", num_groups=4)
    sent = []
    e.observe(lambda ch: sent.append(ch["name"]), names=["results", "input_data"])
    e.num_groups = 8
    e.eps = 1e-2
    e.silu = True
    assert sent == ["results"] * 3
    e.seed = 5
    assert sent[-2:] == ["results", "input_data"]
    check_against_numr_web(e)


def test_a_dtype_or_layout_switch_generates_no_input_again(device, monkeypatch):
    """The generated x and the random dy depend on neither the dtype nor the layout control: a switch casts or
    transposes the kept values (generating the random dy alone took about 0.3 s at (4, 64, 32, 32)); a seed
    or batch change generates them again."""
    from numr_web.explorer import pipeline as pipeline_module

    made = []
    for module, name in ((pipeline_module, "random_dy"), (pipeline_module.inputs, "sample")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: made.append(_name) or _real(*a, **k))
    e = Explorer(device=device, num_groups=4, grad_mode="random")
    assert made.count("random_dy") == 1 and made.count("sample") == 2  # one x sample each of a batch of 2
    made.clear()
    for name, value in (
        ("dtype", "bfloat16"),
        ("memory_layout", "nhwc"),
        ("dtype", "float32"),
        ("memory_layout", "nchw"),
    ):
        setattr(e, name, value)
        assert e.status == "ok", e.status
        check_against_numr_web(e)
    assert made == []
    e.seed = 3
    assert made.count("random_dy") == 1 and made.count("sample") == 2
    e.batch = 3
    assert made.count("random_dy") == 2 and made.count("sample") == 5


def test_bad_arguments_raise_clear_errors():
    x = np.zeros((2, 8, 4), np.float32)
    with pytest.raises(TypeError, match="^x:"):
        Explorer("abc", device="cpu")
    with pytest.raises(ShapeMismatch, match="^x:"):
        Explorer(np.zeros(8, np.float32), device="cpu")
    with pytest.raises(TypeError, match="^x:.*int64"):
        Explorer(np.zeros((2, 8, 4), np.int64), device="cpu")
    with pytest.raises(ValueError, match="^num_groups:"):
        Explorer(x, num_groups=0, device="cpu")
    with pytest.raises(TypeError, match="^num_groups:"):
        Explorer(x, num_groups="4", device="cpu")
    with pytest.raises(ValueError, match="^eps:"):
        Explorer(x, num_groups=4, eps=-1.0, device="cpu")
    with pytest.raises(ValueError, match="^activation:"):
        Explorer(x, num_groups=4, activation="relu", device="cpu")
    with pytest.raises(ValueError, match="^device:"):
        Explorer(x, num_groups=4, device="tpu")
    with pytest.raises(ShapeMismatch, match="^weight:"):
        Explorer(x, num_groups=4, weight=np.ones(3, np.float32), device="cpu")
    with pytest.raises(TypeError, match="^bias:"):
        Explorer(x, num_groups=4, bias=[0.0] * 8, device="cpu")
    with pytest.raises(ValueError, match="^dtype:"):
        Explorer(x, num_groups=4, device="cpu", dtype="float64")


def test_num_groups_clamped_to_a_divisor_with_a_message():
    with pytest.warns(UserWarning, match="num_groups: 5 does not divide the 32 channels.*using 4"):
        e = Explorer(num_groups=5, device="cpu")
    assert e.num_groups == 4 and e.status == "ok"


def test_bad_control_values_set_status_and_never_raise():
    e = Explorer(device="cpu", num_groups=4)
    v = e.results_meta["version"]
    for name, value in [("num_groups", 5), ("scale", 0.0), ("dtype", "float64"), ("batch", 0), ("grad_mode", "x")]:
        old = getattr(e, name)
        setattr(e, name, value)
        assert e.status.startswith(f"error: {name}:"), e.status
        setattr(e, name, old)
        assert e.status == "ok"
    assert e.results_meta["version"] == v + 5


def test_async_recompute_where_blocking_is_unavailable(monkeypatch):
    """Where Python cannot block (Pyodide without JSPI) the recompute awaits its read-backs in a task."""
    require_target("webgpu")
    import numr_web.webgpu  # noqa: F401  (the submodule, also when this test runs alone)

    monkeypatch.setattr(widget_module, "_can_block", lambda: False)
    reads = []
    real = numr_web.webgpu.WebGPUArray.tobytes

    def no_blocking(self, order="C"):
        reads.append(self.shape)
        raise numr_web.webgpu.BlockingUnavailable("tobytes: blocking is unavailable; use await tobytes_async()")

    async def main():
        monkeypatch.setattr(numr_web.webgpu.WebGPUArray, "tobytes", no_blocking)
        e = Explorer(device="webgpu", num_groups=8)
        assert e.status == "computing"
        await e.wait()
        assert e.status == "ok", e.status
        e.num_groups = 2
        e.num_groups = 4  # the first change's task is cancelled
        await e.wait()
        monkeypatch.setattr(numr_web.webgpu.WebGPUArray, "tobytes", real)
        return e

    e = asyncio.run(main())
    assert not reads
    assert e.status == "ok" and decoded(e)["mean"].shape == (2, 4)
    check_against_numr_web(e)


SWITCHES_COMPILE_NOTHING = """
import asyncio, itertools, json
from numr_web.backends.webgpu import device
from numr_web.explorer import Explorer

async def main():
    ctx = await device.context_async()
    prepared, used = set(), set()
    ask, pipeline = ctx.prepare_pipelines, ctx.pipeline

    async def prepare_pipelines(keys, concurrency=None):
        prepared.update(k for k in keys if k not in ctx.pipelines)
        return await ask(keys, concurrency)

    def use(kernel, entry, dtypes, constants):
        used.add(ctx.pipeline_key(kernel, entry, dtypes, constants))
        return pipeline(kernel, entry, dtypes, constants)

    ctx.prepare_pipelines, ctx.pipeline = prepare_pipelines, use
    e = Explorer(shape=(2, 32, 8, 8), num_groups=8, device="webgpu")
    await e.wait()  # the recompute, then the background compile of the switches
    out = {"status": e.status, "prepared": e._prepare_task.result(), "compiled": []}
    switches = [("dtype", "bfloat16"), ("memory_layout", "nhwc"), ("silu", True), ("dtype", "float16")]
    # then every other dtype, layout and SiLU
    for dtype, layout, silu in itertools.product(("float32", "float16", "bfloat16"), ("nchw", "nhwc"), (False, True)):
        switches += [("dtype", dtype), ("memory_layout", layout), ("silu", silu)]
    for name, value in switches:
        before = ctx.compiled_on_call
        setattr(e, name, value)
        await e.wait()
        out["compiled"].append([name, value, e.status, ctx.compiled_on_call - before])
    out["prepared_keys"] = len(prepared)
    out["prepared_unused"] = [str(k) for k in prepared - used]
    return out

print(json.dumps(asyncio.run(main())))
"""


def test_webgpu_switches_compile_nothing_after_the_first_results():
    """In a fresh process (an empty pipeline cache), with a running event loop as in a kernel: once the first
    results are out, the Explorer compiles in the background what a switch of dtype, layout or SiLU needs, so
    those switches compile no pipeline (without it, the first four compile 4, 6, 8 and 10 on lavapipe), in every
    dtype, layout and SiLU; and nothing more: every pipeline it compiled ahead is used by one of them (asking
    prepare for every call with and without weight and bias and for autograd's kernels compiled about 4x as many,
    which on SwiftShader, at a quarter of a second each, kept a learner's first switches waiting)."""
    require_target("webgpu")
    import json

    out = subprocess.run([sys.executable, "-c", SWITCHES_COMPILE_NOTHING], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "ok" and got["prepared"] > 0, got
    assert [c[2:] for c in got["compiled"]] == [["ok", 0]] * len(got["compiled"]), got["compiled"]
    assert got["prepared_keys"] == got["prepared"] and got["prepared_unused"] == [], got
    print(f"\nthe Explorer compiled {got['prepared']} pipelines ahead, each used by a switch")


def test_the_background_compile_goes_nearest_first_one_pipeline_at_a_time(monkeypatch):
    """The variants a switch needs are compiled nearest what is shown first: with the shown activation, the other
    layout, the other dtypes, then two switches away; then SiLU toggled, nearest first; and they follow a switch.
    Each with concurrency=1 (a browser's GPU process compiles in the order asked: a switch's own pipeline then waits
    behind one at most), and only what the recompute calls (GroupNorm with weight and bias, the casts to and from
    float32, not every autograd kernel)."""
    import numr_web.webgpu as wg

    asked, shown = [], ["float32", "nchw", None]

    async def prepare(dtypes, layouts, activations, *, shapes, concurrency, **narrowed):
        asked.append((dtypes, layouts, activations, concurrency))
        assert shapes == [((2, 8, 4, 4), 4)]
        assert narrowed == {"weight": True, "bias": True, "autograd": False}, narrowed
        if len(asked) == 4:  # the learner switches to bfloat16 channels-last with SiLU
            shown[:] = ["bfloat16", "nhwc", "silu"]
        return 1

    monkeypatch.setattr(wg, "prepare", prepare)
    n = asyncio.run(widget_module._prepare_nearest_first([((2, 8, 4, 4), 4)], lambda: tuple(shown)))
    assert n == len(asked) == 12 and len(set(asked)) == 12 and {a[3] for a in asked} == {1}
    # the variant shown (compiled by the first results: nothing left), then one dtype or layout switch away, SiLU as
    # shown (off)
    assert [a[:3] for a in asked[:4]] == [
        ("float32", "nchw", None),
        ("float32", "nhwc", None),
        ("float16", "nchw", None),
        ("bfloat16", "nchw", None),
    ]
    # after the switch: bfloat16 channels-last with SiLU, then one switch away from it with SiLU, then two
    assert asked[4][:3] == ("bfloat16", "nhwc", "silu")
    one_away = {("float32", "nhwc", "silu"), ("float16", "nhwc", "silu"), ("bfloat16", "nchw", "silu")}
    assert {a[:3] for a in asked[5:8]} == one_away
    assert {a[:3] for a in asked[8:10]} == {("float32", "nchw", "silu"), ("float16", "nchw", "silu")}
    # then without SiLU, nearest first: bfloat16 channels-last, then float16 channels-last
    assert [a[:3] for a in asked[10:]] == [("bfloat16", "nhwc", None), ("float16", "nhwc", None)]


def test_a_failing_compute_sets_status(monkeypatch):
    e = Explorer(device="cpu", num_groups=4)

    def boom(*a, **k):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(numr_web.ops, "group_norm_backward", boom)
    e.seed = 3
    assert e.status == "error: RuntimeError: kernel exploded"
    assert e.results_meta["version"] == 1


def test_generated_input_needs_no_numpy_on_webgpu():
    require_target("webgpu")
    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] in ('numpy', 'ml_dtypes'):\n"
        "        raise ImportError('no numpy here')\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "import numr_web\n"
        "e = numr_web.Explorer(device='webgpu', num_groups=8, dtype='float16', memory_layout='nhwc')\n"
        "assert e.status == 'ok', e.status\n"
        "mean, rstd = e.stats()\n"
        "assert mean.shape == (2, 8)\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_import_numr_web_does_not_import_anywidget():
    code = (
        "import sys, numr_web\n"
        "bad = [m for m in ('anywidget', 'traitlets', 'ipywidgets', 'numr_web.explorer') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "assert 'Explorer' in dir(numr_web) or hasattr(numr_web, 'Explorer')\n"
        "assert 'anywidget' in sys.modules\n"
        "print('ok')\n"
    )
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_default_device_is_the_fastest_present():
    dev = explorer_module.default_device()
    assert dev in ("cpu", "cuda", "webgpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = Explorer(num_groups=8)
    assert e.device.startswith(dev)


def test_results_carry_the_weight_and_bias_the_kernel_used(device):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 8, 3, 3)).astype(np.float32)
    w, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    r = decoded(Explorer(x, num_groups=4, weight=w, bias=b, device=device))
    np.testing.assert_array_equal(r["weight"], w)
    np.testing.assert_array_equal(r["bias"], b)
    r = decoded(Explorer(x, num_groups=4, device=device))
    np.testing.assert_array_equal(r["weight"], np.ones(8, np.float32))
    np.testing.assert_array_equal(r["bias"], np.zeros(8, np.float32))


def test_painted_dy_arrives_as_binary_from_the_front_end(device):
    """The front-end sends ``dy_paint`` as a binary buffer; ipywidgets hands the kernel a memoryview of it
    (``set_state`` is the path a comm message takes), which the trait must take, not drop."""
    e = Explorer(shape=(3, 8, 4, 5), num_groups=4, device=device, grad_mode="painted")
    assert e.status == "ok", e.status
    assert not decoded(e)["dy"].any()  # nothing painted yet: dy = 0, dx = 0
    assert not decoded(e)["dx"].any()
    mask = np.zeros((8, 4, 5), np.float32)
    mask[3, 1, 2] = 1.0  # one element of group 1
    v = e.results_meta["version"]
    e.set_state({"dy_paint": memoryview(mask.tobytes())})
    assert e.status == "ok", e.status
    assert e.dy_paint == mask.tobytes() and e.results_meta["version"] == v + 1
    r = check_against_numr_web(e)
    np.testing.assert_array_equal(r["dy"], np.broadcast_to(mask, (3, 8, 4, 5)))
    # one painted element moves every element of its group, and only its group
    moved = np.abs(r["dx"]).reshape(3, 4, -1).max(axis=2) > 0
    assert moved[:, 1].all() and not moved[:, [0, 2, 3]].any()
    # a painting of the wrong size is an error that names the trait; a paint in another mode recomputes nothing
    e.set_state({"dy_paint": memoryview(b"\0" * 12)})
    assert e.status.startswith("error: dy_paint: expected 640 bytes"), e.status
    e.set_state({"dy_paint": memoryview(mask.tobytes())})
    e.grad_mode = "ones"
    v = e.results_meta["version"]
    e.set_state({"dy_paint": memoryview(np.ones_like(mask).tobytes())})
    assert e.results_meta["version"] == v


@pytest.mark.parametrize("gpu", [True, False])
def test_default_device_in_a_browser_follows_navigator_gpu(monkeypatch, gpu):
    """Under Pyodide the Explorer uses the browser's WebGPU, and the CPU (NumPy) where the browser has none.
    The decision alone, with Pyodide's ``js`` module stood in for: the browser runs are tests/test_site.py."""
    import types

    navigator = types.SimpleNamespace(userAgent="test", **({"gpu": object()} if gpu else {}))
    monkeypatch.setitem(sys.modules, "js", types.SimpleNamespace(navigator=navigator))
    monkeypatch.setattr(widget_module, "_in_pyodide", lambda: True)
    assert explorer_module.default_device() == ("webgpu" if gpu else "cpu")


# ---- the gradient modes against an independent float64 computation ----------------------------------------
def _gn64(x, g, eps, w, b, silu):
    """GroupNorm (+ SiLU) forward in float64 NumPy: (y, xhat, rstd, z)."""
    n, c = x.shape[:2]
    xg = x.astype(np.float64).reshape(n, g, -1)
    rstd = 1.0 / np.sqrt(xg.var(axis=2, keepdims=True) + eps)
    xhat = ((xg - xg.mean(axis=2, keepdims=True)) * rstd).reshape(x.shape)
    cshape = (1, c) + (1,) * (x.ndim - 2)
    z = xhat * w.astype(np.float64).reshape(cshape) + b.astype(np.float64).reshape(cshape)
    y = z / (1.0 + np.exp(-z)) if silu else z
    return y, xhat, rstd, z


def _dx64(dy, x, g, eps, w, b, silu):
    """The closed-form backward in float64 NumPy: dx = rstd (gh - mean(gh) - xhat mean(gh xhat)), gh = dL/dxhat."""
    _, xhat, rstd, z = _gn64(x, g, eps, w, b, silu)
    n, c = x.shape[:2]
    dz = dy.astype(np.float64)
    if silu:
        s = 1.0 / (1.0 + np.exp(-z))
        dz = dz * s * (1.0 + z * (1.0 - s))
    gh = (dz * w.astype(np.float64).reshape((1, c) + (1,) * (x.ndim - 2))).reshape(n, g, -1)
    xh = xhat.reshape(n, g, -1)
    dx = rstd * (gh - gh.mean(axis=2, keepdims=True) - xh * (gh * xh).mean(axis=2, keepdims=True))
    return dx.reshape(x.shape)


@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize("mode", ["ones", "random", "loss", "painted"])
def test_gradient_modes_match_an_independent_float64_computation(device, mode, silu):
    """dy of every grad_mode as the contract defines it, and dx from it, computed here in float64 from the input
    alone (the Explorer's x, weight and bias), not through numr_web's ops."""
    import random

    rng = np.random.default_rng(11)
    x = (2.0 + rng.standard_normal((2, 8, 3, 4)) * np.linspace(0.5, 3.0, 8).reshape(1, 8, 1, 1)).astype(np.float32)
    w = (1.0 + 0.3 * rng.standard_normal(8)).astype(np.float32)
    b = (0.2 * rng.standard_normal(8)).astype(np.float32)
    g, eps, seed = 4, 1e-5, 7
    e = Explorer(x, num_groups=g, weight=w, bias=b, eps=eps, device=device, grad_mode=mode, silu=silu, seed=seed)
    mask = np.zeros((8, 3, 4), np.float32)
    if mode == "painted":
        mask[2, 1, :3] = 1.0
        mask[5, 0, 0] = 1.0
        e.set_state({"dy_paint": memoryview(mask.tobytes())})
    assert e.status == "ok", e.status
    r = decoded(e)
    y64 = _gn64(x, g, eps, w, b, silu)[0]
    if mode == "ones":
        dy64 = np.ones(x.shape)
    elif mode == "random":  # the contract's recipe: Python's random from the seed, C order
        gauss = random.Random(seed * 1_000_003 + 7_777_777).gauss
        dy64 = np.array([gauss(0.0, 1.0) for _ in range(x.size)]).reshape(x.shape)
    elif mode == "loss":  # loss = sum(y**2) / 2, so dy = y
        dy64 = y64
    else:
        dy64 = np.broadcast_to(mask, x.shape).astype(np.float64)
    np.testing.assert_allclose(r["dy"], dy64, rtol=2e-6, atol=2e-6 * np.abs(dy64).max())
    dx64 = _dx64(dy64, x, g, eps, w, b, silu)
    rstd = 1.0 / np.sqrt(x.astype(np.float64).reshape(2, g, -1).var(axis=2) + eps)
    tol = 2e-5 * rstd.max() * max(1.0, np.abs(dy64).max()) * max(1.0, np.abs(w).max())
    np.testing.assert_allclose(r["dx"], dx64, rtol=0, atol=tol)
    if mode == "ones" and not silu:  # not zero: the weight differs between the channels of a group
        assert np.abs(dx64).max() > 100 * tol


def test_dx_is_zero_up_to_rounding_for_dy_ones_and_a_uniform_weight(device):
    """With dy = 1 and w = 1, sum(y) does not depend on x (x-hat sums to 0 in every group): dx = 0 exactly in
    float64, and the Explorer's float32 dx is rounding only (the view says so)."""
    e = Explorer(device=device, num_groups=8, grad_mode="ones")
    r = decoded(e)
    assert np.abs(r["dx"]).max() < 1e-5 * r["rstd"].max()


# ---- generated inputs and presets --------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", explorer_module.PATTERNS)
def test_generated_patterns_give_channels_their_own_offset_and_scale(pattern):
    e = Explorer(device="cpu", num_groups=8, pattern=pattern, seed=3)
    x = decoded(e)["x"].astype(np.float64)
    means, sds = x.mean(axis=(2, 3)), x.std(axis=(2, 3))
    # the default spread: channel offsets and scales differ, so normalization visibly changes the input
    assert np.ptp(means[0]) > 2.0 and sds[0].max() / sds[0].min() > 2.0, (means[0], sds[0])
    z = (x - means[..., None, None]) / sds[..., None, None]  # each channel standardized
    lag = np.corrcoef(z[:, :, :, :-1].ravel(), z[:, :, :, 1:].ravel())[0, 1]
    # structured: horizontal neighbours are alike; noise: they are not
    assert (lag > 0.5) if pattern != "noise" else (abs(lag) < 0.2), lag
    again = decoded(Explorer(device="cpu", num_groups=8, pattern=pattern, seed=3))["x"]
    np.testing.assert_array_equal(again, decoded(e)["x"])
    flat = decoded(Explorer(device="cpu", num_groups=8, pattern=pattern, seed=3, channel_spread=0.0))["x"]
    assert np.ptp(flat.mean(axis=(2, 3))[0]) < np.ptp(means[0]) / 2


def test_a_message_setting_several_controls_recomputes_once():
    """A preset sets several traits in one comm message (ipywidgets' set_state): one recompute, one result."""
    e = Explorer(device="cpu", num_groups=4)
    v = e.results_meta["version"]
    e.set_state({"num_groups": 8, "outlier_channel": 1, "channel_spread": 0.0, "pattern": "stripes"})
    assert e.status == "ok" and e.results_meta["version"] == v + 1
    fresh = Explorer(device="cpu", num_groups=8, outlier_channel=1, channel_spread=0.0, pattern="stripes")
    np.testing.assert_array_equal(decoded(e)["mean"], decoded(fresh)["mean"])
    e.set_state({"scale": -1.0, "num_groups": 2})
    assert e.status.startswith("error: scale:"), e.status
    assert e.results_meta["version"] == v + 1


def test_batch_up_to_32_and_a_clear_error_above():
    e = Explorer(device="cpu", num_groups=4)
    e.batch = 32
    assert e.status == "ok" and decoded(e)["mean"].shape == (32, 4)
    e.batch = 33
    assert e.status == "error: batch: expected 1..32, got 33"
    with pytest.raises(ValueError, match="^pattern:"):
        Explorer(device="cpu", pattern="plaid")


def test_the_sample_shown_is_the_selected_groups_from_python_too():
    e = Explorer(device="cpu", num_groups=4, batch=3)
    v = e.results_meta["version"]
    e.selected = [2, 3]
    assert e.sample == 2
    e.sample = 1
    assert e.selected == [1, 3]
    e.set_state({"selected": [0, 1], "sample": 0})
    assert (e.sample, e.selected) == (0, [0, 1])
    assert e.results_meta["version"] == v  # what is drawn, not what is computed

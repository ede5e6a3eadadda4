"""numr_web itself in the browser: its wheel in Pyodide, without NumPy, on Chromium's WebGPU.

In JupyterLite, Python is Pyodide in a Web Worker and NumPy is not to be had
offline, so ``import numr_web`` must work without it and the public API
(``numr_web.webgpu.from_buffer``, ``numr_web.group_norm``,
``numr_web.ops.group_norm_forward/backward``, first-order autograd) must run
on the browser's WebGPU as on the desktop.  This module builds numr_web's pure
wheel from the working tree once, serves it with the harness of
tests/test_browser_transport.py (tests/browser/: npm Pyodide 314.0.6 on
127.0.0.1, Debian's Chromium through the Python ``playwright`` package, every
other host unresolvable), installs it with ``pyodide.unpackArchive`` (the npm
core has neither micropip nor NumPy) and runs reference cases from
tests/data/group_norm_cases.npz in three contexts:

* ``page``: the page's Pyodide, plain synchronous calls (blocking through JSPI);
* ``worker``: the same in a dedicated Web Worker (where JupyterLite's kernel runs);
* ``worker-nojspi``: a worker whose Pyodide cannot block at all (as without JSPI):
  ``await numr_web.webgpu.init()`` first, read-backs through ``await a.tobytes_async()``,
  and the blocking forms raise ``BlockingUnavailable`` naming the awaitable one;
  plus the page's Pyodide entered from a JS timer callback (``can_run_sync()`` false).

Inputs go to the browser as bytes (base64 in the code) with their shape and
dtype name; results come back as bytes, and every output is held to the figures
docs/accuracy.md gives WebGPU on lavapipe (tests/claims.py: 10x the figure of its
case, each output against its own scale).  The channels-last case runs as NCHW
from its C-order bytes and once more from channels-last bytes
(``from_buffer(..., layout="nhwc")``).  tests/test_hard_inputs.py's float32 cases
(HARD_CASES: the whole float range, NaN and constant groups, empty dimensions, eps
beyond float32) run in the page's Pyodide the same NumPy-free way and are checked
by the same functions as on the desktop.

Needs /usr/bin/chromium (or NUMR_WEB_CHROMIUM), tests/browser/node_modules
(``npm ci --prefix tests/browser``, run here when missing) and playwright:
skipped without them, except under CI=true, where their absence, or a null
WebGPU adapter, fails.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time
import zipfile

import claims
import numpy as np
import pytest
import test_hard_inputs as hard
from conftest import IN_CI

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import pyodide_browser as pb  # noqa: E402

CASES_FILE = ROOT / "tests" / "data" / "group_norm_cases.npz"

# float32 NCHW, bfloat16, float16, SiLU, no affine, 3-D, 5-D, channels-last, a large mean, the SD UNet's G=32
# (every one in a dtype WebGPU stores: it refuses float64)
CASES = ["nchw_basic", "bf16", "fp16", "silu", "no_affine", "rank3", "rank5", "channels_last", "offset_1e3", "sd_unet"]
CONTEXTS = {"page": True, "worker": True, "worker-nojspi": False}  # where -> can block


def _missing(why):
    if IN_CI:
        pytest.fail(f"the numr_web browser test is required under CI=true: {why}")
    pytest.skip(why)


# -- the cases, on CPython ----------------------------------------------------------------------


def _b64(a) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def _dtype_name(case_data) -> str:
    if int(case_data.get("bf16", 0)) == 1:
        return "bfloat16"
    return str(case_data["x"].dtype)


def _load_cases():
    data = np.load(CASES_FILE)
    cases = {}
    for name in CASES:
        fields = {k.split("/", 1)[1]: data[k] for k in data.files if k.split("/", 1)[0] == name}
        assert fields, f"no case {name} in {CASES_FILE}"
        cases[name] = fields
    return cases


def _host_x(fields, key="x"):
    """The case's array as NumPy in its own dtype (bfloat16 viewed through ml_dtypes)."""
    a = fields[key]
    if _dtype_name(fields) == "bfloat16":
        import ml_dtypes

        return a.view(ml_dtypes.bfloat16)
    return a


def _channels_last_view(a):
    """An NCHW-shaped view of channels-last memory (the reference README's recipe, any rank)."""
    perm = (0, *range(2, a.ndim), 1)
    inv = np.argsort(perm)
    return np.ascontiguousarray(a.transpose(perm)).transpose(inv)


def _spec(name, fields):
    """What the browser gets: bytes (base64), shape, dtype name and the scalars."""
    x, dy = fields["x"], fields["dy"]  # bfloat16 stays as its uint16 bits: the bytes are the same
    perm = (0, *range(2, x.ndim), 1)
    spec = {
        "name": name,
        "shape": list(x.shape),
        "dtype": _dtype_name(fields),
        "x": _b64(x),
        "dy": _b64(dy),
        "w": _b64(fields["w"]) if "w" in fields else None,
        "b": _b64(fields["b"]) if "b" in fields else None,
        "G": int(fields["G"]),
        "eps": float(fields["eps"]),
        "silu": bool(int(fields["silu"])),
        # channels-last cases too: their C-order bytes run as NCHW (layouts are a desktop/NumPy concern)
        "layout": "nchw",
    }
    if int(fields["channels_last"]):
        # the same values once more from channels-last bytes, where from_buffer takes layout="nhwc"
        nhwc = {**spec, "name": name + "/nhwc", "layout": "nhwc"}
        nhwc["x"], nhwc["dy"] = _b64(x.transpose(perm)), _b64(dy.transpose(perm))
        return [spec, nhwc]
    return [spec]


@pytest.fixture(scope="module")
def cases():
    loaded = _load_cases()
    assert all(_dtype_name(f) in ("float32", "float16", "bfloat16") for f in loaded.values())
    return loaded


def _decode(entry):
    """A read-back {shape, dtype, b64} as float64 NumPy."""
    if entry is None:
        return None
    raw = base64.b64decode(entry["b64"])
    shape = tuple(entry["shape"])
    if entry["dtype"] == "bfloat16":
        bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape).astype(np.float64)
    kind = {"float32": "<f4", "float16": "<f2"}[entry["dtype"]]
    return np.frombuffer(raw, kind).reshape(shape).astype(np.float64)


# -- the browser ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    return pb.build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def browser(wheel):
    why = pb.prerequisites(npm_ci=True)
    if why:
        _missing(why)
    server = pb.Server({f"/wheels/{wheel.name}": wheel})
    session = None
    try:
        t0 = time.perf_counter()
        session = pb.Browser(server.base)
        if not session.adapter.startswith("ok"):
            _missing(f"Chromium has no WebGPU adapter here: {session.adapter}")
        session.installed = {}
        for where in CONTEXTS:
            session.installed[where] = session.install(f"{server.base}/wheels/{wheel.name}", where)
        print(f"browser up and numr_web installed in {time.perf_counter() - t0:.1f} s; boot ms {session.boot_ms}")
        yield session
    finally:
        if session is not None:
            session.close()
        server.close()


# Python for the browser.  ``{DEF}`` is "def" or "async def", ``{AWAIT}`` "" or "await ",
# ``{ASYNC}`` "" or "_async": the blocking forms where the context can block, else the awaitable ones.
PROGRAM = """
import base64, sys, traceback
import numr_web
import numr_web.webgpu as wg


def _b(s):
    return base64.b64decode(s)


{DEF} _read(a):
    raw = {AWAIT}a.tobytes{ASYNC}()
    return {{"shape": list(a.shape), "dtype": str(a.dtype), "b64": base64.b64encode(raw).decode()}}


def _inputs(c):
    shape, dt = tuple(c["shape"]), c["dtype"]
    x = wg.from_buffer(_b(c["x"]), shape, dt, layout=c["layout"])
    dy = wg.from_buffer(_b(c["dy"]), shape, dt, layout=c["layout"])
    w = wg.from_buffer(_b(c["w"]), (shape[1],), "float32") if c["w"] is not None else None
    b = wg.from_buffer(_b(c["b"]), (shape[1],), "float32") if c["b"] is not None else None
    return x, dy, w, b


# forward, backward and autograd, each read back before the next starts (an error stays in its stage)
{DEF} _stages(c):
    x, dy, w, b = _inputs(c)
    G, eps, act = c["G"], c["eps"], "silu" if c["silu"] else None
    saved = {{}}

    def forward():
        got = {{}}
        got["y"], got["mean"], got["rstd"] = numr_web.ops.group_norm_forward(x, w, b, G, eps, activation=act)
        saved["mean"], saved["rstd"] = got["mean"], got["rstd"]
        got["y_group_norm"] = numr_web.group_norm(x, G, w, b, eps, activation=act)
        return got, {{"repr_y": repr(got["y"])}}

    def backward():
        mean, rstd = saved.get("mean"), saved.get("rstd")
        if mean is None:
            mean, rstd = numr_web.ops.group_norm_forward(x, w, b, G, eps, activation=act)[1:]
        got = {{}}
        got["dx"], got["dw"], got["db"] = numr_web.ops.group_norm_backward(
            dy, x, mean, rstd, w, G, bias=b, activation=act
        )
        return got, {{}}

    def autograd():
        got = {{}}
        # an upstream gradient into backward(): the leaves' .grad
        xt = numr_web.Tensor(x, requires_grad=True)
        wt = numr_web.Tensor(w, requires_grad=True) if w is not None else None
        bt = numr_web.Tensor(b, requires_grad=True) if b is not None else None
        yt = numr_web.group_norm(xt, G, wt, bt, eps, activation=act)
        yt.backward(numr_web.Tensor(dy))
        got["ag_dx"] = xt.grad.data
        if wt is not None:
            got["ag_dw"], got["ag_db"] = wt.grad.data, bt.grad.data
        # autograd.grad of a scalar loss, no create_graph
        xg = numr_web.Tensor(x, requires_grad=True)
        wg_ = numr_web.Tensor(w, requires_grad=True) if w is not None else None
        loss = (numr_web.group_norm(xg, G, wg_, b, eps, activation=act) * numr_web.Tensor(dy)).sum()
        grads = numr_web.autograd.grad(loss, [xg] + ([wg_] if wg_ is not None else []))
        got["grad_dx"] = grads[0].data
        if wg_ is not None:
            got["grad_dw"] = grads[1].data
        return got, {{"loss_shape": list(loss.shape)}}

    out = {{}}
    for stage, run in (("forward", forward), ("backward", backward), ("autograd", autograd)):
        try:
            got, extra = run()
            res = dict(extra)
            for k, a in got.items():
                res[k] = None if a is None else {AWAIT}_read(a)
        except Exception:
            res = {{"error": traceback.format_exc()}}
        out[stage] = res
    return out


{DEF} run_all(specs):
    res = {{}}
    for c in specs:
        try:
            res[c["name"]] = {AWAIT}_stages(c)
        except Exception:
            res[c["name"]] = {{"error": traceback.format_exc()}}
    return res
"""

# The page and the worker: plain synchronous calls, blocking through JSPI.
BLOCKING = """
from pyodide.ffi import can_run_sync
res = {"can_run_sync": can_run_sync(), "cases": run_all(SPECS)}
res["numpy_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "ml_dtypes"))
res
"""

# The no-JSPI worker: the blocking forms before and after init, then the cases awaited.
AWAITABLE = """
import struct
from pyodide.ffi import can_run_sync


def _raises(call):
    try:
        call()
        return "returned"
    except wg.BlockingUnavailable as exc:
        return "BlockingUnavailable: " + str(exc)
    except Exception as exc:
        return type(exc).__name__ + ": " + str(exc)


async def main():
    res = {"can_run_sync": can_run_sync(), "can_block": wg.can_block(),
           "is_runtime_error": issubclass(wg.BlockingUnavailable, RuntimeError)}
    res["before_init"] = _raises(lambda: wg.from_buffer(struct.pack("<4f", 1, 2, 3, 4), (1, 2, 2), "float32"))
    res["info"] = await wg.init()
    one = wg.from_buffer(struct.pack("<f", 1.5), (1,), "float32")
    y = numr_web.group_norm(wg.from_buffer(struct.pack("<8f", *range(8)), (1, 4, 2), "float32"), 2)
    res["repr"] = _raises(lambda: repr(y))
    res["repr_value"] = repr(y)
    res["tobytes"] = _raises(lambda: y.tobytes())
    res["item"] = _raises(lambda: one.item())
    res["bool"] = _raises(lambda: bool(one))
    res["y"] = (await y.tobytes_async()).hex()
    res["cases"] = await run_all(SPECS)
    res["numpy_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "ml_dtypes"))
    return res
"""


def _program(blocking, *parts):
    if blocking:
        forms = {"DEF": "def", "AWAIT": "", "ASYNC": ""}
    else:
        forms = {"DEF": "async def", "AWAIT": "await ", "ASYNC": "_async"}
    return PROGRAM.format(**forms) + "".join(textwrap.dedent(p) for p in parts)


@pytest.fixture(scope="module")
def results(browser, cases):
    """Runs every case once per context (on first use) and keeps what came back."""
    specs = [s for name, fields in cases.items() for s in _spec(name, fields)]
    done = {}

    def get(where):
        if where not in done:
            t0 = time.perf_counter()
            specs_src = f"SPECS = {specs!r}\n"
            if CONTEXTS[where]:
                code = _program(True, specs_src, BLOCKING)
            else:
                code = _program(False, specs_src, AWAITABLE, "await main()\n")
            done[where] = browser.py(code, where=where, timeout_ms=240_000)
            print(f"{where}: {len(specs)} cases in {time.perf_counter() - t0:.1f} s")
        return done[where]

    return get


# -- tests ----------------------------------------------------------------------------------------


def test_wheel_is_pure(wheel):
    """One py3-none-any wheel with no compiled code: what Pyodide can install as is."""
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        text = zf.read(meta).decode()
    assert "Root-Is-Purelib: true" in text, text
    compiled = [n for n in names if n.endswith((".so", ".pyd", ".dll", ".dylib"))]
    assert not compiled, compiled
    assert "numr_web/backends/webgpu/transport_browser.py" in names
    assert any(n.startswith("numr_web/kernels/wgsl/") and n.endswith(".wgsl") for n in names)


@pytest.mark.parametrize("where", list(CONTEXTS))
def test_imports_without_numpy(browser, where):
    """numr_web imports in a Pyodide that has no NumPy (nor ml_dtypes) and loads neither."""
    res = browser.py(
        textwrap.dedent(
            """
            import importlib.metadata, sys
            res = {}
            for name in ("numpy", "ml_dtypes"):
                try:
                    __import__(name)
                    res[name] = "imported"
                except ImportError as exc:
                    res[name] = type(exc).__name__
            import numr_web, numr_web.webgpu
            res["file"] = numr_web.__file__
            res["version"] = importlib.metadata.version("numr-web")
            res["api"] = [hasattr(numr_web.webgpu, n) for n in ("from_buffer", "init", "BlockingUnavailable")]
            res["platform"] = sys.platform
            res["numpy_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "ml_dtypes"))
            res
            """
        ),
        where=where,
    )
    assert res["numpy"] == "ModuleNotFoundError" and res["ml_dtypes"] == "ModuleNotFoundError", res
    assert res["file"].startswith("/lib/python3") and "site-packages/numr_web/" in res["file"], res["file"]
    assert res["version"] == browser.installed[where]
    assert res["api"] == [True, True, True]
    assert res["platform"] == "emscripten"
    assert res["numpy_loaded"] == []


def _case_params():
    for where in CONTEXTS:
        for name in CASES:
            yield pytest.param(where, name, id=f"{where}-{name}")
        yield pytest.param(where, "channels_last/nhwc", id=f"{where}-channels_last-nhwc")


STAGES = {
    "forward": {"y": "y", "mean": "mean", "rstd": "rstd", "y_group_norm": "y"},
    "backward": {"dx": "dx", "dw": "dw", "db": "db"},
    # y = group_norm(Tensor x, w, b); y.backward(Tensor(dy)): x.grad, w.grad, b.grad; and
    # numr_web.autograd.grad((group_norm(x, w, b) * dy).sum(), [x, w])
    "autograd": {"ag_dx": "dx", "ag_dw": "dw", "ag_db": "db", "grad_dx": "dx", "grad_dw": "dw"},
}


def _check_stage(results, cases, where, name, stage):
    base = name.split("/")[0]
    fields = cases[base]
    got = results(where)["cases"][name][stage]
    assert "error" not in got, f"{where} {name} {stage} raised in the browser:\n{got['error']}"
    dtype = _dtype_name(fields)
    affine = "w" in fields
    x = _decode({"b64": _b64(fields["x"]), "shape": list(fields["x"].shape), "dtype": dtype})
    case = claims.reference_case(fields, layout="nhwc" if name.endswith("/nhwc") else "nchw")
    errors = {}
    for key, field in STAGES[stage].items():
        if field in ("dw", "db") and not affine:
            assert got.get(key) is None, f"{key}: expected None without an affine, got {got.get(key)}"
            continue
        ref, entry = fields[field], got[key]
        want_dtype = dtype if field in ("y", "dx") else "float32"
        assert entry["dtype"] == want_dtype, (key, entry["dtype"], want_dtype)
        assert tuple(entry["shape"]) == ref.shape, (key, entry["shape"], ref.shape)
        # lavapipe's figures: 10x the claim for the case, on the output's own scale (the mean on max |x|)
        errors[key] = claims.check("browser", {field: _decode(entry)}, fields, x, label=f"{where} {name} {key}", **case)
    return got, errors


@pytest.mark.parametrize("where,name", list(_case_params()))
def test_forward_in_browser(results, cases, where, name):
    """ops.group_norm_forward and group_norm on WebGPU arrays: y, mean, rstd against the CPU and the reference."""
    got, _ = _check_stage(results, cases, where, name, "forward")
    assert got["repr_y"].startswith("WebGPUArray(")


@pytest.mark.parametrize("where,name", list(_case_params()))
def test_backward_in_browser(results, cases, where, name):
    """ops.group_norm_backward from the forward's mean and rstd: dx, dw, db."""
    _check_stage(results, cases, where, name, "backward")


@pytest.mark.parametrize("where,name", list(_case_params()))
def test_autograd_in_browser(results, cases, where, name):
    """First-order autograd: Tensor.backward with an upstream gradient, and autograd.grad of a scalar loss."""
    got, _ = _check_stage(results, cases, where, name, "autograd")
    assert got["loss_shape"] == []


@pytest.mark.parametrize("where", list(CONTEXTS))
def test_no_numpy_after_the_cases(results, where):
    res = results(where)
    assert res["can_run_sync"] is CONTEXTS[where]
    assert res["numpy_loaded"] == []


def test_blocking_unavailable_without_jspi(results, cases):
    """Where nothing can block: the first device use before init and the read-backs name their awaitable forms."""
    res = results("worker-nojspi")
    assert res["can_run_sync"] is False and res["can_block"] is False
    assert res["is_runtime_error"] is True
    assert res["before_init"].startswith("BlockingUnavailable: "), res["before_init"]
    assert "`await numr_web.webgpu.init()`" in res["before_init"], res["before_init"]
    assert res["info"]["adapter"], res["info"]
    for name in ("tobytes", "item", "bool"):
        assert res[name].startswith("BlockingUnavailable: "), (name, res[name])
        assert "tobytes_async" in res[name] or "item_async" in res[name], (name, res[name])
    assert "`await array.tobytes_async()`" in res["tobytes"], res["tobytes"]
    assert res["repr"] == "returned" and res["repr_value"].startswith("WebGPUArray("), res["repr_value"]
    _check_small(res["y"])


def _small_expected():
    """group_norm of arange(8) as (1, 4, 2) in two groups, on numr_web's CPU."""
    import numr_web

    x = np.arange(8, dtype=np.float32).reshape(1, 4, 2)
    return np.asarray(numr_web.group_norm(x, 2), dtype=np.float32)


def _check_small(hex_bytes):
    got = np.frombuffer(bytes.fromhex(hex_bytes), "<f4")
    want = _small_expected().ravel()
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-5, (got, want)


def test_callback_context(browser):
    """The page's Pyodide entered from a JS timer callback (can_run_sync() false): init and reads are awaited."""
    setup = textwrap.dedent(
        """
        import struct
        import numr_web, numr_web.webgpu as wg
        from pyodide.ffi import can_run_sync

        async def setup():
            global cb_y
            info = await wg.init()
            cb_y = numr_web.group_norm(wg.from_buffer(struct.pack("<8f", *range(8)), (1, 4, 2), "float32"), 2)
            return {"adapter": info["adapter"]}

        setup()
        """
    )
    assert browser.py(setup, where="page", mode="callback")["adapter"]
    check = textwrap.dedent(
        """
        import numr_web.webgpu as wg
        from pyodide.ffi import can_run_sync
        res = {"can_run_sync": can_run_sync(), "repr": repr(cb_y)}
        try:
            cb_y.tobytes()
            res["tobytes"] = "returned"
        except wg.BlockingUnavailable as exc:
            res["tobytes"] = "BlockingUnavailable: " + str(exc)

        async def read():
            res["y"] = (await cb_y.tobytes_async()).hex()
            return res

        read()
        """
    )
    res = browser.py(check, where="page", mode="callback")
    assert res["can_run_sync"] is False
    assert res["repr"].startswith("WebGPUArray(")
    assert res["tobytes"].startswith("BlockingUnavailable: ") and "tobytes_async" in res["tobytes"], res["tobytes"]
    _check_small(res["y"])


# -- tests/test_hard_inputs.py's float32 cases, NumPy-free in the page ---------------------------------

HARD_PROGRAM = """
import base64, traceback
import numr_web
import numr_web.webgpu as wg


def _arr(spec):
    if spec is None:
        return None
    raw = base64.b64decode(spec["b64"])
    return wg.from_buffer(raw, tuple(spec["shape"]), "float32", layout=spec["layout"])


def _read(a):
    if a is None:
        return None
    return {"shape": list(a.shape), "dtype": str(a.dtype), "b64": base64.b64encode(a.tobytes()).decode()}


res = {}
for name, p in PROBLEMS.items():
    try:
        x, dy, w, b = (_arr(p[k]) for k in ("x", "dy", "w", "b"))
        y, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, p["G"], p["eps"], activation=p["act"])
        dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, p["G"], bias=b, activation=p["act"])
        outs = (y, mean, rstd, dx, dw, db)
        res[name] = {k: _read(a) for k, a in zip(("y", "mean", "rstd", "dx", "dw", "db"), outs)}
    except Exception:
        res[name] = {"error": traceback.format_exc()}
res
"""


def _bytes_spec(a, layout="nchw"):
    """An array's bytes in memory order for ``from_buffer`` (channels-last: (N, *spatial, C))."""
    if a is None:
        return None
    a = np.asarray(a, np.float32)
    phys = a.transpose(0, *range(2, a.ndim), 1) if layout == "nhwc" else a
    return {"b64": _b64(phys), "shape": list(a.shape), "layout": layout}


def _hard_run(browser, names, plan="auto"):
    """(problems, results) of the float32 hard cases ``names``, run in the page's Pyodide under ``plan``."""
    problems = {name: hard.hard_problems_of(name) for name in names}
    specs = {
        f"{name}/{key}": {
            "x": _bytes_spec(p.x, p.layout),
            "dy": _bytes_spec(p.dy, p.layout),
            "w": _bytes_spec(p.weight),
            "b": _bytes_spec(p.bias),
            "G": p.groups,
            "eps": p.eps,
            "act": p.activation,
        }
        for name, by_key in problems.items()
        for key, p in by_key.items()
    }
    assert all(p.x.dtype == np.float32 for by_key in problems.values() for p in by_key.values())
    t0 = time.perf_counter()
    head = f"import os\nos.environ['NUMR_WEB_WEBGPU_PLAN'] = {plan!r}\nPROBLEMS = {specs!r}\n"
    results = browser.py(head + HARD_PROGRAM, where="page", timeout_ms=240_000)
    print(f"hard cases, plan {plan}: {len(specs)} problems in {time.perf_counter() - t0:.1f} s")
    return problems, results


@pytest.fixture(scope="module")
def hard_results(browser):
    """Every problem of every float32 hard case, run once in the page's Pyodide."""
    return _hard_run(browser, hard.HARD_CASES)


def _check_hard(problems, results, name):
    outs = {}
    for key, p in problems[name].items():
        got = results[f"{name}/{key}"]
        assert "error" not in got, f"{name}/{key} raised in the browser:\n{got['error']}"
        outs[key] = {k: _decode(v) for k, v in got.items()}
        assert outs[key]["y"].shape == p.x.shape and got["y"]["dtype"] == "float32", (key, got["y"])
    hard.HARD_CASES[name][1]("browser", problems[name], outs)


# Chromium's WebGPU (SwiftShader) flushes subnormal results of arithmetic to zero, which WGSL allows and
# lavapipe does not do: an rstd near 3e-39 (|x| near float32's largest) and the dx of groups whose rstd is
# below about 1e-34 are subnormal or partly so.  The kernels form them in scaled units and build the
# subnormal's bits with integer operations (group_norm_pow2.wgsl); before they did, these cases failed here
# (dx 7.7e-4 at 1e35, 6.2e-2 at 1e37, 0.9 and rstd 0 at +-3e38, both layouts).
@pytest.mark.parametrize("name", list(hard.HARD_CASES))
def test_hard_case_in_browser(hard_results, name):
    """A hard case of tests/test_hard_inputs.py through from_buffer and tobytes on the browser's WebGPU,
    checked by that module's own check (the exact-rational oracle, lavapipe's figures)."""
    _check_hard(*hard_results, name)


# the cases with subnormal results (above), through each plan's kernels
SUBNORMAL_CASES = [n for n in hard.HARD_CASES if n.startswith(("sums_overflow-", "near_float32_max-"))]


@pytest.mark.parametrize("plan", ["fused", "split", "thread"])
def test_subnormal_results_under_every_plan_in_browser(browser, plan):
    assert len(SUBNORMAL_CASES) == 6, SUBNORMAL_CASES
    problems, results = _hard_run(browser, SUBNORMAL_CASES, plan)
    for name in SUBNORMAL_CASES:
        _check_hard(problems, results, name)


def test_offline(browser):
    """Every request the page and its workers made went to the test's own server."""
    foreign = [u for u in browser.requests if not u.startswith(browser.base + "/") and not u.startswith("data:")]
    assert not foreign, foreign
    assert any(u.endswith(".whl") for u in browser.requests)


def test_browser_bench_runs(wheel):
    """scripts/browser-bench on one small shape, float32 and bfloat16: its JSON has forward, backward and
    copy rows, timed end to end against the fastest of the three copies (named), bytes counted, with
    two plans and the floor kernels beside them."""
    if pb.prerequisites():
        _missing(pb.prerequisites())
    script = ROOT / "scripts" / "browser-bench"
    assert os.access(script, os.X_OK), "scripts/browser-bench must be executable"
    out_json = wheel.parent / "bench.json"
    out = subprocess.run(
        [sys.executable, str(script), *"--shapes 1,64,16,16,8 --repeat 3 --runs 2 --dtype float32,bfloat16".split()]
        + ["--plans", "fused,thread", "--floor"]
        + ["--wheel", str(wheel), "--json", str(out_json)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out_json.read_text())
    assert report["adapter"] and "adapter" in out.stdout
    assert report["timing"] == "end-to-end" and report["dtypes"] == ["float32", "bfloat16"], report
    assert [r["dtype"] for r in report["rows"]] == ["float32", "bfloat16"]
    assert len(report["runs"]) == 2 and report["runs"][0] == report["rows"], report["runs"]
    assert [r["dtype"] for r in report["runs"][1]] == ["float32", "bfloat16"]
    for row in report["rows"] + report["runs"][1]:
        assert row["shape"] == [1, 64, 16, 16] and row["groups"] == 8 and row["layout"] == "nchw"
        assert row["timing"] == "end-to-end" and row["webgpu_plan"] == "auto", row
        assert set(row["copy_variants_ms"]) == {"copy_vec4", "copy_ranges", "copy_grid"}, row
        ms = row["copy_variants_ms"]
        assert row["copy_variant"] == min(ms, key=ms.get) and row["copy_ms"] == ms[row["copy_variant"]] > 0, row
        assert row["yardstick"].startswith(row["copy_variant"] + ": the fastest of"), row
        assert row["x_bytes"] == 64 * 16 * 16 * (4 if row["dtype"] == "float32" else 2), row
        assert (row["forward_bytes"], row["backward_bytes"], row["copy_bytes"]) == tuple(
            k * row["x_bytes"] for k in (2, 3, 2)
        ), row
        assert row["forward_ms"] > 0 and 0 < row["forward_of_copy"] < 10, row
        for plan in ("fused", "thread"):  # --plans: the same calls under each plan, in the same rounds
            assert row[f"forward@{plan}_ms"] > 0 and 0 < row[f"forward@{plan}_of_copy"] < 10, row
            assert row[f"backward@{plan}_ms"] > 0 and 0 < row[f"backward@{plan}_of_copy"] < 10, row
        assert "backward@split_ms" not in row
        for name in ("floor_forward", "floor_backward"):  # --floor: numr_web.bench.floor's kernels, same rounds
            assert row[f"{name}_ms"] > 0 and 0 < row[f"{name}_of_copy"] < 10 and name not in row["failed"], row
        # a backward that numr_web cannot run here is reported with its error (test_backward_in_browser fails for it)
        assert (row["backward_ms"] or 0) > 0 and 0 < row["backward_of_copy"] < 10 or row["failed"].get("backward"), row
    assert out.stdout.count("plan thread   fwd/copy") == 4, out.stdout
    assert out.stdout.count("floor kernels fwd/copy") == 4, out.stdout
    printed = [line for line in out.stdout.splitlines() if line.startswith("1,64,16,16 G=8 ")]
    assert len(printed) == 4 and all("nchw" in line for line in printed), out.stdout
    assert "float32" in printed[0] and "bfloat16" in printed[1] and "run 2/2" in out.stdout, out.stdout


def test_browser_bench_times_the_layout_asked_for(wheel):
    """README's browser rows come from `scripts/browser-bench --layout both ...`: --layout nhwc times
    channels-last input (rows say so) and nothing else, with the channels-last floor kernels beside it."""
    if pb.prerequisites():
        _missing(pb.prerequisites())
    out_json = wheel.parent / "bench-nhwc.json"
    argv = "--shapes 1,64,16,16,8 --repeat 2 --runs 1 --dtype float32 --layout nhwc --floor".split()
    argv += ["--wheel", str(wheel), "--json", str(out_json)]
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "browser-bench"), *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.loads(out_json.read_text())["rows"]
    assert [(r["layout"], r["dtype"], r["shape"]) for r in rows] == [("nhwc", "float32", [1, 64, 16, 16])], rows
    assert rows[0]["forward_ms"] > 0 and (rows[0]["backward_ms"] or 0) > 0, rows
    for name in ("floor_forward", "floor_backward"):  # --floor: the channels-last floor kernels, same rounds
        assert rows[0][f"{name}_ms"] > 0 and 0 < rows[0][f"{name}_of_copy"] < 10, rows
        assert name not in rows[0]["failed"], rows
    # the faster of its forms at setup, per direction: a window down the rows or the split plan's shape
    assert set(rows[0]["floor_forms"]) == {"floor_fwd", "floor_bwd"}, rows
    assert set(rows[0]["floor_forms"].values()) <= {"window", "split"}, rows
    printed = [line for line in out.stdout.splitlines() if line.startswith("1,64,16,16 G=8 ")]
    assert len(printed) == 1 and "nhwc" in printed[0] and "nchw" not in printed[0], out.stdout


def _host_rows(stdout, label):
    rows = [line for line in stdout.splitlines() if line.startswith(f"| {label} ")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_browser_bench_host_prints_the_host_work_table(wheel):
    """`scripts/browser-bench --host`: webgpu_host's table from the page, per layout and dtype: microseconds of
    the op's, the backend's and the floor kernels' calls and their ratios; "-" where a shape has no floor kernel
    (H*W not a multiple of 4, C not a multiple of 4)."""
    if pb.prerequisites():
        _missing(pb.prerequisites())
    out_json = wheel.parent / "host.json"
    argv = ["--host", "--shapes", "1,64,16,16,8;1,30,5,5,3", "--calls", "5", "--layout", "both"]
    argv += ["--dtype", "float32,bfloat16", "--wheel", str(wheel), "--json", str(out_json)]
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "browser-bench"), *argv], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "host time of a call without its wait" in out.stdout, out.stdout
    full, bare = _host_rows(out.stdout, "1x64x16x16 G8"), _host_rows(out.stdout, "1x30x5x5 G3")
    assert len(full) == 4 and len(bare) == 4, out.stdout  # 2 layouts x 2 dtypes
    for cells in full:
        assert len(cells) == 11 and all(float(c) > 0 for c in cells[1:]), cells
    for cells in bare:
        assert len(cells) == 11 and all(float(c) > 0 for c in cells[1:5]) and set(cells[5:]) == {"-"}, cells
    tables = json.loads(out_json.read_text())["tables"]
    assert [(t["layout"], t["dtype"]) for t in tables] == [
        (lay, dt) for dt in ("float32", "bfloat16") for lay in ("nchw", "nhwc")
    ], tables
    names = {"op_fwd", "backend_fwd", "op_bwd", "backend_bwd"}
    assert all(set(t["rows"][0]["us"]) == names | {"floor_fwd", "floor_bwd"} for t in tables), tables
    assert all(set(t["rows"][1]["us"]) == names for t in tables), tables
    refused = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "browser-bench"), "--host", "--floor"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "--host times the op" in refused.stderr, refused.stderr


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))

"""The browser transport (navigator.gpu through Pyodide) in headless Chromium, served offline.

numr_web/backends/webgpu/transport_browser.py runs inside Pyodide (npm
``pyodide`` 314.0.6, pinned in tests/browser/package.json: the version
JupyterLite's Pyodide kernel 0.8.6 loads) in Debian's Chromium, driven by the
Python ``playwright`` package; the adapter there is SwiftShader.  A Python
http.server thread serves tests/browser/ (the harness page, its worker, the
Pyodide files) and the transport file on 127.0.0.1; Chromium resolves no other
host, so nothing can come from a CDN.  The harness (tests/browser/harness.mjs)
runs Python in these contexts:

* ``page``: the page's Pyodide through ``pyodide.runPythonAsync``: JSPI lets
  the synchronous transport calls block (``can_run_sync()`` is true);
* ``worker``: the same in a dedicated Web Worker;
* ``mode="callback"``: plain ``pyodide.runPython`` from a JS timer callback,
  where ``can_run_sync()`` is false and the blocking calls must raise
  ``BlockingUnavailable`` (a coroutine the code returns is awaited from JS);
* ``worker-nojspi``: a worker whose Pyodide was booted with JSPI hidden, as in
  a browser without it: nothing can block, only the awaitable forms work.

Needs ``npm ci --prefix tests/browser`` and /usr/bin/chromium (or
NUMR_WEB_CHROMIUM); skipped when they are missing, except under CI=true, where
their absence, or a null WebGPU adapter, fails.  (No ``browser`` marker: it
is not registered in pyproject.toml, and an unregistered one warns.)
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import pathlib
import re
import struct
import subprocess
import sys
import textwrap
import threading

import pytest
from conftest import IN_CI

ROOT = pathlib.Path(__file__).resolve().parent.parent
HERE = ROOT / "tests" / "browser"
TRANSPORT = ROOT / "numr_web" / "backends" / "webgpu" / "transport_browser.py"
PYODIDE = HERE / "node_modules" / "pyodide"
CHROMIUM = os.environ.get("NUMR_WEB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--enable-unsafe-webgpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # offline: only 127.0.0.1 resolves
]
CALL_TIMEOUT_MS = 60_000  # one runPython call; a hang fails instead of blocking the run

# y = 2 x + 1 over array<f32>, explicit layout ["read", "read_write"]
WGSL_AFFINE = """
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < arrayLength(&y)) {
        y[i] = 2.0 * x[i] + 1.0;
    }
}
"""

N = 1000
XS = [(i % 37) * 0.25 - 4.5 + (i // 37) * 8.0 for i in range(N)]  # exact in float32


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


EXPECTED_AFFINE = [f32(2.0 * f32(x) + 1.0) for x in XS]

PRELUDE = """
import asyncio, json, struct
from pyodide.ffi import can_run_sync
import transport_browser as tb
"""

# Kernel body shared by the contexts; ``AWAIT`` is "" with the blocking forms or "await " with the
# awaitable ones, ``ASYNC`` the matching suffix ("" or "_async").
KERNEL = """
dev = {AWAIT}tb.request_device{ASYNC}({{}})
nbytes = 4 * N
xb = tb.create_buffer(dev, 256 + nbytes)
yb = tb.create_buffer(dev, nbytes)
tb.write_buffer(dev, xb, 256, struct.pack(f"<{{N}}f", *XS))
pipe = tb.create_pipeline(dev, WGSL_AFFINE, "main", ["read", "read_write"])
tb.dispatch(dev, pipe, [(xb, 256, nbytes), (yb, 0, nbytes)], ((N + 63) // 64, 1, 1))
{AWAIT}tb.wait{ASYNC}(dev)
res["y"] = list(struct.unpack(f"<{{N}}f", {AWAIT}tb.read_buffer{ASYNC}(dev, yb, 0, nbytes)))
res["y_bytes_8_18"] = ({AWAIT}tb.read_buffer{ASYNC}(dev, yb, 8, 10)).hex()
rag = tb.create_buffer(dev, 16)
tb.write_buffer(dev, rag, 0, b"\\x01\\x02\\x03\\x04\\x05\\x06")  # ragged: padded to 8
res["ragged"] = ({AWAIT}tb.read_buffer{ASYNC}(dev, rag, 0, 8)).hex()
res["sizes"] = [int(xb.size), int(yb.size)]
res["pending_errors"] = list(dev.errors)
"""


def program(*parts):
    """Python source for the browser: PRELUDE, the test's constants, then the parts, each dedented."""
    consts = {"N": N, "XS": XS, "WGSL_AFFINE": WGSL_AFFINE}
    assigns = "".join(f"{k} = {v!r}\n" for k, v in consts.items())
    return PRELUDE + assigns + "".join(textwrap.dedent(p) for p in parts)


def kernel(blocking):
    if blocking:
        return KERNEL.format(AWAIT="", ASYNC="")
    return KERNEL.format(AWAIT="await ", ASYNC="_async")


def coroutine(name, *parts):
    """``async def name():`` around the parts (each dedented), as one part for ``program``."""
    body = "".join(textwrap.dedent(p) for p in parts)
    return f"\nasync def {name}():\n" + textwrap.indent(body, "    ") + "\n"


def _missing(why):
    if IN_CI:
        pytest.fail(f"the browser transport test is required under CI=true: {why}")
    pytest.skip(why)


class _Handler(http.server.SimpleHTTPRequestHandler):
    """tests/browser/ at /, and the transport file at /numr/transport_browser.py."""

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".mjs": "text/javascript",
        ".js": "text/javascript",
        ".wasm": "application/wasm",
        ".json": "application/json",
        ".py": "text/x-python",
        ".zip": "application/zip",
    }

    def translate_path(self, path):
        if path.split("?", 1)[0].split("#", 1)[0] == "/numr/transport_browser.py":
            return str(TRANSPORT)
        return super().translate_path(path)

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(HERE)))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


class Harness:
    def __init__(self, page, base, requests, console):
        self.page = page
        self.base = base
        self.requests = requests
        self.console = console
        self.boot_ms = None

    def py(self, code, where="page", mode="async"):
        """Run ``code`` there; its last expression comes back through JSON."""
        text = self.page.evaluate(
            """([code, opts, ms]) => Promise.race([
                window.runPython(code, opts),
                new Promise((_, reject) => setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms)),
            ])""",
            [code, {"where": where, "mode": mode}, CALL_TIMEOUT_MS],
        )
        answer = json.loads(text)
        if not answer["ok"]:
            tail = "\n".join(self.console[-20:])
            raise AssertionError(f"Python in {where}/{mode} failed:\n{answer['error']}\n--- console tail:\n{tail}")
        return answer["result"]


@pytest.fixture(scope="module")
def harness(server):
    if not os.path.exists(CHROMIUM):
        _missing(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    if not (PYODIDE / "pyodide.mjs").is_file():
        _missing(f"no Pyodide at {PYODIDE} (npm ci --prefix tests/browser)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        _missing(f"the playwright Python package is missing ({exc})")

    pw = sync_playwright().start()
    browser = None
    try:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context()
        requests, console = [], []
        context.on("request", lambda r: requests.append(r.url))
        page = context.new_page()
        page.on("console", lambda m: console.append(f"[{m.type}] {m.text}"))
        page.on("pageerror", lambda e: console.append(f"[pageerror] {e}"))
        page.goto(f"{server}/index.html")
        adapter = page.evaluate(
            """async () => {
                if (!navigator.gpu) return "no navigator.gpu";
                const a = await navigator.gpu.requestAdapter();
                return a ? `ok ${a.info.vendor} ${a.info.architecture}` : "null adapter";
            }"""
        )
        if not adapter.startswith("ok"):
            _missing(f"Chromium has no WebGPU adapter here: {adapter}")
        h = Harness(page, server, requests, console)
        try:
            h.boot_ms = page.evaluate(
                """(ms) => Promise.race([window.harnessReady,
                    new Promise((_, reject) => setTimeout(() => reject(new Error(`no boot in ${ms} ms`)), ms))])""",
                120_000,
            )
        except Exception as exc:
            raise AssertionError(f"the harness did not boot: {exc}\n" + "\n".join(console[-20:])) from exc
        yield h
    finally:
        if browser is not None:
            browser.close()
        pw.stop()


def _close(got, expected):
    assert len(got) == len(expected)
    bad = [(i, g, e) for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not bad, f"{len(bad)} of {len(expected)} values differ, first: {bad[:5]}"


def _check_kernel(res):
    _close(res["y"], EXPECTED_AFFINE)
    assert res["y_bytes_8_18"] == struct.pack("<3f", *EXPECTED_AFFINE[2:5])[:10].hex()
    assert res["ragged"] == "0102030405060000"
    assert res["sizes"] == [256 + 4 * N, 4 * N]
    assert res["pending_errors"] == []


# -- (a) page and (b) worker: the synchronous forms block through JSPI -------------------------


@pytest.mark.parametrize("where", ["page", "worker"])
def test_kernel_blocking(harness, where):
    """Plain synchronous Python (no await) does the whole round trip where JSPI is available."""
    code = program('res = {"can_run_sync": can_run_sync(), "can_block": tb.can_block()}\n', kernel(True), "res\n")
    res = harness.py(code, where=where, mode="async")
    assert res["can_run_sync"] is True and res["can_block"] is True
    _check_kernel(res)


@pytest.mark.parametrize("where", ["page", "worker"])
def test_prepared_dispatches(harness, where):
    """``prepare_dispatches`` / ``submit_dispatches`` (a kept GroupNorm recipe's call): two dispatches in
    order (z = 2 y + 1 reads the y = 2 x + 1 the first wrote), submitted again after the outputs were
    zeroed; through the one JS function, and through the Python loop a page that cannot evaluate JS gets."""
    res = harness.py(
        program(
            """
            dev = tb.request_device({})
            nbytes = 4 * N
            xb, yb, zb = tb.create_buffer(dev, nbytes), tb.create_buffer(dev, nbytes), tb.create_buffer(dev, nbytes)
            tb.write_buffer(dev, xb, 0, struct.pack(f"<{N}f", *XS))
            pipe = tb.create_pipeline(dev, WGSL_AFFINE, "main", ["read", "read_write"])
            groups = ((N + 63) // 64, 1, 1)
            pairs = ((xb, yb), (yb, zb))
            steps = [(pipe, tb.bind(dev, pipe, [(a, 0, nbytes), (b, 0, nbytes)]), groups) for a, b in pairs]
            out = {}
            for route in ("js", "python"):
                if route == "python":
                    out["js_made"] = tb._submit_js[0] is not None  # the first round went through JS
                    tb._submit_js[:] = [None]
                prepared = tb.prepare_dispatches(dev, steps)
                for k in range(2):
                    for b in (yb, zb):
                        tb.write_buffer(dev, b, 0, bytes(nbytes))
                    tb.submit_dispatches(dev, prepared)
                    tb.wait(dev)
                    out[f"{route}{k}"] = list(struct.unpack(f"<{N}f", tb.read_buffer(dev, zb, 0, nbytes)))
            out["js_function"] = route == "python" and tb._submit_js == [None]
            out["errors"] = list(dev.errors)
            out
            """
        ),
        where=where,
    )
    assert res["js_made"] and res["js_function"] and res["errors"] == []
    expected = [f32(2.0 * y + 1.0) for y in EXPECTED_AFFINE]
    for key in ("js0", "js1", "python0", "python1"):
        _close(res[key], expected)


@pytest.mark.parametrize("where", ["page", "worker"])
def test_device_description(harness, where):
    res = harness.py(
        program(
            """
            dev = tb.request_device({})
            no_f16 = tb.request_device({"want_f16": False})
            {"info": dev.info, "features": sorted(dev.features), "adapter_features": sorted(dev.adapter_features),
             "limits": dev.limits, "adapter_limits": tb._limits(dev.adapter.limits), "lost": dev.lost,
             "no_f16_features": sorted(no_f16.features), "name": tb.NAME, "import_error": tb.import_error()}
            """
        ),
        where=where,
    )
    info = res["info"]
    assert set(info) == {"adapter", "vendor", "description", "backend", "adapter_type", "transport"}
    assert info["transport"] == res["name"] == "navigator.gpu"
    assert info["adapter"] and info["backend"]
    assert info["adapter_type"] in {"CPU", "DiscreteGPU", "IntegratedGPU", "unknown"}
    if "swiftshader" in info["adapter"].lower():
        assert info["adapter_type"] == "CPU"  # a software adapter: numr_web picks CPU-friendly work shapes
    assert res["import_error"] is None and res["lost"] is False

    limits, adapter_limits = res["limits"], res["adapter_limits"]
    assert all(re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", k) for k in limits), sorted(limits)
    for key, webgpu_default in {
        "max-storage-buffer-binding-size": 128 << 20,
        "max-buffer-size": 256 << 20,
        "max-compute-invocations-per-workgroup": 256,
        "max-compute-workgroup-storage-size": 16384,
        "max-storage-buffers-per-shader-stage": 8,
        "max-compute-workgroups-per-dimension": 65535,
    }.items():
        assert isinstance(limits[key], int) and limits[key] >= webgpu_default, (key, limits.get(key))
    for key in (
        "max-buffer-size",
        "max-storage-buffer-binding-size",
        "max-compute-workgroup-storage-size",
        "max-compute-invocations-per-workgroup",
    ):
        assert limits[key] == adapter_limits[key], f"{key} not raised to the adapter's maximum"
    # kept at WebGPU's default, so a kernel that needs more fails on every adapter alike
    assert limits["max-storage-buffers-per-shader-stage"] == 8

    features, adapter_features = set(res["features"]), set(res["adapter_features"])
    assert features <= adapter_features
    assert ("timestamp-query" in features) == ("timestamp-query" in adapter_features)
    assert ("shader-f16" in features) == ("shader-f16" in adapter_features)
    assert "shader-f16" not in res["no_f16_features"]


# -- (c) blocking unavailable: plain runPython from a JS callback, and a Pyodide without JSPI ----


def test_callback_context_cannot_block(harness):
    """Python entered through plain runPython from a timer callback: can_run_sync() is false."""
    first = program(
        """
        res = {"can_run_sync": can_run_sync(), "can_block": tb.can_block(),
               "is_runtime_error": issubclass(tb.BlockingUnavailable, RuntimeError)}
        try:
            tb.request_device({})
            res["request_device"] = "returned"
        except tb.BlockingUnavailable as exc:
            res["request_device"] = str(exc)
        """,
        coroutine(
            "main",
            kernel(False),
            """
            global cb_dev, cb_buf
            cb_dev, cb_buf = dev, yb
            return res
            """,
        ),
        "main()\n",
    )
    res = harness.py(first, where="page", mode="callback")
    assert res["can_run_sync"] is False and res["can_block"] is False
    assert res["is_runtime_error"] is True
    assert "`await numr_web.webgpu.init()`" in res["request_device"], res["request_device"]
    _check_kernel(res)

    second = """
import transport_browser as tb
from pyodide.ffi import can_run_sync
res = {"can_run_sync": can_run_sync()}
for name, call in [("read_buffer", lambda: tb.read_buffer(cb_dev, cb_buf, 0, 16)), ("wait", lambda: tb.wait(cb_dev))]:
    try:
        call()
        res[name] = "returned"
    except tb.BlockingUnavailable as exc:
        res[name] = str(exc)

async def main():
    res["read_buffer_async"] = (await tb.read_buffer_async(cb_dev, cb_buf, 0, 16)).hex()
    return res

main()
"""
    res = harness.py(second, where="page", mode="callback")
    assert res["can_run_sync"] is False
    assert "`await array.tobytes_async()`" in res["read_buffer"], res["read_buffer"]
    assert "wait_async" in res["wait"], res["wait"]
    assert res["read_buffer_async"] == struct.pack("<4f", *EXPECTED_AFFINE[:4]).hex()


def test_worker_without_jspi(harness):
    """A Pyodide that cannot block at all (as in a browser without JSPI): the awaitable forms do everything."""
    code = program(
        """
        import js
        res = {"can_run_sync": can_run_sync(), "suspending": hasattr(js.WebAssembly, "Suspending")}
        for name, call in [("request_device", lambda: tb.request_device({}))]:
            try:
                call()
                res[name] = "returned"
            except tb.BlockingUnavailable as exc:
                res[name] = str(exc)
        """,
        kernel(False),
        """
        try:
            tb.read_buffer(dev, yb, 0, 16)
            res["read_buffer"] = "returned"
        except tb.BlockingUnavailable as exc:
            res["read_buffer"] = str(exc)
        res
        """,
    )
    res = harness.py(code, where="worker-nojspi", mode="async")
    assert res["suspending"] is False and res["can_run_sync"] is False
    assert "`await numr_web.webgpu.init()`" in res["request_device"], res["request_device"]
    assert "`await array.tobytes_async()`" in res["read_buffer"], res["read_buffer"]
    _check_kernel(res)


# -- device loss and uncaptured errors ---------------------------------------------------------


@pytest.mark.parametrize("where", ["page", "worker-nojspi"])
def test_device_loss(harness, where):
    code = program(
        """
        dev = await tb.request_device_async({})
        buf = tb.create_buffer(dev, 64)
        res = {"lost_before": dev.lost}
        tb.lose_device(dev)
        res["lost_at_once"] = dev.lost
        for _ in range(500):  # the device.lost promise settles on the JS event loop
            if dev.lost:
                break
            await asyncio.sleep(0.01)
        res["lost"] = dev.lost
        res["reason"] = list(dev.lost_reason or ())
        errors = []
        for name, call in [("create_buffer", lambda: tb.create_buffer(dev, 64)),
                           ("write_buffer", lambda: tb.write_buffer(dev, buf, 0, b"abcd"))]:
            try:
                call()
                errors.append([name, "returned", None, False])
            except Exception as exc:
                errors.append([name, type(exc).__name__, str(exc), tb.is_device_lost(exc)])
        try:
            await tb.read_buffer_async(dev, buf, 0, 16)
            errors.append(["read_buffer_async", "returned", None, False])
        except Exception as exc:
            errors.append(["read_buffer_async", type(exc).__name__, str(exc), tb.is_device_lost(exc)])
        res["errors"] = errors
        res["unrelated"] = tb.is_device_lost(RuntimeError("WebGPU error: GPUValidationError: bad binding"))
        res
        """
    )
    res = harness.py(code, where=where)
    assert res["lost_before"] is False
    assert res["lost"] is True, "device.lost never set dev.lost"
    assert res["reason"][0] == "destroyed", res["reason"]
    for name, kind, message, recognised in res["errors"]:
        assert kind == "RuntimeError" and recognised, (name, kind, message)
    assert res["unrelated"] is False


def test_uncaptured_errors_blocking(harness):
    """A bad dispatch surfaces at the next wait; a bad WGSL at create_pipeline (error scope + JSPI)."""
    code = program(
        """
        dev = tb.request_device({})
        xb = tb.create_buffer(dev, 4096)
        yb = tb.create_buffer(dev, 4096)
        pipe = tb.create_pipeline(dev, WGSL_AFFINE, "main", ["read", "read_write"])
        res = {}
        tb.dispatch(dev, pipe, [(xb, 0, 6), (yb, 0, 4096)], (1, 1, 1))  # binding size not a multiple of 4
        try:
            tb.wait(dev)
            res["wait"] = "returned"
        except RuntimeError as exc:
            res["wait"] = str(exc)
        res["after"] = tb.read_buffer(dev, yb, 0, 4).hex()  # the error was raised once, not kept
        try:
            tb.create_pipeline(dev, "fn broken( {", "main", ["read"])
            res["bad_wgsl"] = "returned"
        except RuntimeError as exc:
            res["bad_wgsl"] = str(exc)
        tb.wait(dev)
        res["pending"] = list(dev.errors)
        res
        """
    )
    res = harness.py(code, where="page")
    assert res["wait"].startswith("WebGPU error: GPUValidationError") and "multiple of 4" in res["wait"], res["wait"]
    assert res["after"] == "00000000"
    assert res["bad_wgsl"].startswith("WebGPU error: GPUValidationError") and "WGSL" in res["bad_wgsl"]
    assert res["pending"] == []


def test_uncaptured_errors_without_blocking(harness):
    """Where nothing can block, the errors arrive on the event loop and the next call raises them."""
    code = program(
        """
        dev = await tb.request_device_async({})
        xb = tb.create_buffer(dev, 4096)
        yb = tb.create_buffer(dev, 4096)
        pipe = tb.create_pipeline(dev, WGSL_AFFINE, "main", ["read", "read_write"])
        res = {}
        tb.dispatch(dev, pipe, [(xb, 0, 6), (yb, 0, 4096)], (1, 1, 1))
        try:
            await tb.wait_async(dev)
            res["wait"] = "returned"
        except RuntimeError as exc:
            res["wait"] = str(exc)
        tb.create_pipeline(dev, "fn broken( {", "main", ["read"])  # cannot block: the error comes later
        for _ in range(500):
            if dev.errors:
                break
            await asyncio.sleep(0.01)
        try:
            tb.create_buffer(dev, 16)
            res["next_call"] = "returned"
        except RuntimeError as exc:
            res["next_call"] = str(exc)
        res["pending"] = list(dev.errors)
        res
        """
    )
    res = harness.py(code, where="worker-nojspi")
    assert res["wait"].startswith("WebGPU error: GPUValidationError") and "multiple of 4" in res["wait"], res["wait"]
    assert res["next_call"].startswith("WebGPU error: GPUValidationError") and "WGSL" in res["next_call"]
    assert res["pending"] == []


def test_offline(harness):
    """Every request the page and its workers made went to the test's own server."""
    assert harness.requests, "no requests recorded"
    foreign = [u for u in harness.requests if not u.startswith(harness.base + "/") and not u.startswith("data:")]
    assert not foreign, foreign
    assert any(u.endswith("/pyodide.asm.wasm") for u in harness.requests)
    failed = harness.page.evaluate(
        "() => fetch('https://cdn.jsdelivr.net/pyodide/').then(() => 'fetched', (e) => 'failed: ' + e)"
    )
    assert failed.startswith("failed"), failed


# -- on desktop CPython -------------------------------------------------------------------------


def test_desktop_import():
    """The module imports standalone on CPython (no numr_web, no NumPy) and says why it is unusable."""
    code = textwrap.dedent(
        f"""
        import importlib.util, json, sys
        spec = importlib.util.spec_from_file_location("transport_browser", {str(TRANSPORT)!r})
        tb = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tb)
        try:
            tb.request_device({{}})
            req = "returned"
        except RuntimeError as exc:
            req = type(exc).__name__ + ": " + str(exc)
        print(json.dumps({{"import_error": tb.import_error(), "can_block": tb.can_block(), "request_device": req,
                          "name": tb.NAME, "lost": tb.is_device_lost(RuntimeError("WebGPU device lost (destroyed)")),
                          "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "numr_web", "js",
                                                                                        "pyodide"))}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    res = json.loads(out.stdout)
    assert "not running under Pyodide" in res["import_error"]
    assert res["can_block"] is False
    assert res["request_device"].startswith("RuntimeError: WebGPU is not usable here: not running under Pyodide")
    assert res["name"] == "navigator.gpu" and res["lost"] is True
    assert res["loaded"] == []


@pytest.mark.parametrize("where", ["page", "worker", "worker-nojspi"])
def test_pyodide_version(harness, where):
    """Each context booted the pinned Pyodide (tests/browser/package.json) from the local server."""
    pinned = json.loads((HERE / "package.json").read_text())["dependencies"]["pyodide"]
    got = harness.py("import pyodide, sys\n[pyodide.__version__, sys.platform]", where=where)
    assert got == [pinned, "emscripten"]
    assert set(harness.boot_ms) == {"page", "worker", "worker-nojspi"}
    print(f"pyodide {pinned} boot ms:", harness.boot_ms)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))

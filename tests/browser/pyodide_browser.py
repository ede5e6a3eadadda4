"""numr_web's wheel inside Pyodide in headless Chromium, offline: shared by the tests and scripts/browser-bench.

* ``build_wheel(dest)`` builds the pure wheel from a snapshot of the working tree (pyproject.toml,
  README.md, numr_web/ without caches), so the build writes nothing into the checkout:
  ``pip wheel --no-deps --no-build-isolation``, or with build isolation where the installed
  setuptools cannot make wheels (older than 70.1 and no ``wheel`` package).
* ``Server`` serves tests/browser/ (the harness page, its worker, the npm Pyodide), the browser
  transport file the harness boots with (/numr/transport_browser.py) and the wheel
  (/wheels/<name>), on 127.0.0.1.
* ``Browser`` launches Debian's Chromium through the Python ``playwright`` package with WebGPU
  on and every host but 127.0.0.1 unresolvable, opens the harness page and runs Python in one of
  its contexts (see harness.mjs: page, worker, worker-nojspi; mode async or callback).
* ``INSTALL`` is the Python that installs the served wheel into a context's Pyodide with
  ``pyodide.unpackArchive`` (no micropip: the npm core has none, nor NumPy).

``prerequisites()`` names what is missing (None when all is there), so callers can skip or fail.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
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

# Installs the wheel served at WHEEL_URL into this context's Pyodide and answers what it installed.
# (unpackArchive extracts into the working directory unless told where: site-packages here.)
INSTALL = """
import importlib, importlib.metadata, js, pyodide_js, sysconfig
from pyodide.ffi import to_js
_resp = await js.fetch(WHEEL_URL)
if not _resp.ok:
    raise RuntimeError(f"fetching {WHEEL_URL} failed: {_resp.status}")
_opts = to_js({"extractDir": sysconfig.get_paths()["purelib"]}, dict_converter=js.Object.fromEntries)
pyodide_js.unpackArchive(await _resp.arrayBuffer(), "wheel", _opts)
importlib.invalidate_caches()
importlib.metadata.version("numr-web")
"""


def prerequisites(*, npm_ci=False) -> str | None:
    """None when Chromium, the npm Pyodide and playwright are there, else what is missing.

    With ``npm_ci`` a missing tests/browser/node_modules is installed first (``npm ci``).
    """
    if not os.path.exists(CHROMIUM):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set NUMR_WEB_CHROMIUM)"
    if not (PYODIDE / "pyodide.mjs").is_file() and npm_ci and shutil.which("npm"):
        subprocess.run(
            ["npm", "ci", "--prefix", str(HERE), "--no-audit", "--no-fund", "--loglevel=error"],
            capture_output=True,
            timeout=600,
        )
    if not (PYODIDE / "pyodide.mjs").is_file():
        return f"no Pyodide at {PYODIDE} (npm ci --prefix tests/browser)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"the playwright Python package is missing ({exc}; pip install playwright, never `playwright install`)"
    return None


def build_wheel(dest) -> pathlib.Path:
    """Build numr_web's wheel from a copy of the working tree into ``dest``; returns its path."""
    dest = pathlib.Path(dest)
    with tempfile.TemporaryDirectory(prefix="numr-web-src-") as tmp:
        src = pathlib.Path(tmp)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, src / name)
        shutil.copytree(
            ROOT / "numr_web",
            src / "numr_web",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc"),
        )
        cmd = [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-w", str(dest), "-q"]
        out = subprocess.run(cmd + ["--no-build-isolation"], cwd=src, capture_output=True, text=True, timeout=600)
        if out.returncode != 0 and "invalid command 'bdist_wheel'" in out.stdout + out.stderr:
            # setuptools < 70.1 without the `wheel` package here: let pip fetch a build backend that has it
            out = subprocess.run(cmd, cwd=src, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"pip wheel failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    wheels = sorted(dest.glob("numr_web-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one numr_web wheel in {dest}, found {[w.name for w in wheels]}")
    return wheels[0]


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".mjs": "text/javascript",
        ".js": "text/javascript",
        ".wasm": "application/wasm",
        ".json": "application/json",
        ".py": "text/x-python",
        ".zip": "application/zip",
        ".whl": "application/zip",
    }

    def __init__(self, *args, files, headers, **kwargs):
        self.files = files
        self.extra_headers = headers
        super().__init__(*args, **kwargs)

    def translate_path(self, path):
        path = path.split("?", 1)[0].split("#", 1)[0]
        if path in self.files:
            return str(self.files[path])
        return super().translate_path(path)

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        for key, value in self.extra_headers.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, *args):
        pass


# Cross-origin isolation: performance.now() then ticks in 5 us steps instead of 100 us.
ISOLATED = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}


class Server:
    """tests/browser/ at /, plus ``files`` ({url path: local path}) on 127.0.0.1, in a thread.

    ``headers`` go on every response (``ISOLATED`` for a finer clock).
    """

    def __init__(self, files=None, headers=None):
        files = {"/numr/transport_browser.py": TRANSPORT, **(files or {})}
        handler = functools.partial(_Handler, files=files, headers=dict(headers or {}), directory=str(HERE))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class PythonError(AssertionError):
    """Python in the browser raised; the message holds its traceback and the console's tail."""


class Browser:
    """Chromium on the harness page; ``py`` runs Python in one of its contexts."""

    def __init__(self, base, *, query="", call_timeout_ms=120_000, boot_timeout_ms=120_000):
        from playwright.sync_api import sync_playwright

        self.base = base
        self.call_timeout_ms = call_timeout_ms
        self.requests, self.console = [], []
        self._pw = sync_playwright().start()
        self._browser = None
        try:
            self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            self.version = self._browser.version
            context = self._browser.new_context()
            context.on("request", lambda r: self.requests.append(r.url))
            self.page = context.new_page()
            self.page.on("console", lambda m: self.console.append(f"[{m.type}] {m.text}"))
            self.page.on("pageerror", lambda e: self.console.append(f"[pageerror] {e}"))
            self.page.goto(f"{base}/index.html{query}")
            self.adapter = self.page.evaluate(
                """async () => {
                    if (!navigator.gpu) return "no navigator.gpu";
                    const a = await navigator.gpu.requestAdapter();
                    return a ? `ok ${a.info.vendor} ${a.info.architecture} ${a.info.description}` : "null adapter";
                }"""
            )
            self.boot_ms = None
            if self.adapter.startswith("ok"):
                try:
                    self.boot_ms = self.page.evaluate(
                        """(ms) => Promise.race([window.harnessReady, new Promise((_, reject) =>
                            setTimeout(() => reject(new Error(`no boot in ${ms} ms`)), ms))])""",
                        boot_timeout_ms,
                    )
                except Exception as exc:
                    raise RuntimeError(f"the harness did not boot: {exc}\n" + "\n".join(self.console[-20:])) from exc
        except BaseException:
            self.close()
            raise

    def py(self, code, where="page", mode="async", timeout_ms=None):
        """Run ``code`` there; its last expression (or the value its returned coroutine gives) comes back as JSON."""
        ms = timeout_ms or self.call_timeout_ms
        text = self.page.evaluate(
            """([code, opts, ms]) => Promise.race([
                window.runPython(code, opts),
                new Promise((_, reject) => setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms)),
            ])""",
            [code, {"where": where, "mode": mode}, ms],
        )
        answer = json.loads(text)
        if not answer["ok"]:
            tail = "\n".join(self.console[-20:])
            raise PythonError(f"Python in {where}/{mode} failed:\n{answer['error']}\n--- console tail:\n{tail}")
        return answer["result"]

    def install(self, wheel_url, where):
        """Install the wheel at ``wheel_url`` into that context; returns the installed version."""
        return self.py(f"WHEEL_URL = {wheel_url!r}\n" + INSTALL, where=where)

    def close(self):
        if self._browser is not None:
            self._browser.close()
            self._browser = None
        if self._pw is not None:
            self._pw.stop()
            self._pw = None

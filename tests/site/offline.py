"""The playground offline: its site on 127.0.0.1, Pyodide's CDN answered from a local folder, Chromium.

Used by tests/test_site.py.

* ``cdn_folder(dest, cache)`` makes the folder that stands in for
  ``https://cdn.jsdelivr.net/pyodide/v{PYODIDE_VERSION}/full/``: the npm ``pyodide`` core of
  tests/browser (the same version) plus the pure wheels the kernel loads from the CDN
  (``KERNEL_PACKAGES`` and what they depend on in Pyodide's lock), downloaded from PyPI into
  ``cache`` with ``pip download``; the lock's ``file_name`` and ``sha256`` are rewritten for those
  files.  NumPy (a WebAssembly wheel only Pyodide's CDN has) is not in it.
* ``Playground(base, cdn)`` is Debian's Chromium (the Python ``playwright`` package, WebGPU on, every
  host but 127.0.0.1 unresolvable) whose requests to the CDN are answered from that folder; it
  records every failed request.  ``repl(cells)`` opens the site's REPL app with ``cells`` as its
  ``code=`` parameters and waits for a sentinel output, timing the first output and the Explorer.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import re
import shutil
import subprocess
import sys
import time
import urllib.parse

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import pyodide_browser as pb  # noqa: E402

from numr_web.site import PYODIDE_VERSION  # noqa: E402

CDN = f"https://cdn.jsdelivr.net/pyodide/v{PYODIDE_VERSION}/full/"
#: what the kernel loads from Pyodide's distribution by name: micropip and IPython at start,
#: jedi for completion, typing-extensions for anywidget (their dependencies follow from the lock)
KERNEL_PACKAGES = ("micropip", "ipython", "jedi", "typing-extensions")
CORE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide.js")
SENTINEL = "NUMR-WEB-DONE"
#: the Explorer's statistics table, drawn by its front-end once results arrive
EXPLORER_DRAWN = '[data-testid="group-stats"] tbody tr'


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def kernel_wheels(lock: dict) -> dict:
    """{lock name: package entry} for KERNEL_PACKAGES and their dependencies in the lock."""
    packages = {_norm(k): (k, v) for k, v in lock["packages"].items()}
    found, todo = {}, list(KERNEL_PACKAGES)
    while todo:
        name = _norm(todo.pop())
        if name in found:
            continue
        if name not in packages:
            raise KeyError(f"{name} is not in Pyodide {PYODIDE_VERSION}'s lock")
        key, entry = packages[name]
        found[name] = (key, entry)
        todo.extend(entry.get("depends", []))
    return {key: entry for key, entry in found.values()}


def cdn_folder(dest: pathlib.Path, cache: pathlib.Path) -> pathlib.Path:
    """The stand-in for Pyodide's CDN in ``dest`` (wheels downloaded once into ``cache``)."""
    core = pb.PYODIDE
    version = json.loads((core / "package.json").read_text())["version"]
    if version != PYODIDE_VERSION:
        raise RuntimeError(f"tests/browser has pyodide {version}, the site's kernel loads {PYODIDE_VERSION}")
    lock = json.loads((core / "pyodide-lock.json").read_text())
    wanted = kernel_wheels(lock)
    for key, entry in wanted.items():
        if not entry["file_name"].endswith("-none-any.whl"):
            raise RuntimeError(f"{key} is not a pure wheel in the lock ({entry['file_name']}): PyPI cannot stand in")
    cache.mkdir(parents=True, exist_ok=True)

    def cached(entry):
        stem = f"{_norm(entry['name']).replace('-', '_')}-{entry['version']}-"
        return [p for p in cache.glob("*.whl") if p.name.lower().startswith(stem.lower())]

    missing = [f"{e['name']}=={e['version']}" for e in wanted.values() if not cached(e)]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        cmd += ["--platform", "any", "--implementation", "py", "--abi", "none", "--python-version", "3.14"]
        out = subprocess.run(cmd + ["-d", str(cache), *missing], capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"pip download {' '.join(missing)} failed:\n{out.stderr[-2000:]}")
    dest.mkdir(parents=True, exist_ok=True)
    for name in CORE_FILES:
        shutil.copy2(core / name, dest / name)
    for key, entry in wanted.items():
        (wheel,) = cached(entry)
        shutil.copy2(wheel, dest / wheel.name)
        lock["packages"][key]["file_name"] = wheel.name
        lock["packages"][key]["sha256"] = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (dest / "pyodide-lock.json").write_text(json.dumps(lock))
    return dest


_TYPES = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json"}

READ_OUTPUTS = """() => Array.from(document.querySelectorAll('.jp-OutputArea-output')).map(e => ({
    mime: e.getAttribute('data-mime-type') || '', text: e.innerText }))"""


class Playground:
    """Chromium on the served site, offline but for the CDN stand-in (a context manager)."""

    def __init__(self, base: str, cdn: pathlib.Path):
        self.base = base.rstrip("/")
        self.cdn = pathlib.Path(cdn)
        self.failed, self.cdn_hits, self.console = [], [], []

    def __enter__(self):
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=pb.CHROMIUM, args=pb.CHROMIUM_ARGS)
        except BaseException:
            self._pw.stop()
            raise
        self.version = self._browser.version
        return self

    def __exit__(self, *exc):
        self._browser.close()
        self._pw.stop()

    def _answer(self, route):
        path = urllib.parse.urlparse(route.request.url).path
        name = path.split(f"/v{PYODIDE_VERSION}/full/", 1)[-1]
        local = self.cdn / name
        self.cdn_hits.append(name)
        if "/" in name or not local.is_file():
            route.fulfill(status=404, body=f"{name} is not in the offline stand-in for Pyodide's CDN")
            return
        kind = _TYPES.get(local.suffix, "application/octet-stream")
        headers = {"content-type": kind, "access-control-allow-origin": "*"}
        route.fulfill(status=200, body=local.read_bytes(), headers=headers)

    def open(self, path: str):
        """A fresh context (a cold cache) on ``path`` of the site; returns (page, t0 = monotonic time of goto)."""
        context = self._browser.new_context(viewport={"width": 1400, "height": 1000})
        context.route(CDN + "**", self._answer)
        context.on("requestfailed", lambda r: self.failed.append(f"{r.url} ({r.failure})"))
        context.on("response", lambda r: r.status >= 400 and self.failed.append(f"{r.url} (HTTP {r.status})"))
        page = context.new_page()
        page.on("console", lambda m: self.console.append(f"[{m.type}] {m.text}"))
        page.on("pageerror", lambda e: self.console.append(f"[pageerror] {e}"))
        t0 = time.monotonic()
        page.goto(f"{self.base}/{path}")
        return page, t0

    def repl(self, cells, *, wait_explorer=False, timeout_s=240):
        """Run ``cells`` in the REPL app (one ``code=`` each, then a sentinel); returns a dict with
        ``outputs`` ([{mime, text}]), ``first_output_s``, ``explorer_s`` (None unless waited for),
        ``done_s``, ``page``."""
        query = "&".join("code=" + urllib.parse.quote(c) for c in [*cells, f"print({SENTINEL!r})"])
        page, t0 = self.open(f"repl/index.html?kernel=python&toolbar=1&{query}")
        deadline = t0 + timeout_s
        first = explorer = done = None
        while time.monotonic() < deadline:
            outputs = page.evaluate(READ_OUTPUTS)
            now = time.monotonic() - t0
            if first is None and outputs:
                first = now
            if wait_explorer and explorer is None and page.query_selector(EXPLORER_DRAWN) is not None:
                explorer = now
            if done is None and any(SENTINEL in o["text"] for o in outputs):
                done = now
            if done is not None and (explorer is not None or not wait_explorer):
                break
            page.wait_for_timeout(100)
        outputs = page.evaluate(READ_OUTPUTS)
        if done is None or (wait_explorer and explorer is None):
            what = "the sentinel output" if done is None else "the Explorer's statistics table"
            texts = "\n".join(o["text"][-600:] for o in outputs)
            raise AssertionError(
                f"no {what} within {timeout_s} s\n--- outputs:\n{texts}\n--- console:\n" + "\n".join(self.console[-25:])
            )
        return {"outputs": outputs, "first_output_s": first, "explorer_s": explorer, "done_s": done, "page": page}

    def lab_run_all(self, notebook: str, done_text: str, timeout_s=300):
        """Open ``notebook`` in JupyterLab (the playground's lab app), choose Run > Run All Cells as soon
        as it shows, and wait until an output holds ``done_text`` and the Explorer is drawn.

        Returns ``outputs`` (textContent: JupyterLab renders cells outside the view lazily),
        ``kernel`` (the kernel's name in the toolbar), ``first_output_s``, ``explorer_s``, ``done_s``, ``page``.
        """
        page, t0 = self.open(f"lab/index.html?path={urllib.parse.quote(notebook)}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=timeout_s * 1000)
        page.click(".lm-MenuBar-item:has-text('Run')")
        page.click(".lm-Menu-item[data-command='runmenu:run-all']")
        read = READ_OUTPUTS.replace("e.innerText", "e.textContent")
        deadline = t0 + timeout_s
        first = explorer = done = None
        while time.monotonic() < deadline and (done is None or explorer is None):
            outputs = page.evaluate(read)
            now = time.monotonic() - t0
            if first is None and any(o["text"].strip() for o in outputs):
                first = now
            if explorer is None and page.query_selector(EXPLORER_DRAWN) is not None:
                explorer = now
            if done is None and any(done_text in o["text"] for o in outputs):
                done = now
            page.wait_for_timeout(100)
        outputs = page.evaluate(read)
        kernel = page.evaluate("() => document.querySelector('.jp-KernelName')?.textContent || ''")
        if done is None or explorer is None:
            texts = "\n".join(o["text"][-600:] for o in outputs)
            raise AssertionError(
                f"{notebook} in lab: no {done_text!r} output or no Explorer within {timeout_s} s (kernel: "
                f"{kernel})\n--- outputs:\n{texts}\n--- console:\n" + "\n".join(self.console[-25:])
            )
        return {
            "outputs": outputs,
            "kernel": kernel,
            "first_output_s": first,
            "explorer_s": explorer,
            "done_s": done,
            "page": page,
        }


def errors(outputs) -> list[str]:
    """Output texts that show an exception (a traceback in the REPL's stderr rendering)."""
    return [o["text"] for o in outputs if "Traceback" in o["text"] or re.search(r"^\w*Error\b", o["text"], re.M)]


def tagged(outputs, tag: str):
    """The JSON printed after ``tag`` in the outputs (the last one)."""
    for o in reversed(outputs):
        for line in reversed(o["text"].splitlines()):
            if line.startswith(tag):
                return json.loads(line[len(tag) :])
    raise AssertionError(f"no output line starting with {tag!r}")

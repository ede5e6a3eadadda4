"""The playground offline: its site on 127.0.0.1, Pyodide's CDN answered from a local folder, Chromium.

Used by tests/test_site.py, scripts/playground-cold-start and scripts/explorer-latency --playground.

* ``cdn_folder(dest, cache)`` makes the folder that stands in for
  ``https://cdn.jsdelivr.net/pyodide/v{PYODIDE_VERSION}/full/``: the npm ``pyodide`` core of
  tests/browser (the same version) plus the pure wheels the kernel loads from the CDN
  (``KERNEL_PACKAGES`` and what they depend on in Pyodide's lock), downloaded from PyPI into
  ``cache`` with ``pip download``.  NumPy (a WebAssembly wheel only Pyodide's CDN has) is not in it:
  a request for it is answered 404 and recorded, so a test can see that the page asked for it.
* The site's own lock (``pypi/pyodide-lock.json``: every package of Pyodide's whole lock, at its CDN
  URL) is served as built, except that the entries of the wheels the stand-in holds get those
  wheels' names and sha256 (PyPI's files are not byte for byte the CDN's).
* ``Playground(base, cdn)`` is Debian's Chromium (the Python ``playwright`` package, WebGPU on unless
  ``webgpu=False``, every host but 127.0.0.1 unresolvable) whose requests to the CDN are answered from
  that folder; it records every failed request.  ``repl(cells)`` opens the site's REPL app with
  ``cells`` as its ``code=`` parameters; ``lab_run_all(notebook)`` opens a notebook in the lab and
  chooses Run All Cells, as a visitor does.
* ``served_site(tmp, notebooks)`` (the measuring scripts' start): the site built into ``tmp`` with
  ``notebooks``, served on 127.0.0.1, and the CDN stand-in; yields ``(base URL, cdn folder)``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import pyodide_browser as pb  # noqa: E402

from numr_web.site import PYODIDE_VERSION, SITE_LOCK  # noqa: E402

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
    """The stand-in for Pyodide's CDN in ``dest`` (wheels downloaded once into ``cache``); its
    ``pyodide-lock.json`` is the whole of Pyodide's, with the entries of the wheels it holds rewritten."""
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


@contextlib.contextmanager
def served_site(tmp: pathlib.Path, notebooks):
    """The site built in ``tmp`` with ``notebooks`` and served on 127.0.0.1 (a free port), with the CDN
    stand-in; yields ``(base URL, cdn folder)`` and stops the server on exit."""
    from numr_web import site

    site.build(tmp / "site", notebooks=notebooks, log=lambda *a: None)
    cdn = cdn_folder(tmp / "cdn", HERE / ".wheels")
    httpd = site.server(tmp / "site", 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", cdn
    finally:
        httpd.shutdown()


class Playground:
    """Chromium on the served site, offline but for the CDN stand-in (a context manager).

    ``failed``: requests that failed or were answered 400 or more, but for the CDN's; ``cdn_missing``:
    the CDN files the page asked for that the stand-in lacks (answered 404); ``console``: the pages'
    console messages and errors."""

    def __init__(self, base: str, cdn: pathlib.Path, *, webgpu: bool = True, playwright=None):
        self.base = base.rstrip("/")
        self._own = playwright is None  # a second Playground in the same thread shares the first one's driver
        self._pw = playwright
        self.cdn = pathlib.Path(cdn)
        self.webgpu = webgpu
        self.failed, self.cdn_hits, self.cdn_missing, self.console = [], [], [], []
        #: the "Select Kernel" dialogs accepted in ``lab_run_all`` (their text)
        self.dialogs = []
        stand_in = json.loads((self.cdn / "pyodide-lock.json").read_text())["packages"]
        #: lock key -> (file name, sha256) of the wheels the stand-in holds
        held = {k: e for k, e in stand_in.items() if (self.cdn / e["file_name"]).is_file()}
        self._held = {k: (e["file_name"], e["sha256"]) for k, e in held.items()}

    def __enter__(self):
        from playwright.sync_api import sync_playwright

        args = pb.CHROMIUM_ARGS if self.webgpu else [a for a in pb.CHROMIUM_ARGS if a != "--enable-unsafe-webgpu"]
        if self._own:
            self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=pb.CHROMIUM, args=args)
        except BaseException:
            if self._own:
                self._pw.stop()
            raise
        self.version = self._browser.version
        return self

    def __exit__(self, *exc):
        self._browser.close()
        if self._own:
            self._pw.stop()

    def _answer(self, route):
        path = urllib.parse.urlparse(route.request.url).path
        name = path.split(f"/v{PYODIDE_VERSION}/full/", 1)[-1]
        local = self.cdn / name
        self.cdn_hits.append(name)
        if "/" in name or not local.is_file():
            self.cdn_missing.append(name)
            route.fulfill(status=404, body=f"{name} is not in the offline stand-in for Pyodide's CDN")
            return
        kind = _TYPES.get(local.suffix, "application/octet-stream")
        headers = {"content-type": kind, "access-control-allow-origin": "*"}
        route.fulfill(status=200, body=local.read_bytes(), headers=headers)

    def _site_lock(self, route):
        """The site's lock as built, with the stand-in's own wheels (their names and hashes) for those it holds."""
        response = route.fetch()
        lock = response.json()
        for key, (file_name, sha256) in self._held.items():
            entry = lock["packages"].get(key)
            if entry and entry["file_name"].startswith(CDN):
                entry["file_name"], entry["sha256"] = CDN + file_name, sha256
        route.fulfill(response=response, body=json.dumps(lock))

    def _failure(self, url, why):
        if not url.startswith(CDN):  # the CDN's 404s are in cdn_missing
            self.failed.append(f"{url} ({why})")

    def open(self, path: str):
        """A fresh context (a cold cache) on ``path`` of the site; returns (page, t0 = monotonic time of goto)."""
        context = self._browser.new_context(viewport={"width": 1400, "height": 1000})
        context.route(CDN + "**", self._answer)
        context.route(f"{self.base}/{SITE_LOCK}*", self._site_lock)
        context.on("requestfailed", lambda r: self._failure(r.url, r.failure))
        context.on("response", lambda r: r.status >= 400 and self._failure(r.url, f"HTTP {r.status}"))
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

    def _answer_dialog(self, page) -> None:
        """A dialog over the lab: JupyterLab's "Select Kernel" (shown when a notebook opens before the
        kernel specs are known; it swallows clicks on the menu bar) is accepted with its preselected kernel,
        as a visitor does, and kept in ``dialogs``; any other dialog fails with its text."""
        dialog = page.query_selector(".jp-Dialog")
        if dialog is None:
            return
        text = " ".join(dialog.text_content().split())
        if "Select Kernel" not in text:
            raise AssertionError(f"an unexpected dialog over the lab: {text!r}")
        self.dialogs.append(text)
        # the accept button can be clicked before the dialog takes clicks (its kernel list still loading, on a
        # busy machine): CI's fresh-clone run on d03e8a6 saw the dialog stay 30 s after one click. A visitor
        # clicks again, and so does this, three times at most, 10 s apart
        for attempt in range(3):
            page.click(".jp-Dialog .jp-mod-accept")
            try:
                page.wait_for_selector(".jp-Dialog", state="detached", timeout=10_000)
                return
            except Exception:
                if attempt == 2:
                    raise

    def _choose_run_all(self, page, deadline: float) -> float:
        """Run > Run All Cells once the item is enabled (it is not until the notebook is the lab's current
        widget, and a click on a disabled item does nothing); returns the monotonic time it was chosen."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        item = ".lm-Menu-item[data-command='runmenu:run-all']"
        while True:
            self._answer_dialog(page)
            try:  # briefly: a dialog that opens meanwhile takes the click, and is answered on the next turn
                page.click(".lm-MenuBar-item:has-text('Run')", timeout=5000)
            except PlaywrightTimeout:
                if time.monotonic() > deadline:
                    raise
                continue
            page.wait_for_selector(item)
            if not page.eval_on_selector(item, "e => e.classList.contains('lm-mod-disabled')"):
                page.click(item)
                return time.monotonic()
            page.keyboard.press("Escape")
            if time.monotonic() > deadline:
                raise AssertionError("Run > Run All Cells stayed disabled")
            page.wait_for_timeout(200)

    def lab_run_all(self, notebook: str, *, explorer: bool = False, timeout_s=300):
        """Open ``notebook`` in JupyterLab (the playground's lab app), choose Run > Run All Cells as soon
        as it shows, as a visitor does, and wait until the run ends (every code cell ran, or one failed and
        the rest were not run) and, with ``explorer``, the Explorer is drawn.

        Returns ``outputs`` (textContent: JupyterLab renders cells outside the view lazily), ``prompts``
        (each code cell's "[n]:" or "[ ]:"), ``kernel`` (the kernel's name in the toolbar),
        ``first_output_s``, ``explorer_s``, ``done_s`` (seconds after page open), ``explorer_in_view``
        (pixels of the Explorer inside the notebook's visible area once done, with ``explorer``) and ``page``;
        the "Select Kernel" dialogs it accepted are in ``dialogs``.
        """
        page, t0 = self.open(f"lab/index.html?path={urllib.parse.quote(notebook)}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=timeout_s * 1000)
        deadline = t0 + timeout_s
        chosen = [self._choose_run_all(page, deadline)]
        read = READ_OUTPUTS.replace("e.innerText", "e.textContent")
        first = drawn = done = None
        prompts: list = []
        while time.monotonic() < deadline and (done is None or (explorer and drawn is None)):
            outputs = page.evaluate(read)
            self._answer_dialog(page)
            prompts = page.evaluate(PROMPTS)
            now = time.monotonic() - t0
            if prompts == ["[ ]:"] * len(prompts) and time.monotonic() - chosen[-1] > RUN_ALL_AGAIN_S:
                # nothing queued: the choice came before the notebook took it; a visitor chooses again
                chosen.append(self._choose_run_all(page, deadline))
            if first is None and any(o["text"].strip() for o in outputs):
                first = now
            if explorer and drawn is None and page.query_selector(EXPLORER_DRAWN) is not None:
                drawn = now
            ran = prompts and re.search(r"\d", prompts[0]) and not any("*" in p for p in prompts)
            if done is None and ran:
                done = now
            page.wait_for_timeout(100)
        outputs = page.evaluate(read)
        kernel = page.evaluate("() => document.querySelector('.jp-KernelName')?.textContent || ''")
        if done is None or (explorer and drawn is None):
            texts = "\n".join(o["text"][-600:] for o in outputs)
            what = "the run did not end" if done is None else "the Explorer was not drawn"
            dialog = page.evaluate("() => document.querySelector('.jp-Dialog')?.textContent || ''")
            raise AssertionError(
                f"{notebook} in lab: {what} within {timeout_s} s (kernel: {kernel}; prompts {prompts}; "
                f"Run All chosen {len(chosen)} times; dialog: {dialog!r}; accepted before: {self.dialogs})\n"
                f"--- outputs:\n{texts}\n--- console:\n" + "\n".join(self.console[-25:])
            )
        in_view = None
        if explorer:
            page.wait_for_timeout(500)  # let the layout settle after the last output
            in_view = page.evaluate(EXPLORER_IN_VIEW)
        return {
            "outputs": outputs,
            "prompts": prompts,
            "kernel": kernel,
            "first_output_s": first,
            "explorer_s": drawn,
            "done_s": done,
            "explorer_in_view": in_view,
            "page": page,
        }


#: seconds after choosing Run All with every prompt still "[ ]:" before choosing it again
RUN_ALL_AGAIN_S = 20


#: each code cell's execution prompt ("[3]:", "[*]:" while queued or running, "[ ]:" when not run)
PROMPTS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt'))
    .map(e => e.textContent.trim())"""
#: how many pixels of the Explorer's output lie inside the notebook's visible area
EXPLORER_IN_VIEW = """() => {
    const table = document.querySelector('[data-testid="group-stats"]');
    const out = table && table.closest('.jp-OutputArea-output');
    const view = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer')
        || document.querySelector('.jp-NotebookPanel .jp-Notebook');
    if (!out || !view) return 0;
    const a = out.getBoundingClientRect(), b = view.getBoundingClientRect();
    return Math.max(0, Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top));
}"""


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

"""The Explorer end to end: a real JupyterLab server, a CPython kernel, Debian's Chromium driven by Playwright.

Under CI=true a missing jupyterlab, ipykernel, anywidget, playwright, chromium or front-end bundle
fails the test; elsewhere it skips with the reason.  ``scripts/explorer-latency`` reuses the
helpers here (``JupyterLab``, ``browser``, ``run_explorer_cell``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from conftest import IN_CI

REPO = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
TOKEN = "numr-web-explorer-test"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-unsafe-webgpu",
]


#: what the JupyterLab test imports: (module, what to install)
LAB_MODULES = (
    ("jupyterlab", "jupyterlab"),
    ("ipykernel", "ipykernel"),
    ("anywidget", "anywidget"),
    ("nbformat", "nbformat"),
    ("playwright.sync_api", "the playwright Python package"),
)


def missing_requirements(modules=LAB_MODULES) -> list[str]:
    """What this machine lacks for an end-to-end test importing ``modules`` (empty when it can run)."""
    missing = []
    for module, what in modules:
        try:
            __import__(module)
        except ImportError:
            missing.append(f"{what} (pip install -e '.[dev]')")
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    if not (REPO / "numr_web" / "static" / "explorer.js").exists():
        missing.append("numr_web/static/explorer.js, the Explorer's front-end bundle (build widget/)")
    return missing


def require(what: str, modules=LAB_MODULES):
    """Skips the test (fails it under CI=true) with what is missing for it."""
    missing = missing_requirements(modules)
    if not missing:
        return
    why = f"the {what} needs " + "; ".join(missing)
    if IN_CI:
        pytest.fail(why + " (required under CI=true)")
    pytest.skip(why)


def require_lab():
    require("JupyterLab end-to-end test")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """A throwaway JupyterLab server on 127.0.0.1 (a context manager): its own config, data,
    runtime and root folders under ``base``, a fixed token, the repository first on the kernel's path."""

    def __init__(self, base: pathlib.Path):
        self.base = pathlib.Path(base)
        self.root = self.base / "root"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.base / "jupyterlab.log"
        self.proc = None

    def __enter__(self):
        for d in ("config", "data", "runtime", "ipython", "root", "home"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        # no news/announcement toast over the widget
        labconfig = self.base / "config" / "labconfig"
        labconfig.mkdir(parents=True, exist_ok=True)
        (labconfig / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
        )
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(self.base / "config"),
            JUPYTER_DATA_DIR=str(self.base / "data"),
            JUPYTER_RUNTIME_DIR=str(self.base / "runtime"),
            IPYTHONDIR=str(self.base / "ipython"),
            JUPYTER_PLATFORM_DIRS="1",
            PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            OPENBLAS_NUM_THREADS="1",
        )
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--port-retries=0",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={self.root}",
            "--ServerApp.open_browser=False",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--MappingKernelManager.default_kernel_name=python3",
        ]
        self._log = open(self.log_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=self.root)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({self.proc.returncode}):\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={TOKEN}", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.25)
        self.__exit__(None, None, None)
        raise RuntimeError(f"jupyter lab did not answer on {self.url} within 90 s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text()[-4000:]
        except OSError:
            return ""

    def __exit__(self, *exc):
        """Shut the server down cleanly (its API), then make sure the process is gone."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            req = urllib.request.Request(f"{self.url}/api/shutdown?token={TOKEN}", method="POST", data=b"")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(req, timeout=10).close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self._log.close()
        self.returncode = self.proc.returncode

    def write_notebook(self, name: str, cells: list[str]) -> str:
        import nbformat

        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, str(self.root / name))
        # start its kernel through the REST API first, so the page joins a running session
        # (no "Select Kernel" dialog, which JupyterLab shows when it opens a notebook too early)
        body = json.dumps({"path": name, "type": "notebook", "name": name, "kernel": {"name": "python3"}}).encode()
        req = urllib.request.Request(
            f"{self.url}/api/sessions?token={TOKEN}",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status in (200, 201), r.status
        return f"{self.url}/lab/tree/{name}?token={TOKEN}"


@contextlib.contextmanager
def browser(viewport=(1400, 1000)):
    """A Playwright page on Debian's Chromium (never `playwright install`)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = b.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            yield page
        finally:
            b.close()


def run_explorer_cell(page, url: str, timeout_ms: int = 180_000):
    """Open the notebook at ``url``, run its first cell, wait for the Explorer's statistics table.

    JupyterLab may still ask for a kernel after the page shows its kernel idle (a "Select Kernel" dialog that
    swallows the keystroke): the dialog is accepted and the cell run again while its prompt shows it never ran."""
    page.goto(url)
    cell = page.locator(".jp-Notebook .jp-Cell").first
    cell.wait_for(timeout=timeout_ms)
    idle = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
    deadline = time.monotonic() + timeout_ms / 1000
    while page.query_selector('[data-testid="group-stats"]') is None:
        accept = page.query_selector(".jp-Dialog .jp-mod-accept")
        if accept is not None:
            accept.click()
        elif page.query_selector(idle) is not None:
            prompt = cell.locator(".jp-InputPrompt").inner_text().strip()
            if prompt in ("[ ]:", ""):  # not run yet (or the keystroke went to a dialog)
                cell.locator(".cm-content").click()
                page.keyboard.press("Shift+Enter")
        if time.monotonic() > deadline:
            raise TimeoutError("the Explorer's statistics table did not appear")
        page.wait_for_timeout(250)


READ_TABLE = """() => {
  const t = document.querySelector('[data-testid="group-stats"]');
  if (!t) return null;
  return Array.from(t.querySelectorAll('tbody tr')).map(r => Array.from(r.children).map(c => c.textContent.trim()));
}"""


def read_group_stats(page):
    """The statistics table as {(n, g): (mean, rstd)}."""
    rows = page.evaluate(READ_TABLE) or []
    return {(int(n), int(g)): (float(m), float(r)) for n, g, m, r in rows}


def check_stats(table, mean, rstd):
    import numpy as np

    n, g = mean.shape
    assert sorted(table) == [(i, j) for i in range(n) for j in range(g)], sorted(table)
    got_m = np.array([[table[i, j][0] for j in range(g)] for i in range(n)])
    got_r = np.array([[table[i, j][1] for j in range(g)] for i in range(n)])
    np.testing.assert_allclose(got_m, mean, rtol=1e-5, atol=1e-6 * float(np.abs(mean).max() + 1e-30))
    np.testing.assert_allclose(got_r, rstd, rtol=1e-5)


#: each view's content (its text and every canvas's pixels), to tell that a change redrew it
SIGNATURES = """() => Object.fromEntries(['stats', 'cube', 'selected', 'images', 'gradients', 'invariants-fold']
  .map(t => { const e = document.querySelector(`.nw-body [data-testid="${t}"]`);
    return [t, e ? e.textContent + [...e.querySelectorAll('canvas')].map(c => c.toDataURL()).join() : null]; }))"""
DRAWN = "() => document.querySelector('.nw-body').dataset.drawn"


def _wait_redraw(page, version):
    page.wait_for_function(f"() => ({DRAWN})() !== {json.dumps(version)}", timeout=60_000)


def _run_cell(page, index):
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    out = cell.locator(".jp-OutputArea-output")
    out.wait_for(timeout=60_000)
    return out.inner_text().strip()


def _screenshot(page, path):
    widget = page.locator(".jp-OutputArea-output").first
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(path))
    print(f"widget screenshot: {path}")


def _theme(page, name, light):
    page.click(".lm-MenuBar-item:has-text('Settings')")
    page.hover(".lm-Menu-item:has-text('Theme')")
    page.click(f".lm-Menu-item:has-text('{name}')")
    page.wait_for_function(f"() => document.body.dataset.jpThemeLight === '{str(light).lower()}'", timeout=30_000)
    page.wait_for_timeout(500)


def _screenshots_for_readme(page, tmp_path):
    """When NUMR_WEB_UPDATE_SCREENSHOT is set: the Explorer as it opens, in JupyterLab's light theme and its dark
    one (Settings > Theme), into docs/explorer.png and docs/explorer-dark.png."""
    if not os.environ.get("NUMR_WEB_UPDATE_SCREENSHOT"):
        return
    _screenshot(page, tmp_path / "explorer.png")
    _theme(page, "JupyterLab Dark", False)
    _screenshot(page, tmp_path / "explorer-dark.png")
    _theme(page, "JupyterLab Light", True)
    for name in ("explorer.png", "explorer-dark.png"):
        shutil.copy(tmp_path / name, REPO / "docs" / name)


#: the Explorer the notebook shows: a generated input (the test process makes the same one for its numbers)
EXPLORER = dict(shape=(2, 16, 8, 8), num_groups=4, device="cpu")


def test_explorer_in_jupyterlab(tmp_path):
    require_lab()
    import numpy as np

    import numr_web

    x = np.frombuffer(numr_web.Explorer(**EXPLORER).decode()["x"][1].tobytes(), np.float32).reshape(2, 16, 8, 8)
    want = {}
    for g in (4, 2):
        _, mean, rstd = numr_web.ops.group_norm_forward(x, None, None, g)
        want[g] = (np.asarray(mean), np.asarray(rstd))

    with JupyterLab(tmp_path / "lab") as lab:
        url = lab.write_notebook(
            "explorer.ipynb",
            [
                f"import numr_web\nexplorer = numr_web.Explorer(**{EXPLORER!r})\nexplorer",
                "print('kernel sees', explorer.num_groups, explorer.selected, explorer.sample)",
                "import array\n"
                "paint = array.array('f', explorer.dy_paint)\n"
                "dy = explorer.decode()['dy'][1]\n"
                "painted = [i for i, v in enumerate(paint) if v]\n"
                "print('paint', explorer.grad_mode, len(paint), painted, sum(dy), explorer.status)",
                "print('version', explorer.results_meta['version'], explorer.grad_mode, explorer.status)",
            ],
        )
        # a laptop's screen: the core views must be seen together there
        with browser(viewport=(1280, 880)) as page:
            errors = []
            page.on("pageerror", lambda e: errors.append(f"{e}\n{e.stack}"))
            try:
                _drive(page, url, want, tmp_path)
            finally:
                with contextlib.suppress(Exception):
                    _screenshot(page, tmp_path / "explorer-end.png")
            assert not errors, errors  # the page logged no error (the widget manager included)
    assert lab.returncode == 0, lab.log()


def _drive(page, url, want, tmp_path):
    run_explorer_cell(page, url)
    rows = "() => document.querySelectorAll('[data-testid=\"group-stats\"] tbody tr').length === "
    page.wait_for_function(rows + "8", timeout=60_000)
    check_stats(read_group_stats(page), *want[4])
    # the core story fits a laptop screen: statistics, who shares them, the group, the sample's images
    tops = page.evaluate(
        """() => { const top = document.querySelector('.nw-explorer').getBoundingClientRect().top;
             return ['stats', 'cube', 'selected', 'images'].map(t =>
               document.querySelector(`.nw-body [data-testid="${t}"]`).getBoundingClientRect().bottom - top); }"""
    )
    assert max(tops) <= 760, tops
    _screenshots_for_readme(page, tmp_path)

    # one selection: group (n = 1, g = 2) of the mean heatmap selects sample 1 everywhere, and the kernel knows
    box = page.locator('[data-testid="heatmap-mean"]').bounding_box()
    page.mouse.click(box["x"] + 2.5 * box["width"] / 4, box["y"] + 0.75 * box["height"])
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"images\"] h3').textContent.startsWith('Sample n = 1')"
    )
    assert page.locator('[data-testid="sample"]').input_value() == "1"
    assert _run_cell(page, 1) == "kernel sees 4 [1, 2] 1"

    # a G change redraws every view; the table opened before stays open
    page.locator('[data-testid="stats-table"] > summary').click()
    page.locator('[data-testid="gradients"] > summary').click()
    page.locator('[data-testid="invariants-fold"] > summary').click()
    before = page.evaluate(SIGNATURES)
    version = page.evaluate(DRAWN)
    page.select_option('[data-testid="num-groups"]', "2")
    page.wait_for_function(rows + "4", timeout=60_000)
    _wait_redraw(page, version)
    check_stats(read_group_stats(page), *want[2])
    after = page.evaluate(SIGNATURES)
    assert [t for t in before if before[t] == after[t]] == [], "views not redrawn"
    assert page.locator('[data-testid="stats-table"]').evaluate("d => d.open")

    # an invalid Scale: marked, with its reason, and not reported as up to date
    scale = page.locator('[data-testid="scale"]')
    scale.fill("-1")
    scale.press("Tab")
    assert scale.get_attribute("aria-invalid") == "true"
    assert page.locator('[data-testid="scale-error"]').inner_text().startswith("Scale must be greater than 0")
    assert "Up to date" not in page.locator('[data-testid="status"]').inner_text()
    scale.fill("1")
    scale.press("Tab")
    assert scale.get_attribute("aria-invalid") == "false"

    # dy = ones with w = 1: dx is zero up to rounding, drawn and said as zero
    version = page.evaluate(DRAWN)
    page.select_option('[data-testid="grad-mode"]', "ones")
    _wait_redraw(page, version)
    assert page.locator('[data-testid="dx-zero"]').inner_text().startswith("dx = 0 up to float32 rounding")
    assert page.locator('[data-testid="we-dx"]').text_content() == "0"

    # front-end -> kernel, binary: paint dy (a DataView trait); the kernel gets the bytes and its dy is the painting
    version = page.evaluate(DRAWN)
    page.select_option('[data-testid="grad-mode"]', "painted")
    _wait_redraw(page, version)
    page.wait_for_selector('[data-testid="image-dy"].nw-paint')
    dy_img = page.locator('[data-testid="image-dy"]')
    dy_img.scroll_into_view_if_needed()
    box = dy_img.bounding_box()
    geo = json.loads(dy_img.get_attribute("data-geom"))

    def cell(c, s):  # channel c's tile, position s of its 8 x 8
        i, j = divmod(s, geo["cols"])
        return (
            box["x"] + geo["tx"][c] + (j + 0.5) * geo["tw"] / geo["cols"],
            box["y"] + geo["ty"][c] + (i + 0.5) * geo["th"] / geo["rows"],
        )

    version = page.evaluate(DRAWN)
    page.mouse.move(*cell(1, 0))
    page.mouse.down()
    page.mouse.move(*cell(1, 3), steps=4)
    page.mouse.up()
    _wait_redraw(page, version)
    want_idx = [1 * 64 + s for s in range(4)]
    assert _run_cell(page, 2) == f"paint painted 1024 {want_idx} 8.0 ok"  # dy of both samples

    # a preset sets several traits (dy_paint as binary among them) in one message: the kernel recomputes once
    page.select_option('[data-testid="grad-mode"]', "random")
    page.wait_for_function("() => document.querySelector('[data-testid=\"paint-note\"]') === null")
    before = int(_run_cell(page, 3).split()[1])
    version = page.evaluate(DRAWN)
    page.locator('[data-testid="preset-paint"]').click()
    _wait_redraw(page, version)
    cell = page.locator(".jp-Notebook .jp-Cell").nth(3)
    cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(
        f"() => document.querySelectorAll('.jp-Notebook .jp-Cell')[3].innerText.includes('version {before + 1} ')"
    )
    assert cell.locator(".jp-OutputArea-output").inner_text().strip() == f"version {before + 1} painted ok"
    assert "dy = 1 on a patch of channel 0" in page.locator('[data-testid="lesson"]').inner_text()

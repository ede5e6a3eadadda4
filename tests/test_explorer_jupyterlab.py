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

REPO = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
TOKEN = "numr-web-explorer-test"
IN_CI = os.environ.get("CI", "").lower() == "true"
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


def missing_requirements() -> list[str]:
    """What this machine lacks for the end-to-end test (empty when it can run)."""
    missing = []
    for module, what in (
        ("jupyterlab", "jupyterlab"),
        ("ipykernel", "ipykernel"),
        ("anywidget", "anywidget"),
        ("nbformat", "nbformat"),
        ("playwright.sync_api", "the playwright Python package"),
    ):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"{what} (pip install -e '.[dev]')")
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    if not (REPO / "numr_web" / "static" / "explorer.js").exists():
        missing.append("numr_web/static/explorer.js, the Explorer's front-end bundle (build widget/)")
    return missing


def require_lab():
    missing = missing_requirements()
    if not missing:
        return
    why = "the JupyterLab end-to-end test needs " + "; ".join(missing)
    if IN_CI:
        pytest.fail(why + " (required under CI=true)")
    pytest.skip(why)


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


def test_explorer_in_jupyterlab(tmp_path):
    require_lab()
    import numpy as np

    import numr_web

    rng = np.random.default_rng(2018)
    x = (1.5 + 2.0 * rng.standard_normal((2, 8, 4, 4))).astype(np.float32)
    want = {}
    for g in (4, 2):
        _, mean, rstd = numr_web.ops.group_norm_forward(x, None, None, g)
        want[g] = (np.asarray(mean), np.asarray(rstd))

    with JupyterLab(tmp_path / "lab") as lab:
        np.save(lab.root / "x.npy", x)
        url = lab.write_notebook(
            "explorer.ipynb",
            [
                "import numpy as np\nimport numr_web\n"
                "x = np.load('x.npy')\n"
                "explorer = numr_web.Explorer(x, num_groups=4, device='cpu')\n"
                "explorer",
                "print('kernel sees', explorer.num_groups, explorer.selected)",
                "import array\n"
                "paint = array.array('f', explorer.dy_paint)\n"
                "dy = explorer.decode()['dy'][1]\n"
                "painted = [i for i, v in enumerate(paint) if v]\n"
                "print('paint', explorer.grad_mode, len(paint), painted, sum(dy), explorer.status)",
            ],
        )
        with browser(viewport=(1280, 2600)) as page:
            errors = []
            page.on("pageerror", lambda e: errors.append(f"{e}\n{e.stack}"))
            try:
                run_explorer_cell(page, url)
                page.wait_for_function(
                    f"() => document.querySelectorAll('[data-testid=\"group-stats\"] tbody tr').length === {2 * 4}",
                    timeout=60_000,
                )
                check_stats(read_group_stats(page), *want[4])

                # front-end -> kernel: the num-groups select; the kernel recomputes and the table redraws
                page.select_option('[data-testid="num-groups"]', "2")
                page.wait_for_function(
                    "() => document.querySelectorAll('[data-testid=\"group-stats\"] tbody tr').length === 4",
                    timeout=60_000,
                )
                check_stats(read_group_stats(page), *want[2])

                # front-end -> kernel, a List trait: click group (n=1, g=1) of the mean heatmap, then ask the kernel
                box = page.locator('[data-testid="heatmap-mean"]').bounding_box()
                page.mouse.click(box["x"] + 0.75 * box["width"], box["y"] + 0.75 * box["height"])
                page.wait_for_selector('[data-testid="group-stats"] tbody tr.nw-selected', state="attached")
                page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".cm-content").click()
                page.keyboard.press("Shift+Enter")
                out = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea-output")
                out.wait_for(timeout=60_000)
                assert out.inner_text().strip() == "kernel sees 2 [1, 1]", out.inner_text()

                # front-end -> kernel, binary: paint dy on the dy image (a DataView trait); the kernel gets the
                # bytes, recomputes with them, and its results' dy is the painting on both samples
                drawn = "() => document.querySelector('.nw-body').dataset.drawn"
                version = page.evaluate(drawn)
                page.select_option('[data-testid="grad-mode"]', "painted")
                page.wait_for_function(f"() => ({drawn})() !== {json.dumps(version)}", timeout=60_000)
                page.wait_for_selector('[data-testid="image-dy"].nw-paint')
                dy_img = page.locator('[data-testid="image-dy"]')
                dy_img.scroll_into_view_if_needed()
                box = dy_img.bounding_box()
                rows, cols = 8, 16  # channels by positions of one sample

                def cell(c, s):
                    return box["x"] + (s + 0.5) * box["width"] / cols, box["y"] + (c + 0.5) * box["height"] / rows

                version = page.evaluate(drawn)
                page.mouse.move(*cell(1, 2))
                page.mouse.down()
                page.mouse.move(*cell(1, 6), steps=3)
                page.mouse.up()
                page.wait_for_function(f"() => ({drawn})() !== {json.dumps(version)}", timeout=60_000)
                cell3 = page.locator(".jp-Notebook .jp-Cell").nth(2)
                cell3.locator(".cm-content").click()
                page.keyboard.press("Shift+Enter")
                out3 = cell3.locator(".jp-OutputArea-output")
                out3.wait_for(timeout=60_000)
                want_idx = [1 * 16 + s for s in range(2, 7)]
                assert out3.inner_text().strip() == f"paint painted 128 {want_idx} 10.0 ok", out3.inner_text()
            finally:
                shot = tmp_path / "explorer.png"
                with contextlib.suppress(Exception):
                    page.evaluate(
                        "() => document.querySelectorAll('.jp-OutputArea details').forEach(d => d.open = true)"
                    )
                    page.screenshot(path=str(shot), full_page=True)
                    print(f"screenshot: {shot}")
                    widget = page.locator(".jp-OutputArea-output").first
                    widget.screenshot(path=str(tmp_path / "explorer-widget.png"))
                    print(f"widget screenshot: {tmp_path / 'explorer-widget.png'}")
                    if os.environ.get("NUMR_WEB_UPDATE_SCREENSHOT"):
                        shutil.copy(tmp_path / "explorer-widget.png", REPO / "docs" / "explorer.png")
            assert not errors, errors  # the page logged no error (the widget manager included)
    assert lab.returncode == 0, lab.log()

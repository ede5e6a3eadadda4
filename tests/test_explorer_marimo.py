"""The Explorer in marimo, a second home: a real ``marimo run`` server (headless, no token) serving
tests/apps/explorer_marimo.py, which shows ``mo.ui.anywidget(numr_web.Explorer(x, num_groups=4))``, driven in
Debian's Chromium through Playwright (never ``playwright install``).  The same statistics check as JupyterLab's:
the drawn table holds numr_web's mean and rstd, and a G change in the view reaches the kernel, which recomputes.

Under CI=true a missing marimo, playwright, chromium or front-end bundle fails; elsewhere the test skips with the
reason.  marimo renders a widget inside a shadow root: Playwright's locators pierce it (document.querySelector
would not).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

from test_explorer_jupyterlab import CHROMIUM, CHROMIUM_ARGS, REPO, check_stats, free_port, require

APP = REPO / "tests" / "apps" / "explorer_marimo.py"
ROWS = '[data-testid="group-stats"] tbody tr'


def require_marimo():
    require("marimo test", (("marimo", "marimo"), ("anywidget", "anywidget"), ("playwright.sync_api", "playwright")))


@contextlib.contextmanager
def marimo_server(app: pathlib.Path, base: pathlib.Path):
    """``marimo run app --headless --no-token`` on a free port of 127.0.0.1; yields its URL."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.update(OPENBLAS_NUM_THREADS="1", HOME=str(base), XDG_CONFIG_HOME=str(base / "config"))
    log_path = base / "marimo.log"
    cmd = [sys.executable, "-m", "marimo", "run", str(app), "--headless", "--no-token", "--host", "127.0.0.1"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=base)
        url = f"http://127.0.0.1:{port}/"
        try:
            deadline = time.monotonic() + 90
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"marimo exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
                with contextlib.suppress(urllib.error.URLError, ConnectionError, OSError):
                    with urllib.request.urlopen(url, timeout=2) as r:
                        if r.status == 200:
                            break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"marimo did not answer on {url} in 90 s:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.25)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def read_table(page):
    rows = page.locator(ROWS)
    cells = [[c.strip() for c in r.locator("td").all_text_contents()] for r in rows.all()]
    return {(int(n), int(g)): (float(m), float(r)) for n, g, m, r in cells}


def test_explorer_in_marimo(tmp_path):
    require_marimo()
    import numpy as np
    from playwright.sync_api import sync_playwright

    import numr_web

    x = (1.5 + 2.0 * np.random.default_rng(2018).standard_normal((2, 8, 4, 4))).astype(np.float32)  # the app's x
    want = {g: [np.asarray(a) for a in numr_web.ops.group_norm_forward(x, None, None, g)[1:]] for g in (4, 2)}
    with marimo_server(APP, tmp_path) as url, sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = b.new_page(viewport={"width": 1280, "height": 900})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.locator(ROWS).nth(2 * 4 - 1).wait_for(state="attached", timeout=120_000)
            assert page.locator(ROWS).count() == 8
            check_stats(read_table(page), *want[4])
            assert page.locator('[data-testid="status"]').inner_text().startswith("Up to date")
            # view -> kernel: the G select; marimo's kernel recomputes and the table redraws with G = 2
            page.locator('[data-testid="num-groups"]').select_option("2")
            deadline = time.monotonic() + 60
            while page.locator(ROWS).count() != 4:
                assert time.monotonic() < deadline, "the table did not redraw for G = 2"
                page.wait_for_timeout(100)
            check_stats(read_table(page), *want[2])
            # the kernel holds the view's G (the app's second cell prints it, re-run by marimo on the change)
            page.get_by_text("kernel sees G = 2, status ok").wait_for(timeout=60_000)
            # one selection in marimo too: a heatmap click moves the images to that sample
            box = page.locator('[data-testid="heatmap-mean"]').bounding_box()
            page.mouse.click(box["x"] + 0.75 * box["width"], box["y"] + 0.75 * box["height"])
            page.get_by_text("Sample n = 1: x, y, dy and dx (group 1 outlined)").wait_for(timeout=30_000)
            assert not errors, errors
        finally:
            b.close()

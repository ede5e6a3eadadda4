"""The playground end to end: ``numr-web site build`` and ``serve``, then the site in headless Chromium, offline.

The site is built by the real command into a temporary folder and served by ``numr-web site serve
--port 0`` on 127.0.0.1.  Chromium (Debian's, through the Python ``playwright`` package, WebGPU on)
resolves no host but 127.0.0.1; its requests to Pyodide's CDN are answered from a local folder
(tests/site/offline.py: the npm ``pyodide`` core of tests/browser plus the pure wheels the kernel
loads, downloaded from PyPI into tests/site/.wheels/, which git ignores).  In that page:

* the kernel starts; ``%pip install numr_web`` installs the site's own wheel and ``import numr_web``
  works; a GroupNorm forward and backward run on the browser's WebGPU through the NumPy-free path
  (``numr_web.webgpu.from_buffer``, awaited read-backs) and equal numr_web's CPU results here;
* notebooks/04_explorer.ipynb runs top to bottom (its code cells in the REPL app) and the
  Explorer draws its statistics table, which holds the kernel's numbers;
* no request fails (a CDN file missing from the stand-in counts as failed).

Cold start, from opening the page (a fresh browser context: empty cache) to the first output and
to the Explorer drawn, is printed (``pytest tests/test_site.py -s -k cold_start``); with
NUMR_WEB_PLAYGROUND_SCREENSHOT=PATH that test also saves a screenshot of the Explorer in the
playground.  NumPy inside Pyodide cannot be had offline, so notebooks that import NumPy are not run
in the browser here; the test prints which (they run under CPython in tests/test_notebooks.py).

Missing Chromium, playwright, jupyterlite or the npm Pyodide skip the test, except under CI=true,
where they fail it.
"""

from __future__ import annotations

import base64
import json
import math
import os
import pathlib
import subprocess
import sys
import time
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "site"))
import offline  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
WHEEL_CACHE = ROOT / "tests" / "site" / ".wheels"
#: the cold-start goal (seconds, page open to the Explorer drawn, offline on the project's machine)
GOAL_S = 15.0


def _cli(*args, timeout=900):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "numr_web.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _missing() -> str | None:
    why = offline.pb.prerequisites(npm_ci=True)
    if why:
        return why
    from numr_web import site

    try:
        site._versions()
    except site.SiteError as exc:
        return str(exc)
    return None


def _require():
    why = _missing()
    if why is None:
        return
    if IN_CI:
        pytest.fail(f"the playground test is required under CI=true: {why}")
    pytest.skip(why)


# -- the command line, no browser ---------------------------------------------------------------


def test_site_rejects_bad_flags(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    cases = [
        (("site", "serve", "--port", "abc", "--output", str(tmp_path / "s")), "--port"),
        (("site", "serve", "--port", "70000", "--output", str(tmp_path / "s")), "--port"),
        (("site", "build", "--output", str(a_file)), "--output"),
        (("site", "serve", "--output", str(a_file)), "--output"),
    ]
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep me")
    cases.append((("site", "build", "--output", str(full)), "--output"))
    for args, flag in cases:
        out = _cli(*args, timeout=120)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert len(lines) == 1 and flag in lines[0] and "error" in lines[0], (args, out.stderr)
    assert (full / "mine.txt").read_text() == "keep me"  # a folder that is not a site is never replaced


# -- the site -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    _require()
    out = tmp_path_factory.mktemp("playground") / "site"
    start = time.perf_counter()
    res = _cli("site", "build", "--output", str(out))
    assert res.returncode == 0, f"numr-web site build failed:\n{res.stdout}\n{res.stderr}"
    print(f"\nnumr-web site build: {time.perf_counter() - start:.1f} s")
    return out


@pytest.fixture(scope="module")
def served(built):
    """``numr-web site serve --port 0`` on the built site; yields the base URL it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "numr_web.cli", "site", "serve", "--port", "0", "--output", str(built)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    lines = []
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "http://127.0.0.1:" in line:
                url = line.split("http://", 1)[1].split()[0]
        assert url, f"numr-web site serve printed no URL:\n{''.join(lines)}"
        assert not any("building the site" in line for line in lines), f"serve rebuilt a fresh site:\n{lines}"
        yield "http://" + url.split("/lab/", 1)[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cdn(tmp_path_factory):
    _require()
    try:
        return offline.cdn_folder(tmp_path_factory.mktemp("cdn"), WHEEL_CACHE)
    except Exception as exc:  # PyPI unreachable, npm core of another version
        pytest.fail(f"the offline stand-in for Pyodide's CDN could not be made: {exc}")


@pytest.fixture(scope="module")
def browser(served, cdn):
    with offline.Playground(served, cdn) as pg:
        yield pg


def test_site_contents(built):
    stamp = json.loads((built / ".numr-web-site.json").read_text())
    config = json.loads((built / "jupyter-lite.json").read_text())["jupyter-config-data"]
    kernel = config["litePluginSettings"]["@jupyterlite/pyodide-kernel-extension:kernel"]
    assert kernel["disablePyPIFallback"] is True
    wheels = sorted(p.name for p in (built / "pypi").glob("*.whl"))
    for name in ("numr_web-", "anywidget-", "ipywidgets-", "psygnal-", "comm-", "jupyterlab_widgets-"):
        assert any(w.startswith(name) for w in wheels), (name, wheels)
    index = json.loads((built / "pypi" / "all.json").read_text())
    assert "numr-web" in index or "numr_web" in index, sorted(index)
    notebooks = sorted(p.name for p in (built / "files").glob("*.ipynb"))
    assert notebooks == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")), notebooks
    assert stamp["notebooks"] == notebooks
    assert not list(built.rglob("*.js.map")), "source maps in the site (--no-sourcemaps)"
    assert (built / ".nojekyll").is_file()
    # the wheel carries the Explorer's front-end bundle and the WGSL kernels
    (wheel,) = (built / "pypi").glob("numr_web-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "numr_web/static/explorer.js" in names and any(n.endswith(".wgsl") for n in names)
    # up to date: a second build is not needed
    from numr_web import site

    assert site.stale(built) is None
    # and stale once what it was made from differs (serve then rebuilds)
    stamp_file = built / ".numr-web-site.json"
    original = stamp_file.read_text()
    try:
        stamp_file.write_text(json.dumps({**stamp, "digest": "0" * 64}))
        assert "changed" in (site.stale(built) or "")
        stamp_file.unlink()  # a full folder without the stamp is not taken for a site
        with pytest.raises(site.SiteError, match="--output"):
            site.stale(built)
        assert "no site" in (site.stale(built.parent / "not-built-yet") or "")
    finally:
        stamp_file.write_text(original)
    assert site.stale(built) is None


def _wheel_requires_numpy_in_pyodide(built) -> bool:
    """Whether numr_web's wheel asks for NumPy under Pyodide (no emscripten marker on the requirement)."""
    (wheel,) = (built / "pypi").glob("numr_web-*.whl")
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        reqs = [line for line in z.read(meta).decode().splitlines() if line.startswith("Requires-Dist: numpy")]
    return any("emscripten" not in line for line in reqs)


# the GroupNorm of the WebGPU check: values both sides generate the same way (float32)
SHAPE, GROUPS = (2, 8, 4, 4), 4
MAKE = f"""
import math, array
SHAPE, GROUPS = {SHAPE!r}, {GROUPS!r}
count = math.prod(SHAPE)
xs = array.array("f", [3.0 * math.sin(0.37 * i) + 0.5 * (i % 5) - 1.0 for i in range(count)])
dys = array.array("f", [math.cos(0.11 * i) for i in range(count)])
ws = array.array("f", [1.0 + 0.25 * c for c in range(SHAPE[1])])
bs = array.array("f", [0.1 * c - 0.3 for c in range(SHAPE[1])])
"""

WEBGPU_CELL = (
    MAKE
    + """
import base64, json, sys
import numr_web, numr_web.webgpu as wg
info = await wg.init()  # awaitable: works where the browser cannot block too
x, dy = wg.from_buffer(xs, SHAPE), wg.from_buffer(dys, SHAPE)
w, b = wg.from_buffer(ws, (SHAPE[1],)), wg.from_buffer(bs, (SHAPE[1],))
y, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, GROUPS, 1e-5)
dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, GROUPS)
got = {k: base64.b64encode(await a.tobytes_async()).decode() for k, a in
       dict(y=y, mean=mean, rstd=rstd, dx=dx, dw=dw, db=db).items()}
print("NUMR-WEBGPU " + json.dumps({"got": got, "numpy": "numpy" in sys.modules, "adapter": str(info.get("adapter")),
      "version": numr_web.__version__, "platform": sys.platform, "can_block": wg.can_block()}))
"""
)


def _expected():
    import numpy as np

    import numr_web

    ns: dict = {}
    exec(MAKE, ns)
    x = np.frombuffer(ns["xs"], np.float32).reshape(SHAPE)
    dy = np.frombuffer(ns["dys"], np.float32).reshape(SHAPE)
    w, b = np.frombuffer(ns["ws"], np.float32), np.frombuffer(ns["bs"], np.float32)
    y, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, GROUPS, 1e-5)
    dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, GROUPS)
    return {"y": y, "mean": mean, "rstd": rstd, "dx": dx, "dw": dw, "db": db}


def test_kernel_installs_numr_web_and_runs_groupnorm_on_webgpu(browser, built):
    import numpy as np

    # NumPy is optional in the browser: the wheel asks for it everywhere but Pyodide, so a plain %pip works offline
    assert not _wheel_requires_numpy_in_pyodide(built), "numr_web's wheel requires NumPy under Pyodide"
    pip = "%pip install numr_web"
    cells = ["print('kernel up')", pip, "import numr_web; print('numr_web', numr_web.__version__)", WEBGPU_CELL]
    run = browser.repl(cells)
    outputs = run["outputs"]
    assert not offline.errors(outputs), offline.errors(outputs)
    texts = [o["text"] for o in outputs]
    assert any("kernel up" in t for t in texts), texts
    assert any(t.startswith("numr_web ") for t in texts), texts
    res = offline.tagged(outputs, "NUMR-WEBGPU ")
    assert res["platform"] == "emscripten" and res["version"] == _installed_version(built)
    assert res["numpy"] is False, "NumPy was imported on the NumPy-free path"
    expected = _expected()
    for key, ref in expected.items():
        got = np.frombuffer(base64.b64decode(res["got"][key]), np.float32).reshape(ref.shape)
        err = float(np.abs(got.astype(np.float64) - ref).max() / max(1.0, float(np.abs(ref).max())))
        assert err < 3e-5, f"{key}: WebGPU in the browser against numr_web's CPU: {err:.2e}"
    print(f"\nWebGPU in the playground ({res['adapter']}, can block: {res['can_block']}): y, mean, rstd, dx, dw, db")
    print(f"kernel cold start: page open -> first output {run['first_output_s']:.1f} s")
    assert browser.failed == [], browser.failed


def _installed_version(built) -> str:
    (wheel,) = (built / "pypi").glob("numr_web-*.whl")
    return wheel.name.split("-")[1]


def _code_cells(path):
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _needs_numpy(path) -> bool:
    return any("import numpy" in src for src in _code_cells(path))


def test_notebooks_that_need_numpy_are_named():
    """Says plainly which notebooks the offline browser run leaves out (and keeps 04 NumPy-free)."""
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    left_out = [p.name for p in notebooks if _needs_numpy(p)]
    print(
        "\nnot run in the browser here (they import NumPy, which only Pyodide's CDN serves; "
        f"CPython runs them in tests/test_notebooks.py): {', '.join(left_out) or 'none'}"
    )
    explorer = ROOT / "notebooks" / "04_explorer.ipynb"
    assert explorer.exists() and not _needs_numpy(explorer)


def test_notebook_04_runs_in_the_browser_and_the_explorer_draws(browser):
    cells = _code_cells(ROOT / "notebooks" / "04_explorer.ipynb")
    stats = (
        "import json\n_m = explorer.decode()['mean'][1]\n"
        "print('NUMR-STATS ' + json.dumps({'status': explorer.status, 'device': explorer.device,"
        " 'G': explorer.num_groups, 'mean': list(_m)}))"
    )
    run = browser.repl([*cells, stats], wait_explorer=True)
    outputs = run["outputs"]
    assert not offline.errors(outputs), offline.errors(outputs)
    res = offline.tagged(outputs, "NUMR-STATS ")
    assert res["status"] == "ok" and res["device"].startswith("webgpu"), res
    assert res["G"] == 8 and len(res["mean"]) == 2 * 8, res
    # the drawn table holds the kernel's statistics for the current G
    page = run["page"]
    page.wait_for_function(
        "(n) => document.querySelectorAll('[data-testid=\"group-stats\"] tbody tr').length === n", arg=16
    )
    rows = page.evaluate(
        """() => Array.from(document.querySelectorAll('[data-testid="group-stats"] tbody tr'))
                 .map(r => Array.from(r.children).map(c => c.textContent.trim()))"""
    )
    table = {(int(n), int(g)): float(m) for n, g, m, *_ in rows}
    for i, mean in enumerate(res["mean"]):
        n, g = divmod(i, 8)
        assert math.isclose(table[n, g], mean, rel_tol=1e-3, abs_tol=1e-3), (n, g, table[n, g], mean)
    # a control change in the view: the comm message reaches the Pyodide kernel, which recomputes on the
    # browser's WebGPU and sends the results back; the table then holds the G = 4 statistics of the same input
    # (numr_web on the CPU here, from the same generated values)
    page.select_option('[data-testid="num-groups"]', "4")
    page.wait_for_function(
        "(n) => document.querySelectorAll('[data-testid=\"group-stats\"] tbody tr').length === n", arg=8
    )
    rows = page.evaluate(
        """() => Array.from(document.querySelectorAll('[data-testid="group-stats"] tbody tr'))
                 .map(r => Array.from(r.children).map(c => c.textContent.trim()))"""
    )
    from numr_web.explorer import Explorer

    want = Explorer(device="cpu", num_groups=4).decode()
    for (n, g, m, r), want_m, want_r in zip(rows, want["mean"][1], want["rstd"][1], strict=True):
        assert math.isclose(float(m), want_m, rel_tol=1e-4, abs_tol=1e-5), (n, g, m, want_m)
        assert math.isclose(float(r), want_r, rel_tol=1e-4), (n, g, r, want_r)
    assert browser.failed == [], browser.failed
    print(
        f"\nnotebook 04 in the playground: first output {run['first_output_s']:.1f} s, "
        f"Explorer drawn {run['explorer_s']:.1f} s, all cells done {run['done_s']:.1f} s after page open"
    )


def test_notebook_04_in_lab_run_all(browser):
    """What a visitor does: open notebook 04 in the playground's JupyterLab and choose Run All Cells."""
    run = browser.lab_run_all("04_explorer.ipynb", "G = 8: mean")
    assert not offline.errors(run["outputs"]), offline.errors(run["outputs"])
    assert "Pyodide" in run["kernel"], f"notebook 04 opened with the kernel {run['kernel']!r}"
    assert browser.failed == [], browser.failed
    print(
        f"\nnotebook 04 in lab, Run All Cells at once: first output {run['first_output_s']:.1f} s, "
        f"Explorer drawn {run['explorer_s']:.1f} s, last cell done {run['done_s']:.1f} s after page open"
    )


def test_cold_start(browser):
    """Page open to first output, and to the Explorer drawn, in a fresh context; printed, goal < 15 s."""
    cells = [
        "print('first output')",
        "%pip install anywidget\n%pip install numr_web",
        "import numr_web\nexplorer = numr_web.Explorer()\nexplorer",
    ]
    run = browser.repl(cells, wait_explorer=True)
    assert not offline.errors(run["outputs"]), offline.errors(run["outputs"])
    assert browser.failed == [], browser.failed
    shot = os.environ.get("NUMR_WEB_PLAYGROUND_SCREENSHOT")
    if shot:  # the Explorer in the playground, for the docs (nothing is written unless asked)
        run["page"].evaluate(
            """() => Array.from(document.querySelectorAll('.jp-OutputArea-output'))
                     .find(e => e.innerText.startsWith('GroupNorm Explorer'))?.scrollIntoView({block: 'start'})"""
        )
        run["page"].wait_for_timeout(1000)
        run["page"].screenshot(path=shot)
    first, drawn = run["first_output_s"], run["explorer_s"]
    print(
        f"\nplayground cold start (offline, Chromium {browser.version}): page open -> first output {first:.1f} s, "
        f"-> Explorer drawn {drawn:.1f} s (goal < {GOAL_S:.0f} s)"
    )
    # a loaded shared machine can be slower than the goal: hold it to a bound that still catches a regression
    assert drawn < 4 * GOAL_S, f"the Explorer took {drawn:.1f} s to draw"

"""The playground end to end: ``numr-web site build`` and ``serve``, then the site in headless Chromium, offline.

The site is built by the real command into a temporary folder and served by ``numr-web site serve
--port 0`` on 127.0.0.1.  Chromium (Debian's, through the Python ``playwright`` package, WebGPU on)
resolves no host but 127.0.0.1; its requests to Pyodide's CDN are answered from a local folder
(tests/site/offline.py: the npm ``pyodide`` core of tests/browser plus the pure wheels the kernel
loads, downloaded from PyPI into tests/site/.wheels/, which git ignores; every other file of Pyodide's
lock is answered 404, and recorded).  In that page:

* the landing page says whether the browser has WebGPU and links every notebook by its title;
* the kernel starts with numr_web and anywidget importable (the site's lock preloads them: no
  ``%pip``), without NumPy; a GroupNorm forward and backward run on the browser's WebGPU through the
  NumPy-free path (``numr_web.webgpu.from_buffer``, awaited read-backs) and equal numr_web's CPU
  results here;
* every notebook opens in the lab unmodified and runs with Run All Cells, as a visitor does:
  04 (the Explorer) runs through, draws the Explorer and leaves it in view; 01 to 03 need NumPy, which
  only Pyodide's CDN serves: offline, the page asks the CDN for the wheel the lock names and the
  notebook stops at its setup cell with one line naming NumPy (where the CDN answers, as for real
  visitors, they run on: tests/test_notebooks.py runs them under CPython);
* in Chromium without WebGPU the Explorer notebook asks for NumPy (the CPU's) in the same way;
* no other request fails.

Cold start is a benchmark, not a test: scripts/playground-cold-start.

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
from conftest import IN_CI

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "site"))
import offline  # noqa: E402

WHEEL_CACHE = ROOT / "tests" / "site" / ".wheels"


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
    from numr_web import site

    stamp = json.loads((built / ".numr-web-site.json").read_text())
    config = json.loads((built / "jupyter-lite.json").read_text())["jupyter-config-data"]
    kernel = config["litePluginSettings"]["@jupyterlite/pyodide-kernel-extension:kernel"]
    assert kernel["disablePyPIFallback"] is True
    assert kernel["loadPyodideOptions"] == {"lockFileURL": "./pypi/pyodide-lock.json", "packages": list(site.PRELOADED)}
    assert config["settingsOverrides"]["@jupyterlab/filebrowser-extension:browser"]["showLastModifiedColumn"] is False
    wheels = sorted(p.name for p in (built / "pypi").glob("*.whl"))
    for name in ("numr_web-", "anywidget-", "ipywidgets-", "psygnal-", "comm-", "jupyterlab_widgets-", "piplite-"):
        assert any(w.startswith(name) for w in wheels), (name, wheels)
    index = json.loads((built / "pypi" / "all.json").read_text())
    assert "numr-web" in index or "numr_web" in index, sorted(index)
    notebooks = sorted(p.name for p in (built / "files").glob("*.ipynb"))
    assert notebooks == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")), notebooks
    assert stamp["notebooks"] == notebooks
    for name in notebooks:  # the Lite kernel's kernelspec, so a notebook opens unmodified and finds its kernel
        nb = json.loads((built / "files" / name).read_text())
        assert nb["metadata"]["kernelspec"] == {
            "display_name": "Python (Pyodide)",
            "language": "python",
            "name": "python",
        }
        assert all(c.get("outputs", []) == [] for c in nb["cells"]), name
    assert not list(built.rglob("*.js.map")), "source maps in the site (--no-sourcemaps)"
    assert (built / ".nojekyll").is_file()
    # the wheel carries the Explorer's front-end bundle and the WGSL kernels
    (wheel,) = (built / "pypi").glob("numr_web-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "numr_web/static/explorer.js" in names and any(n.endswith(".wgsl") for n in names)
    # up to date: a second build is not needed
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


def test_site_lock_is_pyodides_whole_lock_at_its_cdn_plus_the_sites_wheels(built):
    """Every package of Pyodide's own lock (the npm package of the kernel's version: what its CDN serves)
    at its CDN URL with the CDN's hash, so NumPy and the rest still come from there; the site's wheels
    beside the lock, with their own hashes; every requirement resolvable; the preloaded names present."""
    import hashlib

    from numr_web import site

    lock = json.loads((built / "pypi" / "pyodide-lock.json").read_text())
    npm = json.loads((offline.pb.PYODIDE / "pyodide-lock.json").read_text())
    assert lock["info"] == npm["info"]
    cdn = f"https://cdn.jsdelivr.net/pyodide/v{site.PYODIDE_VERSION}/full/"
    ours = {"numr-web", "anywidget", "ipywidgets", "jupyterlab-widgets", "psygnal", "comm", "piplite", "ipykernel"}
    ours |= {"pyodide-kernel", "widgetsnbextension"}
    assert ours <= set(lock["packages"]), sorted(ours - set(lock["packages"]))
    for key, entry in npm["packages"].items():
        if key in ours:
            continue
        got = lock["packages"][key]
        assert got["file_name"] == cdn + entry["file_name"] and got["sha256"] == entry["sha256"], key
    assert lock["packages"]["numpy"]["file_name"].startswith(cdn + "numpy-")
    for key in ours:
        entry = lock["packages"][key]
        wheel = built / "pypi" / entry["file_name"]
        assert wheel.is_file() and hashlib.sha256(wheel.read_bytes()).hexdigest() == entry["sha256"], key
        assert all(dep in lock["packages"] for dep in entry["depends"]), (key, entry["depends"])
    # numr_web needs no NumPy in the browser; anywidget brings ipywidgets
    assert lock["packages"]["numr-web"]["depends"] == [] and lock["packages"]["numr-web"]["imports"] == ["numr_web"]
    assert "ipywidgets" in lock["packages"]["anywidget"]["depends"]
    assert all(site._norm(name) in lock["packages"] for name in site.PRELOADED)


def test_site_lock_refuses_a_requirement_nobody_has(tmp_path):
    """A site wheel whose requirement neither Pyodide nor the site has fails the build, naming it."""
    from numr_web import site

    wheel = tmp_path / "needy-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("needy/__init__.py", "")
        meta = "Metadata-Version: 2.1\nName: needy\nVersion: 1.0\nRequires-Dist: not-in-pyodide>=1\n"
        meta += "Requires-Dist: numpy; sys_platform != 'emscripten'\n"
        z.writestr("needy-1.0.dist-info/METADATA", meta)
    entry = site.wheel_entry(wheel)
    assert entry["depends"] == ["not-in-pyodide"] and entry["imports"] == ["needy"]  # numpy's marker is false
    base = {"info": {}, "packages": {n: {"name": n, "file_name": f"{n}.whl"} for n in map(site._norm, site.PRELOADED)}}
    with pytest.raises(site.SiteError, match="needy requires not-in-pyodide"):
        site.site_lock(base, [wheel])


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


def test_kernel_starts_with_numr_web_and_runs_groupnorm_on_webgpu(browser, built):
    import numpy as np

    # NumPy is optional in the browser: the wheel asks for it everywhere but Pyodide
    assert not _wheel_requires_numpy_in_pyodide(built), "numr_web's wheel requires NumPy under Pyodide"
    first = "import sys, numr_web, anywidget; print('preloaded', numr_web.__version__, 'numpy' in sys.modules)"
    run = browser.repl([first, WEBGPU_CELL])
    outputs = run["outputs"]
    assert not offline.errors(outputs), offline.errors(outputs)
    texts = [o["text"] for o in outputs]
    assert any(t.startswith(f"preloaded {_installed_version(built)} False") for t in texts), texts
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
    assert browser.failed == [] and browser.cdn_missing == [], (browser.failed, browser.cdn_missing)


def _installed_version(built) -> str:
    (wheel,) = (built / "pypi").glob("numr_web-*.whl")
    return wheel.name.split("-")[1]


def _code_cells(path):
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _setup_packages(path) -> list:
    """The packages a notebook's setup cell asks for (``setup("numpy", "matplotlib")``): Pyodide's CDN serves them."""
    import re

    first = _code_cells(path)[0]
    call = re.search(r"setup\(([^)]*)\)", first)
    return re.findall(r"[\"']([\w.-]+)[\"']", call.group(1)) if call else []


def _needs_numpy(path) -> bool:
    return any('setup("numpy"' in src or "import numpy" in src for src in _code_cells(path))


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_explorer_notebook_needs_no_numpy():
    explorer = ROOT / "notebooks" / "04_explorer.ipynb"
    assert explorer.exists() and not _needs_numpy(explorer)
    assert not any("%pip" in src for p in NOTEBOOKS for src in _code_cells(p)), "a notebook still needs %pip"


def _stats_table(page):
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('[data-testid="group-stats"] tbody tr'))
                 .map(r => Array.from(r.children).map(c => c.textContent.trim()))"""
    )


def test_notebook_04_runs_in_the_browser_and_the_explorer_draws(browser):
    cells = _code_cells(ROOT / "notebooks" / "04_explorer.ipynb")
    stats = (
        "import json\nawait explorer.wait()\n_m = explorer.decode()['mean'][1]\n"
        "print('NUMR-STATS ' + json.dumps({'status': explorer.status, 'device': explorer.device,"
        " 'G': explorer.num_groups, 'mean': list(_m)}))"
    )
    run = browser.repl([*cells, stats], wait_explorer=True)
    outputs = run["outputs"]
    assert not offline.errors(outputs), offline.errors(outputs)
    res = offline.tagged(outputs, "NUMR-STATS ")
    assert res["status"] == "ok" and res["device"].startswith("webgpu"), res
    groups = res["G"]
    assert len(res["mean"]) == 2 * groups, res
    # the drawn table holds the kernel's statistics for the current G
    page = run["page"]
    wait_rows = "(n) => document.querySelectorAll('[data-testid=\"group-stats\"] tbody tr').length === n"
    page.wait_for_function(wait_rows, arg=2 * groups)
    table = {(int(n), int(g)): float(m) for n, g, m, *_ in _stats_table(page)}
    for i, mean in enumerate(res["mean"]):
        n, g = divmod(i, groups)
        assert math.isclose(table[n, g], mean, rel_tol=1e-3, abs_tol=1e-3), (n, g, table[n, g], mean)
    # a control change in the view: the comm message reaches the Pyodide kernel, which recomputes on the
    # browser's WebGPU and sends the results back; the table then holds the G = 4 statistics of the same input
    # (numr_web on the CPU here, from the same generated values)
    page.select_option('[data-testid="num-groups"]', "4")
    page.wait_for_function(wait_rows, arg=8)
    from numr_web.explorer import Explorer

    want = Explorer(device="cpu", num_groups=4).decode()
    for (n, g, m, r), want_m, want_r in zip(_stats_table(page), want["mean"][1], want["rstd"][1], strict=True):
        assert math.isclose(float(m), want_m, rel_tol=1e-4, abs_tol=1e-5), (n, g, m, want_m)
        assert math.isclose(float(r), want_r, rel_tol=1e-4), (n, g, r, want_r)
    assert browser.failed == [] and browser.cdn_missing == [], (browser.failed, browser.cdn_missing)
    print(
        f"\nnotebook 04 in the playground: first output {run['first_output_s']:.1f} s, "
        f"Explorer drawn {run['explorer_s']:.1f} s, all cells done {run['done_s']:.1f} s after page open"
    )


def _numpy_wheel(built, key="numpy") -> str:
    """The file name of the wheel the site's lock names for ``key`` (at Pyodide's CDN)."""
    lock = json.loads((built / "pypi" / "pyodide-lock.json").read_text())["packages"]
    return lock[key]["file_name"].rsplit("/", 1)[-1]


def _one_line_naming_numpy(outputs) -> str:
    lines = [line for o in outputs for line in o["text"].splitlines() if line.startswith("MissingPackage:")]
    assert len(lines) == 1, [o["text"] for o in outputs]
    assert "NumPy" in lines[0] and "could not be loaded" in lines[0] and "cdn.jsdelivr.net" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("name", [p.name for p in NOTEBOOKS])
def test_every_notebook_runs_in_lab_with_run_all(browser, built, name):
    """What a visitor does: open the notebook in the playground's JupyterLab, choose Run All Cells."""
    missing_before = len(browser.cdn_missing)
    run = browser.lab_run_all(name, explorer=not _needs_numpy(ROOT / "notebooks" / name))
    outputs, prompts = run["outputs"], run["prompts"]
    assert "Pyodide" in run["kernel"], f"{name} opened with the kernel {run['kernel']!r}"
    assert not offline.errors(outputs), offline.errors(outputs)
    asked = set(browser.cdn_missing[missing_before:])
    if _needs_numpy(ROOT / "notebooks" / name):
        # offline NumPy cannot load: the page asked the CDN for the wheel the lock names, and the setup cell
        # says so in one line; the cells after it did not run
        assert _numpy_wheel(built) in asked, asked
        for package in _setup_packages(ROOT / "notebooks" / name):  # matplotlib too, where asked for
            assert _numpy_wheel(built, package) in asked, (package, asked)
        print(f"\n{name}: {_one_line_naming_numpy(outputs)}")
        assert prompts[0].startswith("[1]") and all(p == "[ ]:" for p in prompts[1:]), prompts
    else:
        assert asked == set(), f"{name} asked the CDN for what the stand-in lacks: {asked}"
        assert all(any(ch.isdigit() for ch in p) for p in prompts), prompts
        # the Explorer is in view after Run All (not scrolled past)
        assert run["explorer_in_view"] >= 200, f"only {run['explorer_in_view']} px of the Explorer are in view"
        print(
            f"\n{name} in lab, Run All at once: first output {run['first_output_s']:.1f} s, "
            f"Explorer drawn {run['explorer_s']:.1f} s, done {run['done_s']:.1f} s after page open"
        )
    assert browser.failed == [], browser.failed
    assert not [c for c in browser.console if "No exact match found" in c], "a kernelspec the Lite kernel lacks"


def test_a_notebook_opens_unmodified(browser):
    """Opening a notebook and starting its kernel changes nothing in it (no kernelspec or metadata rewrite)."""
    page, _ = browser.open("lab/index.html?path=02_gradients.ipynb")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('.jp-StatusBar-TextItem'))"
        ".some(e => /Pyodide\\)? \\| Idle/.test(e.textContent))",
        timeout=240_000,
    )
    page.wait_for_timeout(1000)
    dirty = page.evaluate("() => !!document.querySelector('.lm-TabBar-tab.jp-mod-dirty')")
    assert not dirty, "the notebook is marked modified right after opening"


def test_landing_page_says_where_to_start(browser, built):
    """The site opens on a short page: what this is, whether this browser has WebGPU, every notebook by its
    title, and a link that opens the Explorer's notebook in the lab."""
    from numr_web import site

    page, _ = browser.open("")
    status = page.locator('[data-testid="webgpu-status"]')
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"webgpu-status\"]').textContent.startsWith('Checking')"
    )
    assert status.text_content().startswith("This browser has WebGPU ("), status.text_content()
    links = page.evaluate(
        "() => Array.from(document.querySelectorAll('a[data-notebook]')).map(a => [a.dataset.notebook, a.textContent])"
    )
    assert [n for n, _ in links] == [p.name for p in NOTEBOOKS]
    for (notebook, text), path in zip(links, NOTEBOOKS, strict=True):
        assert text == site.notebook_summary(path)[0] and text.startswith(notebook[:2] + " · "), (notebook, text)
    page.click('[data-testid="start-explorer"]')
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    tab = page.evaluate(
        "() => document.querySelector('.lm-TabBar-tab.jp-mod-current .lm-TabBar-tabLabel')?.textContent"
    )
    assert tab == "04_explorer.ipynb", tab
    assert browser.failed == [], browser.failed


def test_a_browser_without_webgpu_is_told_and_asks_for_numpy(browser, served, cdn, built):
    """Chromium without WebGPU: the landing page says so; the Explorer's notebook falls back to the CPU,
    which needs NumPy: offline, up to asking the CDN for it and the one line naming it."""
    with offline.Playground(served, cdn, webgpu=False, playwright=browser._pw) as pg:
        page, _ = pg.open("")
        page.wait_for_function(
            "() => !document.querySelector('[data-testid=\"webgpu-status\"]').textContent.startsWith('Checking')"
        )
        said = page.locator('[data-testid="webgpu-status"]').text_content()
        assert "no adapter" in said or "no WebGPU" in said, said
        run = pg.lab_run_all("04_explorer.ipynb")
        assert {_numpy_wheel(built), _numpy_wheel(built, "ml-dtypes")} <= set(pg.cdn_missing), pg.cdn_missing
        print(f"\n04 without WebGPU: {_one_line_naming_numpy(run['outputs'])}")
        assert not offline.errors(run["outputs"]), offline.errors(run["outputs"])
        assert pg.failed == [], pg.failed

"""The playground: a static JupyterLite site whose Pyodide kernel runs numr_web (``numr-web site``).

``build(output)`` makes the site with jupyterlite-core and jupyterlite-pyodide-kernel (both
pinned to ``JUPYTERLITE_VERSION``, whose kernel loads Pyodide ``PYODIDE_VERSION`` from Pyodide's
CDN): the notebooks of ``notebooks/``, numr_web's wheel built from this source tree, and
anywidget with the requirements Pyodide does not ship, all as the site's own wheels (the
kernel's ``%pip`` finds them; its PyPI fallback is off). anywidget's front-end extension comes
from the build environment, where it must be installed. ``serve(output, port)`` builds when
the site is stale and serves it on 127.0.0.1.

The output is plain files: any static host (GitHub Pages, a bucket, ``python -m http.server``)
can publish it; nothing runs on a server.

numr_web and anywidget are not pre-installed: that needs the kernel's lock add-on (the
``lock`` extra of jupyterlite-pyodide-kernel, pyodide-lock 0.1.3 or later, uv) and Pyodide's lock
from its CDN at build time, neither of which this project's machines can get; the notebooks
``%pip install`` them from the site instead (in the cold-start test those installs and the
Explorer's first draw together took about 2 s).

Each build starts from a fresh working folder, so jupyterlite's task database
(``.jupyterlite.doit.db``) never skips a step that changed. A file ``STAMP`` in the output
records a digest of everything the site is made from; ``stale(output)`` compares it.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import importlib.metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

__all__ = ["build", "serve", "stale", "SiteError", "DEFAULT_OUTPUT", "STAMP"]

#: jupyterlite-core and jupyterlite-pyodide-kernel: one version, so the site and the tests agree
JUPYTERLITE_VERSION = "0.8.6"
#: the Pyodide that kernel loads (from cdn.jsdelivr.net/pyodide/v{PYODIDE_VERSION}/full/)
PYODIDE_VERSION = "314.0.6"
KERNEL_PLUGIN = "@jupyterlite/pyodide-kernel-extension:kernel"
#: anywidget and those of its requirements that Pyodide's distribution lacks (ipython,
#: traitlets and typing-extensions come from Pyodide; widgetsnbextension from the kernel)
WIDGET_WHEELS = ("anywidget", "ipywidgets", "jupyterlab_widgets", "psygnal", "comm")
DEFAULT_OUTPUT = pathlib.Path("build") / "site"
STAMP = ".numr-web-site.json"
#: bump when the way the site is made changes, so older sites count as stale
LAYOUT = 1

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = pathlib.Path(__file__).resolve().parent
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")


class SiteError(ValueError):
    """A site cannot be built or served; the message says why and what to do."""


# -- inputs -------------------------------------------------------------------------------------


def _versions() -> dict:
    """The build tools' versions; SiteError naming the extra when one is missing or off its pin."""
    found = {}
    for dist in ("jupyterlite-core", "jupyterlite-pyodide-kernel", "anywidget"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise SiteError(
                f"{dist} is not installed: the site needs the `site` extra "
                f'(python3 -m pip install -e ".[site]" from the source tree)'
            ) from None
    for dist in ("jupyterlite-core", "jupyterlite-pyodide-kernel"):
        if found[dist] != JUPYTERLITE_VERSION:
            raise SiteError(
                f"{dist} {found[dist]} is installed, the site is pinned to {JUPYTERLITE_VERSION} "
                f'(Pyodide {PYODIDE_VERSION}): python3 -m pip install -e ".[site]"'
            )
    return found


def _source_root() -> pathlib.Path:
    if not ((ROOT / "pyproject.toml").is_file() and (ROOT / "notebooks").is_dir()):
        raise SiteError(
            f"numr-web site builds from a source tree (pyproject.toml and notebooks/ beside numr_web/), "
            f"and {ROOT} is not one: clone the repository and pip install -e '.[site]' there"
        )
    return ROOT


def _notebooks(root: pathlib.Path) -> list[pathlib.Path]:
    found = sorted((root / "notebooks").glob("*.ipynb"))
    if not found:
        raise SiteError(f"no notebooks in {root / 'notebooks'}")
    return found


def _inputs(root: pathlib.Path) -> list[pathlib.Path]:
    files = [root / "pyproject.toml", root / "README.md", *_notebooks(root)]
    for path in sorted((root / "numr_web").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".nbi", ".nbc"):
            files.append(path)
    return files


def digest(root: pathlib.Path | None = None) -> str:
    """sha256 over the site's inputs (sources, notebooks) and the build tools' versions."""
    root = root or _source_root()
    h = hashlib.sha256(f"layout {LAYOUT} {sorted(_versions().items())}\n".encode())
    for path in _inputs(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def check_output(output) -> pathlib.Path:
    """``output`` as a Path, or SiteError when it is a file or a folder that holds something else."""
    out = pathlib.Path(output)
    if out.exists() and not out.is_dir():
        raise SiteError(f"--output: {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / STAMP).is_file():
        raise SiteError(
            f"--output: {out} is not empty and holds no numr-web site ({STAMP}); give a new or empty folder"
        )
    return out


def stale(output) -> str | None:
    """Why the site in ``output`` must be (re)built, or None when it is up to date."""
    out = check_output(output)
    try:
        stamp = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return f"no site in {out} yet"
    if stamp.get("digest") != digest():
        return "numr_web, the notebooks or the build tools changed since it was built"
    return None


# -- build --------------------------------------------------------------------------------------


def _run(cmd, cwd, what, timeout=900):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-25:])
        raise SiteError(f"{what} failed (exit {out.returncode}):\n{tail}")
    return out


def build_wheel(root: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """numr_web's pure wheel from a snapshot of the source tree (nothing is written into the tree)."""
    with tempfile.TemporaryDirectory(prefix="numr-web-wheel-") as tmp:
        src = pathlib.Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(root / name, src / name)
        shutil.copytree(root / "numr_web", src / "numr_web", ignore=_SKIP)
        cmd = [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(dest)]
        _run(cmd + ["--no-build-isolation"], src, "building numr_web's wheel (pip wheel)")
    wheels = sorted(dest.glob("numr_web-*-py3-none-any.whl"))
    if len(wheels) != 1:
        raise SiteError(f"expected one numr_web wheel, pip wheel made {[w.name for w in dest.iterdir()]}")
    return wheels[0]


def _cache_dir() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "numr-web" / "site-wheels"


def widget_wheels(dest: pathlib.Path) -> list[pathlib.Path]:
    """anywidget and its missing requirements as pure wheels, at the versions installed here (so
    the kernel's Python side matches the front-end extension the site takes from this environment).

    Downloaded once from PyPI into a cache folder (``$XDG_CACHE_HOME/numr-web/site-wheels``).
    """
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    pins = {}
    for dist in WIDGET_WHEELS:
        try:
            pins[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise SiteError(f'{dist} is not installed: python3 -m pip install -e ".[site]"') from None

    def cached(dist, version):
        stem = f"{dist.replace('-', '_').lower()}-{version}-"
        return [p for p in cache.glob("*.whl") if p.name.lower().startswith(stem)]

    missing = [f"{d}=={v}" for d, v in pins.items() if not cached(d, v)]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        cmd += ["--platform", "any", "--implementation", "py", "--abi", "none", "--python-version", "3.14"]
        _run(cmd + ["-d", str(cache), *missing], None, f"downloading {', '.join(missing)} from PyPI (pip download)")
    out = []
    for dist, version in pins.items():
        found = cached(dist, version)
        if not found:
            raise SiteError(f"no pure wheel of {dist}=={version} on PyPI or in {cache}")
        out.append(pathlib.Path(shutil.copy2(found[0], dest / found[0].name)))
    return out


def _lite_config() -> dict:
    return {
        "jupyter-lite-schema-version": 0,
        "jupyter-config-data": {
            "appName": "numr_web playground",
            "defaultKernelName": "python",
            # the kernel's %pip finds numr_web and anywidget among the site's own wheels and never asks PyPI
            "litePluginSettings": {KERNEL_PLUGIN: {"disablePyPIFallback": True}},
        },
    }


def _verify(out: pathlib.Path, wheels: list[pathlib.Path]) -> None:
    """The built site has what the playground needs, else SiteError naming what is missing."""
    config = json.loads((out / "jupyter-lite.json").read_text())["jupyter-config-data"]
    kernel = config.get("litePluginSettings", {}).get(KERNEL_PLUGIN, {})
    problems = []
    if kernel.get("disablePyPIFallback") is not True:
        problems.append("the kernel's PyPI fallback is not disabled in jupyter-lite.json")
    if not any(str(u).startswith("./pypi/all.json") for u in kernel.get("pipliteUrls", [])):
        problems.append("jupyter-lite.json lists no ./pypi/all.json among pipliteUrls")
    for wheel in wheels:
        if not (out / "pypi" / wheel.name).is_file():
            problems.append(f"pypi/{wheel.name} is missing")
    names = {e.get("name") for e in config.get("federated_extensions", [])}
    for ext in ("anywidget", "@jupyter-widgets/jupyterlab-manager", "@jupyterlite/pyodide-kernel-extension"):
        if ext not in names:
            problems.append(f"the front-end extension {ext} is missing")
    if problems:
        raise SiteError("the built site is incomplete: " + "; ".join(problems))


def _say(*args):
    print(*args, flush=True)


def build(output=DEFAULT_OUTPUT, *, log=_say) -> dict:
    """Build the site into ``output`` (replacing a site built there before); returns its stamp."""
    out = check_output(output)
    root = _source_root()
    versions = _versions()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="numr-web-site-") as tmp:
        work = pathlib.Path(tmp)
        wheels_dir = work / "wheels"
        wheels_dir.mkdir()
        log(f"numr_web wheel from {root}")
        wheels = [build_wheel(root, wheels_dir)]
        log(f"anywidget and its requirements: {', '.join(WIDGET_WHEELS)}")
        wheels += widget_wheels(wheels_dir)
        lite = work / "lite"
        files = lite / "files"
        files.mkdir(parents=True)
        notebooks = _notebooks(root)
        for nb in notebooks:
            shutil.copy2(nb, files / nb.name)
        (lite / "jupyter-lite.json").write_text(json.dumps(_lite_config(), indent=2))
        built = work / "site"
        cmd = [sys.executable, "-m", "jupyterlite_core", "build", "--lite-dir", str(lite)]
        cmd += ["--output-dir", str(built), "--contents", str(files), "--piplite-wheels", str(wheels_dir)]
        cmd += ["--no-sourcemaps"]
        log(f"jupyter lite build (jupyterlite-core {versions['jupyterlite-core']}, Pyodide {PYODIDE_VERSION})")
        # cwd=work: jupyterlite's task database (.jupyterlite.doit.db) lives and dies with this build
        _run(cmd, work, "jupyter lite build")
        _verify(built, wheels)
        stamp = {
            "digest": digest(root),
            "numr_web_wheel": wheels[0].name,
            "wheels": sorted(w.name for w in wheels),
            "notebooks": [nb.name for nb in notebooks],
            "versions": versions,
            "pyodide": PYODIDE_VERSION,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (built / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        (built / ".nojekyll").write_text("")  # GitHub Pages: serve every file as it is, no Jekyll
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(built, out)
    log(f"site built in {out} ({time.perf_counter() - start:.1f} s)")
    return stamp


# -- serve --------------------------------------------------------------------------------------


def parse_port(value) -> int:
    try:
        port = int(str(value), 10)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise SiteError(f"--port: expected a port number from 0 to 65535 (0: any free port), got {value!r}")
    return port


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".json": "application/json",
        ".wasm": "application/wasm",
        ".whl": "application/zip",
        ".ipynb": "application/x-ipynb+json",
    }

    def log_message(self, *args):  # quiet: the console shows the URL, not every file
        pass


def server(output, port: int = 0) -> http.server.ThreadingHTTPServer:
    """An HTTP server for the site in ``output`` on 127.0.0.1:``port`` (not yet serving)."""
    handler = functools.partial(_Handler, directory=str(pathlib.Path(output)))
    try:
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise SiteError(f"--port: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None


def serve(output=DEFAULT_OUTPUT, port=8000, *, log=_say) -> int:
    """Build ``output`` when stale, then serve it on 127.0.0.1 until interrupted."""
    port = parse_port(port)
    out = check_output(output)
    why = stale(out)
    if why:
        log(f"building the site: {why}")
        build(out, log=log)
    httpd = server(out, port)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    log(f"numr_web playground: {url}lab/index.html  (notebooks: {url}tree/index.html; Ctrl-C stops)")
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0

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

numr_web and anywidget are pre-installed: the kernel starts Pyodide with a lock file of the site's own
(``pypi/pyodide-lock.json``): Pyodide's lock for ``PYODIDE_VERSION`` (from the npm ``pyodide`` package
of that version, its integrity pinned here) with every package pointing at Pyodide's CDN, plus the
site's wheels (numr_web, anywidget and its requirements, the kernel's own piplite, ipykernel and
pyodide-kernel).  Pyodide loads the kernel's packages, numr_web and anywidget together while it starts,
so no notebook needs a ``%pip`` cell, and NumPy, matplotlib and the rest still come from the CDN when a
notebook asks for them.

The site opens on a short page (``index.html``, from ``landing.html`` beside this module) that says
what this is, whether the visitor's browser has WebGPU and which notebook to open first, with links
into the lab.  The notebooks are copied with the Lite kernel's kernelspec, so they open unmodified.

Each build starts from a fresh working folder, so jupyterlite's task database
(``.jupyterlite.doit.db``) never skips a step that changed. A file ``STAMP`` in the output
records a digest of everything the site is made from; ``stale(output)`` compares it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import http.server
import importlib.metadata
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
import zipfile

__all__ = ["build", "serve", "stale", "SiteError", "DEFAULT_OUTPUT", "STAMP"]

#: jupyterlite-core and jupyterlite-pyodide-kernel: one version, so the site and the tests agree
JUPYTERLITE_VERSION = "0.8.6"
#: the Pyodide that kernel loads (from cdn.jsdelivr.net/pyodide/v{PYODIDE_VERSION}/full/)
PYODIDE_VERSION = "314.0.6"
KERNEL_PLUGIN = "@jupyterlite/pyodide-kernel-extension:kernel"
#: where Pyodide's packages live; the site's lock points every package of Pyodide's own there
PYODIDE_CDN = f"https://cdn.jsdelivr.net/pyodide/v{PYODIDE_VERSION}/full/"
#: the npm package of that Pyodide, which carries its ``pyodide-lock.json``, and its integrity (npm's sha512)
PYODIDE_NPM = f"pyodide/-/pyodide-{PYODIDE_VERSION}.tgz"
PYODIDE_NPM_SHA512 = "BKDTJyIqFxC4BExLqeRS3f5xvXZIjOt8C3zGLN/Cc7tFxSwvKVhVkchQQ2AGLOtR4YrVOIFxbV8poyDOOmWwxQ=="
#: the site's lock, relative to the site's root (beside the wheels it lists)
SITE_LOCK = "pypi/pyodide-lock.json"
#: what the kernel loads while Pyodide starts: the names its worker checks to skip its own installs
#: (micropip, piplite, ipykernel, comm, pyodide-kernel, jedi, ipython), then numr_web and anywidget
PRELOADED = ("micropip", "piplite", "ipykernel", "comm", "pyodide-kernel", "jedi", "ipython", "numr-web", "anywidget")
#: the Lite kernel's kernelspec, written into the site's copies of the notebooks so they open unmodified
LITE_KERNELSPEC = {"display_name": "Python (Pyodide)", "language": "python", "name": "python"}
#: the language_info the Lite kernel replies with (jupyterlite-pyodide-kernel 0.8's kernel_info_reply, which
#: says 3.8 whatever the Python): the lab writes it into a notebook whose own differs, marking it modified
LITE_LANGUAGE_INFO = {
    "codemirror_mode": {"name": "python", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
    "version": "3.8",
}
#: the markers of Pyodide's Python, for the requirements of the site's wheels
PYODIDE_MARKERS = {
    "sys_platform": "emscripten",
    "platform_system": "Emscripten",
    "platform_machine": "wasm32",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "python_version": "3.14",
    "python_full_version": "3.14.2",
    "extra": "",
}
#: anywidget and those of its requirements that Pyodide's distribution lacks (ipython,
#: traitlets and typing-extensions come from Pyodide; widgetsnbextension from the kernel)
WIDGET_WHEELS = ("anywidget", "ipywidgets", "jupyterlab_widgets", "psygnal", "comm")
DEFAULT_OUTPUT = pathlib.Path("build") / "site"
STAMP = ".numr-web-site.json"
#: bump when the way the site is made changes, so older sites count as stale
LAYOUT = 2

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
    return _cache_root() / "site-wheels"


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
    kernel = {
        # %pip finds only the site's own wheels and Pyodide's packages, never PyPI
        "disablePyPIFallback": True,
        # Pyodide starts with the site's lock and loads the kernel's packages, numr_web and anywidget at once
        # (the extension resolves a key ending in URL against the site's root)
        "loadPyodideOptions": {"lockFileURL": f"./{SITE_LOCK}", "packages": list(PRELOADED)},
    }
    return {
        "jupyter-lite-schema-version": 0,
        "jupyter-config-data": {
            "appName": "numr_web playground",
            "defaultKernelName": "python",
            "litePluginSettings": {KERNEL_PLUGIN: kernel},
        },
    }


#: settings a visitor's lab starts with: the file browser shows whole names (no date column)
_OVERRIDES = {"@jupyterlab/filebrowser-extension:browser": {"showLastModifiedColumn": False}}


# -- the site's lock: Pyodide's, pointing at its CDN, plus the site's wheels ----------------------


def _cache_root() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "numr-web"


def pyodide_lock() -> dict:
    """Pyodide ``PYODIDE_VERSION``'s ``pyodide-lock.json`` (what its CDN serves), from the npm package of
    that version: downloaded once (its sha512 checked against ``PYODIDE_NPM_SHA512``) and cached."""
    cached = _cache_root() / "pyodide" / f"pyodide-lock-{PYODIDE_VERSION}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    registry = os.environ.get("npm_config_registry") or "https://registry.npmjs.org/"
    url = registry.rstrip("/") + "/" + PYODIDE_NPM
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
    except OSError as exc:
        raise SiteError(f"downloading Pyodide {PYODIDE_VERSION}'s lock file ({url}) failed: {exc}") from None
    if base64.b64encode(hashlib.sha512(data).digest()).decode() != PYODIDE_NPM_SHA512:
        raise SiteError(f"{url} is not the npm package of Pyodide {PYODIDE_VERSION} (its sha512 differs)")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        text = tar.extractfile("package/pyodide-lock.json").read().decode()
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(text)
    return json.loads(text)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_entry(wheel: pathlib.Path) -> dict:
    """The lock entry of a pure wheel (``depends`` as requirement names, not yet checked)."""
    from email.parser import HeaderParser

    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta_name = next(n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        meta = HeaderParser().parsestr(z.read(meta_name).decode())
    depends = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(PYODIDE_MARKERS):
            depends.append(_norm(req.name))
    tops = {n.split("/", 1)[0] for n in names if "/" in n or n.endswith(".py")}
    imports = sorted(t.removesuffix(".py") for t in tops if not t.endswith((".dist-info", ".data")))
    return {
        "name": meta["Name"],
        "version": meta["Version"],
        "file_name": wheel.name,
        "install_dir": "site",
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "package_type": "package",
        "imports": imports,
        "depends": sorted(set(depends)),
        "unvendored_tests": False,
    }


def site_lock(base: dict, wheels: list[pathlib.Path]) -> dict:
    """``base`` (Pyodide's lock) with its packages at absolute CDN URLs, plus ``wheels`` (relative to the
    lock, which lies beside them); a site wheel replaces Pyodide's package of the same name.
    SiteError when a requirement of a site wheel is in neither."""
    packages = {}
    for key, entry in base["packages"].items():
        url = entry["file_name"] if "://" in entry["file_name"] else PYODIDE_CDN + entry["file_name"]
        packages[key] = {**entry, "file_name": url}
    ours = {_norm(e["name"]): e for e in map(wheel_entry, wheels)}
    packages.update(ours)
    for entry in ours.values():
        unknown = [d for d in entry["depends"] if d not in packages]
        if unknown:
            raise SiteError(
                f"{entry['name']} requires {', '.join(unknown)}, which neither Pyodide {PYODIDE_VERSION} "
                "nor the site's wheels have"
            )
    missing = [name for name in PRELOADED if _norm(name) not in packages]
    if missing:
        raise SiteError(f"the site's lock lacks what the kernel preloads: {', '.join(missing)}")
    return {**base, "packages": dict(sorted(packages.items()))}


# -- the notebooks and the landing page -----------------------------------------------------------


def _site_notebook(path: pathlib.Path) -> str:
    """The notebook as the site serves it: the Lite kernel's kernelspec and language_info (so opening it
    changes nothing), no outputs or execution counts."""
    nb = json.loads(path.read_text())
    meta = nb.setdefault("metadata", {})
    meta["kernelspec"], meta["language_info"] = dict(LITE_KERNELSPEC), dict(LITE_LANGUAGE_INFO)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def notebook_summary(path: pathlib.Path) -> tuple[str, str]:
    """(title, summary) of a notebook: its first Markdown heading and the paragraph after it."""
    nb = json.loads(path.read_text())
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        lines = "".join(cell["source"]).strip().splitlines()
        if not lines or not lines[0].startswith("# "):
            continue
        paragraph = "\n".join(lines[1:]).strip().split("\n\n")[0]
        text = " ".join(line.strip() for line in paragraph.splitlines()).strip("*_ ")
        return lines[0][2:].strip(), re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)  # [words](link) -> words
    return path.stem, ""


def _inline(text: str) -> str:
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def landing_page(notebooks: list[pathlib.Path]) -> str:
    """The site's ``index.html``: ``landing.html`` with a link and a line for each notebook."""
    items = []
    for nb in notebooks:
        title, sentence = notebook_summary(nb)
        href = "lab/index.html?path=" + urllib.parse.quote(nb.name)
        items.append(
            f'      <li><a href="{href}" data-notebook="{html.escape(nb.name)}">{_inline(title)}</a>'
            f"<span>{_inline(sentence)}</span></li>"
        )
    page = (PACKAGE / "landing.html").read_text()
    if "<!-- NOTEBOOKS -->" not in page:
        raise SiteError("landing.html has no <!-- NOTEBOOKS --> marker")
    return page.replace("<!-- NOTEBOOKS -->", "\n".join(items)).replace("{PYODIDE_VERSION}", PYODIDE_VERSION)


def _verify(out: pathlib.Path, wheels: list[pathlib.Path]) -> None:
    """The built site has what the playground needs, else SiteError naming what is missing."""
    config = json.loads((out / "jupyter-lite.json").read_text())["jupyter-config-data"]
    kernel = config.get("litePluginSettings", {}).get(KERNEL_PLUGIN, {})
    problems = []
    if kernel.get("disablePyPIFallback") is not True:
        problems.append("the kernel's PyPI fallback is not disabled in jupyter-lite.json")
    if not any(str(u).startswith("./pypi/all.json") for u in kernel.get("pipliteUrls", [])):
        problems.append("jupyter-lite.json lists no ./pypi/all.json among pipliteUrls")
    if kernel.get("loadPyodideOptions", {}).get("lockFileURL") != f"./{SITE_LOCK}":
        problems.append(f"the kernel does not start from the site's lock ./{SITE_LOCK}")
    lock = json.loads((out / SITE_LOCK).read_text())["packages"] if (out / SITE_LOCK).is_file() else {}
    if not lock:
        problems.append(f"{SITE_LOCK} is missing")
    for wheel in wheels:
        if not (out / "pypi" / wheel.name).is_file():
            problems.append(f"pypi/{wheel.name} is missing")
    for key, entry in lock.items():
        if "://" not in entry["file_name"] and not (out / "pypi" / entry["file_name"]).is_file():
            problems.append(f"the lock's {key} names pypi/{entry['file_name']}, which is missing")
    names = {e.get("name") for e in config.get("federated_extensions", [])}
    for ext in ("anywidget", "@jupyter-widgets/jupyterlab-manager", "@jupyterlite/pyodide-kernel-extension"):
        if ext not in names:
            problems.append(f"the front-end extension {ext} is missing")
    if problems:
        raise SiteError("the built site is incomplete: " + "; ".join(problems))


#: where jupyterlite-pyodide-kernel puts its own wheels (piplite, ipykernel, pyodide-kernel, widgetsnbextension)
KERNEL_WHEELS = pathlib.PurePosixPath("extensions/@jupyterlite/pyodide-kernel-extension/static/pypi")


def _say(*args):
    print(*args, flush=True)


def build(output=DEFAULT_OUTPUT, *, log=_say, notebooks=None) -> dict:
    """Build the site into ``output`` (replacing a site built there before); returns its stamp.

    ``notebooks``: the notebook files to publish instead of the source tree's (a benchmark adds one)."""
    out = check_output(output)
    root = _source_root()
    versions = _versions()
    start = time.perf_counter()
    base_lock = pyodide_lock()
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
        notebooks = _notebooks(root) if notebooks is None else [pathlib.Path(nb) for nb in notebooks]
        for nb in notebooks:
            (files / nb.name).write_text(_site_notebook(nb))
        (lite / "jupyter-lite.json").write_text(json.dumps(_lite_config(), indent=2))
        (lite / "overrides.json").write_text(json.dumps(_OVERRIDES, indent=2))
        built = work / "site"
        cmd = [sys.executable, "-m", "jupyterlite_core", "build", "--lite-dir", str(lite)]
        cmd += ["--output-dir", str(built), "--contents", str(files), "--piplite-wheels", str(wheels_dir)]
        cmd += ["--no-sourcemaps"]
        log(f"jupyter lite build (jupyterlite-core {versions['jupyterlite-core']}, Pyodide {PYODIDE_VERSION})")
        # cwd=work: jupyterlite's task database (.jupyterlite.doit.db) lives and dies with this build
        _run(cmd, work, "jupyter lite build")
        # the kernel's own wheels beside the site's, so the lock names every local wheel relative to itself
        kernel_wheels = sorted((built / KERNEL_WHEELS).glob("*.whl"))
        kernel_wheels = [w for w in kernel_wheels if not w.name.startswith("widgetsnbextension-3.")]
        for wheel in kernel_wheels:
            shutil.copy2(wheel, built / "pypi" / wheel.name)
        lock = site_lock(base_lock, [built / "pypi" / w.name for w in wheels + kernel_wheels])
        (built / SITE_LOCK).write_text(json.dumps(lock, indent=1) + "\n")
        (built / "index.html").write_text(landing_page(notebooks))
        _verify(built, wheels)
        stamp = {
            "digest": digest(root),
            "numr_web_wheel": wheels[0].name,
            "wheels": sorted(w.name for w in wheels + kernel_wheels),
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
    log(f"numr_web playground: {url}  (the lab: {url}lab/index.html; Ctrl-C stops)")
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0

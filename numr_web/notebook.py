"""One setup cell for a notebook, on the desktop and in the playground (``numr_web.notebook.setup``).

    >>> from numr_web.notebook import setup
    >>> env = await setup("numpy")     # the packages this notebook needs; then which devices compute here

In the browser (Pyodide, JupyterLite's kernel) numr_web needs no NumPy: a page that computes on WebGPU
never downloads it.  A notebook that does needs it says so here, and ``setup`` loads it from Pyodide's
own distribution (its CDN), as ``%pip install numpy`` would.  Where that fails (offline, a blocked CDN)
the cell stops with one line naming the package and what to do, not a traceback from inside a library.
On the desktop the packages must be installed already; a missing one gets the same one line, with the
``pip install`` that fixes it.

Then it probes the devices (CPU, CUDA, WebGPU: the WebGPU device request is awaited, so it works in
every browser, with or without JSPI), prints what it found and returns a ``Setup``.  In a browser without
WebGPU the CPU is the only device, so ``setup`` loads NumPy (and ml_dtypes) for it even when not asked.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys

from numr_web import __version__
from numr_web.backends import DEVICES, fastest_device, get_backend

__all__ = ["setup", "Setup", "MissingPackage"]

#: import names of the distribution names a notebook may ask for, where they differ
_IMPORT_NAMES = {"ml-dtypes": "ml_dtypes", "ml_dtypes": "ml_dtypes", "scikit-learn": "sklearn", "pillow": "PIL"}
#: what the CPU backend computes with (ml_dtypes: bfloat16 only)
CPU_PACKAGES = ("numpy", "ml_dtypes")
#: how a visitor or a reader names them
_TITLES = {"numpy": "NumPy", "matplotlib": "matplotlib", "ml_dtypes": "ml_dtypes"}


class MissingPackage(ImportError):
    """A package a notebook needs cannot be imported or loaded here; the message says what to do.

    In IPython (Jupyter, JupyterLite) it shows as that one line, without a traceback."""

    def _render_traceback_(self):  # IPython shows these lines in place of the traceback
        return [f"{type(self).__name__}: {self}"]


@dataclasses.dataclass
class Setup:
    """What ``setup`` found: where this runs, the packages it loaded, each device and why (not)."""

    in_browser: bool
    python: str
    #: name -> version of the packages asked for
    packages: dict
    #: device -> (usable, description or the reason it is not)
    devices: dict
    #: the device to compute on by default: WebGPU in a browser that has it, else the CPU; on the
    #: desktop CUDA, then a hardware WebGPU adapter, else the CPU
    device: str

    @property
    def available(self) -> list:
        return [d for d, (ok, _) in self.devices.items() if ok]

    def report(self) -> str:
        where = "in the browser (Pyodide)" if self.in_browser else "(CPython)"
        lines = [f"numr_web {__version__} on Python {self.python} {where}"]
        for name, version in self.packages.items():
            origin = " (Pyodide's distribution)" if self.in_browser else ""
            lines.append(f"  {_title(name)} {version}{origin}")
        for device, (ok, why) in self.devices.items():
            lines.append(f"  {device:7s} {'yes' if ok else 'no '}  {why}")
        lines.append(f"computing on {self.device}")
        return "\n".join(lines)


def _title(name: str) -> str:
    return _TITLES.get(_import_name(name), name)


def _import_name(name: str) -> str:
    return _IMPORT_NAMES.get(name.lower(), name.replace("-", "_"))


def _in_browser() -> bool:
    return sys.platform == "emscripten"


async def _load_in_browser(names: list) -> list:
    """Load ``names`` from Pyodide's distribution (the lock's URLs: its CDN); the messages of failures."""
    import pyodide_js  # Pyodide's JavaScript API, importable inside Pyodide only

    errors = []
    # loadPackage never rejects on a failed download: it reports through errorCallback
    await pyodide_js.loadPackage(names, errorCallback=errors.append, messageCallback=lambda _m: None)
    return [str(e) for e in errors]


def _pyodide_said(messages: list) -> str:
    """Pyodide's failure messages in a few words: its "error while loading X:" headers and their reasons
    come as separate messages; the reasons, once each ("Failed to fetch"), or the first message."""
    text = " ".join(" ".join(m.split()) for m in messages)
    reasons = re.findall(r"while loading \S+?: (.+?)(?= The following error|$)", text)
    said = "; ".join(dict.fromkeys(r.strip() for r in reasons)) if reasons else text
    return said if len(said) <= 160 else said[:157].rsplit(" ", 1)[0] + " ..."


async def _require(names, *, webgpu: bool) -> dict:
    versions, missing, messages = {}, [], []
    wanted = [n for n in names if _import_name(n) not in sys.modules]
    if wanted and _in_browser():
        messages = await _load_in_browser(wanted)
    importlib.invalidate_caches()
    for name in names:
        try:
            module = importlib.import_module(_import_name(name))
        except ImportError:
            missing.append(name)
            continue
        versions[name] = getattr(module, "__version__", "?")
    if missing:
        what = " and ".join(_title(n) for n in missing)
        if _in_browser():
            said = _pyodide_said(messages)
            said = f" (Pyodide: {said})" if said else ""
            raise MissingPackage(
                f"{what} could not be loaded: this notebook needs {what}, which the playground loads from "
                f"Pyodide's CDN (cdn.jsdelivr.net), and that failed{said}; check the connection and run this "
                "cell again" + (" (04_explorer.ipynb runs without it, on WebGPU)" if webgpu else "")
            )
        fix = "python3 -m pip install " + " ".join(missing)
        raise MissingPackage(f"this notebook needs {what}, which is not installed here: {fix}")
    return versions


async def _webgpu() -> tuple:
    try:
        import numr_web.webgpu as wg

        info = await wg.init()  # awaitable: works in every browser, with or without JSPI
    except Exception as exc:  # no navigator.gpu, no adapter, no wgpu-py or no driver
        return False, f"{type(exc).__name__}: {exc}".split("\n")[0]
    return True, f"{info.get('adapter', 'adapter')} ({info.get('adapter type', info.get('backend', 'WebGPU'))})"


def _probe(device: str, in_browser: bool) -> tuple:
    if in_browser and device == "cuda":
        return False, "no CUDA in a browser"
    backend = get_backend(device, require=False)
    ok, why = backend.available()
    if ok and device == "cpu":
        why += f", {backend.info().get('cpu path', '?')} path"
    if in_browser and device == "cpu" and not ok and "numpy" not in sys.modules:
        why = "needs NumPy: await setup('numpy') loads it from Pyodide's distribution"
    return ok, why


async def setup(*packages: str, quiet: bool = False) -> Setup:
    """Make ``packages`` importable (in the browser: load them from Pyodide's distribution), probe the
    devices, print what was found (unless ``quiet``) and return it as a ``Setup``.

    Raises ``MissingPackage`` (one line in a notebook) when a package cannot be had.
    """
    for name in packages:
        if not isinstance(name, str) or not name:
            raise TypeError(f"packages: expected package names such as 'numpy', got {name!r}")
    in_browser = _in_browser()
    webgpu = await _webgpu()
    needed = list(packages)
    if in_browser and not webgpu[0]:
        needed += CPU_PACKAGES  # the CPU is the only device left: NumPy, and ml_dtypes for bfloat16
    needed = list(dict.fromkeys(needed))
    versions = await _require(needed, webgpu=webgpu[0])
    devices = {"webgpu": webgpu}
    for device in DEVICES:
        if device != "webgpu":
            devices[device] = _probe(device, in_browser)
    if in_browser:
        device = "webgpu" if webgpu[0] else "cpu"
    else:
        device = fastest_device()
    env = Setup(in_browser, sys.version.split()[0], versions, devices, device)
    if not quiet:
        print(env.report())
    return env

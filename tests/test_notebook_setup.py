"""The notebooks' one setup cell (``numr_web.notebook.setup``) on the desktop, and ``get_backend(...,
require=False)`` where a backend cannot even be imported.

In the browser the same helper loads NumPy from Pyodide's distribution; tests/test_site.py runs it there
(offline: up to the request for NumPy's wheel and the one-line message when it fails).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from numr_web.notebook import MissingPackage, setup


def test_setup_reports_packages_and_devices(capsys):
    import numpy as np

    env = asyncio.run(setup("numpy"))
    out = capsys.readouterr().out
    assert env.packages == {"numpy": np.__version__}
    assert env.in_browser is False
    assert set(env.devices) == {"cpu", "cuda", "webgpu"}
    assert env.devices["cpu"][0] is True and "cpu" in env.available
    assert env.device in env.available
    # the printed report names every device with yes or no and the device chosen
    for device, (ok, _) in env.devices.items():
        assert any(line.split()[:2] == [device, "yes" if ok else "no"] for line in out.splitlines()), out
    assert f"computing on {env.device}" in out


def test_setup_quiet_prints_nothing(capsys):
    asyncio.run(setup(quiet=True))
    assert capsys.readouterr().out == ""


def test_a_missing_package_is_one_line_naming_it_and_the_fix():
    with pytest.raises(MissingPackage) as info:
        asyncio.run(setup("numpy", "no-such-package-here", quiet=True))
    exc = info.value
    assert isinstance(exc, ImportError)
    assert "no-such-package-here" in str(exc) and "pip install no-such-package-here" in str(exc)
    assert "numpy" not in str(exc).lower().split("pip install")[-1], "only the missing package is named"
    lines = exc._render_traceback_()  # what IPython shows instead of a traceback
    assert len(lines) == 1 and lines[0].startswith("MissingPackage: this notebook needs no-such-package-here")


@pytest.mark.parametrize("bad", [123, "", None])
def test_setup_refuses_what_is_not_a_package_name(bad):
    with pytest.raises(TypeError, match="packages: expected package names"):
        asyncio.run(setup(bad, quiet=True))


NO_NUMPY = textwrap.dedent(
    """
    import asyncio, importlib.abc, json, sys

    class _NoNumpy(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            top = name.split(".")[0]
            if top in ("numpy", "ml_dtypes"):
                raise ModuleNotFoundError(f"No module named {top!r}", name=top)
            return None

    sys.meta_path.insert(0, _NoNumpy())
    from numr_web.backends import get_backend
    from numr_web.errors import BackendUnavailable
    from numr_web.notebook import MissingPackage, setup

    out = {}
    cpu = get_backend("cpu", require=False)  # must not raise
    out["available"] = list(cpu.available())
    out["info"] = cpu.info()
    for what, call in (("require", lambda: get_backend("cpu")), ("use", lambda: cpu.group_norm_forward)):
        try:
            call()
            out[what] = None
        except BackendUnavailable as exc:
            out[what] = str(exc)
    try:
        asyncio.run(setup("numpy", quiet=True))
        out["setup"] = None
    except MissingPackage as exc:
        out["setup"] = exc._render_traceback_()
    print(json.dumps(out))
    """
)


def test_without_numpy_the_cpu_backend_is_reported_unavailable_never_raised():
    import json

    res = subprocess.run([sys.executable, "-c", NO_NUMPY], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    ok, why = out["available"]
    assert ok is False and "NumPy" in why and "pip install numpy" in why
    assert out["info"] == {"available": False, "detail": why}
    assert out["require"] is not None and "NumPy" in out["require"]
    assert out["use"] == why  # any use of the stand-in raises with the same reason
    assert out["setup"] == [
        "MissingPackage: this notebook needs NumPy, which is not installed here: python3 -m pip install numpy"
    ]


def test_pyodides_failure_messages_are_said_in_a_few_words():
    """In the browser, loadPackage reports each failed package as a header message and a reason; the one line
    a visitor reads keeps each reason once (tests/test_site.py sees the real messages, offline)."""
    from numr_web.notebook import _pyodide_said

    header = "The following error occurred while loading {}:"
    messages = [header.format("numpy"), "Failed to fetch", header.format("contourpy"), "Failed to fetch"]
    assert _pyodide_said(messages) == "Failed to fetch"
    messages += [header.format("pillow"), "HTTP 500"]
    assert _pyodide_said(messages) == "Failed to fetch; HTTP 500"
    assert _pyodide_said(["  an   unexpected\nmessage "]) == "an unexpected message"
    long = _pyodide_said(["word " * 100])
    assert len(long) <= 160 and long.endswith(" ...")

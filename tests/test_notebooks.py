"""Every notebook in notebooks/ runs top to bottom in a real Jupyter kernel (CPython, ipykernel) via nbclient.

An error in any cell (an exception, a failed assertion of the notebook's own checks) fails the test with
the cell's source and traceback.  The playground's browser run of the same notebooks is tests/test_site.py.
Under CI=true a missing nbclient, nbformat or ipykernel fails instead of skipping.
"""

from __future__ import annotations

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IN_CI = os.environ.get("CI", "").lower() == "true"


def test_there_are_notebooks():
    names = [p.name for p in NOTEBOOKS]
    for prefix in ("01_", "02_", "03_", "04_"):
        assert any(n.startswith(prefix) for n in names), f"no notebook {prefix}* in {names}"


def _require():
    missing = []
    for module in ("nbclient", "nbformat", "ipykernel"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        why = f"executing the notebooks needs {', '.join(missing)} (pip install -e '.[dev]')"
        if IN_CI:
            pytest.fail(why + " (required under CI=true)")
        pytest.skip(why)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
    _require()
    import nbclient
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    # the kernel imports numr_web from this checkout and starts no thread pool of its own on the shared cores
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(tmp_path)}}, allow_errors=False
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell failed:\n{exc}")
    # every code cell ran, and none wrote an error output
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.get("execution_count"), f"{path.name}: code cell {i} did not run"
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{path.name}: code cell {i} raised {errors[0].get('ename')}: {errors[0].get('evalue')}"

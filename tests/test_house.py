"""The house rules CI holds the code to: import layers and no cycles, one-line module
docstrings, numerics constants defined once, one transport contract."""

from __future__ import annotations

import ast
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import numr_web
from numr_web import numerics
from numr_web.backends.webgpu import source, transport, transport_browser, transport_wgpu

ROOT = Path(numr_web.__file__).resolve().parent
REPO = ROOT.parent
MODULES = sorted(ROOT.rglob("*.py"))


def test_import_layers_and_no_cycles():
    """`lint-imports` checks the contracts declared in pyproject.toml (layers, acyclic siblings)."""
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports (import-linter, a dev extra) is not installed")
    proc = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_opens_with_one_line_saying_what_it_owns(path):
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc, f"{path.relative_to(REPO)} has no module docstring"
    first = doc.split("\n")[0]
    assert first.strip() and len(first) <= 120 and first.rstrip().endswith((".", ":")), first


def test_wgsl_modules_get_the_shared_numerics_constants():
    code = source.build("group_norm_forward.wgsl", {"X": "f32", "Y": "f32"}, {})
    for name, value in numerics.WGSL_CONSTANTS.items():
        assert f"const {name}: f32 = {value!r};" in code


def test_kernel_sources_hold_no_copy_of_the_numerics_constants():
    wgsl = " ".join(p.read_text() for p in (ROOT / "kernels" / "wgsl").glob("*.wgsl"))
    cuda = (ROOT / "kernels" / "cuda" / "group_norm.cu").read_text()
    for name in numerics.WGSL_CONSTANTS:
        assert not re.search(rf"const\s+{name}\b", wgsl), f"{name} is declared in a .wgsl file"
    assert not re.search(r"[^\w.]8\.0\s*\*", wgsl + cuda), "a bare 8.0 ratio: use POOR_SHIFT_RATIO"
    assert not re.search(r"#define\s+NUMR_(BLOCK|POOR_SHIFT_RATIO)\b", cuda)


@pytest.mark.parametrize("module", [transport_wgpu, transport_browser], ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_each_transport_satisfies_the_protocol(module):
    for name, member in vars(transport.Transport).items():
        if name.startswith("_"):
            continue
        assert hasattr(module, name), f"{module.__name__} lacks {name}"
        if callable(member):
            want = list(inspect.signature(member).parameters)[1:]  # without self
            got = list(inspect.signature(getattr(module, name)).parameters)
            assert got == want, f"{module.__name__}.{name}{tuple(got)} differs from the protocol's {tuple(want)}"


def test_import_numr_web_loads_no_backend_framework():
    code = "import sys, numr_web; print(sorted(m for m in ('numba', 'wgpu', 'cupy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


KERNEL_ENTRIES = sorted(
    p.name
    for p in (ROOT / "kernels" / "wgsl").glob("*.wgsl")
    if not p.name.startswith("dtype_")
    and p.name not in ("group_norm_common.wgsl", "group_norm_coef.wgsl", "group_norm_pow2.wgsl")
)


@pytest.mark.parametrize("kernel", KERNEL_ENTRIES)
def test_every_kernel_binds_at_most_eight_storage_buffers(kernel):
    """WebGPU's default maxStorageBuffersPerShaderStage is 8 (SwiftShader allows 10, some GPUs 8)."""
    roles = dict.fromkeys(re.findall(r"array<ST_(\w+)>", source.expand(kernel)), "f32")
    code = source.build(kernel, roles, {})
    assert len(re.findall(r"var<storage", code)) <= 8


def test_the_contracts_catch_a_deliberate_cycle(tmp_path):
    """A function-level import that closes a cycle (schema -> ops, the old way of registering the
    ops) breaks both contracts, so CI fails on it."""
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports (import-linter, a dev extra) is not installed")
    shutil.copytree(ROOT, tmp_path / "numr_web", ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    schema_py = tmp_path / "numr_web" / "schema.py"
    text = schema_py.read_text()
    marker = 'def schema(name: str) -> OpSchema:\n    """The schema of op ``name`` (e.g. ``"group_norm"``)."""\n'
    assert marker in text
    schema_py.write_text(text.replace(marker, marker + "    import numr_web.ops  # noqa: F401\n"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([exe, "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "numr_web.schema is not allowed to import numr_web.ops" in proc.stdout
    assert ".schema -> .ops" in proc.stdout

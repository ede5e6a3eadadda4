"""Assemble a WGSL module from the shipped ``.wgsl`` files.

Kept deliberately tiny (a JavaScript port is a dozen lines):

* ``//!include NAME.wgsl`` lines are replaced by that file (its own includes too; a file
  already included once is not included again);
* every storage role declared ``var<storage, MODE> R: array<ST_R>`` gets the
  load (and, for ``read_write``, store) helpers of its dtype from
  ``dtype_<key>.wgsl``, with ``$`` replaced by ``R``;
* constants (``const NAME: type = value;``) are prepended: the launch's own,
  and the numerics constants every kernel shares (``numr_web.numerics``);
* ``enable f16;`` goes first when a role uses native float16.

``binding_kinds`` reads the ``@binding(i) var<...>`` declarations, so the
launcher knows the bind group layout without a second description.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from numr_web.numerics import WGSL_CONSTANTS

_ROLE = re.compile(r"var<storage,\s*(read|read_write)>\s+(\w+)\s*:\s*array<ST_(\w+)>")
_BINDING = re.compile(r"@binding\((\d+)\)\s*var<([^>]+)>")
_INCLUDE = re.compile(r"^//!include (\S+)\s*$", re.M)

KERNEL_DIR = Path(__file__).resolve().parent.parent.parent / "kernels" / "wgsl"

#: dtype keys: storage formats a role can hold
DTYPE_KEYS = ("f32", "f16", "f16_packed", "bf16")


@cache
def read(name: str) -> str:
    return (KERNEL_DIR / name).read_text()


def _literal(value) -> tuple[str, str]:
    if isinstance(value, bool):
        return "bool", "true" if value else "false"
    if isinstance(value, int):
        return "u32", f"{value}u"
    if isinstance(value, float):
        return "f32", repr(value)
    raise TypeError(f"constant of unsupported type {type(value).__name__}")


def expand(kernel: str) -> str:
    """``kernel``'s text with its ``//!include`` lines replaced by the files they name, each once."""
    seen = {kernel}

    def include(m):
        name = m.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return _INCLUDE.sub(include, read(name))

    return _INCLUDE.sub(include, read(kernel))


def build(kernel: str, dtypes: dict, constants: dict) -> str:
    """The WGSL text of ``kernel`` for role dtypes ``{"X": "f32", ...}`` and ``constants``."""
    body = expand(kernel)
    head = []
    if any(v == "f16" for v in dtypes.values()):
        head.append("enable f16;")
    for name, value in {**WGSL_CONSTANTS, **constants}.items():
        typ, lit = _literal(value)
        head.append(f"const {name}: {typ} = {lit};")
    for mode, _name, role in _ROLE.findall(body):
        snippet = read(f"dtype_{dtypes[role]}.wgsl")
        if mode == "read":
            snippet = snippet.split("// store")[0]
        head.append(snippet.replace("$", role))
    return "\n".join(head) + "\n" + body


def binding_kinds(code: str) -> list[str]:
    """``["read" | "read_write" | "uniform", ...]`` indexed by binding number."""
    found = {}
    for idx, decl in _BINDING.findall(code):
        decl = decl.replace(" ", "")
        found[int(idx)] = {"storage,read": "read", "storage,read_write": "read_write", "uniform": "uniform"}[decl]
    return [found[i] for i in range(len(found))]

"""Every command README.md gives, each run in a new virtual environment with exactly what it installs.

README's shell blocks hold lines of the form ``python3 -m pip install SPEC [&& RUN]``.  For each line
this makes a fresh venv, runs the line there (from the source root, as README says) and checks it:

* ``numr-web site serve`` (it serves until stopped): until the playground's pages answer 200;
* ``python3 -m pytest``: the test suite, whose exit code is the line's (5, no tests, counts as failing);
* any other RUN: exit code 0;
* every line, also one without RUN: numr_web imports in the venv from outside the source tree, with
  what its extras promise (the Explorer with ``widget``; kernels and the front-end in a regular install).

A line fails when its install, its run or its check fails; the script exits 1 if any line failed.
``--only KIND`` / ``--skip KIND`` pick lines by kind (``site``, ``bare``, ``widget``, ``dev``, ``wheel``);
``--venv DIR`` keeps the (single) line's venv at DIR and ``--install-only`` stops after its install (CI
then lints in it and runs the tests line there with ``--run-only``).  ``--root`` runs them against
another source tree (the tests use a copy whose pyproject lacks a requirement).

Usage: python3 .ci/readme_commands.py [--root DIR] [--only KIND ...] [--skip KIND ...] [--list]
       [--venv DIR] [--install-only | --run-only]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: where `numr-web site serve` listens when README does not say --port
SERVE_URL = "http://127.0.0.1:8000/"
SERVE_PAGES = ("", "lab/index.html", "pypi/pyodide-lock.json")

#: what each kind of install must give, checked from outside the source tree (python3 -c)
SMOKE = {
    "bare": "import numr_web, numpy; print(numr_web.group_norm(numpy.ones((1, 2, 3), 'f4'), 1).shape)",
    "wheel": (
        "import importlib.resources as r, numr_web; p = r.files('numr_web');"
        "assert (p / 'kernels/wgsl/group_norm_forward.wgsl').is_file() and (p / 'static/explorer.js').is_file(),"
        " 'a regular install lacks the kernels or the front-end'; print(numr_web.__file__)"
    ),
    "widget": (
        "import numr_web; e = numr_web.Explorer(device='cpu', num_groups=4);"
        "assert e.status == 'ok', e.status; print('Explorer', e.device, e.status)"
    ),
    "site": "import numr_web.site as s; s._versions(); print('site tools', s.JUPYTERLITE_VERSION)",
    "dev": "import numr_web, wgpu, numba, pytest, playwright, nbclient, jupyterlab, matplotlib; print('dev tools')",
}


def readme_lines(readme: pathlib.Path) -> list[str]:
    """The command lines of README's ```bash blocks (comments dropped)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", readme.read_text(), re.S):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def kind_of(spec: str) -> str:
    """The kind of an install spec: -e ".[site]" -> site, -e . -> bare, . -> wheel (a regular install)."""
    spec = spec.strip("'\"")
    if spec == ".":
        return "wheel"
    match = re.fullmatch(r"\.(?:\[(\w+)\])?", spec.removeprefix("-e ").strip("'\""))
    return (match.group(1) or "bare") if match else "other"


def parse(line: str) -> dict:
    """``line`` as {kind, install, run}; ValueError when it is not ``python3 -m pip install SPEC [&& RUN]``."""
    install = re.match(r"^python3 -m pip install (-e )?(\S+)", line)
    if not install:
        raise ValueError(f"README command not of the form `python3 -m pip install SPEC [&& RUN]`: {line}")
    rest = line[install.end() :].strip()
    if rest and not rest.startswith("&& "):
        raise ValueError(f"README command: expected `&& RUN` after the install, got {rest!r} in: {line}")
    spec = (install.group(1) or "") + install.group(2)
    return {"kind": kind_of(spec), "install": line[: install.end()], "run": rest[3:] or None, "line": line}


def _env(venv: pathlib.Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _sh(cmd: str, cwd, env, timeout):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, timeout=timeout)


def _serve_until_pages_answer(cmd: str, root, env, timeout_s=900) -> str | None:
    """Run a serving line until SERVE_PAGES answer 200; None when they did, else why not."""
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=root, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"it exited with {proc.returncode} before serving"
            try:
                for page in SERVE_PAGES:
                    with urllib.request.urlopen(SERVE_URL + page, timeout=10) as response:
                        if response.status != 200:
                            raise urllib.error.URLError(f"{page}: HTTP {response.status}")
                print(f"   served: {', '.join(SERVE_URL + p for p in SERVE_PAGES)} answer 200", flush=True)
                return None
            except OSError:
                time.sleep(2)
        return f"{SERVE_URL} did not answer within {timeout_s} s"
    finally:
        _stop(proc)


def _stop(proc):
    """Stop a line's process group (the server and anything it started); it may have exited already."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


def run_line(cmd: dict, root: pathlib.Path, venv: pathlib.Path, *, install=True, run=True) -> str | None:
    """Install and run one README line in ``venv``; None when it worked, else why it failed."""
    env = _env(venv)
    if install:
        if not (venv / "bin" / "python3").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        print(f"== [{cmd['kind']}] in a new venv: {cmd['line']}", flush=True)
        if _sh(cmd["install"], root, env, 1800).returncode != 0:
            return f"the install failed: {cmd['install']}"
        with tempfile.TemporaryDirectory() as away:  # outside the source tree: the installed numr_web
            smoke = SMOKE.get(cmd["kind"], "import numr_web")
            if _sh(f"python3 -c {shlex.quote(smoke)}", away, env, 600).returncode != 0:
                return f"numr_web does not work as the {cmd['kind']} install promises: python3 -c {smoke!r}"
    if not run or not cmd["run"]:
        return None
    if "numr-web site serve" in cmd["run"]:
        why = _serve_until_pages_answer(cmd["run"], root, env)
        return f"`{cmd['run']}`: {why}" if why else None
    rc = _sh(cmd["run"], root, env, 5400).returncode
    if rc == 5 and "pytest" in cmd["run"]:
        return "pytest collected no tests"
    return f"`{cmd['run']}` exited with {rc}" if rc != 0 else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=ROOT, help="the source tree (default: this one)")
    ap.add_argument("--only", action="append", default=[], metavar="KIND")
    ap.add_argument("--skip", action="append", default=[], metavar="KIND")
    ap.add_argument("--list", action="store_true", help="print the lines and their kinds, run nothing")
    ap.add_argument("--venv", type=pathlib.Path, help="the venv for the one line picked (kept afterwards)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--install-only", action="store_true")
    mode.add_argument("--run-only", action="store_true", help="run the line in --venv, installed before")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    try:
        commands = [parse(line) for line in readme_lines(root / "README.md")]
    except ValueError as exc:
        print(f"readme_commands: {exc}", file=sys.stderr)
        return 1
    picked = [c for c in commands if (not args.only or c["kind"] in args.only) and c["kind"] not in args.skip]
    if args.list:
        for c in picked:
            print(f"{c['kind']:7s} {c['line']}")
        return 0
    if not picked:
        print("readme_commands: no README command picked", file=sys.stderr)
        return 1
    if (args.venv or args.install_only or args.run_only) and len(picked) != 1:
        print("readme_commands: --venv, --install-only and --run-only take exactly one line", file=sys.stderr)
        return 1
    failures = []
    for cmd in picked:
        with tempfile.TemporaryDirectory(prefix=f"readme-{cmd['kind']}-") as tmp:
            venv = args.venv.resolve() if args.venv else pathlib.Path(tmp) / "venv"
            why = run_line(cmd, root, venv, install=not args.run_only, run=not args.install_only)
        if why:
            failures.append(f"[{cmd['kind']}] {cmd['line']}\n   {why}")
            print(f"   FAILED: {why}", flush=True)
    if failures:
        print("\nREADME commands that failed in a fresh venv:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    print(f"README commands: {len(picked)} passed in fresh venvs ({', '.join(c['kind'] for c in picked)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

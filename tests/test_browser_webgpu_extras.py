"""Issue 27 in the browser: the double backward on WebGPU and pipelines prepared ahead of need, in Pyodide
on headless Chromium's WebGPU (SwiftShader), offline, NumPy-free.

The harness and the wheel are tests/test_browser_numr_web.py's (its ``browser`` and ``wheel``
fixtures: numr_web's wheel built from the working tree and installed in the page's Pyodide and
in two workers', one of them without JSPI).

* The double backward: each case of tests/double_backward.py runs there from its bytes
  (``from_buffer``, channels-last ones from channels-last bytes), with the same
  ``second_derivatives`` source as on the desktop; the results come back as bytes and are held
  on the host to that module's tolerance against the CPU in float64.  In the page (blocking
  read-backs through JSPI) and in the worker without JSPI (awaited read-backs).
* ``await numr_web.webgpu.prepare(...)`` on a new device, in the worker where nothing can block
  (createComputePipelineAsync), then the first bfloat16 forwards (both layouts, with and
  without SiLU, weight and bias) compile nothing (``Context.compiled_on_call`` stays 0), while
  a float32 call that was not prepared does compile.

Skipped without Chromium, the npm Pyodide or playwright, except under CI=true, where their
absence fails (as in tests/test_browser_numr_web.py).
"""

from __future__ import annotations

import base64
import inspect
import textwrap

import numpy as np
import pytest
from double_backward import CASES, case_arrays, rel_err, second_derivatives, tolerance
from test_browser_numr_web import browser, wheel  # noqa: F401  (the harness, with the wheel installed)
from test_webgpu_double_backward import _cpu, _storage_array

DB_PROGRAM = """
import base64, traceback
import numr_web
import numr_web.webgpu as wg

{SOURCE}

def _arr(spec):
    return wg.from_buffer(base64.b64decode(spec["b64"]), tuple(spec["shape"]), spec["dtype"], layout=spec["layout"])

{DEF} _read(a):
    if a is None:
        return None
    raw = {AWAIT}a.tobytes{ASYNC}()
    return {{"shape": list(a.shape), "dtype": str(a.dtype), "b64": base64.b64encode(raw).decode()}}

{DEF} run_all(specs):
    res = {{}}
    for name, c in specs.items():
        try:
            x, v = _arr(c["x"]), _arr(c["v"])
            u = [_arr(s) for s in c["u"]]
            w = _arr(c["w"]) if c["w"] else None
            b = _arr(c["b"]) if c["b"] else None
            out = second_derivatives(numr_web, x, v, u, w, b, c["G"], c["act"])
            res[name] = [({AWAIT}_read(a)) for a in out]
        except Exception:
            res[name] = {{"error": traceback.format_exc()}}
    return res
"""


def _spec(a, dtype, layout):
    """An array's bytes in memory order, as from_buffer takes them."""
    stored = _storage_array(a, dtype, "nchw")
    phys = stored.transpose(0, *range(2, stored.ndim), 1) if layout == "nhwc" else stored
    return {
        "b64": base64.b64encode(np.ascontiguousarray(phys).tobytes()).decode(),
        "shape": list(a.shape),
        "dtype": dtype,
        "layout": layout,
    }


def _case_spec(case):
    _name, _shape, G, _affine, act, layout, storage = case
    x, v, u, w, b = case_arrays(case)
    return {
        "x": _spec(x, storage, layout),
        "v": _spec(v, storage, layout),
        "u": [_spec(u[0], storage, layout)] + [_spec(t, "float32", "nchw") for t in u[1:]],
        "w": _spec(w, "float32", "nchw") if w is not None else None,
        "b": _spec(b, "float32", "nchw") if b is not None else None,
        "G": G,
        "act": act,
    }


def _decode(entry):
    raw = base64.b64decode(entry["b64"])
    if entry["dtype"] == "bfloat16":
        bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        flat = bits.view(np.float32)
    else:
        flat = np.frombuffer(raw, {"float32": "<f4", "float16": "<f2"}[entry["dtype"]])
    return flat.reshape(entry["shape"]).astype(np.float64)


CONTEXTS = {"page": True, "worker-nojspi": False}  # where -> can block


@pytest.fixture(scope="module")
def db_results(browser):  # noqa: F811
    specs = {c[0]: _case_spec(c) for c in CASES}
    source = inspect.getsource(second_derivatives)
    done = {}

    def get(where):
        if where not in done:
            if CONTEXTS[where]:
                forms = {"DEF": "def", "AWAIT": "", "ASYNC": ""}
                tail = "run_all(SPECS)\n"
            else:
                forms = {"DEF": "async def", "AWAIT": "await ", "ASYNC": "_async"}
                tail = "await wg.init()\nawait run_all(SPECS)\n"
            code = DB_PROGRAM.format(SOURCE=source, **forms) + f"SPECS = {specs!r}\n" + tail
            done[where] = browser.py(code, where=where, timeout_ms=240_000)
        return done[where]

    return get


@pytest.mark.parametrize("where", list(CONTEXTS))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_double_backward_in_browser(db_results, where, case):
    got = db_results(where)[case[0]]
    assert "error" not in got, f"{case[0]} raised in the browser ({where}):\n{got['error']}"
    ref = _cpu(case, reference=True)
    cpu = _cpu(case)
    assert len(got) == len(ref)
    for k, (r, c, g) in enumerate(zip(ref, cpu, got)):
        if r is None:
            assert g is None, (case[0], k)
            continue
        assert g["shape"] == list(r.shape), (case[0], k, g["shape"])
        if k == 0:
            assert g["dtype"] == case[-1], (case[0], g["dtype"])
        err, err_cpu = rel_err(_decode(g), r), rel_err(c, r)
        tol = tolerance(case, err_cpu)
        print(f"{where} {case[0]} output {k}: {err / 2**-24:.1f} u (cpu {err_cpu / 2**-24:.1f} u)")
        assert err <= tol, f"{where} {case[0]} output {k}: {err:.3g} against float64, tolerance {tol:.3g}"


PREPARE_PROGRAM = textwrap.dedent(
    """
    import struct
    import numr_web, numr_web.webgpu as wg
    from numr_web.backends.webgpu import device
    from pyodide.ffi import can_run_sync

    SHAPES = [((2, 64, 8, 8), 8), ((3, 12, 5, 7), 3), ((2, 40, 12, 8), 5), ((2, 10, 4, 4), 5)]

    def bf16(count):
        return struct.pack(f"<{count}H", *((0x3F80 + (i * 37) % 512) for i in range(count)))

    async def main():
        wg.configure()  # a new device: nothing compiled yet
        await wg.init()
        ctx = device.current()
        res = {"can_run_sync": can_run_sync(), "compiled_before": ctx.compiled_on_call}
        res["prepared"] = await wg.prepare(
            dtypes="bfloat16", layouts=("nchw", "nhwc"), activations=(None, "silu"), shapes=SHAPES, backward=False
        )
        res["ahead"] = ctx.compiled_ahead
        outs = []
        for shape, G in SHAPES:
            count = 1
            for n in shape:
                count *= n
            for layout in ("nchw", "nhwc"):
                x = wg.from_buffer(bf16(count), shape, "bfloat16", layout=layout)
                wc = wg.from_buffer(struct.pack(f"<{shape[1]}f", *([1.5] * shape[1])), (shape[1],), "float32")
                for act in (None, "silu"):
                    for wt, bt in ((None, None), (wc, None), (None, wc), (wc, wc)):
                        outs.append(numr_web.ops.group_norm_forward(x, wt, bt, G, 1e-5, activation=act)[0])
        res["compiled_after_bf16"] = ctx.compiled_on_call
        res["last"] = (await outs[-1].tobytes_async())[:8].hex()
        x32 = wg.from_buffer(struct.pack("<128f", *range(128)), (2, 16, 4), "float32")
        numr_web.group_norm(x32, 4)
        res["compiled_after_float32"] = ctx.compiled_on_call
        wg.configure()
        return res
    """
)


def test_prepare_in_browser_then_the_first_bfloat16_forward_compiles_nothing(browser):  # noqa: F811
    res = browser.py(PREPARE_PROGRAM + "await main()\n", where="worker-nojspi", timeout_ms=240_000)
    print(res)
    assert res["can_run_sync"] is False  # nothing can block here: prepare is awaited, compiles go async
    assert res["compiled_before"] == 0 and res["prepared"] > 0 and res["ahead"] == res["prepared"]
    assert res["compiled_after_bf16"] == 0, res
    assert res["compiled_after_float32"] > 0, res  # float32 was not prepared: its first call compiles
    assert len(bytes.fromhex(res["last"])) == 8

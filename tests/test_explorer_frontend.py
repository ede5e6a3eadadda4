"""The Explorer's front-end (numr_web/static/explorer.js, built from widget/) in headless Chromium.

A test page (tests/explorer_frontend/) mounts the bundle with a minimal anywidget-style model that records
what the view sets. The model holds KNOWN results: numr_web's CPU forward and backward on NumPy arrays,
packed as the contract says (docs/explorer-contract.md). The tests read what the DOM shows.

Debian's /usr/bin/chromium through the Python ``playwright`` package (never ``playwright install``). Under
CI=true a missing browser or playwright fails; elsewhere the tests skip with the reason.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import re
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import IN_CI

import numr_web

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "numr_web" / "static" / "explorer.js"
CHROMIUM = os.environ.get("NUMR_WEB_CHROMIUM", "/usr/bin/chromium")
PAGE = "/tests/explorer_frontend/index.html"
EPS = 1e-5


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"the Python playwright package is not installed ({exc}); pip install -e '.[dev]'"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set NUMR_WEB_CHROMIUM)"
    if not BUNDLE.exists():
        return f"{BUNDLE} is missing: npm ci --prefix widget && npm run --prefix widget build"
    return None


# ---- known results, packed as the contract says ------------------------------------------------------------
def compute(n=2, c=8, hw=(4, 4), g=4, seed=0, offset=3.0, grad_mode="random", eps=EPS, affine=False, silu=False):
    """numr_web's CPU forward and backward on a known x (channel c scaled by 1 + c/4), as the kernel sends them."""
    rng = np.random.default_rng(seed)
    spread = 1.0 + np.arange(c).reshape((1, c) + (1,) * len(hw)) * 0.25
    x = (offset + rng.standard_normal((n, c, *hw)) * spread).astype(np.float32)
    w, b = np.ones(c, np.float32), np.zeros(c, np.float32)
    if affine:
        w, b = (1.0 + 0.5 * rng.standard_normal(c)).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    act = "silu" if silu else None
    y, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, g, eps, activation=act)
    if grad_mode == "loss":
        dy = y.copy()
    elif grad_mode == "ones":
        dy = np.ones_like(x)
    else:
        dy = rng.standard_normal(x.shape).astype(np.float32)
    dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, g, bias=b, activation=act)
    x64, dx64 = x.astype(np.float64).reshape(n, g, -1), dx.astype(np.float64).reshape(n, g, -1)
    xhat = (x64 - np.asarray(mean, np.float64).reshape(n, g, 1)) * np.asarray(rstd, np.float64).reshape(n, g, 1)
    xc = x.astype(np.float64).reshape(n, c, -1)
    arrays = {
        "x": x,
        "y": y,
        "mean": mean,
        "rstd": rstd,
        "dy": dy,
        "dx": dx,
        "dweight": dw,
        "dbias": db,
        "dx_norm": np.sqrt((dx64 * dx64).sum(axis=2)),
        "dx_sum": dx64.sum(axis=2),
        "dx_dot_xhat": (dx64 * xhat).sum(axis=2),
        "bn_mean": xc.mean(axis=(0, 2)),
        "bn_var": xc.var(axis=(0, 2)),
        "weight": w,
        "bias": b,
    }
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()}


def pack(arrays, version=1):
    blob, meta = bytearray(), {}
    for name, a in arrays.items():
        meta[name] = {"offset": len(blob), "shape": list(a.shape)}
        blob += a.astype("<f4").tobytes()
    return base64.b64encode(bytes(blob)).decode(), {"version": version, "arrays": meta}


def state_for(arrays, **traits):
    b64, meta = pack(arrays, traits.pop("version", 1))
    x = arrays["x"]
    st = {
        "shape": list(x.shape),
        "device": "cpu (test)",
        "status": "ok",
        "results_b64": b64,
        "results_meta": meta,
        "num_groups": arrays["mean"].shape[1],
        "eps": EPS,
        "offset": 3.0,
        "scale": 1.0,
        "channel_spread": 0.0,
        "outlier_channel": -1,
        "seed": 0,
        "dtype": "float32",
        "memory_layout": "nchw",
        "silu": False,
        "grad_mode": "random",
        "pattern": "noise",
        "generated": True,
        "batch": x.shape[0],
        "sample": 0,
        "selected": [0, 0],
    }
    st.update(traits)
    return st


# ---- browser fixtures --------------------------------------------------------------------------------------
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


@pytest.fixture(scope="module")
def server():
    handler = functools.partial(_Quiet, directory=str(ROOT))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    why = _missing()
    if why:
        if IN_CI:
            pytest.fail(f"required under CI=true: {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless=new", "--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    pg = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.goto(server + PAGE)
    pg.wait_for_function("window.harnessReady === true", timeout=15_000)
    yield pg
    pg.close()
    assert not errors, f"errors in the page: {errors}"


#: opens every closed section (their views draw when opened: a closed section costs nothing on a recompute)
OPEN_FOLDS = """() => new Promise((r) => { document.querySelectorAll('details').forEach((d) => (d.open = true));
  requestAnimationFrame(() => setTimeout(() => setTimeout(r, 0), 0)); })"""


def mount(page, state, kind="dataview", open_folds=True):
    page.evaluate("([s, k]) => window.mount(s, k)", [state, kind])
    if open_folds:
        page.evaluate(OPEN_FOLDS)


def mount_view(page, name, state):
    """One view module on its own, fed known results (a unit test of that module), its sections open."""
    page.evaluate("([n, s]) => window.mountView(n, s)", [name, state])
    page.evaluate(OPEN_FOLDS)


def table_rows(page, testid):
    return page.evaluate(
        """(t) => [...document.querySelectorAll(`[data-testid="${t}"] tr`)]
            .map(r => [...r.children].map(c => c.textContent.trim()))""",
        testid,
    )


def text(page, testid):
    return page.locator(f'[data-testid="{testid}"]').first.text_content().strip()


def sets(page):
    return page.evaluate("window.model.sets")


def assert_stats_table(page, arrays):
    rows = table_rows(page, "group-stats")
    assert rows[0] == ["n", "g", "mean", "rstd"]
    mean, rstd = arrays["mean"], arrays["rstd"]
    n, g = mean.shape
    assert len(rows) == 1 + n * g
    for (sn, sg, sm, sr), (i, j) in zip(rows[1:], np.ndindex(n, g), strict=True):
        assert (int(sn), int(sg)) == (i, j)
        np.testing.assert_allclose(float(sm), mean[i, j], rtol=1e-5, atol=1e-30)
        np.testing.assert_allclose(float(sr), rstd[i, j], rtol=1e-5)
        # at least 6 significant digits
        assert len(re.sub(r"[^0-9]", "", sm.split("e")[0]).lstrip("0")) >= 6 or float(sm) == 0


# ---- tests -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dataview", "arraybuffer", "uint8array"])
def test_group_stats_table_shows_the_known_mean_and_rstd(page, kind):
    arrays = compute()
    mount(page, state_for(arrays), kind)
    assert_stats_table(page, arrays)
    assert text(page, "status").startswith("Up to date")


def test_worked_example_has_the_selected_groups_numbers(page):
    eps = 0.5  # large, so that var = 1/rstd^2 - eps differs visibly from 1/rstd^2
    arrays = compute(eps=eps)
    n, g = 1, 2
    mount(page, state_for(arrays, selected=[n, g], eps=eps))
    mean, rstd = float(arrays["mean"][n, g]), float(arrays["rstd"][n, g])
    c0 = g * (arrays["x"].shape[1] // arrays["mean"].shape[1])
    x0 = float(arrays["x"][n, c0].reshape(-1)[0])
    want = {
        "we-mean": mean,
        "we-rstd": rstd,
        "we-var": 1.0 / rstd**2 - eps,
        "we-x": x0,
        "we-xhat": (x0 - mean) * rstd,
        "we-y-expected": (x0 - mean) * rstd,
        "we-y": float(arrays["y"][n, c0].reshape(-1)[0]),
    }
    for testid, value in want.items():
        np.testing.assert_allclose(float(text(page, testid)), value, rtol=1e-5, err_msg=testid)
    # the kernel's y equals the formula's to float32 rounding
    assert abs(float(text(page, "we-y-diff"))) < 1e-5
    # the selected row of the table is marked
    assert page.locator('[data-testid="group-stats"] tr.nw-selected td').first.text_content() == str(n)


@pytest.mark.parametrize("grad_mode", ["random", "loss"])
def test_invariant_checks_pass_on_numr_webs_backward(page, grad_mode):
    arrays = compute(grad_mode=grad_mode)
    mount(page, state_for(arrays, grad_mode=grad_mode))
    for testid in ("inv-dx-sum", "inv-dx-dot-xhat"):
        row = page.locator(f'[data-testid="{testid}"]')
        assert row.get_attribute("data-pass") == "true", row.text_content()
        assert float(text(page, f"{testid}-worst")) <= 1e-5
    if grad_mode == "loss":
        # dy = y: dx is almost all the eps term, so plain orthogonality (cosine) does not hold here
        xhat_norm = np.sqrt(arrays["x"][0].size / arrays["mean"].shape[1])
        cos = np.abs(arrays["dx_dot_xhat"]) / (arrays["dx_norm"] * xhat_norm)
        assert cos.max() > 0.5


def test_invariant_check_fails_on_a_wrong_dx_sum(page):
    arrays = compute()
    arrays["dx_sum"][1, 3] += 1e-2 * float(np.abs(arrays["dx"]).sum() / arrays["mean"].size)
    mount(page, state_for(arrays))
    assert page.locator('[data-testid="inv-dx-sum"]').get_attribute("data-pass") == "false"
    assert "(n 1, g 3)" in page.locator('[data-testid="inv-dx-sum"]').text_content()
    assert page.locator('[data-testid="inv-dx-dot-xhat"]').get_attribute("data-pass") == "true"


def test_num_groups_select_offers_divisors_and_sends_the_change(page):
    mount(page, state_for(compute()))
    sel = page.locator('[data-testid="num-groups"]')
    values = sel.evaluate("s => [...s.options].map(o => o.value)")
    assert values == ["1", "2", "4", "8"]
    assert sel.input_value() == "4"
    sel.select_option("2")  # sets the value and dispatches input and change
    assert ["num_groups", 2] in sets(page)
    assert page.evaluate("window.model.saves") >= 1
    page.get_by_role("button", name="G = C (InstanceNorm)").click()
    assert sets(page)[-1] == ["num_groups", 8]
    page.get_by_role("button", name="G = 1 (LayerNorm)").click()
    assert sets(page)[-1] == ["num_groups", 1]


def test_new_results_redraw_the_table(page):
    mount(page, state_for(compute()))
    new = compute(n=3, g=2, seed=5, offset=-7.0)
    b64, meta = pack(new, version=2)
    # every view shows version 2 in the task that got the results (no frame shows two versions), not later
    drawn = page.evaluate(
        """async (p) => { window.pyUpdate(p); await Promise.resolve();
             return [...document.querySelectorAll('.nw-body, .nw-body [data-drawn]')].map((e) => e.dataset.drawn); }""",
        {"results_b64": b64, "results_meta": meta, "num_groups": 2},
    )
    assert len(drawn) >= 7 and set(drawn) == {"2"}, drawn  # the body and its six views
    assert_stats_table(page, new)
    assert "v2" in text(page, "status")
    np.testing.assert_allclose(float(text(page, "we-mean")), new["mean"][0, 0], rtol=1e-6)
    assert page.locator('[data-testid="selected"] h3').count() == 1


def test_clicking_a_heatmap_cell_selects_that_group(page):
    arrays = compute()
    mount(page, state_for(arrays))
    for testid in ("heatmap-mean", "heatmap-rstd"):
        canvas = page.locator(f'[data-testid="{testid}"]')
        box = canvas.bounding_box()
        g_count = arrays["mean"].shape[1]
        n, g = 1, 3 if testid == "heatmap-mean" else 2
        page.mouse.click(box["x"] + (g + 0.5) * box["width"] / g_count, box["y"] + (n + 0.5) * box["height"] / 2)
        assert sets(page)[-2:] == [["selected", [n, g]], ["sample", n]]
        assert page.locator('[data-testid="selected"] h3').text_content() == f"Selected group (n = {n}, g = {g})"
    # the hover tooltip shows the exact values
    canvas = page.locator('[data-testid="heatmap-mean"]')
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + 0.5 * box["width"] / 4, box["y"] + 0.5 * box["height"] / 2)
    tip = page.locator(".nw-tooltip")
    assert tip.is_visible()
    shown = re.search(r"mean = (\S+)", tip.text_content()).group(1)
    np.testing.assert_allclose(float(shown), arrays["mean"][0, 0], rtol=1e-6)


def test_controls_send_their_traits(page):
    mount(page, state_for(compute()))
    page.locator('[data-testid="dtype"]').select_option("bfloat16")
    page.locator('[data-testid="layout"]').select_option("nhwc")
    page.locator('[data-testid="grad-mode"]').select_option("loss")
    page.locator('[data-testid="outlier-channel"]').select_option("3")
    page.locator('[data-testid="silu"]').check()
    page.locator('[data-testid="batch"]').fill("5")
    page.locator('[data-testid="batch"]').press("Tab")
    page.locator('[data-testid="eps-zero"]').check()
    got = sets(page)
    for want in (["dtype", "bfloat16"], ["memory_layout", "nhwc"], ["grad_mode", "loss"], ["outlier_channel", 3]):
        assert want in got
    assert ["silu", True] in got and ["batch", 5] in got and ["eps", 0] in got
    # every control has a visible label
    unlabeled = page.evaluate(
        """() => [...document.querySelectorAll('.nw-controls input, .nw-controls select, [data-testid="batch"]')]
            .filter(e => !(e.labels && e.labels.length && e.labels[0].offsetParent !== null))
            .map(e => e.dataset.testid)"""
    )
    assert unlabeled == []


def test_status_shows_computing_and_errors(page):
    mount(page, state_for(compute()))
    page.evaluate("() => window.pyUpdate({status: 'computing'})")
    assert text(page, "status") == "Computing…"
    page.evaluate("() => window.pyUpdate({status: 'error: num_groups must divide C'})")
    assert text(page, "status") == "Error: num_groups must divide C"


def test_views_dim_only_while_a_recompute_runs_long(page):
    """A quick recompute does not fade the views out and in (a flicker, and frames competing with the redraw); one
    running longer than 300 ms (BUSY_MS) dims them, and they are back at once when it ends."""
    mount(page, state_for(compute()))
    busy = "() => document.querySelector('.nw-explorer').classList.contains('nw-busy')"
    page.evaluate("() => window.pyUpdate({status: 'computing'})")
    assert page.evaluate(busy) is False
    page.wait_for_timeout(100)
    page.evaluate("() => window.pyUpdate({status: 'ok'})")
    page.wait_for_timeout(400)
    assert page.evaluate(busy) is False  # the quick one never dimmed
    page.evaluate("() => window.pyUpdate({status: 'computing'})")
    page.wait_for_function(busy, timeout=2000)
    opacity = "() => getComputedStyle(document.querySelector('.nw-body')).opacity"
    page.wait_for_function(f"() => Number(({opacity})()) < 0.7", timeout=2000)
    page.evaluate("() => window.pyUpdate({status: 'ok'})")
    assert page.evaluate(busy) is False
    assert page.evaluate(opacity) == "1"  # no fade back


def test_bn_mean_moves_with_the_batch_and_gn_mean_does_not(page):
    a2 = compute(n=2, seed=3)
    mount(page, state_for(a2))
    before = table_rows(page, "bn-gn")
    a4 = compute(n=4, seed=3)
    assert np.array_equal(a4["x"][:2], a2["x"][:2])  # the same first samples
    b64, meta = pack(a4, version=2)
    page.evaluate("(p) => window.pyUpdate(p)", {"results_b64": b64, "results_meta": meta, "batch": 4})
    after = table_rows(page, "bn-gn")
    np.testing.assert_allclose([float(r[1]) for r in after[1:]], a4["bn_mean"][:4], rtol=1e-5)
    assert [r[2:4] for r in after[1:]] == [r[2:4] for r in before[1:]]  # GN means of n = 0, 1 unchanged
    assert [r[1] for r in after[1:]] != [r[1] for r in before[1:]]
    assert "changes with N" in page.locator('[data-testid="cube-batch"] svg').get_attribute("aria-label")


def test_cleanup_removes_listeners_and_screenshot(page, tmp_path):
    mount(page, state_for(compute(n=2, c=16, hw=(8, 8), g=4), selected=[1, 1]))
    assert page.evaluate("window.model.handlerCount()") > 0
    page.locator('[data-testid="heatmap-mean"]').hover()
    shot = tmp_path / "explorer.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    page.evaluate("window.cleanup()")
    assert page.evaluate("window.model.handlerCount()") == 0


def test_parameters_in_results_meta_win_over_traits_that_moved_on(page):
    # the eps slider moved (trait) while the shown results were computed with eps = 0.5 (results_meta)
    arrays = compute(eps=0.5)
    st = state_for(arrays, eps=1e-3)
    st["results_meta"]["eps"] = 0.5
    mount(page, st)
    rstd = float(arrays["rstd"][0, 0])
    np.testing.assert_allclose(float(text(page, "we-var")), 1.0 / rstd**2 - 0.5, rtol=1e-5)
    assert page.locator('[data-testid="inv-dx-dot-xhat"]').get_attribute("data-pass") == "true"


def _canvas_point(page, testid, c, s):
    """The page coordinates of element (channel c, flat position s) of an image (scrolled into view): each channel is
    a tile, placed as the canvas's data-geom says."""
    loc = page.locator(f'[data-testid="{testid}"]')
    loc.scroll_into_view_if_needed()
    box = loc.bounding_box()
    geo = json.loads(loc.get_attribute("data-geom"))
    i, j = divmod(s, geo["cols"])
    x = geo["tx"][c] + (j + 0.5) * geo["tw"] / geo["cols"]
    y = geo["ty"][c] + (i + 0.5) * geo["th"] / geo["rows"]
    return box["x"] + x, box["y"] + y


@pytest.mark.parametrize("silu", [False, True])
def test_images_hover_exact_values_and_click_chooses_the_worked_element(page, silu):
    arrays = compute(affine=True, silu=silu)
    n, c, hh, ww = arrays["x"].shape
    mount(page, state_for(arrays, silu=silu))
    assert [page.locator(f'[data-testid="image-{k}"]').count() for k in ("x", "y", "dy", "dx")] == [1, 1, 1, 1]
    ch, pos = 5, 7  # channel 5 is in group 2 (2 channels a group); position 7 is (1, 3) of 4x4
    page.mouse.move(*_canvas_point(page, "image-x", ch, pos))
    tip = page.locator(".nw-tooltip").text_content()
    shown = re.search(r"x\[0, 5, 1, 3\] = (\S+)", tip)
    assert shown, tip
    np.testing.assert_allclose(float(shown.group(1)), arrays["x"][0, 5, 1, 3], rtol=1e-6)
    np.testing.assert_allclose(float(re.search(r"dx = (\S+)", tip).group(1)), arrays["dx"][0, 5, 1, 3], rtol=1e-6)
    page.mouse.click(*_canvas_point(page, "image-x", ch, pos))
    assert sets(page)[-3:] == [["selected", [0, 2]], ["sample", 0], ["element", [ch, pos]]]
    assert "x[0, 5, 1, 3]" in text(page, "we-element")
    mean, rstd = float(arrays["mean"][0, 2]), float(arrays["rstd"][0, 2])
    x0 = float(arrays["x"][0, ch, 1, 3])
    z = (x0 - mean) * rstd * float(arrays["weight"][ch]) + float(arrays["bias"][ch])
    np.testing.assert_allclose(float(text(page, "we-x")), x0, rtol=1e-6)
    np.testing.assert_allclose(float(text(page, "we-y-expected")), z / (1 + np.exp(-z)) if silu else z, rtol=1e-5)
    # the backward worked through for that element: the formula (float64 in JS) against the kernel's dx
    dx = float(arrays["dx"][0, ch, 1, 3])
    np.testing.assert_allclose(float(text(page, "we-dx")), dx, rtol=1e-6)
    np.testing.assert_allclose(float(text(page, "we-dx-expected")), dx, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(text(page, "we-dy")), arrays["dy"][0, ch, 1, 3], rtol=1e-6)
    # with the kernel's weight and bias in the results, the invariants hold for a non-unit affine too
    for testid in ("inv-dx-sum", "inv-dx-dot-xhat"):
        assert page.locator(f'[data-testid="{testid}"]').get_attribute("data-pass") == "true"
    # keyboard: the focused image moves the element with the arrow keys
    page.locator('[data-testid="image-x"]').focus()
    page.keyboard.press("ArrowLeft")
    assert sets(page)[-1] == ["element", [ch, pos - 1]]
    # the tooltip says dx = 0 only where it is: here it is not
    assert "rounding" not in tip


def test_cube_hover_says_which_elements_share_the_statistics(page):
    mount(page, state_for(compute(), selected=[1, 2]))
    # the slabs overlap (an oblique drawing): the event goes to the element itself, as a pointer over its visible part
    page.locator('[data-testid="cube-group"] rect[data-n="1"][data-c0="4"]').first.dispatch_event("mousemove")
    tip = page.locator(".nw-tooltip").text_content()
    assert "sample 1, channels 4–5 (group 2)" in tip and "\nshares" in tip, tip
    page.locator('[data-testid="cube-group"] rect[data-n="0"][data-c0="4"]').first.dispatch_event("mousemove")
    assert "does not share" in page.locator(".nw-tooltip").text_content()


PAINT = """() => { const d = window.model.state.dy_paint;
  return d ? Array.from(new Float32Array(d.buffer.slice(d.byteOffset, d.byteOffset + d.byteLength))) : null; }"""


def test_painting_dy_sends_the_mask_as_binary(page):
    arrays = compute()
    n, c, hh, ww = arrays["x"].shape
    s = hh * ww
    mount(page, state_for(arrays, grad_mode="painted"))
    # the caption says whose dy the painting is: every sample's
    assert "every sample (n = 0…1)" in text(page, "paint-note")
    page.mouse.move(*_canvas_point(page, "image-dy", 1, 2))
    page.mouse.down()
    page.mouse.move(*_canvas_point(page, "image-dy", 1, 3), steps=3)
    page.mouse.up()
    name, value = sets(page)[-1]
    assert name == "dy_paint"
    assert page.evaluate("window.model.state.dy_paint instanceof DataView")
    mask = np.array(page.evaluate(PAINT), np.float32).reshape(c, s)
    want = np.zeros((c, s), np.float32)
    want[1, 2:4] = 1.0
    np.testing.assert_array_equal(mask, want)
    # shift erases, the button clears
    page.keyboard.down("Shift")
    page.mouse.click(*_canvas_point(page, "image-dy", 1, 3))
    page.keyboard.up("Shift")
    want[1, 3] = 0.0
    np.testing.assert_array_equal(np.array(page.evaluate(PAINT), np.float32).reshape(c, s), want)
    page.locator('[data-testid="paint-clear"]').click()
    assert not any(page.evaluate(PAINT))


CONTRAST = """() => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
  const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  const lum = ([r, g, b]) => 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  const bgOf = (e) => { for (; e; e = e.parentElement) { const b = getComputedStyle(e).backgroundColor;
    if (b && !b.startsWith('rgba(0, 0, 0, 0)') && b !== 'transparent') return b; } return 'rgb(255, 255, 255)'; };
  const out = {};
  for (const sel of ['.nw-title', '.nw-field > label', '.nw-controls select', '.nw-table td', '.nw-table th',
                     '.nw-figure figcaption', '.nw-status', '.nw-buttons button', '.nw-lesson', '.nw-controls legend',
                     '.nw-presets button', '.nw-step .nw-rhs']) {
    const e = document.querySelector(sel);
    const a = lum(rgb(getComputedStyle(e).color)), b = lum(rgb(bgOf(e)));
    out[sel] = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  }
  return out;
}"""

# JupyterLab's dark theme's values of the variables the Explorer's CSS reads
DARK = """() => { const s = document.documentElement.style;
  for (const [k, v] of Object.entries({'--jp-layout-color0': '#111111', '--jp-layout-color1': '#212121',
    '--jp-layout-color2': '#424242', '--jp-layout-color3': '#616161', '--jp-ui-font-color0': '#ffffff',
    '--jp-ui-font-color1': 'rgba(255,255,255,0.87)', '--jp-ui-font-color2': 'rgba(255,255,255,0.54)',
    '--jp-border-color1': '#616161', '--jp-border-color2': '#424242', '--jp-input-background': '#212121',
    '--jp-brand-color1': '#42a5f5', '--jp-brand-color3': '#0d47a1', '--jp-error-color1': '#ff8a80'}))
    s.setProperty(k, v);
  document.body.style.background = '#111111'; }"""


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_is_readable_in_jupyterlabs_light_and_dark_themes(page, theme):
    if theme == "dark":
        page.evaluate(DARK)
    mount(page, state_for(compute()))
    ratios = page.evaluate(CONTRAST)
    # WCAG AA asks 4.5:1 for body text; secondary text (captions, status) at least 3:1
    low = {
        k: round(v, 2) for k, v in ratios.items() if v < (3.0 if "caption" in k or "status" in k or "rhs" in k else 4.5)
    }
    assert not low, low


def test_arrays_split_over_results_and_input_data_decode_alike(page):
    """The kernel sends what a G change leaves equal (x, dy, ...) in a second Bytes trait, input_data."""
    arrays = compute(affine=True)
    fixed = {k: v for k, v in arrays.items() if k in ("x", "dy", "bn_mean", "bn_var", "weight", "bias")}
    changing = {k: v for k, v in arrays.items() if k not in fixed}
    b64, meta = pack(changing)
    b64_in, meta_in = pack(fixed)
    for info in meta_in["arrays"].values():
        info["trait"] = "input_data"
    meta["arrays"].update(meta_in["arrays"])
    st = state_for(arrays)
    st.update(results_b64=b64, input_data_b64=b64_in, results_meta=meta)
    mount(page, st)
    assert_stats_table(page, arrays)
    np.testing.assert_allclose(float(text(page, "we-x")), arrays["x"][0, 0, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(float(text(page, "we-dx")), arrays["dx"][0, 0, 0, 0], rtol=1e-6)
    # new results with the same input_data (an eps change sends only results): x still decodes
    new = compute(affine=True, eps=0.5)
    b64_2, meta_2 = pack({k: v for k, v in new.items() if k not in fixed}, version=2)
    meta_2["arrays"].update(meta_in["arrays"])
    draws = "(id) => document.querySelector(`[data-testid=image-${id}]`).dataset.draws"
    before = {k: page.evaluate(draws, k) for k in ("x", "y")}
    page.evaluate("(p) => window.pyUpdate(p)", {"results_b64": b64_2, "results_meta": meta_2, "eps": 0.5})
    assert_stats_table(page, new)
    np.testing.assert_allclose(float(text(page, "we-x")), arrays["x"][0, 0, 0, 0], rtol=1e-6)
    # the x image, whose values and group edges did not change, is not drawn again; y's is
    assert page.evaluate(draws, "x") == before["x"] and page.evaluate(draws, "y") != before["y"]
    # a new input_data buffer (a seed change) draws x anew too
    b64_3, meta_3 = pack(fixed)
    for info in meta_3["arrays"].values():
        info["trait"] = "input_data"
    meta_2["arrays"].update(meta_3["arrays"])
    page.evaluate("(p) => window.pyUpdate(p)", {"input_data_b64": b64_3, "results_meta": meta_2})
    assert page.evaluate(draws, "x") != before["x"]


def test_heatmap_keyboard_moves_the_selection_and_keeps_the_focus(page):
    mount(page, state_for(compute(), selected=[0, 0]))
    page.locator('[data-testid="heatmap-rstd"]').focus()
    for key, want in [("ArrowRight", [0, 1]), ("ArrowDown", [1, 1]), ("ArrowDown", [1, 1]), ("ArrowLeft", [1, 0])]:
        page.keyboard.press(key)
        assert sets(page)[-2:] == [["selected", want], ["sample", want[0]]]
        assert page.evaluate("document.activeElement.dataset.testid") == "heatmap-rstd"
    assert page.locator('[data-testid="selected"] h3').text_content() == "Selected group (n = 1, g = 0)"


def test_histograms_count_the_selected_groups_values(page):
    arrays = compute(hw=(8, 8))
    n, g = 1, 2
    mount(page, state_for(arrays, selected=[n, g]))
    cg = arrays["x"].shape[1] // arrays["mean"].shape[1]
    for name in ("x", "y"):
        vals = arrays[name][n, g * cg : (g + 1) * cg].astype(np.float64).ravel()
        want, _ = np.histogram(vals, bins=30, range=(vals.min(), vals.max()))
        got = np.array(page.locator(f'[data-testid="hist-{name}"]').get_attribute("data-counts").split(), int)
        assert got.sum() == vals.size
        assert np.abs(got - want).sum() <= 2, (got, want)  # a value on a bin edge may fall either side


# ---- one selection, state kept, honest numbers -------------------------------------------------------------
def test_selecting_a_group_selects_its_sample_everywhere(page):
    arrays = compute(n=3)
    mount(page, state_for(arrays))
    box = page.locator('[data-testid="heatmap-mean"]').bounding_box()
    n, g = 1, 2
    page.mouse.click(box["x"] + (g + 0.5) * box["width"] / 4, box["y"] + (n + 0.5) * box["height"] / 3)
    assert (
        page.locator('[data-testid="images"] h3').text_content() == "Sample n = 1: x, y, dy and dx (group 2 outlined)"
    )
    assert page.locator('[data-testid="sample"]').input_value() == "1"
    assert "group 2 outlined" in page.locator('[data-testid="image-x"]').get_attribute("aria-label")
    assert "of sample 1" in page.locator('[data-testid="worked-example"]').text_content()
    np.testing.assert_allclose(float(text(page, "we-x")), arrays["x"][1, 4, 0, 0], rtol=1e-6)  # group 2's first
    # the image shows sample 1's values
    page.mouse.move(*_canvas_point(page, "image-x", 4, 0))
    tip = page.locator(".nw-tooltip").text_content()
    np.testing.assert_allclose(float(re.search(r"x\[1, 4, 0, 0\] = (\S+)", tip).group(1)), arrays["x"][1, 4, 0, 0])
    # choosing a sample selects the same group of that sample: the worked example follows
    page.locator('[data-testid="sample"]').select_option("2")
    assert sets(page)[-2:] == [["selected", [2, 2]], ["sample", 2]]
    assert page.locator('[data-testid="selected"] h3').text_content() == "Selected group (n = 2, g = 2)"
    np.testing.assert_allclose(float(text(page, "we-mean")), arrays["mean"][2, 2], rtol=1e-6)


def test_open_sections_and_the_table_stay_open_across_a_recompute(page):
    mount(page, state_for(compute()), open_folds=False)
    for testid in ("stats-table", "gradients", "invariants-fold"):
        page.locator(f'[data-testid="{testid}"] > summary').click()
    page.locator('[data-testid="stats-table"] .nw-scroll').evaluate("e => e.scrollTop = 0")
    new = compute(g=2, seed=4)
    b64, meta = pack(new, version=2)
    page.evaluate("(p) => window.pyUpdate(p)", {"results_b64": b64, "results_meta": meta, "num_groups": 2})
    assert_stats_table(page, new)
    for testid in ("stats-table", "gradients", "invariants-fold"):
        assert page.locator(f'[data-testid="{testid}"]').evaluate("d => d.open"), testid
    assert not page.locator('[data-testid="hist-fold"]').evaluate("d => d.open")


@pytest.mark.parametrize(
    ("testid", "value", "reason"),
    [
        ("scale", "-1", "Scale must be greater than 0"),
        ("batch", "33", "Batch size N must be a whole number from 1 to 32"),
    ],
)
def test_an_invalid_entry_is_marked_and_never_reported_as_up_to_date(page, testid, value, reason):
    mount(page, state_for(compute()))
    field = page.locator(f'[data-testid="{testid}"]')
    field.fill(value)
    field.press("Tab")
    assert field.get_attribute("aria-invalid") == "true"
    error = page.locator(f'[data-testid="{testid}-error"]')
    assert error.is_visible() and error.text_content().startswith(reason), error.text_content()
    assert field.get_attribute("aria-describedby") == error.get_attribute("id")
    status = page.locator('[data-testid="status"]')
    assert "Up to date" not in status.text_content() and "nw-error" in status.get_attribute("class")
    assert reason in status.text_content()
    assert not [s for s in sets(page) if s[0] == testid.replace("-", "_")]  # not sent
    field.fill("2")
    field.press("Tab")
    assert field.get_attribute("aria-invalid") == "false" and not error.is_visible()
    assert sets(page)[-1] == [testid, 2]
    assert text(page, "status").startswith("Up to date")


def test_a_control_the_kernel_refused_is_marked(page):
    mount(page, state_for(compute()))
    page.evaluate("() => window.pyUpdate({status: 'error: channel_spread: expected a non-negative number, got -2.0'})")
    field = page.locator('[data-testid="channel-spread"]')
    assert field.get_attribute("aria-invalid") == "true"
    assert "expected a non-negative number" in text(page, "channel-spread-error")
    assert text(page, "status").startswith("Error: channel_spread:")
    page.evaluate("() => window.pyUpdate({status: 'ok'})")
    assert field.get_attribute("aria-invalid") == "false"


#: the colours drawn in channel k's tile of an image (k outside the selected group: no outline, no element mark)
FLAT = """([id, k]) => { const c = document.querySelector(`[data-testid="${id}"]`);
  const g = JSON.parse(c.dataset.geom), r = c.width / parseFloat(c.style.width);
  const d = c.getContext('2d').getImageData(Math.ceil(g.tx[k] * r), Math.ceil(g.ty[k] * r),
                                            Math.floor(g.tw * r), Math.floor(g.th * r)).data;
  const seen = new Set(); for (let i = 0; i < d.length; i += 4) seen.add(d[i] + ',' + d[i + 1] + ',' + d[i + 2]);
  return [...seen]; }"""


def test_dx_zero_up_to_rounding_is_drawn_and_said_as_zero(page):
    arrays = compute(grad_mode="ones")  # w = 1: sum(y) does not depend on x, dx is rounding only
    assert 0 < np.abs(arrays["dx"]).max() < 1e-5
    mount(page, state_for(arrays, grad_mode="ones"))
    said = page.locator('[data-testid="dx-zero"]')
    assert said.text_content().startswith("dx = 0 up to float32 rounding"), said.text_content()
    assert "because dy·w is the same for every element of a group" in said.text_content()
    assert text(page, "caption-dx").startswith("dx = 0 up to float32 rounding")
    assert text(page, "we-dx") == "0" and text(page, "we-dx-expected") == "0"
    assert "all 0 (equal up to rounding)" in page.locator('[data-testid="heatmap-dx_norm"]').get_attribute("aria-label")
    assert len(page.evaluate(FLAT, ["image-dx", 2])) == 1  # one colour: no noise stretched to full contrast
    page.mouse.move(*_canvas_point(page, "image-dx", 0, 0))
    assert re.search(r"dx\[0, 0, 0, 0\] = 0 \(\S+: rounding\)", page.locator(".nw-tooltip").text_content())
    # random dy: dx is not zero, and nothing says it is
    mount(page, state_for(compute()))
    assert page.locator('[data-testid="dx-zero"]').is_hidden()
    assert len(page.evaluate(FLAT, ["image-dx", 2])) > 4


def test_every_chart_shows_values_on_hover(page):
    arrays = compute(affine=True)
    mount(page, state_for(arrays), open_folds=False)
    page.locator('[data-testid="gradients"] > summary').click()
    page.locator('[data-testid="hist-fold"] > summary').click()
    for name in ("dweight", "dbias"):
        plot = page.locator(f'[data-testid="bars-{name}"] svg').first
        plot.scroll_into_view_if_needed()
        box = plot.bounding_box()
        # channel 5's bar: Plot's x range spans the plot area between its margins
        xs = plot.evaluate("(s) => { const r = s.getBoundingClientRect(); return [r.left, r.width]; }")
        frame = page.evaluate(
            """(n) => { const s = document.querySelector(`[data-testid="bars-${n}"] svg`);
                 const rects = [...s.querySelectorAll('rect')].filter(r => r.getAttribute('width'));
                 const b = rects[5].getBoundingClientRect(); return [b.left + b.width / 2, b.top + b.height / 2]; }""",
            name,
        )
        page.mouse.move(frame[0], box["y"] + box["height"] / 2)
        tip = page.locator(".nw-tooltip").text_content()
        got = re.search(rf"{name}\[5\] = (\S+)", tip)
        assert got, (tip, xs)
        np.testing.assert_allclose(float(got.group(1)), arrays[name][5], rtol=1e-6)
    hist = page.locator('[data-testid="hist-x"] svg').first
    hist.scroll_into_view_if_needed()
    box = hist.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert re.search(r"x in \[\S+, \S+\): \d+ values", page.locator(".nw-tooltip").text_content())


# ---- crisp at any size -------------------------------------------------------------------------------------
def test_canvases_are_drawn_at_their_size_times_the_device_pixel_ratio(browser, server):
    pg = browser.new_page(viewport={"width": 1200, "height": 900}, device_scale_factor=2)
    pg.goto(server + PAGE)
    pg.wait_for_function("window.harnessReady === true")
    mount(pg, state_for(compute(c=64, g=32, hw=(8, 8))))
    sizes = pg.evaluate(
        """() => [...document.querySelectorAll('canvas')].map(c => [c.dataset.testid, c.width, c.height,
            c.clientWidth, c.clientHeight])"""
    )
    assert len(sizes) >= 7
    for testid, w, h, cw, ch in sizes:
        assert abs(w - 2 * cw) <= 1 and abs(h - 2 * ch) <= 1, (testid, w, h, cw, ch)
    # group separators: a gap between the tiles of two groups, at least a CSS pixel, at G = 32 of 64 channels too
    geo = json.loads(pg.locator('[data-testid="image-x"]').get_attribute("data-geom"))
    gaps = [geo["tx"][c + 1] - geo["tx"][c] - geo["tw"] for c in range(63) if geo["ty"][c + 1] == geo["ty"][c]]
    assert min(gaps) >= 1 and max(gaps) >= 3, gaps  # groups (2 channels) further apart than channels
    pg.close()


def test_the_cube_is_readable_at_64_channels(page):
    mount(page, state_for(compute(c=64, g=32, hw=(2, 2)), selected=[0, 5]))
    for kind in ("instance", "batch", "group"):
        widths = page.evaluate(
            """(k) => [...document.querySelectorAll(`[data-testid="cube-${k}"] rect.nw-cube-on`)]
                 .map(r => parseFloat(r.getAttribute('width')))""",
            kind,
        )
        assert widths and min(widths) >= 8, (kind, widths)  # one channel of 64 is drawn 8 units wide, not 1.75
    lit = page.locator('[data-testid="cube-instance"] rect.nw-cube-on').first
    assert (lit.get_attribute("data-c0"), lit.get_attribute("data-c1")) == ("10", "10")


# ---- presets -----------------------------------------------------------------------------------------------
def test_presets_set_their_controls_in_one_message_and_say_what_to_look_at(page):
    mount(page, state_for(compute()))
    assert text(page, "lesson").startswith("Start here:")
    saves = page.evaluate("window.model.saves")
    page.locator('[data-testid="preset-outlier"]').click()
    got = dict(sets(page)[-12:])
    assert got["outlier_channel"] == 1 and got["num_groups"] == 2 and got["selected"] == [0, 0]
    assert page.evaluate("window.model.saves") == saves + 1  # one comm message: one recompute
    assert "Channel 1" in text(page, "lesson")
    page.locator('[data-testid="preset-batch"]').click()
    assert sets(page)[-3] == ["batch", 32] and "N is now 32" in text(page, "lesson")
    page.locator('[data-testid="preset-instance"]').click()
    assert ["num_groups", 8] in sets(page)[-3:]
    page.locator('[data-testid="preset-paint"]').click()
    mask = np.array(page.evaluate(PAINT), np.float32).reshape(8, 16)
    assert mask[0].sum() == 4 and mask[1:].sum() == 0  # a patch of channel 0
    # a given input (not generated): the presets that change the input are off, so are its controls
    mount(page, state_for(compute(), generated=False))
    assert page.locator('[data-testid="preset-outlier"]').is_disabled()
    assert page.locator('[data-testid="scale"]').is_disabled()
    assert page.locator('[data-testid="preset-layer"]').is_enabled()


# ---- one view module at a time, fed known results ----------------------------------------------------------
def test_the_bundle_exports_each_view(page):
    assert set(page.evaluate("window.viewNames")) == {
        "statsView",
        "cubeView",
        "groupView",
        "imagesView",
        "gradientsView",
        "invariantsView",
        "headerView",
        "controlsView",
    }


def test_unit_stats_view(page):
    arrays = compute(n=3, g=2)
    mount_view(page, "statsView", state_for(arrays, selected=[2, 1]))
    assert page.locator("section").count() == 1  # this view alone
    assert_stats_table(page, arrays)
    assert page.locator('[data-testid="group-stats"] tr.nw-selected td').first.text_content() == "2"
    assert page.locator('[data-testid="heatmap-rstd"]').count() == 1


def test_unit_cube_view(page):
    mount_view(page, "cubeView", state_for(compute(), selected=[1, 3]))
    label = page.locator('[data-testid="cube-group"] svg').get_attribute("aria-label")
    assert label.startswith("GroupNorm: sample 1, channels 6 to 7"), label
    assert [r[2:4] for r in table_rows(page, "bn-gn")][0] == ["GN mean, n = 0", "GN mean, n = 1"]


def test_unit_group_view(page):
    arrays = compute(affine=True)
    mount_view(page, "groupView", state_for(arrays, selected=[1, 1], element=[3, 5]))
    np.testing.assert_allclose(float(text(page, "we-x")), arrays["x"][1, 3].ravel()[5], rtol=1e-6)
    np.testing.assert_allclose(float(text(page, "we-dx")), arrays["dx"][1, 3].ravel()[5], rtol=1e-6)
    np.testing.assert_allclose(float(text(page, "we-dx-expected")), arrays["dx"][1, 3].ravel()[5], rtol=1e-4)


def test_unit_images_view(page):
    arrays = compute(hw=(4, 4))
    mount_view(page, "imagesView", state_for(arrays, selected=[1, 0]))
    assert page.locator("canvas").count() == 4
    geo = json.loads(page.locator('[data-testid="image-y"]').get_attribute("data-geom"))
    assert (geo["rows"], geo["cols"]) == (4, 4) and len(geo["tx"]) == 8
    assert "sample 1" in text(page, "caption-y")


def test_unit_gradients_view(page):
    arrays = compute()
    mount_view(page, "gradientsView", state_for(arrays))
    assert page.locator('[data-testid="bars-dweight"]').count() == 1
    assert page.locator('[data-testid="dx-zero"]').is_hidden()
    mount_view(page, "gradientsView", state_for(compute(grad_mode="ones"), grad_mode="ones"))
    assert page.locator('[data-testid="dx-zero"]').text_content().startswith("dx = 0")


def test_unit_invariants_view(page):
    mount_view(page, "invariantsView", state_for(compute()))
    assert page.locator('[data-testid="inv-dx-sum"]').get_attribute("data-pass") == "true"


def test_unit_header_view(page):
    mount_view(page, "headerView", state_for(compute(), status="error: scale: expected a positive finite number"))
    assert text(page, "status") == "Error: scale: expected a positive finite number"
    assert text(page, "device") == "cpu (test)"


def test_unit_controls_view(page):
    mount_view(page, "controlsView", state_for(compute(c=12, g=3)))
    values = page.locator('[data-testid="num-groups"]').evaluate("s => [...s.options].map(o => o.value)")
    assert values == ["1", "2", "3", "4", "6", "12"]
    page.locator('[data-testid="pattern"]').select_option("stripes")
    assert sets(page)[-1] == ["pattern", "stripes"]


def test_each_view_marks_the_results_it_shows_and_closed_sections_wait_until_opened(page):
    mount(page, state_for(compute()), open_folds=False)
    assert page.locator('[data-testid="hist-x"]').count() == 0  # closed: not drawn
    new = compute(seed=9)
    b64, meta = pack(new, version=2)
    page.evaluate("(p) => window.pyUpdate(p)", {"results_b64": b64, "results_meta": meta})
    drawn = page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('.nw-body [data-drawn]')]
             .map((e) => [e.dataset.testid || e.className, e.dataset.drawn]))"""
    )
    for view in ("stats", "cube", "selected", "images", "gradients", "invariants-fold"):
        assert drawn.get(view) == "2", (view, drawn)
    page.locator('[data-testid="hist-fold"] > summary').click()
    counts = page.locator('[data-testid="hist-x"]').get_attribute("data-counts").split()
    assert sum(map(int, counts)) == new["x"][0, :2].size  # the new results' group (0, 0), drawn on opening


def test_a_change_event_between_new_results_and_their_redraw_drops_no_view(page):
    """ipywidgets echoes a control's value back from the kernel: that event (or a hover) may come right after new
    results; every view must still show the new results."""
    mount(page, state_for(compute()))
    new = compute(seed=3)
    b64, meta = pack(new, version=2)
    page.evaluate(
        """async (p) => { const done = window.pyUpdate(p);
             setTimeout(() => window.model.emit('change:num_groups'), 0); await done; }""",
        {"results_b64": b64, "results_meta": meta},
    )
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 20)))")
    assert page.evaluate("document.querySelector('.nw-body').dataset.drawn") == "2"
    assert page.locator('[data-testid="images"]').get_attribute("data-drawn") == "2"
    np.testing.assert_allclose(float(text(page, "we-mean")), new["mean"][0, 0], rtol=1e-6)


def test_a_y_that_eps_squashes_toward_zero_is_drawn_pale(page):
    """y is normalized: its colours span at least ±2, so |y| < 0.4 (eps = 400 against a variance near 1-10) stays
    near the scale's white middle instead of being stretched to full red and blue."""
    arrays = compute(eps=400.0)
    assert np.abs(arrays["y"]).max() < 0.4
    mount(page, state_for(arrays, eps=400.0))
    darkest = "(cs) => Math.min(...cs.map((c) => Math.min(...c.split(',').map(Number))))"
    assert page.evaluate(darkest, page.evaluate(FLAT, ["image-y", 2])) > 150
    mount(page, state_for(compute()))  # a y of unit size: full colours
    assert page.evaluate(darkest, page.evaluate(FLAT, ["image-y", 2])) < 120


@pytest.mark.parametrize(
    ("hw", "c", "g", "rows", "cols"), [((5,), 8, 4, 1, 5), ((2, 3, 3), 4, 2, 6, 3), ((), 6, 3, 1, 1)]
)
def test_inputs_of_any_rank_are_drawn(page, hw, c, g, rows, cols):
    """A 1-D input draws each channel as a strip, a 3-D one as (D·H) x W tiles, one without spatial axes as cells."""
    arrays = compute(c=c, g=g, hw=hw)
    mount(page, state_for(arrays, selected=[1, g - 1]))
    assert_stats_table(page, arrays)
    geo = json.loads(page.locator('[data-testid="image-x"]').get_attribute("data-geom"))
    assert (geo["rows"], geo["cols"], len(geo["tx"])) == (rows, cols, c)
    last = c - 1
    s = rows * cols - 1
    page.mouse.move(*_canvas_point(page, "image-x", last, s))
    tip = page.locator(".nw-tooltip").text_content()
    got = re.search(r"x\[1, (\d+), ([\d, ]*)\] = (\S+)", tip)
    assert got and int(got.group(1)) == last, tip
    np.testing.assert_allclose(float(got.group(3)), arrays["x"][1, last].ravel()[s], rtol=1e-6)

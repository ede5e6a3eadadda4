"""The Explorer widget: its traits (docs/explorer-contract.md), its arguments' checks, and the recompute driver.

A control change that the contract lists as a recompute trigger runs ``Pipeline.run`` (numr_web's forward and
closed-form backward on the Explorer's device) and publishes the results through the codec.  A comm message
that sets several controls at once (a preset) recomputes once.  Where Python cannot block (Pyodide without
JSPI) the recompute awaits its read-backs in an asyncio task.  A failing recompute sets ``status`` to
``"error: ..."``; callbacks never raise.  On WebGPU, once the first results are out, the pipelines a switch of
dtype, layout or SiLU will need are compiled in the background (``numr_web.webgpu.prepare``), so that the
first switch does not wait for a compiler.
"""

from __future__ import annotations

import asyncio
import numbers
import pathlib
import sys
import warnings

import anywidget
import traitlets

from numr_web.autograd import Tensor
from numr_web.backends import device_of, fastest_device, get_backend, is_array
from numr_web.errors import ShapeMismatch
from numr_web.host import is_ndarray

from . import codec, inputs
from .pipeline import PREPARE_CALLS, VARIANTS, Pipeline, layout_of, read_bytes

#: the front-end bundle (built from widget/ by the front-end's build)
STATIC = pathlib.Path(__file__).resolve().parents[1] / "static"
_ESM = STATIC / "explorer.js"
_CSS = STATIC / "explorer.css"

_MISSING = (
    "numr_web/static/explorer.js is missing: the Explorer's front-end bundle has not been built "
    "(build it from widget/ with `npm ci --prefix widget && npm run build --prefix widget`, "
    "or install a numr-web wheel that ships it)"
)
_MISSING_ESM = "export default { render({ el }) { el.textContent = " + repr(_MISSING).replace("'", '"') + "; } };\n"

#: the traits whose change recomputes (the contract's writable traits but ``sample``, ``selected``, ``element``;
#: ``dy_paint`` recomputes in the "painted" mode only)
RECOMPUTE = (
    "num_groups",
    "eps",
    "offset",
    "scale",
    "channel_spread",
    "outlier_channel",
    "seed",
    "pattern",
    "dtype",
    "memory_layout",
    "silu",
    "grad_mode",
    "batch",
    "max_samples",
)


def _bytes_from_json(value, widget):
    """A Bytes trait set by the front-end: ipywidgets hands the kernel a memoryview of the binary buffer,
    which a plain ``traitlets.Bytes`` refuses (and the change would be lost without a word)."""
    if value is None:
        return b""
    return bytes(value)


def _in_pyodide() -> bool:
    return sys.platform == "emscripten" or "pyodide" in sys.modules


def _browser_has_webgpu() -> bool:
    try:
        from js import navigator  # Pyodide's bridge to the page (or the Web Worker) it runs in
    except ImportError:
        return False
    try:
        return getattr(navigator, "gpu", None) is not None
    except Exception:
        return False


def default_device() -> str:
    """Under Pyodide "webgpu" where the browser has ``navigator.gpu``, else "cpu" when NumPy is there
    (else "webgpu", whose error says what is missing); elsewhere "cuda" if usable, then a WebGPU
    adapter that is not a CPU (lavapipe, SwiftShader are CPUs), else "cpu"."""
    if _in_pyodide():
        if _browser_has_webgpu():
            return "webgpu"
        import importlib.util

        return "cpu" if "numpy" in sys.modules or importlib.util.find_spec("numpy") else "webgpu"
    return fastest_device()


def _device_label(device: str) -> str:
    try:
        info = get_backend(device, require=False).info()
    except Exception:
        return device
    if device == "cpu":
        path = info.get("cpu path")
        return f"cpu ({path} path)" if path else "cpu"
    name = info.get("adapter") or info.get("device_name") or info.get("name") or ""
    name = str(name).split(" (")[0]
    return f"{device} ({name})" if name else device


def _can_block() -> bool:
    try:
        import numr_web.webgpu as wg

        return wg.can_block()
    except Exception:
        return True


def _check_x(x):
    """A given input: its array, shape and the dtype trait it implies."""
    if isinstance(x, Tensor):
        x = x.data
    if not is_array(x):
        raise TypeError(
            "x: expected a NumPy, CuPy or WebGPU array or a numr_web.Tensor of shape (N, C, *spatial), "
            f"got {type(x).__name__}"
        )
    if x.ndim < 2:
        raise ShapeMismatch(f"x: expected at least 2 dimensions (N, C, *spatial), got shape {tuple(x.shape)}")
    if int(x.shape[0]) < 1 or int(x.shape[1]) < 1 or 0 in tuple(x.shape):
        raise ShapeMismatch(f"x: expected a non-empty array, got shape {tuple(x.shape)}")
    from numr_web.dtypes import dtype_name

    xdt = dtype_name(x.dtype)
    if xdt not in ("float16", "bfloat16", "float32", "float64"):
        raise TypeError(f"x: expected a floating-point dtype (float16, bfloat16, float32), got {xdt}")
    return x, tuple(int(n) for n in x.shape), xdt if xdt in inputs.DTYPES else "float32"


class Explorer(anywidget.AnyWidget):
    """GroupNorm made visible: per-group statistics and gradients, recomputed by numr_web as the
    controls move.

    ``Explorer(x=None, num_groups=32, weight=None, bias=None, eps=1e-5, activation=None, device=None)``

    - ``x``: a NumPy, CuPy or WebGPU array or a ``numr_web.Tensor`` of shape (N, C, *spatial);
      None generates one from the distribution traits (``pattern``, ``offset``, ``scale``,
      ``channel_spread``, ``outlier_channel``, ``seed``), of ``shape=`` (default (2, 32, 16, 16)).
    - ``num_groups``: clamped (with a warning) to the largest divisor of C not above it.
    - ``weight``/``bias``: (C,) arrays (default ones / zeros, so dweight and dbias exist).
    - ``activation``: None or "silu" (the ``silu`` trait).
    - ``device``: "cpu", "cuda" or "webgpu"; default x's device for a CuPy/WebGPU x, else
      ``default_device()``.

    ``stats()`` -> (mean, rstd), ``grads()`` -> (dx, dweight, dbias): arrays of the device, the
    values the view shows.
    """

    _esm = _ESM if _ESM.exists() else _MISSING_ESM
    _css = _CSS if _CSS.exists() else ""

    # Python -> JS
    shape = traitlets.List(traitlets.Int(), default_value=[]).tag(sync=True)
    device = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Unicode("computing").tag(sync=True)
    results = traitlets.Bytes(b"").tag(sync=True)
    input_data = traitlets.Bytes(b"").tag(sync=True)
    results_meta = traitlets.Dict().tag(sync=True)
    #: the input is generated from the distribution traits (False: x was given, and those traits do nothing)
    generated = traitlets.Bool(True).tag(sync=True)
    # JS -> Python
    num_groups = traitlets.Int(32).tag(sync=True)
    eps = traitlets.Float(1e-5).tag(sync=True)
    offset = traitlets.Float(0.0).tag(sync=True)
    scale = traitlets.Float(1.0).tag(sync=True)
    #: how much the channels' offsets and scales differ (0: every channel alike)
    channel_spread = traitlets.Float(2.0).tag(sync=True)
    outlier_channel = traitlets.Int(-1).tag(sync=True)
    seed = traitlets.Int(0).tag(sync=True)
    #: the generated input's spatial pattern: "blobs", "edges", "stripes" or "noise"
    pattern = traitlets.Unicode("blobs").tag(sync=True)
    dtype = traitlets.Unicode("float32").tag(sync=True)
    memory_layout = traitlets.Unicode("nchw").tag(sync=True)
    silu = traitlets.Bool(False).tag(sync=True)
    grad_mode = traitlets.Unicode("random").tag(sync=True)
    batch = traitlets.Int(2).tag(sync=True)
    sample = traitlets.Int(0).tag(sync=True)
    selected = traitlets.List(traitlets.Int(), default_value=[0, 0]).tag(sync=True)
    #: the element of the selected group that the worked example follows: [channel, spatial position]
    element = traitlets.List(traitlets.Int(), default_value=[0, 0]).tag(sync=True)
    #: grad_mode "painted": dy for every sample, float32 little-endian (C, *spatial) in C order, painted on
    #: the dy image by the front-end and sent as binary (empty: dy = 0)
    dy_paint = traitlets.Bytes(b"").tag(sync=True, from_json=_bytes_from_json)
    #: how many samples of x/y/dy/dx travel (the statistics are always whole); 0: as many as fit in
    #: SAMPLE_BUDGET elements per tensor, at least one (each MiB sent costs tens of ms in JupyterLab)
    max_samples = traitlets.Int(0).tag(sync=True)

    def __init__(self, x=None, num_groups=32, weight=None, bias=None, eps=1e-5, activation=None, device=None, **traits):
        self._ready = False
        self._batching = False
        self._dirty = False
        self._task = None
        self._prepare_task = None
        self._last = None
        self._version = 0
        num_groups = inputs.num_groups_type(num_groups)
        eps = inputs.real(eps, "eps")
        if eps < 0:
            raise ValueError(f"eps: expected a non-negative finite number, got {eps!r}")
        if activation is not None and not (isinstance(activation, str) and activation.lower() == "silu"):
            raise ValueError(f"activation: expected None or 'silu', got {activation!r}")
        for name in inputs.CHOICES:
            if name in traits:
                inputs.choice(name, traits[name])

        if x is not None:
            if "shape" in traits:
                raise ValueError("shape: give either x or shape (the shape of a generated input), not both")
            x, shape, xdt = _check_x(x)
            traits.setdefault("dtype", xdt)
            traits.setdefault("memory_layout", layout_of(x))
            dev = device if device is not None else (device_of(x) if not is_ndarray(x) else default_device())
        else:
            dev = device if device is not None else default_device()
            shape = self._generated_shape(traits.pop("shape", inputs.DEFAULT_SHAPE))
        if not isinstance(dev, str) or dev.lower() not in ("cpu", "cuda", "webgpu"):
            raise ValueError(f"device: expected 'cpu', 'cuda' or 'webgpu', got {dev!r}")
        dev = dev.lower()
        get_backend(dev)  # BackendUnavailable with the reason and how to fix it
        traits.setdefault("batch", shape[0])
        num_groups = self._fit_groups(num_groups, shape[1])
        self._pipe = Pipeline(dev, x, shape, weight, bias)
        super().__init__(
            num_groups=num_groups,
            eps=eps,
            silu=bool(traits.pop("silu", False)) or activation is not None,
            shape=list(shape),
            generated=x is None,
            device=_device_label(dev) if dev != "webgpu" or _can_block() else "webgpu",
            **traits,
        )
        self._ready = True
        self._recompute()

    @staticmethod
    def _generated_shape(shape):
        if (
            not isinstance(shape, (tuple, list))
            or len(shape) < 2
            or not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) and n > 0 for n in shape)
        ):
            raise ValueError(f"shape: expected (N, C, *spatial) of positive integers, got {shape!r}")
        return tuple(int(n) for n in shape)

    @staticmethod
    def _fit_groups(num_groups, channels):
        """The largest divisor of C not above num_groups (with a warning when it is not num_groups)."""
        if channels % num_groups == 0:
            return num_groups
        fit = max(d for d in inputs.divisors(channels) if d <= num_groups)
        warnings.warn(
            f"num_groups: {num_groups} does not divide the {channels} channels of x; using {fit}, "
            f"the largest divisor of {channels} not above {num_groups}",
            UserWarning,
            stacklevel=3,
        )
        return fit

    # -- public --------------------------------------------------------------------------
    @property
    def _dev(self):
        return self._pipe.dev

    def stats(self):
        """(mean, rstd), each (N, G), arrays of the Explorer's device: the values the view shows."""
        last = self._require_last()
        return last["mean"], last["rstd"]

    def grads(self):
        """(dx, dweight, dbias), arrays of the Explorer's device: the values the view shows."""
        last = self._require_last()
        return last["dx"], last["dweight"], last["dbias"]

    def inputs(self):
        """(x, dy, weight, bias) as computed (after the dtype and layout controls), arrays of the device."""
        last = self._require_last()
        return last["x"], last["dy"], self._pipe.weight, self._pipe.bias

    def decode(self):
        """The ``results`` trait decoded: {name: (shape, array.array("f"))} (NumPy-free)."""
        return codec.decode_results(self.results, self.results_meta, self.input_data)

    async def wait(self):
        """Awaits a recompute in flight (where it runs as an asyncio task), and on WebGPU the background
        compile of what a switch of dtype, layout or SiLU will need."""
        for task in (self._task, self._prepare_task):
            if task is not None and not task.done():
                await asyncio.shield(task)

    # -- internals -----------------------------------------------------------------------
    def _require_last(self):
        if self._last is None:
            raise RuntimeError(f"no results yet (status: {self.status})")
        return self._last

    def set_state(self, sync_data):
        """A comm message from the view: the controls it sets (a preset sets several) recompute once."""
        self._batching, self._dirty = True, False
        try:
            super().set_state(sync_data)
        finally:
            self._batching = False
        if self._dirty:
            self._dirty = False
            self._recompute()

    @traitlets.observe(*RECOMPUTE)
    def _on_control(self, change):
        if self._ready:
            self._request()

    @traitlets.observe("dy_paint")
    def _on_paint(self, change):
        if self._ready and self.grad_mode == "painted":
            self._request()

    @traitlets.observe("sample")
    def _on_sample(self, change):
        """One selection: the sample shown is the selected group's (set from Python, the other follows)."""
        sel = list(self.selected) or [0, 0]
        if sel[0] != change["new"]:
            self.selected = [int(change["new"]), *sel[1:2]]

    @traitlets.observe("selected")
    def _on_selected(self, change):
        if change["new"] and self.sample != change["new"][0]:
            self.sample = int(change["new"][0])

    def _request(self):
        if self._batching:
            self._dirty = True
        else:
            self._recompute()

    def _recompute(self):
        try:
            inputs.check_controls(self, self._pipe.base_shape, self._dev)
        except Exception as exc:  # a control out of range: say so, keep the last results
            self.status = f"error: {exc}"
            return
        self.status = "computing"
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._dev == "webgpu" and not _can_block():
            try:
                self._task = asyncio.ensure_future(self._run_async())
            except Exception as exc:  # no event loop to run it on
                self._fail(exc)
            return
        try:
            gen = self._pipe.run(self)
            raw = None
            while True:
                raw = read_bytes(gen.send(raw))
        except StopIteration as stop:
            self._publish(*stop.value)
        except Exception as exc:
            self._fail(exc)

    async def _run_async(self):
        try:
            import numr_web.webgpu as wg

            await wg.init()
            if self.device == "webgpu":
                self.device = _device_label("webgpu")
            gen = self._pipe.run(self)
            raw = None
            try:
                while True:
                    raw = await gen.send(raw).tobytes_async()
            except StopIteration as stop:
                self._publish(*stop.value)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc):
        self.status = f"error: {type(exc).__name__}: {exc}"

    def _publish(self, parts, last):
        self._last = last
        self._version += 1
        shape = [int(s) for s in last["x"].shape]
        sent = codec.samples_sent(shape[0], len(parts["x"][0]) // 4 // shape[0], self.max_samples)
        blobs, meta = codec.encode(parts, sent)
        with self.hold_sync():
            self.results = blobs["results"]
            self.input_data = blobs["input_data"]  # not sent again when equal to the last
            # the controls these results were computed with (a trait may already be ahead of them)
            self.results_meta = {
                "version": self._version,
                "arrays": meta,
                "eps": float(self.eps),
                "dtype": str(self.dtype),
                "silu": bool(self.silu),
                "grad_mode": str(self.grad_mode),
            }
            self.shape = shape
            self.status = "ok"
        self._prepare_switches()

    def _prepare_switches(self):
        """Once, after the first results on WebGPU: compiles in the background the pipelines the other dtypes,
        layouts and SiLU need at this shape and G (desktop: worker threads; browser: createComputePipelineAsync),
        one at a time and nearest first (see ``_prepare_nearest_first``).  Needs a running event loop (a Jupyter
        kernel's, Pyodide's); without one every variant compiles on its first call, as before."""
        if self._prepare_task is not None or self._dev != "webgpu":
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        calls = [(tuple(int(s) for s in self.shape), int(self.num_groups))]

        def shown():
            return self.dtype, self.memory_layout, "silu" if self.silu else None

        self._prepare_task = loop.create_task(_prepare_nearest_first(calls, shown))
        # a variant that failed to compile here fails again, with its error, on the call that needs it
        self._prepare_task.add_done_callback(lambda t: t.cancelled() or t.exception())


async def _prepare_nearest_first(calls, here):
    """``numr_web.webgpu.prepare`` for every dtype, layout and SiLU at ``calls``, one variant at a time, each time
    the one nearest what is shown (``here()``: dtype, layout, activation) first: with the activation shown, the
    other layout and the other dtypes, then those two switches away; then the same with SiLU toggled; after a
    switch, those nearest the new one.  A dtype or layout switch goes first because SiLU's toggle is the cheaper
    lesson to wait for: at the playground's input the five variants a learner reaches by dtype and layout switches
    compile in about 1.7 s on SwiftShader (Dawn, scripts/pipeline-compile-times); in the order before (SiLU toggled
    first, then every variant one switch away with and without SiLU) the last of them came after about 3.4 s
    (both: sums of that command's rows).  One pipeline compiles at a time: a browser's GPU process compiles in the
    order asked, so a switch's own compile waits behind one pipeline at most instead of behind all (about a
    hundred, tens of seconds on SwiftShader, which made a first switch in the playground take 5 to 8 s).  Returns
    how many pipelines it compiled."""
    import numr_web.webgpu as wg

    left = list(VARIANTS)
    compiled = 0
    while left:
        dtype, layout, act = here()
        # ties: the first listed
        dt, lay, a = min(left, key=lambda v: (v[2] != act, (v[0] != dtype) + (v[1] != layout)))
        left.remove((dt, lay, a))
        compiled += await wg.prepare(dt, lay, a, shapes=calls, concurrency=1, **PREPARE_CALLS)
    return compiled

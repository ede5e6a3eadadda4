"""The WebGPU transport over the browser's ``navigator.gpu``, for numr_web running in Pyodide.

Same names and semantics as ``transport_wgpu`` (the wgpu-py transport); see
that module's docstring for the contract.  Differences that the browser forces:

* Waiting for the GPU is asynchronous in WebGPU's JS API (``requestAdapter``,
  ``requestDevice``, ``mapAsync``, ``onSubmittedWorkDone`` return promises).
  The synchronous ``request_device``, ``read_buffer`` and ``wait`` block on
  those promises with ``pyodide.ffi.run_sync``, which needs JS Promise
  Integration (JSPI: Chromium) and a Python call stack entered through an
  awaitable route (``pyodide.runPythonAsync``, an async Python function,
  ``callPromising``).  Where that is not possible (Safari, Firefox, Python
  entered from a plain JS callback) they raise ``BlockingUnavailable``, whose
  message names the awaitable form; ``can_block()`` says in advance.  The
  awaitable forms ``request_device_async``, ``read_buffer_async`` and
  ``wait_async`` work everywhere.
* Everything else (buffers, uploads, pipelines, dispatches) is synchronous in
  WebGPU and never needs JSPI.
* WebGPU reports validation errors through the device's ``uncapturederror``
  event, not by throwing.  They are kept on the ``Device`` and raised (as a
  RuntimeError with WebGPU's message) by the next transport call on it, and
  by ``wait``/``read_buffer`` once the GPU has answered.  Events arrive only
  while JS runs its event loop, so an error from a dispatch shows up at the
  next wait or read-back at the latest.  ``create_pipeline`` wraps itself in
  error scopes and, where it can block, raises a bad WGSL at once.
* Device loss comes through the ``device.lost`` promise, which sets
  ``dev.lost``; every later call on that device raises a RuntimeError that
  ``is_device_lost`` recognises.

This module imports nothing from numr_web and no NumPy; ``js`` and ``pyodide``
are imported inside functions, so it imports on desktop CPython too, where
``import_error()`` says why it is unusable.
"""

from __future__ import annotations

import re
import sys
import weakref

NAME = "navigator.gpu"

# The limits raised to the adapter's maximum when it allows more than the
# WebGPU defaults (the same list as transport_wgpu._RAISED_LIMITS; storage buffers per stage
# stay at the default 8 there and here).
_RAISED_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
)

# What a caller that cannot block should use instead of each blocking call.
_AWAITABLE_FORM = {
    "request_device": "use `await numr_web.webgpu.init()` (transport: `await request_device_async(options)`)",
    "read_buffer": "use `await array.tobytes_async()` (transport: `await read_buffer_async(dev, buf, offset, size)`)",
    "wait": "use `await wait_async(dev)`",
}

_MAX_KEPT_ERRORS = 32


class BlockingUnavailable(RuntimeError):
    """A synchronous call must wait for a JS promise, and this Python call stack cannot block on one."""


def _in_pyodide():
    return sys.platform == "emscripten"


def import_error():
    """None when running under Pyodide with ``navigator.gpu`` present, else the reason."""
    if not _in_pyodide():
        return (
            f"not running under Pyodide (sys.platform is {sys.platform!r}); "
            "this transport needs a browser's navigator.gpu"
        )
    try:
        import js
        import pyodide.ffi  # noqa: F401
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    nav = getattr(js, "navigator", None)
    if _nullish(nav):
        return "no `navigator` object in this JS context"
    if _nullish(getattr(nav, "gpu", None)):
        return (
            "navigator.gpu is missing: this browser has no WebGPU, it is switched off, "
            "or the page is not a secure context (https or http://127.0.0.1)"
        )
    return None


def can_block() -> bool:
    """True when the synchronous waits (``request_device``, ``read_buffer``, ``wait``) can run here."""
    if not _in_pyodide():
        return False
    try:
        from pyodide.ffi import can_run_sync
    except ImportError:  # a Pyodide without run_sync
        return False
    return bool(can_run_sync())


def _nullish(x):
    # JS undefined arrives as None, JS null as None or pyodide.ffi.jsnull (by Pyodide version).
    return x is None or type(x).__name__ == "JsNull"


def _require_blocking(what):
    if not can_block():
        raise BlockingUnavailable(
            f"{what}() has to wait for the GPU, and this Python call cannot block on a JS promise "
            "(no JSPI in this browser, or Python was entered from a plain JS callback, not through "
            f"pyodide.runPythonAsync or an async function): {_AWAITABLE_FORM[what]}"
        )


def _run_sync(awaitable):
    from pyodide.ffi import run_sync

    return run_sync(awaitable)


def _obj(d):
    """A Python dict (nested dicts and lists, JS objects as leaves) as a plain JS object."""
    import js
    from pyodide.ffi import to_js

    return to_js(d, dict_converter=js.Object.fromEntries)


def _dashed(name):
    return re.sub(r"([A-Z])", r"-\1", name).lower()


def _camel(name):
    head, *rest = name.split("-")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _limits(js_limits):
    """A GPUSupportedLimits as a dict with dashed names.

    Its attributes are getters on the prototype, so neither ``Object.keys`` nor
    ``to_py`` sees them; the names are read from the prototype (no eval, so a
    strict Content-Security-Policy does not matter).
    """
    import js

    names = {str(n) for n in js.Object.getOwnPropertyNames(js.Object.getPrototypeOf(js_limits))}
    names.update(str(n) for n in js.Object.keys(js_limits))
    limits = {}
    for name in sorted(names):
        value = getattr(js_limits, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            limits[_dashed(name)] = int(value)
    return limits


class Device:
    """What the layers above need from an adapter + device pair."""

    def __init__(self, adapter, device, info, features, adapter_features, limits):
        self.adapter = adapter
        self.device = device
        self.queue = device.queue
        self.info = info
        self.features = features
        self.adapter_features = adapter_features
        self.limits = limits
        self.lost = False
        self.lost_reason = None  # (reason, message) from device.lost
        self.errors = []  # uncaptured WebGPU errors not raised yet
        self._listeners = []  # JS callbacks kept alive with the device


def _hook(dev):
    """device.lost sets dev.lost; uncapturederror events are kept for the next call to raise."""
    from pyodide.ffi import create_once_callable, create_proxy

    ref = weakref.ref(dev)

    def on_lost(info):
        d = ref()
        if d is not None:
            d.lost = True
            d.lost_reason = (str(getattr(info, "reason", "")), str(getattr(info, "message", "")))

    def on_error(event):
        d = ref()
        if d is None:
            return
        if len(d.errors) < _MAX_KEPT_ERRORS:
            d.errors.append(_error_text(event.error))

    dev.device.lost.then(create_once_callable(on_lost))
    listener = create_proxy(on_error)
    dev.device.addEventListener("uncapturederror", listener)
    dev._listeners.append(listener)


def _check(dev):
    """Raise what the browser reported since the last call: a lost device, then uncaptured errors."""
    if dev.lost:
        reason, message = dev.lost_reason or ("unknown", "")
        raise RuntimeError(f"WebGPU device lost ({reason}): {message}")
    if dev.errors:
        errors = list(dev.errors)
        dev.errors.clear()
        more = f" (and {len(errors) - 1} more: {' | '.join(errors[1:])})" if len(errors) > 1 else ""
        raise RuntimeError(f"WebGPU error: {errors[0]}{more}")


def _info(adapter):
    ai = getattr(adapter, "info", None)

    def field(name):
        v = getattr(ai, name, None) if ai is not None else None
        return "" if _nullish(v) else str(v)

    vendor, arch, device, description = field("vendor"), field("architecture"), field("device"), field("description")
    fallback = field("isFallbackAdapter").lower() == "true"
    kind = field("type")  # only with Chromium's --enable-webgpu-developer-features
    text = " ".join((vendor, arch, device, description)).lower()
    if kind:
        adapter_type = {"discrete gpu": "DiscreteGPU", "integrated gpu": "IntegratedGPU", "cpu": "CPU"}.get(
            kind.lower(), kind
        )
    elif fallback or any(s in text for s in ("swiftshader", "llvmpipe", "lavapipe", "warp")):
        adapter_type = "CPU"  # a software adapter
    else:
        adapter_type = "unknown"  # browsers do not tell
    return {
        "adapter": device or description or " ".join(x for x in (vendor, arch) if x) or "unknown",
        "vendor": vendor,
        "description": description,
        "backend": field("backend") or "browser",
        "adapter_type": adapter_type,
        "transport": NAME,
    }


def _gpu():
    why = import_error()
    if why is not None:
        raise RuntimeError(f"WebGPU is not usable here: {why}")
    import js

    return js.navigator.gpu


async def request_device_async(options):
    """Adapter and device, or raise RuntimeError with the reason (awaitable; works without JSPI).

    ``options``: power_preference, required_features (extra, must exist),
    required_limits (extra, dict with dashed names), want_f16 (use shader-f16 when offered).
    A new adapter is requested each time (a browser adapter gives one device).
    """
    gpu = _gpu()
    adapter = await gpu.requestAdapter(_obj({"powerPreference": options.get("power_preference", "high-performance")}))
    if _nullish(adapter):
        raise RuntimeError(
            "no WebGPU adapter found: navigator.gpu.requestAdapter() gave null "
            "(headless Chromium needs --enable-unsafe-webgpu)"
        )
    adapter_features = {str(f) for f in adapter.features}
    features = [str(f) for f in options.get("required_features", ())]
    if options.get("want_f16", True) and "shader-f16" in adapter_features:
        features.append("shader-f16")
    if "timestamp-query" in adapter_features:
        features.append("timestamp-query")
    features = list(dict.fromkeys(features))
    adapter_limits = _limits(adapter.limits)
    limits = {k: adapter_limits[k] for k in _RAISED_LIMITS if k in adapter_limits}
    limits.update(options.get("required_limits", {}))
    descriptor = {"requiredFeatures": features, "requiredLimits": {_camel(k): int(v) for k, v in limits.items()}}
    try:
        device = await adapter.requestDevice(_obj(descriptor))
    except Exception as exc:
        raise RuntimeError(f"the adapter refused a device: {exc}") from exc
    dev = Device(
        adapter,
        device,
        _info(adapter),
        {str(f) for f in device.features},
        adapter_features,
        _limits(device.limits),
    )
    _hook(dev)
    return dev


def request_device(options):
    """``request_device_async`` for callers that can block (JSPI); else BlockingUnavailable."""
    _gpu()  # outside a browser: RuntimeError with the reason
    _require_blocking("request_device")
    return _run_sync(request_device_async(options))


def _usage():
    import js

    return js.GPUBufferUsage


def create_buffer(dev, size):
    _check(dev)
    u = _usage()
    return dev.device.createBuffer(_obj({"size": int(size), "usage": u.STORAGE | u.UNIFORM | u.COPY_SRC | u.COPY_DST}))


def destroy_buffer(buf):
    try:
        buf.destroy()
    except Exception:
        pass


def write_buffer(dev, buf, offset, data):
    """WebGPU copies whole 4-byte words: a ragged tail is padded (buffers are allocated padded)."""
    from pyodide.ffi import to_js

    _check(dev)
    mv = memoryview(data).cast("B")
    if len(mv) % 4:
        mv = memoryview(bytes(mv) + bytes(4 - len(mv) % 4))
    if len(mv):
        dev.queue.writeBuffer(buf, int(offset), to_js(mv))


async def read_buffer_async(dev, buf, offset, size):
    """``size`` bytes of ``buf`` from ``offset``, through a MAP_READ staging buffer (awaitable)."""
    import js
    from pyodide.ffi import to_js

    _check(dev)
    size = int(size)
    if size == 0:
        return b""
    padded = (size + 3) // 4 * 4
    u = _usage()
    staging = dev.device.createBuffer(_obj({"size": padded, "usage": u.MAP_READ | u.COPY_DST}))
    try:
        enc = dev.device.createCommandEncoder()
        enc.copyBufferToBuffer(buf, int(offset), staging, 0, padded)
        dev.queue.submit(to_js([enc.finish()]))
        try:
            await staging.mapAsync(js.GPUMapMode.READ)
        except Exception as exc:
            _check(dev)  # a lost device or an earlier error explains it better
            raise RuntimeError(f"WebGPU read-back failed: {exc}") from exc
        data = js.Uint8Array.new(staging.getMappedRange()).to_bytes()
        staging.unmap()
    finally:
        staging.destroy()
    _check(dev)
    return data[:size] if padded != size else data


def read_buffer(dev, buf, offset, size):
    """``read_buffer_async`` for callers that can block (JSPI); else BlockingUnavailable."""
    _check(dev)
    if int(size) == 0:
        return b""
    _require_blocking("read_buffer")
    return _run_sync(read_buffer_async(dev, buf, offset, size))


class Pipeline:
    def __init__(self, pipeline, layout):
        self.pipeline = pipeline
        self.layout = layout


_BINDING_TYPES = {"read": "read-only-storage", "read_write": "storage", "uniform": "uniform"}


def _layout(dev, binding_kinds):
    """(bind group layout, pipeline layout) with one entry per binding kind."""
    import js

    compute = js.GPUShaderStage.COMPUTE
    entries = [
        {"binding": i, "visibility": compute, "buffer": {"type": _BINDING_TYPES[k]}}
        for i, k in enumerate(binding_kinds)
    ]
    bgl = dev.device.createBindGroupLayout(_obj({"entries": entries}))
    return bgl, dev.device.createPipelineLayout(_obj({"bindGroupLayouts": [bgl]}))


def create_pipeline(dev, code, entry, binding_kinds):
    """A compute pipeline with an explicit bind group layout (one entry per binding kind).

    WGSL and layout errors are caught in error scopes: where the call can block
    (JSPI) they are raised here, as wgpu-py raises them; elsewhere the next
    call on the device raises them.
    """
    _check(dev)
    d = dev.device
    d.pushErrorScope("internal")
    d.pushErrorScope("validation")
    try:
        bgl, layout = _layout(dev, binding_kinds)
        module = d.createShaderModule(_obj({"code": code}))
        pipe = d.createComputePipeline(_obj({"layout": layout, "compute": {"module": module, "entryPoint": entry}}))
    finally:
        scopes = [d.popErrorScope(), d.popErrorScope()]
    if can_block():
        errors = _run_sync(_scope_errors(scopes))
        if errors:
            raise RuntimeError(f"WebGPU error: {' | '.join(errors)}")
    else:
        from pyodide.ffi import create_once_callable

        ref = weakref.ref(dev)

        def keep(err):
            d = ref()
            if d is not None and not _nullish(err) and len(d.errors) < _MAX_KEPT_ERRORS:
                d.errors.append(_error_text(err))

        for scope in scopes:
            scope.then(create_once_callable(keep))
    return Pipeline(pipe, bgl)


async def create_pipeline_async(dev, code, entry, binding_kinds):
    """``create_pipeline`` through ``createComputePipelineAsync``: the browser compiles while the
    page (and Python) go on; a bad WGSL or layout rejects the promise and raises here."""
    _check(dev)
    d = dev.device
    d.pushErrorScope("validation")
    try:
        bgl, layout = _layout(dev, binding_kinds)
        module = d.createShaderModule(_obj({"code": code}))
        pending = d.createComputePipelineAsync(
            _obj({"layout": layout, "compute": {"module": module, "entryPoint": entry}})
        )
    finally:
        scope = d.popErrorScope()
    try:
        pipe = await pending
    except Exception as exc:
        errors = await _scope_errors([scope])
        raise RuntimeError(f"WebGPU error: {' | '.join(errors) or exc}") from exc
    errors = await _scope_errors([scope])
    if errors:
        raise RuntimeError(f"WebGPU error: {' | '.join(errors)}")
    return Pipeline(pipe, bgl)


async def _scope_errors(scopes):
    errors = []
    for scope in scopes:
        err = await scope
        if not _nullish(err):
            errors.append(_error_text(err))
    return errors


def _error_text(err):
    kind = str(getattr(getattr(err, "constructor", None), "name", "") or "GPUError")
    return f"{kind}: {err.message}"


def bind(dev, pipeline, bindings):
    """A bind group of ``bindings`` (``(buffer, offset, size)`` each) for ``pipeline``'s layout."""
    _check(dev)
    entries = [
        {"binding": i, "resource": {"buffer": b, "offset": int(o), "size": int(s)}}
        for i, (b, o, s) in enumerate(bindings)
    ]
    return dev.device.createBindGroup(_obj({"layout": pipeline.layout, "entries": entries}))


class Encoding:
    """A command encoder with one open compute pass: dispatches recorded to be submitted together."""

    def __init__(self, dev):
        self.encoder = dev.device.createCommandEncoder()
        self.compute = self.encoder.beginComputePass()


def encode(dev):
    _check(dev)
    return Encoding(dev)


def encode_dispatch(encoding, pipeline, bind_group, groups):
    """Record one dispatch (WebGPU orders it after the pass's earlier dispatches' writes)."""
    cp = encoding.compute
    cp.setPipeline(pipeline.pipeline)
    cp.setBindGroup(0, bind_group)
    cp.dispatchWorkgroups(int(groups[0]), int(groups[1]), int(groups[2]))


def submit_encoded(dev, encoding):
    from pyodide.ffi import to_js

    _check(dev)
    encoding.compute.end()
    dev.queue.submit(to_js([encoding.encoder.finish()]))


# One JS function records and submits a kept recipe's dispatches: one call from Python instead of
# three per dispatch, plus the encoder's, the pass's and the submit's
_SUBMIT_DISPATCHES_JS = """(device, queue, steps) => {
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  for (const [pipeline, group, x, y, z] of steps) {
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(x, y, z);
  }
  pass.end();
  queue.submit([encoder.finish()]);
}"""
_submit_js = []  # [the JS function] once made, [None] where the page does not let it be made


def _submit_function():
    if not _submit_js:
        try:
            from pyodide.code import run_js

            _submit_js.append(run_js(_SUBMIT_DISPATCHES_JS))
        except Exception:  # a page whose content security policy forbids evaluating JS: the loop below
            _submit_js.append(None)
    return _submit_js[0]


def prepare_dispatches(dev, steps):
    """``steps`` (``(pipeline, bind_group, groups)`` each) as ``submit_dispatches`` takes them: a
    JS array made once (and the same steps for Python, where no JS function can be made)."""
    from pyodide.ffi import to_js

    rows = [(pipe.pipeline, group, int(g[0]), int(g[1]), int(g[2])) for pipe, group, g in steps]
    return to_js([list(r) for r in rows]), tuple(rows)


def submit_dispatches(dev, prepared):
    """Record ``prepare_dispatches``'s dispatches in one compute pass and submit them as one command buffer."""
    _check(dev)
    submit = _submit_function()
    if submit is not None:
        submit(dev.device, dev.queue, prepared[0])
        return
    encoding = Encoding(dev)
    cp = encoding.compute
    for pipe, group, x, y, z in prepared[1]:
        cp.setPipeline(pipe)
        cp.setBindGroup(0, group)
        cp.dispatchWorkgroups(x, y, z)
    submit_encoded(dev, encoding)


def dispatch_bound(dev, pipeline, bind_group, groups):
    """Encode one compute dispatch with a bind group from ``bind`` and submit it."""
    encoding = encode(dev)
    encode_dispatch(encoding, pipeline, bind_group, groups)
    submit_encoded(dev, encoding)


def dispatch(dev, pipeline, bindings, groups):
    """Encode one compute dispatch and submit it."""
    dispatch_bound(dev, pipeline, bind(dev, pipeline, bindings), groups)


async def wait_async(dev):
    """Until all submitted work is done (awaitable); then raise any error the browser reported."""
    _check(dev)
    await dev.queue.onSubmittedWorkDone()
    _check(dev)


def wait(dev):
    """``wait_async`` for callers that can block (JSPI); else BlockingUnavailable."""
    _check(dev)
    _require_blocking("wait")
    _run_sync(wait_async(dev))


def lose_device(dev):
    """Destroy the device, as a driver reset would (used by tests); ``dev.lost`` follows from device.lost."""
    dev.device.destroy()


def is_device_lost(exc) -> bool:
    """True when ``exc`` says the device is gone (destroyed, reset, removed)."""
    text = str(exc).lower()
    return "device is lost" in text or "device lost" in text or "devicelost" in text or "device was lost" in text

"""The WebGPU transport over wgpu-py (native: Vulkan, Metal, D3D12, lavapipe).

The only module that calls wgpu-py.  It satisfies ``transport.Transport``
(this module's functions are the protocol's methods).
"""

from __future__ import annotations

import os
import tempfile

NAME = "wgpu-py"


def _quiet_runtime_dir():
    # Mesa's loader prints "XDG_RUNTIME_DIR is invalid" on every adapter
    # request when the variable is unset (headless CI); an empty private
    # folder silences it and changes nothing else.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="numr-web-xdg-")


def import_error():
    """None when wgpu-py imports, else the reason."""
    try:
        import wgpu  # noqa: F401
    except Exception as exc:  # ImportError, or a missing wgpu-native library
        return f"{type(exc).__name__}: {exc}"
    return None


class Device:
    """What the layers above need from an adapter + device pair."""

    def __init__(self, adapter, device, info, features, limits):
        self.adapter = adapter
        self.device = device
        self.queue = device.queue
        self.info = info
        self.features = features
        self.limits = limits
        self.lost = False
        self._fence = None
        self.adapter_features = set(adapter.features)


# The limits we raise to the adapter's maximum when it allows more than the
# WebGPU defaults (buffers past 256 MiB, bigger workgroup memory...).  Storage
# buffers per stage stay at the default 8 on purpose: every kernel must run on
# every adapter, and a kernel that needs more fails here first, not in a browser.
DEFAULT_STORAGE_BUFFERS = 8
_RAISED_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
)


def request_device(options):
    """Adapter and device, or raise RuntimeError with the reason.

    ``options``: power_preference, required_features (extra, must exist),
    required_limits (extra, dict), want_f16 (use shader-f16 when offered).
    """
    _quiet_runtime_dir()
    import wgpu

    adapter = wgpu.gpu.request_adapter_sync(power_preference=options.get("power_preference", "high-performance"))
    if adapter is None:
        raise RuntimeError("no WebGPU adapter found")
    adapter_features = set(adapter.features)
    features = [f for f in options.get("required_features", ())]
    if options.get("want_f16", True) and "shader-f16" in adapter_features:
        features.append("shader-f16")
    if "timestamp-query" in adapter_features:
        features.append("timestamp-query")
    # wgpu-native hands out the adapter's limit when none is asked for: ask for the default
    limits = {"max-storage-buffers-per-shader-stage": DEFAULT_STORAGE_BUFFERS}
    for key in _RAISED_LIMITS:
        if key in adapter.limits:
            limits[key] = adapter.limits[key]
    limits.update(options.get("required_limits", {}))
    try:
        device = adapter.request_device_sync(required_features=features, required_limits=limits)
    except Exception as exc:
        raise RuntimeError(f"the adapter refused a device: {exc}") from exc
    ai = adapter.info
    info = {
        "adapter": ai.get("device", "") or ai.get("description", ""),
        "vendor": ai.get("vendor", ""),
        "description": ai.get("description", ""),
        "backend": ai.get("backend_type", ""),
        "adapter_type": ai.get("adapter_type", ""),
        "transport": NAME,
    }
    return Device(adapter, device, info, set(device.features), dict(device.limits))


def _usage():
    import wgpu

    return wgpu.BufferUsage


def create_buffer(dev, size):
    u = _usage()
    return dev.device.create_buffer(size=int(size), usage=u.STORAGE | u.UNIFORM | u.COPY_SRC | u.COPY_DST)


def destroy_buffer(buf):
    try:
        buf.destroy()
    except Exception:
        pass


def write_buffer(dev, buf, offset, data):
    """WebGPU copies whole 4-byte words: a ragged tail is padded (buffers are allocated padded)."""
    mv = memoryview(data).cast("B")
    if len(mv) % 4:
        mv = memoryview(bytes(mv) + bytes(4 - len(mv) % 4))
    if len(mv):
        dev.queue.write_buffer(buf, int(offset), mv)


def read_buffer(dev, buf, offset, size):
    if size == 0:
        return b""
    padded = (int(size) + 3) // 4 * 4
    data = dev.queue.read_buffer(buf, int(offset), padded)
    return bytes(data[:size]) if padded != size else bytes(data)


class Pipeline:
    def __init__(self, pipeline, layout):
        self.pipeline = pipeline
        self.layout = layout


def create_pipeline(dev, code, entry, binding_kinds):
    import wgpu

    kinds = {
        "read": wgpu.BufferBindingType.read_only_storage,
        "read_write": wgpu.BufferBindingType.storage,
        "uniform": wgpu.BufferBindingType.uniform,
    }
    entries = [
        {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kinds[k]}}
        for i, k in enumerate(binding_kinds)
    ]
    d = dev.device
    bgl = d.create_bind_group_layout(entries=entries)
    layout = d.create_pipeline_layout(bind_group_layouts=[bgl])
    module = d.create_shader_module(code=code)
    pipe = d.create_compute_pipeline(layout=layout, compute={"module": module, "entry_point": entry})
    return Pipeline(pipe, bgl)


_compilers = []  # the worker pool of start_pipeline, made on first use


def start_pipeline(dev, code, entry, binding_kinds):
    """``create_pipeline`` on a worker thread: a ``concurrent.futures.Future`` of the pipeline.

    wgpu-py's ``create_compute_pipeline_async`` would be the natural call, but wgpu-native
    (as of wgpu-py 0.32) does not implement createComputePipelineAsync: that method compiles
    on the caller's thread before it returns.  A worker thread does the same compile off the
    caller's (wgpu-native is thread-safe; wgpu-py keeps its error capture per thread).
    """
    if not _compilers:
        from concurrent.futures import ThreadPoolExecutor

        workers = max(1, min(4, os.cpu_count() or 1))
        _compilers.append(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="numr-web-pipelines"))
    return _compilers[0].submit(create_pipeline, dev, code, entry, binding_kinds)


async def create_pipeline_async(dev, code, entry, binding_kinds):
    """``create_pipeline``, awaited: compiled on a worker thread (``start_pipeline``)."""
    import asyncio

    return await asyncio.wrap_future(start_pipeline(dev, code, entry, binding_kinds))


def bind(dev, pipeline, bindings):
    """A bind group of ``bindings`` (``(buffer, offset, size)`` each) for ``pipeline``'s layout."""
    entries = [
        {"binding": i, "resource": {"buffer": b, "offset": int(o), "size": int(s)}}
        for i, (b, o, s) in enumerate(bindings)
    ]
    return dev.device.create_bind_group(layout=pipeline.layout, entries=entries)


class Encoding:
    """A command encoder with one open compute pass: dispatches recorded to be submitted together."""

    def __init__(self, dev):
        self.encoder = dev.device.create_command_encoder()
        self.compute = self.encoder.begin_compute_pass()


def encode(dev):
    return Encoding(dev)


def encode_dispatch(encoding, pipeline, bind_group, groups):
    """Record one dispatch (WebGPU orders it after the pass's earlier dispatches' writes)."""
    cp = encoding.compute
    cp.set_pipeline(pipeline.pipeline)
    cp.set_bind_group(0, bind_group)
    cp.dispatch_workgroups(int(groups[0]), int(groups[1]), int(groups[2]))


def submit_encoded(dev, encoding):
    encoding.compute.end()
    dev.queue.submit([encoding.encoder.finish()])


def prepare_dispatches(dev, steps):
    """``steps`` (``(pipeline, bind_group, groups)`` each) made ready for ``submit_dispatches``:
    what each of its calls would otherwise look up again."""
    return tuple((pipe.pipeline, group, int(g[0]), int(g[1]), int(g[2])) for pipe, group, g in steps)


def submit_dispatches(dev, prepared):
    """Record the dispatches of ``prepare_dispatches`` in one compute pass and submit them as one
    command buffer (a kept GroupNorm recipe's call: one loop, its methods looked up once)."""
    encoder = dev.device.create_command_encoder()
    cp = encoder.begin_compute_pass()
    set_pipeline, set_bind_group, dispatch_workgroups = cp.set_pipeline, cp.set_bind_group, cp.dispatch_workgroups
    for pipe, group, x, y, z in prepared:
        set_pipeline(pipe)
        set_bind_group(0, group)
        dispatch_workgroups(x, y, z)
    cp.end()
    dev.queue.submit([encoder.finish()])


def dispatch_bound(dev, pipeline, bind_group, groups):
    """Encode one compute dispatch with a bind group from ``bind`` and submit it."""
    encoding = encode(dev)
    encode_dispatch(encoding, pipeline, bind_group, groups)
    submit_encoded(dev, encoding)


def dispatch(dev, pipeline, bindings, groups):
    """Encode one compute dispatch and submit it."""
    dispatch_bound(dev, pipeline, bind(dev, pipeline, bindings), groups)


def wait(dev):
    """Block until all submitted work is done.

    wgpu-py 0.32's on_submitted_work_done_sync raises TypeError; reading back
    a tiny buffer waits for the queue just as well (about 0.15 ms).
    """
    if dev._fence is None:
        dev._fence = create_buffer(dev, 16)
    dev.queue.read_buffer(dev._fence, 0, 4)


def lose_device(dev):
    """Destroy the device, as a driver reset would (used by tests)."""
    dev.device.destroy()


def is_device_lost(exc) -> bool:
    """True when ``exc`` says the device is gone (destroyed, reset, removed)."""
    text = str(exc).lower()
    return "device is lost" in text or "device lost" in text or "devicelost" in text

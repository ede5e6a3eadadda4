"""The transport contract: the few WebGPU calls the layers above need, as a Protocol both transports satisfy.

Everything above a transport (buffers, the pipeline cache, launches, chunking)
is shared; a transport only turns these calls into one WebGPU API:

* ``transport_wgpu``: wgpu-py on the desktop (Vulkan, Metal, D3D12, lavapipe);
* ``transport_browser``: the browser's ``navigator.gpu`` from Pyodide.

Buffers are the transport's own objects with a ``.size``; ``bindings`` are
``(buffer, offset, size)`` tuples; ``binding_kinds`` lists "read",
"read_write" or "uniform" per binding number.  Writes, pipelines and
dispatches are synchronous in WebGPU everywhere; only the device request and
the read-back wait on the GPU, and a transport that cannot block (a browser
without JSPI) offers awaitable forms of those instead.  Compiling a pipeline
has an awaitable form too (``create_pipeline_async``), so that pipelines can
be made ahead of need without making anyone wait.
"""

from __future__ import annotations

from typing import Any, Protocol


class Device(Protocol):
    """An adapter and its device, with the facts the layers above read."""

    #: adapter, vendor, description, backend, adapter_type, transport
    info: dict
    #: features enabled on the device, and those the adapter offers
    features: set
    adapter_features: set
    #: WebGPU limit names in dashed form ("max-storage-buffer-binding-size") -> value
    limits: dict
    #: set once the device is gone (destroyed, reset); the next call asks for a new one
    lost: bool


class Transport(Protocol):
    #: the name ``numr-web info`` shows ("wgpu-py", "navigator.gpu")
    NAME: str

    def import_error(self) -> str | None:
        """None when this transport's API is present here, else why not."""

    def request_device(self, options: dict) -> Device:
        """An adapter and device (blocks), or RuntimeError with the reason.

        ``options``: power_preference, required_features, required_limits, want_f16.
        """

    def create_buffer(self, dev: Device, size: int) -> Any:
        """A buffer of ``size`` bytes (usage storage | uniform | copy_src | copy_dst)."""

    def write_buffer(self, dev: Device, buf: Any, offset: int, data) -> None:
        """Queue a write of ``data`` (any buffer-protocol object) at ``offset``."""

    def read_buffer(self, dev: Device, buf: Any, offset: int, size: int) -> bytes:
        """``size`` bytes from ``offset``, after all queued work (blocks)."""

    def create_pipeline(self, dev: Device, code: str, entry: str, binding_kinds: list) -> Any:
        """A compute pipeline for ``entry`` of WGSL ``code`` with an explicit bind group layout."""

    async def create_pipeline_async(self, dev: Device, code: str, entry: str, binding_kinds: list) -> Any:
        """``create_pipeline`` without blocking the caller while the driver compiles: the
        browser's ``createComputePipelineAsync``; on the desktop a worker thread (a transport
        may also offer ``start_pipeline``, the same as a ``concurrent.futures.Future`` that
        synchronous code can wait on)."""

    def bind(self, dev: Device, pipeline: Any, bindings: list) -> Any:
        """A bind group of ``bindings`` (``(buffer, offset, size)`` each) for ``pipeline``'s layout;
        the caller may keep it and dispatch with it again while its buffers live."""

    def dispatch_bound(self, dev: Device, pipeline: Any, bind_group: Any, groups: tuple) -> None:
        """Encode and submit one dispatch of ``groups`` (x, y, z) workgroups with a bind group from ``bind``."""

    def encode(self, dev: Device) -> Any:
        """A command encoder with an open compute pass, for ``encode_dispatch`` and ``submit_encoded``."""

    def encode_dispatch(self, encoding: Any, pipeline: Any, bind_group: Any, groups: tuple) -> None:
        """Record a dispatch in ``encoding``; it sees the writes of the dispatches recorded before it."""

    def submit_encoded(self, dev: Device, encoding: Any) -> None:
        """End the pass and submit everything recorded in ``encoding``, as one command buffer."""

    def prepare_dispatches(self, dev: Device, steps: list) -> Any:
        """``steps`` (``(pipeline, bind_group, groups)`` each) made ready to be submitted again and
        again by ``submit_dispatches``, while their pipelines and bind groups live."""

    def submit_dispatches(self, dev: Device, prepared: Any) -> None:
        """Record ``prepared``'s dispatches, in order, in one compute pass and submit them as one
        command buffer (as ``encode``, ``encode_dispatch`` each, ``submit_encoded``)."""

    def dispatch(self, dev: Device, pipeline: Any, bindings: list, groups: tuple) -> None:
        """``dispatch_bound`` with a fresh bind group of ``bindings``."""

    def wait(self, dev: Device) -> None:
        """Block until the submitted work is done."""

    def destroy_buffer(self, buf: Any) -> None:
        """Free a buffer now (errors from an already lost device are ignored)."""

    def lose_device(self, dev: Device) -> None:
        """Destroy the device as a driver reset would (tests)."""

    def is_device_lost(self, exc: BaseException) -> bool:
        """True when ``exc`` says the device is gone."""

"""WebGPU backend: WGSL kernels (numr_web/kernels/wgsl) through a thin transport.

Importing this package touches no hardware and does not need wgpu-py; the
device is created on first use.  Layers:

* ``transport_wgpu`` -- the only module that calls a WebGPU API (wgpu-py);
* ``device``         -- device/context, pipeline cache, buffer pool, ``launch``;
* ``source``         -- WGSL assembly (dtype helpers and constants spliced in);
* ``array``/``ops``  -- ``WebGPUArray`` and its elementwise, sum and copy kernels;
* ``group_norm``     -- the GroupNorm launches (chunking, variant choice);
* ``backend``        -- ``BACKEND``, the object the registry uses.
"""

from numr_web.backends.webgpu.array import WebGPUArray
from numr_web.backends.webgpu.backend import BACKEND, WebGPUBackend
from numr_web.backends.webgpu.device import configure

__all__ = ["BACKEND", "WebGPUArray", "WebGPUBackend", "configure"]

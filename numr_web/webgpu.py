"""The public WebGPU API (``numr_web.webgpu``): NumPy-free transfers, the awaitable device request and read-back.

    >>> import array, numr_web, numr_web.webgpu as wg
    >>> x = wg.from_buffer(array.array("f", range(8)), (2, 4, 1), "float32")
    >>> y = numr_web.group_norm(x, 2)          # runs as WGSL kernels
    >>> array.array("f", y.tobytes())          # and back, without NumPy

On the desktop the transport is wgpu-py; under Pyodide (JupyterLite, a page)
it is the browser's ``navigator.gpu``.  WebGPU creates buffers, writes them
and dispatches synchronously; only the device request and the read-back wait
for the GPU.  Where the browser lets Python block (Chromium's JSPI) the API is
the desktop's.  Where it does not (Safari and Firefox today, or Python entered
from a JavaScript callback), everything but those two waits still works, and
they have awaitable forms::

    await numr_web.webgpu.init()        # adapter and device
    await numr_web.webgpu.prepare(dtypes="float32", shapes=[((2, 8, 4), 2)])  # optional: compile ahead
    y = numr_web.group_norm(x, 2)       # no waiting here
    raw = await y.tobytes_async()       # or await y.get_async() for NumPy

and the blocking forms (``tobytes()``, ``item()``, ``bool(array)``, the first
device use before ``init()``) raise ``BlockingUnavailable`` naming the
awaitable one.  Importing this module touches no hardware; this is a facade
over ``numr_web.backends.webgpu``, which users need not import.
"""

from __future__ import annotations

from numr_web.backends.webgpu import BACKEND, WebGPUArray, configure
from numr_web.backends.webgpu import device as _device
from numr_web.backends.webgpu.transport_browser import BlockingUnavailable

__all__ = [
    "BACKEND",
    "BlockingUnavailable",
    "WebGPUArray",
    "available",
    "can_block",
    "configure",
    "from_buffer",
    "full",
    "info",
    "init",
    "prepare",
    "synchronize",
    "synchronize_async",
]


def from_buffer(buf, shape, dtype="float32", layout="nchw") -> WebGPUArray:
    """A device array holding the bytes of ``buf`` (any buffer-protocol object:
    ``bytes``, ``bytearray``, ``array.array``, ``memoryview``, a NumPy array...).

    ``buf`` holds the elements in C order of ``shape`` (``layout="nchw"``), or in
    channels-last order, ``(N, *spatial, C)``, for an NCHW-shaped channels-last
    array (``layout="nhwc"``).  ``dtype`` is "float32", "float16" or "bfloat16"
    (or the NumPy dtype).  Raises ``ValueError`` when the byte count does not
    match ``shape``.
    """
    if isinstance(shape, int):
        shape = (shape,)
    try:
        memoryview(buf)
    except TypeError:
        raise TypeError(
            f"buf: expected a buffer-protocol object (bytes, array.array, memoryview), got {type(buf).__name__}"
        ) from None
    return BACKEND.from_buffer(buf, tuple(shape), dtype, layout)


def full(shape, value, dtype="float32") -> WebGPUArray:
    """A device array of ``shape`` filled with ``value`` (no host buffer involved)."""
    from numr_web.backends.webgpu import array_kernels
    from numr_web.backends.webgpu.array import as_dtype

    if isinstance(shape, int):
        shape = (shape,)
    return array_kernels.full(_device.context(), tuple(shape), as_dtype(dtype), value)


async def init() -> dict:
    """Request the adapter and device without blocking (awaitable everywhere); returns ``info()``.

    Needed once before the first WebGPU call where Python cannot block (a browser
    without JSPI); harmless elsewhere.
    """
    await _device.context_async()
    return BACKEND.info()


def _names(value, name, allowed=None):
    """``value`` (one item or a sequence) as a tuple; each in ``allowed`` when given."""
    items = (value,) if value is None or isinstance(value, str) else value
    try:
        items = tuple(items)
    except TypeError:
        items = (value,)
    if not items:
        raise ValueError(f"{name}: expected at least one, got an empty {type(value).__name__}")
    if allowed is not None:
        for item in items:
            if (item.lower() if isinstance(item, str) else item) not in allowed:
                raise ValueError(f"{name}: expected {' or '.join(map(repr, allowed))}, got {item!r}")
        items = tuple(item.lower() if isinstance(item, str) else item for item in items)
    return items


def _shapes(shapes):
    """``shapes`` as ((shape tuple, num_groups), ...), checked like the op checks x and num_groups."""
    if shapes is None:
        return None
    out = []
    for entry in shapes:
        try:
            shape, groups = entry
            shape = tuple(shape)
        except (TypeError, ValueError):
            raise TypeError(f"shapes: expected (shape, num_groups) pairs, got {entry!r}") from None
        if len(shape) < 2 or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise ValueError(f"shapes: a shape is (N, C, *spatial) of non-negative ints, got {shape!r}")
        if not (isinstance(groups, int) and not isinstance(groups, bool) and groups > 0 and shape[1] % groups == 0):
            raise ValueError(f"shapes: num_groups must be a positive divisor of C={shape[1]}, got {groups!r}")
        out.append((shape, groups))
    return tuple(out)


async def prepare(
    dtypes=("float32",),
    layouts=("nchw", "nhwc"),
    activations=(None, "silu"),
    *,
    shapes=None,
    weight=None,
    bias=None,
    backward=True,
    autograd=True,
    concurrency=None,
) -> int:
    """Compile ahead of need, without blocking, every pipeline the GroupNorm calls of these
    ``dtypes`` (float32, float16, bfloat16), ``layouts`` ("nchw", "nhwc": channels-last) and
    ``activations`` (None, "silu") can reach, with and without weight and bias, forward and
    (``backward``) backward; with ``autograd`` also the elementwise and sum kernels autograd
    runs on arrays of those dtypes (without it, of those only the conversions between a 16-bit
    dtype and float32).  The first call of each is then as quick as a later one.

    ``shapes``: ``[(shape, num_groups), ...]`` to prepare only the pipelines those calls reach
    (tens instead of hundreds: without it, every work shape the planner can choose for any
    shape is compiled); with them, ``weight`` / ``bias`` True or False narrows to the calls with
    or without a weight / bias (None: both).  Awaitable everywhere: the browser compiles with
    ``createComputePipelineAsync``; on the desktop worker threads compile (``asyncio.run``
    waits for them; a call that needs a pipeline still compiling waits for that one only).
    ``concurrency``: at most that many compile at once, in order (None: all at once).  A page
    that goes on computing meanwhile passes a small number: a browser's GPU process compiles
    in the order asked, so a call's own pipeline would otherwise wait behind every one queued.
    Each argument also takes a single value.  Returns how many pipelines this call compiled (one a
    call compiled meanwhile is not counted).
    """
    from numr_web.backends.webgpu.array import as_dtype

    kinds = []
    for dt in _names(dtypes, "dtypes"):
        try:
            kinds.append(as_dtype(dt))
        except TypeError as exc:
            raise TypeError(f"dtypes: {exc}") from None
    lays = _names(layouts, "layouts", ("nchw", "nhwc"))
    acts = _names(activations, "activations", (None, "silu"))
    wanted = _shapes(shapes)
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ValueError(f"concurrency: expected None or a positive integer, got {concurrency!r}")
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"{name}: expected None (calls with and without it), True or False, got {value!r}")
        if value is not None and wanted is None:
            raise ValueError(f"{name}: narrows the calls of shapes; pass shapes=[(shape, num_groups), ...] too")
    ctx = await _device.context_async()
    keys = []
    for dt in dict.fromkeys(kinds):
        keys += _dtype_keys(ctx, dt, lays, acts, wanted, backward=backward, weight=weight, bias=bias, autograd=autograd)
    return await ctx.prepare_pipelines(keys, concurrency)


def _dtype_keys(ctx, dtype, layouts, activations, wanted, *, backward, weight, bias, autograd):
    """The pipeline keys ``prepare`` compiles for one ``dtype`` (a DType), its arguments checked: GroupNorm's for
    each layout and activation, then autograd's kernels or only the conversions to and from float32."""
    from numr_web.backends.webgpu import array_kernels, group_norm_launch

    keys = []
    for layout in layouts:
        calls = wanted if wanted is None or layout == "nchw" else tuple(c for c in wanted if len(c[0]) >= 3)
        for act in activations:
            keys += group_norm_launch.variant_keys(
                ctx, dtype, layout, act, shapes=calls, backward=backward, weight=weight, bias=bias
            )
    casts = array_kernels.variant_keys(ctx, dtype) if autograd else array_kernels.conversion_keys(ctx, dtype)
    return keys + [ctx.pipeline_key(*k) for k in casts]


def can_block() -> bool:
    """Whether the blocking forms (device request, read-back) work here: always on the desktop;
    in the browser where Pyodide can suspend (JSPI, ``pyodide.ffi.can_run_sync()``)."""
    transport = _device.transport()
    check = getattr(transport, "can_block", None)
    return True if check is None else bool(check())


def available() -> tuple[bool, str]:
    """(usable here, adapter description or the reason and how to fix it)."""
    return BACKEND.available()


def info() -> dict:
    """Adapter name, backend, features and key limits (what ``numr-web info`` prints)."""
    return BACKEND.info()


def synchronize() -> None:
    """Wait until the device has finished all queued work."""
    BACKEND.synchronize()


async def synchronize_async() -> None:
    """``synchronize``, awaited."""
    ctx = _device.current()
    if ctx is not None:
        await ctx.wait_async()

"""The WebGPU device: lazy creation, pipeline cache, buffer pool, lost devices.

Nothing here touches hardware at import time.  ``context()`` creates the
device on first use and again after a loss; ``launch()`` is the one way to
run a WGSL kernel (source assembly -> cached pipeline -> dispatch), whichever
transport is underneath.
"""

from __future__ import annotations

import atexit
import sys
import threading
import weakref
from collections import OrderedDict

from numr_web.backends.webgpu import source

INSTALL_HINT = (
    "install wgpu-py (pip install 'numr-web[webgpu]') and a WebGPU-capable driver; "
    "on a machine without a GPU, Mesa's software Vulkan driver lavapipe works "
    "(Debian/Ubuntu: apt-get install mesa-vulkan-drivers libvulkan1)"
)
BROWSER_HINT = (
    "open the page in a browser with WebGPU (a recent Chrome or Edge; Safari 26; Firefox 141 or later on Windows), "
    "or use the 'cpu' device"
)


def default_transport():
    """navigator.gpu under Pyodide (``sys.platform == "emscripten"``), wgpu-py elsewhere."""
    if sys.platform == "emscripten":
        from numr_web.backends.webgpu import transport_browser as transport
    else:
        from numr_web.backends.webgpu import transport_wgpu as transport
    return transport


def _hint(transport):
    return BROWSER_HINT if transport.NAME == "navigator.gpu" else INSTALL_HINT


ALIGN = 16  # every buffer is padded to whole 16-byte units (kernels write whole vec4s)
OFFSET_ALIGN = 256  # WebGPU's default minStorageBufferOffsetAlignment
MAX_DISPATCH = 65535  # workgroups per grid dimension
_POOL_IDLE_BYTES = 768 << 20
#: output buffers the kept GroupNorm recipes may hold for their next call, all recipes of a device together
#: (group_norm_launch.Recipe.outputs: a buffer its caller dropped is reused without a trip through the pool)
HELD_OUTPUT_BYTES = 256 << 20
#: bind groups kept for reuse (a call's host work is mostly creating them: a repeated call finds its own)
_BIND_GROUPS_KEPT = 512
#: launch parameter blocks kept, each in its own never-rewritten buffer (a repeated call writes none)
_PARAMS_KEPT = 256


def _unavailable(msg):
    from numr_web.errors import BackendUnavailable

    return BackendUnavailable(msg)


def round_up(n, a):
    return (int(n) + a - 1) // a * a


class Context:
    """One adapter + device and everything cached on it."""

    def __init__(self, transport, dev, generation):
        self.transport = transport
        self.dev = dev
        self.generation = generation
        self.pipelines = {}
        self._compiling = {}  # pipeline key -> concurrent.futures.Future (desktop background compiles)
        #: pipelines a call had to compile (or wait for) when it needed them, and those made ahead
        #: of need (prepare_pipelines): the first call of a prepared variant compiles nothing
        self.compiled_on_call = 0
        self.compiled_ahead = 0
        self.pool = {}  # size -> [buffers]
        self.pool_bytes = 0
        self.live_bytes = 0
        self.created = 0  # buffers ever created on this device (tests: memory stays flat)
        self.use_shader_f16 = "shader-f16" in dev.features
        self.max_binding = int(dev.limits.get("max-storage-buffer-binding-size", 128 << 20))
        self.max_buffer = int(dev.limits.get("max-buffer-size", 256 << 20))
        self._dummy = None
        self._dummy_rw = None
        self._bind_groups = OrderedDict()  # (pipeline, (buffer, offset, size)...) ids -> (group, buffers)
        self._bind_keys_of = {}  # id(buffer) -> keys of the bind groups that use it
        self._params = OrderedDict()  # params bytes -> Scratch holding them
        #: kept launch recipes (group_norm_launch.Recipe) by call signature, least recent first
        self.recipes = OrderedDict()
        #: [bytes] of output buffers the kept recipes hold (a list: a recipe's finalizer lowers it without
        #: holding the context)
        self.held_output_bytes = [0]
        self._batch_depth = 0  # inside batch(): dispatches are recorded, and submitted on leaving it
        self._encoding = None
        self._deferred = []  # buffers released inside batch(): pooled after the submit
        self._batcher = _Batch(self)
        self.lock = threading.RLock()
        # software adapters (lavapipe, SwiftShader) want other work shapes than GPUs
        self.cpu_adapter = str(dev.info.get("adapter_type", "")).lower() == "cpu"

    # -- buffers -------------------------------------------------------------
    def alloc(self, nbytes):
        size = max(round_up(nbytes, 256), 256)
        if size > self.max_buffer:
            raise ValueError(f"a {nbytes}-byte array exceeds this adapter's maxBufferSize ({self.max_buffer} bytes)")
        with self.lock:
            free = self.pool.get(size)
            if free:
                self.pool_bytes -= size
                self.live_bytes += size
                return free.pop(), size
        buf = self.transport.create_buffer(self.dev, size)
        self.created += 1
        self.live_bytes += size
        return buf, size

    def release(self, buf, size):
        with self.lock:
            if self._batch_depth:
                # a recorded, not yet submitted dispatch may use it: a write to it now (a new
                # array's upload, a parameter block) would land before that dispatch runs
                self._deferred.append((buf, size))
                return
            self.live_bytes -= size
            if self.dev.lost:
                return
            if self.pool_bytes + size > _POOL_IDLE_BYTES:
                for key in self._bind_keys_of.pop(id(buf), ()):
                    self._forget_bind_group(key, keep=id(buf))
                self.transport.destroy_buffer(buf)
                return
            self.pool.setdefault(size, []).append(buf)
            self.pool_bytes += size

    def dummy_rw(self, k=0):
        """Placeholder ranges for unused read_write bindings: one buffer may not be bound
        read-only and writable in one dispatch, and writable bindings must not alias
        (Dawn checks that), so the k-th unused writable binding gets its own 256-byte range."""
        if self._dummy_rw is None:
            self._dummy_rw = self.transport.create_buffer(self.dev, 1024)
        return (self._dummy_rw, 256 * k, 256)

    @property
    def dummy(self):
        if self._dummy is None:
            self._dummy = self.transport.create_buffer(self.dev, 256)
        return self._dummy

    # -- kernels -------------------------------------------------------------
    def dtype_key(self, name):
        """WGSL storage format for a dtype name ("float32", "float16", "bfloat16")."""
        if name == "float32":
            return "f32"
        if name == "float16":
            return "f16" if (self.use_shader_f16 and "shader-f16" in self.dev.features) else "f16_packed"
        if name == "bfloat16":
            return "bf16"
        raise TypeError(f"dtype {name} has no WGSL storage format")

    @staticmethod
    def pipeline_key(kernel, entry, dtypes, constants):
        """The pipeline cache's key of a kernel variant."""
        return (kernel, entry, tuple(sorted(dtypes.items())), tuple(sorted(constants.items())))

    def pipeline(self, kernel, entry, dtypes, constants):
        key = (kernel, entry, tuple(sorted(dtypes.items())), tuple(sorted(constants.items())))
        pipe = self.pipelines.get(key)
        if pipe is None:
            pending = self._compiling.get(key)
            if pending is not None:  # prepared in the background, not done yet: wait for that one
                pipe = pending.result()
            else:
                code = source.build(kernel, dtypes, constants)
                pipe = self.transport.create_pipeline(self.dev, code, entry, source.binding_kinds(code))
            self.pipelines[key] = pipe
            self.compiled_on_call += 1
        return pipe

    async def prepare_pipelines(self, keys, concurrency=None) -> int:
        """Compile the variants ``keys`` (``pipeline_key`` tuples) that are not cached yet, without
        blocking: in the browser ``createComputePipelineAsync``, on the desktop worker threads
        (a call that needs one still in flight waits for that one only).  At most ``concurrency``
        compile at once, in the order given (None: all at once); a compile queue the browser's GPU
        process works through in order then holds no more than that many ahead of a call's own.
        Returns how many this call compiled (not those a call compiled meanwhile)."""

        todo = {}
        for key in keys:
            if key not in self.pipelines and key not in self._compiling and key not in todo:
                todo[key] = None
        if not todo:
            return 0
        order = list(todo)
        step = len(order) if concurrency is None else concurrency
        failed = None
        compiled = 0
        for i in range(0, len(order), step):
            done, error = await self._compile_ahead(order[i : i + step])
            compiled += done
            failed = failed or error
        if failed is not None:
            (kernel, entry, _dtypes, _constants), exc = failed
            raise RuntimeError(f"compiling {kernel} ({entry}) ahead of use failed: {exc}") from exc
        return compiled

    async def _compile_ahead(self, keys):
        """Compiles ``keys`` at once and keeps the pipelines; returns (how many it compiled and kept, the first
        (key, error) or None)."""
        import asyncio

        start = getattr(self.transport, "start_pipeline", None)
        jobs = []
        for key in keys:
            if key in self.pipelines:  # a call compiled it meanwhile
                jobs.append(asyncio.sleep(0, self.pipelines[key]))
                continue
            kernel, entry, dtypes, constants = key
            code = source.build(kernel, dict(dtypes), dict(constants))
            kinds = source.binding_kinds(code)
            if start is not None:
                future = self._compiling[key] = start(self.dev, code, entry, kinds)
                jobs.append(asyncio.wrap_future(future))
            else:
                jobs.append(self.transport.create_pipeline_async(self.dev, code, entry, kinds))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        failed = None
        compiled = 0
        for key, result in zip(keys, results):
            self._compiling.pop(key, None)
            if isinstance(result, BaseException):
                failed = failed or (key, result)
            elif key not in self.pipelines:
                self.pipelines[key] = result
                compiled += 1
        self.compiled_ahead += compiled
        return compiled, failed

    def launch(
        self, kernel, entry, dtypes, constants, bindings, workgroups, params=None, *, prepared=None, encoding=None
    ):
        """Run ``entry`` of ``kernel`` over ``workgroups`` (an int, spread over a 2-D grid).

        ``bindings``: list of ``(buffer, offset, size)`` or ``buffer`` (whole);
        ``params``: bytes for the last binding (a small read-only buffer).  A repeated call
        finds its parameter buffer and its bind group made already.  ``prepared``: (pipeline,
        grid, bind group) made before (a kept recipe: ``bindings``, ``workgroups`` and
        ``params`` are then not read; what is passed says what the group binds).  ``encoding``:
        record the dispatch there (``transport.encode``; the caller submits it) instead of into
        an open ``batch()`` or a submit of its own.
        """
        held = None
        if prepared is not None:
            pipe, groups, group = prepared
        else:
            pipe = self.pipeline(kernel, entry, dtypes, constants)
            binds = [b if isinstance(b, tuple) else (b.buffer, 0, b.size) for b in bindings]
            if params is not None:
                held = self._params_buffer(bytes(params))
                binds.append((held.buffer, 0, held.size))
            groups = grid(workgroups)
            group = self._bind_group(pipe, binds)
        if encoding is not None:
            self.transport.encode_dispatch(encoding, pipe, group, groups)
        elif self._batch_depth:
            if self._encoding is None:
                self._encoding = self.transport.encode(self.dev)
            self.transport.encode_dispatch(self._encoding, pipe, group, groups)
        else:
            self.transport.dispatch_bound(self.dev, pipe, group, groups)
        return held

    def batch(self):
        """A context manager: within it, launches are recorded into one compute pass, submitted
        as one command buffer on leaving (one submit per GroupNorm call instead of one per
        dispatch); buffers released meanwhile return to the pool after that submit.  Nests."""
        return self._batcher

    def _enter_batch(self):
        with self.lock:
            self._batch_depth += 1
        return self

    def _exit_batch(self, *exc):
        with self.lock:
            self._batch_depth -= 1
            outer = self._batch_depth == 0
        if outer:
            self.flush()

    def flush(self):
        """Submit what ``batch`` recorded, then pool the buffers released meanwhile."""
        with self.lock:
            encoding, self._encoding = self._encoding, None
        try:
            if encoding is not None:
                self.transport.submit_encoded(self.dev, encoding)
        finally:
            with self.lock:
                deferred, self._deferred = self._deferred, []
            for buf, size in deferred:
                self.release(buf, size)

    def submit_recorded(self):
        """Submit what an open ``batch()`` has recorded so far: a read-back must see the writes of
        the dispatches recorded before it (the batch goes on recording after it)."""
        if self._encoding is not None:
            self.flush()

    def params_buffer(self, params):
        """The kept buffer holding the parameter block ``params`` (bytes), written once."""
        return self._params_buffer(bytes(params))

    def _params_buffer(self, params):
        with self.lock:
            held = self._params.get(params)
            if held is not None:
                self._params.move_to_end(params)
                return held
        held = Scratch(self, len(params))
        self.transport.write_buffer(self.dev, held.buffer, 0, params)
        with self.lock:
            self._params[params] = held
            while len(self._params) > _PARAMS_KEPT:
                self._params.popitem(last=False)  # back to the pool once no kept bind group needs it
        return held

    def bind_group(self, pipe, binds):
        """The kept bind group of ``binds`` (``(buffer, offset, size)`` each) for ``pipe``, made on first use."""
        return self._bind_group(pipe, binds)

    def _bind_group(self, pipe, binds):
        key = (id(pipe), *[(id(b), o, n) for b, o, n in binds])
        with self.lock:
            kept = self._bind_groups.get(key)
            if kept is not None:
                self._bind_groups.move_to_end(key)
                return kept[0]
        group = self.transport.bind(self.dev, pipe, binds)
        buffers = tuple(b for b, _, _ in binds)
        with self.lock:
            # the buffers and pipeline are held too, so that their ids stay theirs while the key lives
            self._bind_groups[key] = (group, buffers, pipe)
            for b in buffers:
                self._bind_keys_of.setdefault(id(b), set()).add(key)
            while len(self._bind_groups) > _BIND_GROUPS_KEPT:
                self._forget_bind_group(next(iter(self._bind_groups)))
        return group

    def _forget_bind_group(self, key, keep=None):
        kept = self._bind_groups.pop(key, None)
        if kept is None:
            return
        for b in kept[1]:
            if id(b) != keep:
                keys = self._bind_keys_of.get(id(b))
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._bind_keys_of[id(b)]

    def wait(self):
        self.flush()
        self.transport.wait(self.dev)

    async def wait_async(self):
        self.flush()
        wait = getattr(self.transport, "wait_async", None)
        if wait is None:  # a transport that only blocks (wgpu-py)
            self.transport.wait(self.dev)
        else:
            await wait(self.dev)


class _Batch:
    """``Context.batch()``'s context manager (one object per context: entering costs no generator)."""

    __slots__ = ("ctx",)

    def __init__(self, ctx):
        self.ctx = ctx

    def __enter__(self):
        return self.ctx._enter_batch()

    def __exit__(self, *exc):
        self.ctx._exit_batch()


#: weak reference to a live Scratch -> (context, buffer, size): what goes back to the pool when it dies
_OWNED = {}
#: set at interpreter exit: a Scratch dying during shutdown pools nothing (the device may be gone)
_EXITING = []
atexit.register(_EXITING.append, True)


def _owner_died(ref):
    item = _OWNED.pop(ref, None)
    if item is not None and not _EXITING:
        ctx, buf, size = item
        ctx.release(buf, size)


class Scratch:
    """A pooled device buffer owned by one Python object (returned to the pool on collection).

    A weak reference with a callback (not ``__del__``) gives the buffer back, as
    ``weakref.finalize`` does but cheaper per object: the module's registry holds
    the buffer strongly, so when this object dies in a reference cycle the buffer
    cannot be finalized (released) before it is pooled.
    """

    __slots__ = ("ctx", "buffer", "size", "nbytes", "generation", "__weakref__")

    def __init__(self, ctx, nbytes):
        self.ctx = ctx
        self.nbytes = nbytes = int(nbytes)
        self.buffer, self.size = buf, size = ctx.alloc(nbytes if nbytes > 16 else 16)
        self.generation = ctx.generation
        _OWNED[weakref.ref(self, _owner_died)] = (ctx, buf, size)


def grid(workgroups):
    """An int count of workgroups -> (x, y, 1) within the per-dimension limit."""
    w = int(workgroups)
    if w <= MAX_DISPATCH:
        return (max(w, 1), 1, 1)
    y = -(-w // MAX_DISPATCH)
    x = -(-w // y)
    return (x, y, 1)


# -- the current context ------------------------------------------------------

_state = {"ctx": None, "generation": 0, "transport": None, "options": {}}
_lock = threading.Lock()


def configure(*, transport=None, **options):
    """Choose the transport and device request options (power_preference,
    required_features, required_limits, want_f16); the next call makes a new device.

    ``configure()`` with no arguments restores the defaults.
    """
    with _lock:
        _state["transport"] = transport
        _state["options"] = dict(options)
        _drop()


def _drop():
    ctx = _state["ctx"]
    if ctx is not None:
        ctx.dev.lost = True
    _state["ctx"] = None


def transport():
    """The transport in use: the configured one, else ``default_transport()``."""
    return _state["transport"] or default_transport()


def _usable_transport():
    t = transport()
    why = t.import_error()
    if why is not None:
        raise _unavailable(f"WebGPU is not usable here: {t.NAME} is not available ({why}); {_hint(t)}")
    return t


def _adopt(t, dev) -> Context:
    _state["generation"] += 1
    ctx = Context(t, dev, _state["generation"])
    _state["ctx"] = ctx
    return ctx


def _device_error(t, exc):
    if type(exc).__name__ == "BlockingUnavailable":  # the browser cannot wait here: say how to
        return exc
    return _unavailable(f"WebGPU is not usable here: {exc}; {_hint(t)}")


def context() -> Context:
    """The live context; creates the device on first use and after a loss (blocks while it does)."""
    ctx = _state["ctx"]
    if ctx is not None and not ctx.dev.lost:
        return ctx
    with _lock:
        ctx = _state["ctx"]
        if ctx is not None and not ctx.dev.lost:
            return ctx
        t = _usable_transport()
        try:
            dev = t.request_device(_state["options"])
        except Exception as exc:
            raise _device_error(t, exc) from exc
        return _adopt(t, dev)


async def context_async() -> Context:
    """``context()``, awaited: the device request does not block (a browser without JSPI)."""
    ctx = _state["ctx"]
    if ctx is not None and not ctx.dev.lost:
        return ctx
    t = _usable_transport()
    request = getattr(t, "request_device_async", None)
    try:
        dev = await request(_state["options"]) if request is not None else t.request_device(_state["options"])
    except Exception as exc:
        raise _device_error(t, exc) from exc
    ctx = _state["ctx"]
    if ctx is not None and not ctx.dev.lost:  # another request finished first
        return ctx
    return _adopt(t, dev)


def current():
    """The live context or None (never creates one)."""
    ctx = _state["ctx"]
    return ctx if ctx is not None and not ctx.dev.lost else None


def mark_lost(ctx):
    """Forget ``ctx``: its device is gone; the next call requests a new one."""
    with _lock:
        ctx.dev.lost = True
        if _state["ctx"] is ctx:
            _state["ctx"] = None

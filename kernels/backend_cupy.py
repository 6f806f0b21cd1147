"""The GPU backend: CuPy as the array module, the worker's device set-up, an allocator that zeroes
what it takes from the driver and counts it against the tenant's budget, and CuPy kernels
built from the generated CUDA C in cuda_source.

CuPy is optional: without it (or without a GPU) `array_module()` refuses with
E_OP_UNSUPPORTED and `init_device()` with E_LAYER_UNAVAILABLE.

Compiled kernels stay in memory: CUPY_CACHE_IN_MEMORY is set before CuPy is imported (CuPy
reads it at every compile), so a worker never writes a kernel cache file; CUDA_CACHE_DISABLE
is set before CUDA initialises, so the driver's PTX JIT never makes its cache directory
(~/.nv/ComputeCache: a mkdir and writes the GPU filter refuses).

Everything CUDA may open or map is touched in `init_device`, before the worker's seccomp
filter (which refuses new executable mappings, so a library loaded later would fail): each
library a plan can reach is loaded by running what reaches it (WARM_UP: cuBLAS, which links
cuBLASLt; cuSOLVER for Det; Thrust for sorts, TopK and Unique; CUB for reductions; NVRTC
with and without CuPy's headers), a CUDA graph is captured and replayed once (the graph
machinery initialised), and the pinned staging pool (kernels/staging.py, STAGING_BYTES) is
taken from the driver, so no pinned allocation happens once confined. rtd's ops use neither
cuRAND nor cuFFT (random ops draw on the host); tests/kernels/test_backend_cupy.py fails when
an op starts to call a library-backed CuPy function WARM_UP does not cover.

Memory hygiene: CUDA does not promise that memory fresh from cudaMalloc is clean, so a block
the driver hands over may hold what another tenant's process left on the device. Every
block the allocator takes from the driver is zeroed (cudaMemsetAsync on the current stream,
before anything else on that stream can use it) the first time it is handed out; blocks the
pools hand out again belonged to this worker already and are not zeroed again. Cost: one
memset at device bandwidth per byte taken from the driver (about 0.3 ms per GiB on an H100
class GPU), paid in the warm-up run, not per request once the pools hold their blocks.
"""
import os
import threading

import numpy as np

from rtd.errors import Code, RtdError

from .cuda_source import CTYPES, ROW_THREADS, ROW_TYPES, chain_body, layernorm_source, softmax_source
from .staging import StagingPool

STAGING_BYTES = 64 << 20   # pinned host memory for the graphed plans' inputs and outputs, taken at start
# What the warm-up runs, and the library-backed CuPy functions each covers (the ops call them as xp.<name>)
WARM_UP = {
    "cuBLAS (and cuBLASLt, which it links)": ("matmul", "dot", "tensordot", "einsum"),
    "cuSOLVER": ("linalg",),
    "Thrust": ("sort", "argsort", "partition", "argpartition", "unique"),
    "CUB": ("sum", "prod", "mean", "max", "min", "argmax", "argmin", "cumsum", "nonzero"),
}

os.environ["CUPY_CACHE_IN_MEMORY"] = "1"   # before the import: no kernel cache files, ever
os.environ["CUDA_CACHE_DISABLE"] = "1"     # before CUDA initialises: no PTX JIT cache directory either

try:  # imported at module import, never lazily: workers run under seccomp
    import cupy
    import cupyx   # CuPy's companion package (pinned host buffers), in the same wheel
except ImportError as e:  # CPU-only hosts
    cupy, cupyx, _IMPORT_ERROR = None, None, f"cupy not installed ({e.name})"
    OUT_OF_MEMORY: tuple = ()
else:
    _IMPORT_ERROR = None
    OUT_OF_MEMORY = (cupy.cuda.memory.OutOfMemoryError,)


def unavailable_reason() -> str | None:
    """Why device cuda cannot run here (None: it can). Counting devices initialises CUDA in the
    calling process, which its forks cannot inherit: a process that forks workers (the
    supervisor, the zygote) must not call this; a worker calls it after its fork."""
    if cupy is None:
        return _IMPORT_ERROR
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except cupy.cuda.runtime.CUDARuntimeError as e:
        return f"CUDA runtime: {e}"
    return None


class DeviceBudget:
    """The bytes this process holds from cudaMalloc through rtd's allocator, capped at `limit`
    (0: no cap). Every memory pool of the process (the default one and each CUDA graph's
    private one) takes its blocks through `malloc`, so the cap covers them all; CUDA's context,
    cuBLAS's workspace and loaded modules are outside it (the supervisor's GPU limit layer
    sees the whole process). A CUDA graph's pool keeps its blocks for its plan's life: past the
    cap, only the asking pool's cached blocks are freed before the refusal."""

    def __init__(self, limit: int):
        self.limit, self.held = limit, 0
        self._lock = threading.Lock()
        self._sizes: dict[int, int] = {}

    def malloc(self, size: int, device_id: int) -> int:
        with self._lock:
            if self.limit and self.held + size > self.limit:
                # the pool frees its cached blocks and retries once before the caller sees it
                raise cupy.cuda.memory.OutOfMemoryError(size, self.held, self.limit)
            self.held += size
        try:
            pointer = cupy.cuda.runtime.malloc(size)
        except BaseException:
            with self._lock:
                self.held -= size
            raise
        self._sizes[pointer] = size
        cupy.cuda.runtime.memsetAsync(pointer, 0, size, cupy.cuda.get_current_stream().ptr)
        return pointer

    def free(self, pointer: int, device_id: int) -> None:
        cupy.cuda.runtime.free(pointer)
        with self._lock:
            self.held -= self._sizes.pop(pointer)

    def new_pool(self):
        """A memory pool whose fresh blocks come zeroed and counted from this budget."""
        return cupy.cuda.MemoryPool(allocator=cupy.cuda.memory.PythonFunctionAllocator(self.malloc, self.free).malloc)


_budget: DeviceBudget | None = None   # set once per process by _set_up
_staging: StagingPool | None = None   # the pinned staging pool, taken by _start


def budget() -> DeviceBudget:
    return _budget


def _set_up(memory_limit: int) -> None:
    """The process's device, once (a later call only moves the cap); E_OP_UNSUPPORTED when it
    cannot start."""
    if _budget is not None:
        if memory_limit:
            _budget.limit = memory_limit
        return
    reason = unavailable_reason()
    if reason is not None:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"device cuda unavailable: {reason}")
    try:
        _start(memory_limit)
    except Exception as e:  # a driver or CUDA library that fails to start: one line, no traceback
        raise RtdError(Code.E_OP_UNSUPPORTED, f"device cuda unavailable: {type(e).__name__}: {str(e)[:160]}") from None


def _start(memory_limit: int) -> None:
    """Device 0 of those this process sees, its context, the budgeted zeroing pool, the pinned
    staging pool, and what needs files loaded now (WARM_UP, NVRTC and its builtins, CuPy's
    headers, a CUDA graph's capture and replay)."""
    global _budget, _staging
    cupy.cuda.Device(0).use()
    starting = DeviceBudget(memory_limit)
    cupy.cuda.set_allocator(starting.new_pool().malloc)
    a = cupy.ones((4, 4), np.float32)
    v = cupy.arange(8, dtype=np.float32)[::-1].copy()
    (a @ a).sum().get()                                   # cuBLAS, a CUB reduction
    cupy.einsum("ij,jk->ik", a, a)
    cupy.linalg.det(a + cupy.eye(4, dtype=np.float32))    # cuSOLVER
    for thrust in (cupy.sort, cupy.argsort, cupy.unique, cupy.cumsum):   # Thrust (CUB's scan for cumsum)
        thrust(v)
    cupy.partition(v, 3)
    softmax_rows(a, 1.0, a)                               # NVRTC on a header-free raw kernel
    cupy.add(a, a).get()                                  # a CuPy element-wise kernel: its headers through NVRTC
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        cupy.add(a, a, out=a)
        stream.end_capture().launch(stream=stream)        # the graph machinery, before the filter
    stream.synchronize()
    _staging = StagingPool(cupyx.empty_pinned((STAGING_BYTES,), np.uint8))
    cupy.cuda.get_current_stream().synchronize()
    _budget = starting   # set up: later calls find it


def init_device(device_ordinals: tuple[int, ...], memory_limit: int) -> None:
    """The worker's GPU set-up, after its fork and mounts and before its privileges drop and
    its seccomp filter: CUDA never survives a fork, so each worker creates its own context.

    `device_ordinals` are the host's GPU indices of the tenant's policy; the worker's mount
    namespace holds only their /dev/nvidiaN nodes, so CUDA numbers them from 0 in the worker
    and the context goes on device 0 (CUDA_VISIBLE_DEVICES is not what isolates them).
    `memory_limit` caps what rtd's allocator takes from the driver (a request past it fails
    the request with E_RESOURCE_EXHAUSTED)."""
    if not device_ordinals:
        raise RtdError(Code.E_POLICY_INVALID, "init_device needs the policy's GPU indices (limits.gpu_devices)")
    try:
        _set_up(memory_limit)
    except RtdError as e:
        raise RtdError(Code.E_LAYER_UNAVAILABLE, f"GPU {list(device_ordinals)}: {e.detail}") from None


def array_module(memory_limit: int | None = None):
    """CuPy on device 0, set up on first use (outside a worker: tests, benchmarks), its
    allocations capped at `memory_limit` bytes when given."""
    _set_up(memory_limit or 0)
    return cupy


def to_host(value):
    return cupy.asnumpy(value) if cupy is not None and isinstance(value, cupy.ndarray) else value


def pinned_empty(shape, dtype):
    """A host array in the pinned staging pool (copies from and to it are queued without the host
    waiting; keep the array itself while it is in use), or in ordinary memory once the pool is full."""
    array = _staging.take(shape, dtype) if _staging is not None else None
    return array if array is not None else np.empty(shape, dtype)


class Transfers:
    """A partitioned plan's copies (kernels/partition.py), on a stream of their own: an upload
    is queued there and the computing stream waits for it on the device, the host does not; a
    download is queued once the computing stream has produced the value, into pinned staging,
    and the host waits for it only where a host step reads it (AwaitHost)."""

    def __init__(self):
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def to_device(self, x):
        computing = cupy.cuda.get_current_stream()
        with self.stream:
            on_device = cupy.empty(x.shape, x.dtype)
            on_device.set(x, stream=self.stream)
        computing.wait_event(self.stream.record())
        return on_device

    def to_host(self, x):
        self.stream.wait_event(cupy.cuda.get_current_stream().record())
        host = pinned_empty(x.shape, x.dtype)
        x.get(stream=self.stream, out=host, blocking=False)
        return host, self.stream.record()   # pending until AwaitHost

    @staticmethod
    def await_host(pending):
        host, copied = pending
        copied.synchronize()
        return host


def chain_kernel(links: list, n_inputs: int, out_dtype):
    """A CuPy ElementwiseKernel computing the chain with broadcasting (inputs x0.., output out);
    None without CuPy, for a link without a CUDA form, or for half precision (CuPy's float16 is
    its own C type, not cuda_fp16's half that the expressions are written for)."""
    out_type = CTYPES.get(np.dtype(out_dtype))
    if cupy is None or not links or out_type in (None, "half"):
        return None
    body = chain_body(links, out_type)
    if body is None:
        return None
    params = ", ".join(f"T{i} x{i}" for i in range(n_inputs))
    return cupy.ElementwiseKernel(params, f"{out_type} out", body, "rtd_chain")


_row_kernels: dict = {}


def _row_kernel(kind: str, dtype):
    key = (kind, np.dtype(dtype))
    kernel = _row_kernels.get(key)
    if kernel is None:
        t = ROW_TYPES[np.dtype(dtype)]
        source = layernorm_source(dtype) if kind == "layernorm" else softmax_source(dtype)
        kernel = _row_kernels[key] = cupy.RawKernel(source, f"rtd_{kind}_{t}")
    return kernel


def rows_kernel_fits(x) -> bool:
    """Whether the row kernels take `x`: a C-contiguous float32/float64 array with rows."""
    return np.dtype(x.dtype) in ROW_TYPES and x.flags.c_contiguous and x.ndim >= 1 and x.size > 0


def layernorm_rows(x, gamma, beta, epsilon: float, out):
    """LayerNorm over the last axis of `x` into `out` (both C-contiguous, one dtype); gamma and
    beta one value per column."""
    cols = x.shape[-1]
    scalar = x.dtype.type
    _row_kernel("layernorm", x.dtype)((x.size // cols,), (ROW_THREADS,),
                                      (x, gamma, beta, out, np.int64(cols), scalar(epsilon)))
    return out


def softmax_rows(x, scale: float, out):
    """softmax(x * scale) over the last axis of `x` into `out` (both C-contiguous; out may be x)."""
    cols = x.shape[-1]
    _row_kernel("softmax", x.dtype)((x.size // cols,), (ROW_THREADS,), (x, out, np.int64(cols), x.dtype.type(scale)))
    return out

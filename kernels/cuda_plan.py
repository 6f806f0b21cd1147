"""A Plan run on a GPU: on its thread's own non-blocking stream, and, for a plan whose values all
have static shapes, as a CUDA graph captured once and replayed.

Streams and copies: every run goes on the calling thread's non-blocking stream (never the
legacy default stream, which would serialise with every other stream of the process).
A graphed plan stages inputs and outputs through pinned host buffers, so the upload, the
replay and the download are all queued without the host waiting, and the host waits once,
at the end; runs on different threads overlap one's copies with another's compute.

Graph capture: on a graphed plan's first run the plan runs once eagerly (compiling its
kernels and filling the graph's memory pool), then once under stream capture. The steps
allocate from a pool private to the graph, so the addresses baked into it are never handed
to anything else; blocks freed during capture are reused in the same order on every replay.
Inputs are copied into the graph's input buffers before a replay and the outputs read from
its output buffers, so one replay runs at a time per plan (a lock).

A partitioned plan (kernels/partition.py: ops the GPU backend lacks run on the host) takes its
feeds on the host, uploads what the device needs itself, and is never graphed (host steps
sit between device ones).

Fallback, documented: a plan with a value whose shape is not fixed by the signature
(NonZero, Unique, ..., and random ops, which lower.shapes never counts as fixed: a replay
would repeat their numbers), a plan whose capture fails because a
step reads a device value on the host (`Kernel.host()`: shapes, axes, counts given as
tensors; a synchronous copy is not capturable), and a profiled run all run the steps
eagerly on the stream: the same results, without the launch overhead the graph saves.
A failed capture is not retried for that plan.
"""
import threading

from . import backend_cupy
from .backend_cupy import cupy, pinned_empty

_streams = threading.local()


def thread_stream():
    """This thread's non-blocking stream, made on first use."""
    stream = getattr(_streams, "stream", None)
    if stream is None:
        stream = _streams.stream = cupy.cuda.Stream(non_blocking=True)
    return stream


class CudaPlan:
    """Wraps a Plan (same `run`, `stats`, `peak_bytes`); `static` names the values whose shape the
    signature fixes (lower_signature's)."""

    def __init__(self, plan, static: set):
        self.plan, self.peak_bytes = plan, plan.peak_bytes
        self.graphable = not plan.partitioned and all(o in static for node in plan.graph.nodes for o in node.outputs if o)
        self.graph = self.pool = None
        self.device_inputs, self.device_outputs, self.pinned_inputs, self.pinned_outputs = [], [], [], []
        self._lock = threading.Lock()

    def stats(self) -> dict:
        return dict(self.plan.stats(), cuda_graph=self.graph is not None)

    def run(self, feeds: list, profile=None) -> list:
        """Host (or device) feeds in, host arrays out."""
        stream = thread_stream()
        with stream:
            if profile is None and self.graphable:
                with self._lock:
                    if self.graph is None:
                        self._capture(feeds, stream)
                    if self.graph is not None:
                        return self._replay(feeds, stream)
            if self.graph is not None:   # eager, profiled: the capturing thread's buffers are the graph's
                with self._lock:
                    return self._download(self.plan.run([cupy.asarray(v) for v in feeds], profile), stream)
            if self.plan.partitioned:   # its feeds stay on the host: the plan uploads what the device reads
                return self._download(self.plan.run(list(feeds), profile), stream)
            return self._download(self.plan.run([cupy.asarray(v) for v in feeds], profile), stream)

    @staticmethod
    def _download(outputs: list, stream) -> list:
        # an output a kernel computed on the host (a shape, say) is already there
        host = [o.get(stream=stream, blocking=False) if isinstance(o, cupy.ndarray) else o for o in outputs]
        stream.synchronize()
        return host

    def _capture(self, feeds: list, stream) -> None:
        pool = backend_cupy.budget().new_pool()
        with cupy.cuda.using_allocator(pool.malloc):
            inputs = [cupy.empty(v.shape, v.dtype) for v in feeds]
            for buffer, value in zip(inputs, feeds):
                _copy_in(buffer, value, stream)
            self.plan.run(inputs)   # warm-up: kernels compiled, every block the steps take now in the pool
            stream.synchronize()
            stream.begin_capture()
            try:
                outputs = self.plan.run(inputs)
            except Exception:   # a step that reads the device on the host: not capturable
                outputs = None
            try:
                graph = stream.end_capture()
            except cupy.cuda.runtime.CUDARuntimeError:   # the capture was invalidated
                graph = None
        self.pool = pool   # kept either way: the plan's arena for this thread may live in it
        if outputs is None or graph is None or not all(isinstance(o, cupy.ndarray) for o in outputs):
            self.graphable = False   # not capturable, or an output the host computed (a replay would not renew it)
            return
        self.graph, self.device_inputs, self.device_outputs = graph, inputs, outputs
        self.pinned_inputs = [pinned_empty(v.shape, v.dtype) for v in inputs]
        self.pinned_outputs = [pinned_empty(v.shape, v.dtype) for v in outputs]

    def _replay(self, feeds: list, stream) -> list:
        for buffer, pinned, value in zip(self.device_inputs, self.pinned_inputs, feeds):
            if not isinstance(value, cupy.ndarray):
                pinned[...] = value   # staged: a copy from pinned memory is queued, not waited for
                value = pinned
            _copy_in(buffer, value, stream)
        self.graph.launch(stream=stream)
        for device, pinned in zip(self.device_outputs, self.pinned_outputs):
            device.get(stream=stream, out=pinned, blocking=False)
        stream.synchronize()
        return [pinned.copy() for pinned in self.pinned_outputs]   # the pinned buffers are the next replay's


def _copy_in(buffer, value, stream) -> None:
    """`value` (host or device) into the device `buffer`, queued on `stream`."""
    if isinstance(value, cupy.ndarray):
        cupy.copyto(buffer, value)   # on the current stream, which is `stream`
    else:
        buffer.set(value, stream=stream)

"""The model worker: runs INSIDE the sandbox and serves one instance of one model version
over one socket.

Preloaded into the zygote, so everything it needs is imported here at module import (a
confined child may no longer be able to open files). It receives the verified model bytes
as a memfd (and the package's signed files its external data may name, as memfds), parses
them only here — behind the sandbox — with the ONNX guard and the executor's op allow-list,
serves the weights as read-only views of those memfds, compiles and warms the model up, then
answers INFER frames in the order they arrive (the supervisor pipelines them): it decodes the
requests the supervisor passed on unread and builds their responses (infer.py). It never opens
a path and never sends anything but wire frames; its socket's EOF is its end.

In a GPU worker, a call its seccomp filter trapped while a frame was handled (sandbox/sigsys:
the call failed with EPERM) turns that frame's failure into E_SYSCALL_REFUSED naming the call:
the filter refused what the driver or CUDA asked, and the operator, not the model, must act.
"""
import os
import socket

import numpy as np
import threadpoolctl

import rtd.kernels
import rtd.kernels.ops
from rtd import dtypes, wire
from rtd.daemon.worker.infer import Serving
from rtd.daemon.worker.kserve_codec import Caps
from rtd.daemon.worker.staging import stage_part
from rtd.errors import Code, RtdError
from rtd.kernels import native
from rtd.kernels.ir import weights_from_views
from rtd.loader import onnx_guard
from rtd.sandbox import seccomp, sigsys
from rtd.signature import Signature, TensorSpec
# The BLAS libraries' thread controls, found now, in the zygote: finding them reads
# /proc/self/maps, which a confined worker cannot; setting them later is a plain call.
BLAS = threadpoolctl.ThreadpoolController()


def _spec(spec) -> TensorSpec:
    row = dtypes.of_numpy(spec.dtype) if spec.dtype is not None else None
    return TensorSpec(spec.name, row.wire if row else None, spec.shape)


def _signature(model) -> dict:
    return Signature(tuple(_spec(s) for s in model.inputs), tuple(_spec(s) for s in model.outputs)).to_json()


def _int(head: dict, key: str, low: int, high: int, default: int) -> int:
    value = head.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise RtdError(Code.E_WORKER_PROTOCOL, f"LOAD: {key} {value!r}")
    return value


def _warm_up(model) -> None:
    """One run on zeros so the first tenant request doesn't pay for lazy set-up, and an op
    the executor cannot run on the declared types refuses the load, not the first request.
    On a GPU a second run: the first traces the graph, the second runs the shape's plan,
    which compiles its fused kernels and captures its CUDA graph now, at load."""
    feeds = {}
    for spec in model.inputs:
        if spec.dtype is None or spec.shape is None:
            return
        feeds[spec.name] = np.zeros([d if isinstance(d, int) else 1 for d in spec.shape], spec.dtype)
    try:
        for _ in range(2 if model.device == "cuda" else 1):
            model.run(feeds)
    except RtdError as e:
        if e.code is Code.E_OP_UNSUPPORTED:
            raise
        # otherwise shapes guessed for symbolic dims may not fit the graph; real requests will say


class Worker:
    """Holds the one compiled model of this instance and what it serves it as."""

    def __init__(self, refusals: sigsys.Refusals):
        self.model, self.serving, self.refusals = None, None, refusals
        self.allowed_ops = set(rtd.kernels.ops.supported())

    def load(self, frame: wire.Frame) -> tuple[dict, dict]:
        names = frame.head.get("external", [])
        if (self.model is not None or not isinstance(names, list) or not all(isinstance(n, str) for n in names)
                or len(frame.fds) != 1 + len(names)):
            raise RtdError(Code.E_WORKER_PROTOCOL, "LOAD needs the model memfd and one memfd per external file, once")
        threads = _int(frame.head, "threads", 1, 4096, 1)
        name, version = frame.head.get("name", "model"), frame.head.get("version", "1")
        if not isinstance(name, str) or not isinstance(version, str):
            raise RtdError(Code.E_WORKER_PROTOCOL, "LOAD: name and version are strings")
        caps = Caps(max_bytes=_int(frame.head, "max_message_bytes", 1, 1 << 40, 1 << 28),
                    max_elements=_int(frame.head, "max_elements", 1, 1 << 40, 1 << 22))
        max_batch = _int(frame.head, "max_batch", 0, 1 << 20, 0)
        # One set of threads, the compiled kernels', as many as the cores the tenant was granted; BLAS
        # runs single-threaded inside them (its pool spins between calls and fought them for the cores).
        native.set_threads(threads)
        BLAS.limit(limits=1)
        device = frame.head.get("device", "cpu")   # "cuda" when the tenant's policy names GPUs
        if device not in ("cpu", "cuda"):
            raise RtdError(Code.E_WORKER_PROTOCOL, f"LOAD: device {device!r}")
        model_fd, *sibling_fds = frame.fds
        # the package's signed sibling files, which the guard lets external data name
        external = {name: wire.map_fd(fd, os.fstat(fd).st_size) for name, fd in zip(names, sibling_fds)}
        views = {}   # the main graph's weights, left in the sealed memfds (shared by every instance)
        proto = onnx_guard.check_model(wire.map_fd(model_fd, os.fstat(model_fd).st_size), allowed_ops=self.allowed_ops,
                                       external=external or None, views=views)
        weights, staged = weights_from_views(proto, views), None
        if "stages" in frame.head:   # one stage of a model cut into stages: its part of the graph
            proto, staged = stage_part(proto, weights, frame.head["stages"], _signature)
        # on "cuda" the device was set up before confinement (backend_cupy.init_device); where
        # CuPy or a GPU is missing this refuses with E_OP_UNSUPPORTED, one line
        model = rtd.kernels.compile_model(proto, device=device, weights=weights)
        del proto, external, views, weights
        if frame.head.get("warm_up", True):
            _warm_up(model)
        wire.release_freed_heap()   # the parsed protobuf is gone; its heap need not stay with the worker
        self.model = model
        self.serving = Serving(model, name, version, caps, caps.max_bytes, max_batch,
                               refuse=lambda code, detail: _failure(code, detail, self.refusals))
        return {**_signature(model), **({"stages": staged} if staged else {})}, {}

    def infer(self, frame: wire.Frame) -> tuple[dict, dict]:
        if self.serving is None:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, "no model loaded in this worker")
        return self.serving.answer(frame)

    def handle(self, frame: wire.Frame) -> tuple[dict, dict]:
        if frame.kind == wire.Kind.INFER:
            return self.infer(frame)
        if frame.kind == wire.Kind.LOAD:
            return self.load(frame)
        if frame.kind == wire.Kind.ECHO:
            return {}, frame.tensors
        if frame.kind == wire.Kind.PING:
            return {"loaded": self.model is not None, "kernel_threads": native.threads(),
                    "blas_threads": max((c.get_num_threads() for c in BLAS.lib_controllers), default=None)}, {}
        raise RtdError(Code.E_WORKER_PROTOCOL, f"unexpected frame kind {frame.kind.name}")


def _failure(code: Code, detail: str, refusals: sigsys.Refusals) -> dict:
    """An ERROR head: E_SYSCALL_REFUSED naming the calls the filter trapped meanwhile, if any."""
    trapped = refusals.new()
    if trapped:
        calls = ", ".join(dict.fromkeys(seccomp.describe(t.nr, t.args) for t in trapped))
        return {"code": Code.E_SYSCALL_REFUSED.name, "detail": f"{calls}; then {code.name}: {detail}"}
    return {"code": code.name, "detail": detail}


def _answer(sock, arena: wire.Arena, frame: wire.Frame, worker: Worker, refusals: sigsys.Refusals) -> None:
    refusals.new()   # what the filter trapped before this frame is not this frame's doing
    try:
        head, tensors = worker.handle(frame)
        try:
            wire.send(sock, wire.Kind.OK, frame.request_id, head, tensors, arena=arena)
        finally:   # a step's sealed tensors went with the frame: the supervisor holds them now
            for tensor in tensors.values():
                if isinstance(tensor, wire.FdTensor):
                    tensor.close()
    except RtdError as e:
        wire.send(sock, wire.Kind.ERROR, frame.request_id, _failure(e.code, e.detail, refusals))
    except MemoryError:
        wire.send(sock, wire.Kind.ERROR, frame.request_id, _failure(Code.E_RESOURCE_EXHAUSTED, "allocation failed", refusals))
    except Exception as e:  # a bug or an executor failure on this input: answer, keep serving
        wire.send(sock, wire.Kind.ERROR, frame.request_id, _failure(Code.E_INTERNAL, f"{type(e).__name__}: {e}"[:200], refusals))


def serve(sock, *args) -> None:
    """The worker's main loop: frames in, one answer each, in order, until the supervisor hangs up."""
    if not isinstance(sock, socket.socket):
        sock = socket.socket(fileno=sock)
    refusals = sigsys.Refusals()
    worker, arena = Worker(refusals), wire.Arena()
    reader = wire.Reader(sock, wire.PeerArena())
    while True:
        try:
            frame = reader.recv()
        except EOFError:
            return
        try:
            arena.release(frame.head.pop("released", []))
            _answer(sock, arena, frame, worker, refusals)
        finally:
            for fd in frame.fds:
                os.close(fd)

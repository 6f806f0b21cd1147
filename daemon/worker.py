"""The tenant worker: runs INSIDE the sandbox and serves one tenant's models over one socket.

Preloaded into the zygote, so everything it needs is imported here at module import (a
confined child may no longer be able to open files). It receives verified model bytes as
a memfd, parses them only here — behind the sandbox — with the ONNX guard and the
executor's op allow-list, compiles and warms the model up, then answers INFER frames.
It never opens a path and never sends anything but frames.
"""
import os
import socket

import numpy as np

import rtd.kernels
import rtd.kernels.ops
from rtd.daemon import frames
from rtd.daemon.frames import Kind
from rtd.errors import Code, RtdError
from rtd.loader import onnx_guard

MAX_DETAIL = 300


def _spec_json(spec) -> dict:
    shape = [d if isinstance(d, int) else -1 for d in spec.shape]
    return {"name": spec.name, "dtype": spec.dtype.name if spec.dtype is not None else None, "shape": shape}


def _warm_up(model) -> None:
    """One run on zeros so the first tenant request doesn't pay for lazy set-up."""
    feeds = {}
    for spec in model.inputs:
        if spec.dtype is None:
            return
        feeds[spec.name] = np.zeros([d if isinstance(d, int) else 1 for d in spec.shape], spec.dtype)
    try:
        model.run(feeds)
    except RtdError:
        pass  # shapes guessed for symbolic dims may not fit the graph; real requests will say


class Worker:
    """Holds the compiled models of one tenant, keyed by the supervisor's model key."""

    def __init__(self):
        self.models = {}
        self.allowed_ops = set(rtd.kernels.ops.supported())

    def load(self, frame: frames.Frame) -> tuple[dict, dict]:
        key = frame.head.get("key")
        if not isinstance(key, str) or len(frame.fds) != 1:
            raise RtdError(Code.E_WORKER_PROTOCOL, "LOAD needs a key and one model memfd")
        size = os.fstat(frame.fds[0]).st_size
        data = frames.map_fd(frame.fds[0], size)
        proto = onnx_guard.check_model(data, allowed_ops=self.allowed_ops)
        model = rtd.kernels.compile_model(proto)
        if frame.head.get("warm_up", True):
            _warm_up(model)
        self.models[key] = model
        return {"inputs": [_spec_json(s) for s in model.inputs],
                "outputs": [_spec_json(s) for s in model.outputs]}, {}

    def infer(self, frame: frames.Frame) -> tuple[dict, dict]:
        model = self.models.get(frame.head.get("key"))
        if model is None:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, "model not loaded in this worker")
        results = model.run(frame.tensors)
        wanted = frame.head.get("outputs")
        if wanted:
            results = {name: results[name] for name in wanted if name in results}
        return {}, {name: np.asarray(v) for name, v in results.items()}

    def unload(self, frame: frames.Frame) -> tuple[dict, dict]:
        self.models.pop(frame.head.get("key"), None)
        return {}, {}

    def handle(self, frame: frames.Frame) -> tuple[dict, dict]:
        if frame.kind == Kind.LOAD:
            return self.load(frame)
        if frame.kind == Kind.INFER:
            return self.infer(frame)
        if frame.kind == Kind.UNLOAD:
            return self.unload(frame)
        if frame.kind == Kind.ECHO:
            return {}, frame.tensors
        if frame.kind == Kind.PING:
            return {"models": len(self.models)}, {}
        raise RtdError(Code.E_WORKER_PROTOCOL, f"unexpected frame kind {frame.kind.name}")


def serve(sock, *args) -> None:
    """The worker's main loop: one frame in, one frame out, until the supervisor hangs up."""
    if not isinstance(sock, socket.socket):
        sock = socket.socket(fileno=sock)
    worker, arena, peer = Worker(), frames.Arena(), frames.PeerArena()
    while True:
        try:
            frame = frames.recv(sock, peer)
            arena.release(frame.head.pop("released", []))
        except EOFError:
            return
        try:
            try:
                head, tensors = worker.handle(frame)
                frames.send(sock, Kind.OK, frame.request_id, head, tensors, arena=arena)
            except RtdError as e:
                frames.send(sock, Kind.ERROR, frame.request_id, {"code": e.code.name, "detail": e.detail[:MAX_DETAIL]})
            except MemoryError:
                frames.send(sock, Kind.ERROR, frame.request_id, {"code": Code.E_RESOURCE_EXHAUSTED.name, "detail": "allocation failed"})
            except Exception as e:  # a bug or an executor failure on this input: answer, keep serving
                detail = f"{type(e).__name__}: {e}"[:MAX_DETAIL]
                frames.send(sock, Kind.ERROR, frame.request_id, {"code": Code.E_INTERNAL.name, "detail": detail})
        finally:
            for fd in frame.fds:
                os.close(fd)

"""An upload's package files, found where they lie in its spool: never in the supervisor's memory.

The transport spools a load request to an unlinked file of the state directory as it arrives
(fronts/kserve.py `spool`). From there:

- gRPC: rtd.load_request walks the protobuf in place (tags and lengths only, like an inference
  request's header); each `file:` parameter is a FileExtent of the spool, copied into its memfd
  by the kernel when the intake seals it.
- REST: the JSON and its base64 are the tenant's payload, and decoding them is work in
  proportion to it, so the supervisor does none of it: the upload decoder
  (daemon/worker/upload.py), a confined process of the tenant's, spawned by the zygote like a
  worker (in the tenant's cgroups, with its uid, filter and namespaces, and no GPU), gets the
  spool read-only and answers one memfd per file. The supervisor takes each over — seals it,
  checks its size, hashes it (loader.sealed.seal_memfd) — and treats everything the decoder says
  as it treats a worker's answer: bounded, checked, its refusal the tenant's own. A body no
  bigger than a control call's (SMALL_BODY: a load by name, `{}`) is read in place
  by the same lexer, as a control call's JSON is.

An Upload holds a duplicate of the spool's fd (made on the event loop, so the files stay readable
whatever becomes of the call) and the decoded memfds; `close()` releases them; the spool's
package_bytes charge is where the package's bytes are taken from (supervisor.load).
"""
import os
import socket

from rtd import load_request, wire
from rtd.daemon.worker.upload import ENTRY as DECODER_ENTRY
from rtd.daemon.worker.upload import read_load_request
from rtd.errors import Code, RtdError
from rtd.loader.sealed import FileExtent, SealedFile, seal_memfd

__all__ = ["DECODER_ENTRY", "Upload", "from_grpc", "from_rest"]
SMALL_BODY = 1 << 16   # read in place, as a control call's JSON is (transport CONTROL_MESSAGE_BYTES)


class DecodedFile:
    """A file the decoder wrote into a memfd; sealed, sized and hashed here when the intake takes it."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size

    def __len__(self) -> int:
        return self.size

    def seal(self, name: str, cap: int, code: Code) -> SealedFile:
        if self.size > cap:
            raise RtdError(code, f"{name} is {self.size} bytes, over the {cap}-byte cap")
        fd, self.fd = self.fd, -1
        return seal_memfd(name, fd, self.size, Code.E_WORKER_PROTOCOL)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Upload(dict):
    """{package path: Extent} of one load request, the `config` it carried, and its spool's charge."""

    def __init__(self, spool):
        super().__init__()
        self.fd, self.size, self.charge, self.config = os.dup(spool.fd), len(spool), spool.charge, None

    def add(self, path: str, extent) -> None:
        if path in self:
            extent.close()
            raise RtdError(Code.E_REQUEST_INVALID, f"{path[:100]!r} is given twice")
        self[path] = extent

    def close(self) -> None:
        """The spool's duplicate and every memfd not yet taken over."""
        for extent in self.values():
            extent.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def from_grpc(spool) -> tuple[str, Upload]:
    """(model name, files and config) of a spooled RepositoryModelLoadRequest (bounded: on the loop)."""
    upload = Upload(spool)
    try:
        head = load_request.scan(upload.fd, upload.size)
        upload.config = head.config
        for path, (offset, length) in head.files.items():
            upload.add(path, FileExtent(upload.fd, offset, length))
    except BaseException:
        upload.close()
        raise
    return head.model_name, upload


def from_rest(upload: Upload, spawn, caps: dict, timeout: float) -> Upload:
    """Blocking (on the tenant's thread): the files and config of a spooled REST load request in
    `upload` (made on the loop by Upload(spool)), read by the confined decoder `spawn(sock)` starts,
    or in place when it is no bigger than a control call's body. Closes `upload` when it fails."""
    try:
        if upload.size <= SMALL_BODY:
            files, upload.config = read_load_request(upload.fd, upload.size, caps)
            for f in files:
                upload.add(f.path, DecodedFile(f.fd, f.size))
        else:
            _decode(upload, spawn, caps, timeout)
    except BaseException:
        upload.close()
        raise
    return upload


def _decode(upload: Upload, spawn, caps: dict, timeout: float) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    handle = None
    try:
        try:
            handle = spawn(theirs)
        finally:
            theirs.close()
        readable = os.open(f"/proc/self/fd/{upload.fd}", os.O_RDONLY | os.O_CLOEXEC)   # the decoder only reads it
        try:
            wire.send(ours, wire.Kind.DECODE, head={"size": upload.size, **caps}, fds=[readable])
        finally:
            os.close(readable)
        ours.settimeout(timeout)
        try:
            frame = wire.Reader(ours, max_head=1 << 21, max_body=0).recv()
        except socket.timeout:
            handle.kill()
            raise RtdError(Code.E_DEADLINE, f"the upload decoder took longer than {timeout:g} s") from None
        except (EOFError, OSError):
            status = handle.wait(5)
            if status is not None and status.layer:
                raise RtdError(Code.E_SANDBOX_KILLED, f"the upload decoder: {status.layer} layer ({status.reason})") from None
            how = f"exit {status.code}, signal {status.signal}" if status is not None else "still running"
            raise RtdError(Code.E_WORKER_CRASHED, f"the upload decoder ended without an answer ({how})") from None
        _take(upload, frame, caps)
    finally:
        ours.close()
        if handle is not None and handle.wait(2) is None:
            handle.kill()
            handle.wait(5)


def _take(upload: Upload, frame: wire.Frame, caps: dict) -> None:
    """The decoder's answer, checked as any confined process's is; its memfds become the upload's."""
    fds = list(frame.fds)
    try:
        if frame.kind == wire.Kind.ERROR:
            code = Code.__members__.get(str(frame.head.get("code")), Code.E_WORKER_PROTOCOL)
            raise RtdError(code, str(frame.head.get("detail", ""))[:200])
        files, config = frame.head.get("files"), frame.head.get("config")
        if (frame.kind != wire.Kind.OK or not isinstance(files, list) or len(files) != len(fds)
                or len(files) > caps["max_files"] or not (config is None or isinstance(config, str))
                or not all(isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) and type(f[1]) is int
                           and 0 <= f[1] <= caps["max_file_bytes"] for f in files)):
            raise RtdError(Code.E_WORKER_PROTOCOL, "the upload decoder's answer is malformed")
        upload.config = config
        while fds:
            path, size = files[len(files) - len(fds)]
            upload.add(path, DecodedFile(fds.pop(0), size))
    finally:
        for fd in fds:
            os.close(fd)

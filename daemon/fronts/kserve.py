"""What the two KServe v2 fronts (gRPC in grpc.py, REST in rest.py) share: the server's
identity and extensions, the public text of a refusal, an upload's spool and its load (the
request itself is read by upload.py), tritonclient's timeout,
and the repository index and statistics as Triton lays them out. Each front only moves these between its own encoding and the Supervisor API."""
import errno
import os
import time

from rtd.daemon.transport.contract import BufferBody, SpooledBody
from rtd.errors import Code, RtdError, storage_error

SERVER_NAME = "rtd"
MEMFD_BODY_BYTES = 1 << 16   # inference bodies at least this big go to a memfd (passed to the worker as it is)
SPOOL_RESERVE = 4    # uploads may not spool into the last quarter of the state directory's disk (256 MiB at most)
EXTENSIONS = ["model_repository", "model_configuration", "binary_tensor_data"]


def describe(error: RtdError) -> str:
    """The public message of a refusal; an internal failure's details stay in the log."""
    if error.code == Code.E_INTERNAL:
        return f"{Code.E_INTERNAL.name}: Internal server error"
    return str(error)


async def load(supervisor, tenant, name: str, upload) -> None:
    """Load what a spooled load request names (serving/uploads.py found it): its files, or with none the
    model of the tenant's repository; the spool's fd is closed once the intake is done with it."""
    if not upload:
        upload.close()
        await supervisor.load(tenant, name, None, upload.config)
        return
    await supervisor.load(tenant, name, upload, upload.config, upload=upload)


def deadline_of(deadline: float | None, timeout_us: int) -> float | None:
    """The earlier of a transport deadline and tritonclient's `timeout` parameter (microseconds)."""
    if timeout_us <= 0:
        return deadline
    until = time.monotonic() + timeout_us / 1e6
    return min(deadline, until) if deadline else until


async def repository_index(supervisor, tenant, ready_only: bool) -> list[dict]:
    """A tenant's models as RepositoryIndex lists them: name, version, state, reason."""
    return [{key: m[key] for key in ("name", "version", "state", "reason")} for m in await supervisor.models(tenant)
            if not ready_only or m["state"] == "READY"]


def model_statistics(supervisor, tenant, name: str, version: str) -> list[dict]:
    """ModelStatistics of a tenant's serving versions, in Triton's JSON form (REST's body; the
    gRPC message is parsed from it)."""
    def duration(count: int, ns: int) -> dict:
        return {"count": count, "ns": ns}
    return [{"name": model, "version": served, "last_inference": s.last_inference_ms, "inference_count": s.count,
             "execution_count": s.exec_count, "inference_stats": {
                 "success": duration(s.success, s.request_ns), "fail": duration(sum(s.failure.values()), s.fail_ns),
                 "queue": duration(s.success, s.queue_ns), "compute_input": duration(s.success, s.input_ns),
                 "compute_infer": duration(s.success, s.infer_ns), "compute_output": duration(s.success, s.output_ns)}}
            for model, served, s in supervisor.statistics(tenant, name, version)]


class UploadSpool(SpooledBody):
    """A spooled upload and its package_bytes charge (a load takes its package's share of it)."""

    def __init__(self, fd: int, expected: int, charge):
        super().__init__(fd, expected)
        self.charge = charge


def upload_spool(supervisor, who: str, length: int):
    """Where an upload's body goes as it arrives: an unlinked file in the state directory's
    spool/ (nothing survives a crash), its whole length allocated at once (so a full disk
    refuses the upload now, not half way), charged to the tenant's package budget until the
    call ends, and refused while it would leave less than SPOOL_RESERVE of the disk to the
    registry's writes. (SpooledBody, its charge)."""
    charge = supervisor.ledger.take(who, "package_bytes", length)
    directory = os.path.join(supervisor.config.state_dir, "spool")
    fd = -1
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        disk = os.statvfs(directory)
        reserve = min(disk.f_blocks * disk.f_frsize // SPOOL_RESERVE, 256 << 20)
        if disk.f_bavail * disk.f_frsize - length < reserve:
            raise OSError(errno.ENOSPC, f"{length} bytes would leave less than {reserve} bytes free, "
                                        "kept for the registry's writes")   # said, as df still shows room
        fd = os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        if length:
            os.posix_fallocate(fd, 0, length)
    except OSError as e:
        charge.release()
        if fd >= 0:
            os.close(fd)
        raise storage_error(e.errno, "spooling an upload", e.strerror) from None
    return UploadSpool(fd, length, charge), charge


def request_body(ledger, who: str, length: int):
    """Where an inference request's body goes as it arrives, charged as the tenant's request
    bytes: a small one to a buffer, a large one to a memfd of its own that the worker maps as
    it is (the supervisor never maps more of it than the header it reads). (body, its charge)."""
    charge = ledger.take(who, "request_bytes", length)
    if length < MEMFD_BODY_BYTES:
        return BufferBody(), charge
    try:
        return SpooledBody.memfd(length), charge
    except OSError as e:
        charge.release()
        raise RtdError(Code.E_RESOURCE_EXHAUSTED, f"a memfd for the request body: {e.strerror}") from None

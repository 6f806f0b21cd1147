"""The one vocabulary of refusals: every layer raises RtdError(Code.X, detail).

Each code carries a stable name, a one-line human reason and the gRPC status name it
maps to, so transports and metrics translate a refusal without tables of their own.
This module imports nothing from rtd and nothing heavy: every layer may import it.
"""
import enum
import errno
import os

MAX_DETAIL = 200   # details may echo client input: bounded so a status always fits gRPC's metadata


class Code(enum.Enum):
    def __new__(cls, reason: str, status: str):
        member = object.__new__(cls)
        member._value_ = len(cls.__members__)
        member.reason, member.status = reason, status
        return member

    # package integrity and signatures (loader)
    E_DIGEST_MISMATCH = "a file's SHA-256 does not match the signed manifest", "INVALID_ARGUMENT"
    E_MANIFEST_INVALID = "checksum.sha256 is not a well-formed sorted sha256sum manifest", "INVALID_ARGUMENT"
    E_SIG_MISSING = "the package carries no signature", "INVALID_ARGUMENT"
    E_SIG_INVALID = "the signature does not verify over the manifest", "INVALID_ARGUMENT"
    E_KEY_UNTRUSTED = "the package is not signed by a key this tenant trusts", "PERMISSION_DENIED"
    E_KEY_REVOKED = "the signing key is on the tenant's revocation list", "PERMISSION_DENIED"
    E_ALG_UNSUPPORTED = "only RSA-PSS/SHA-256/MGF1-SHA256, salt 32, keys of 3072 bits or more are accepted", "INVALID_ARGUMENT"
    E_FILE_UNLISTED = "the package holds a file the manifest does not list", "INVALID_ARGUMENT"
    E_FILE_MISSING = "a file the layout or manifest requires is absent", "INVALID_ARGUMENT"
    E_BINDING_MISMATCH = "the signed name or version differs from where the package sits", "INVALID_ARGUMENT"
    E_ROLLBACK = "the package's counter is not above the last one loaded for this model", "FAILED_PRECONDITION"
    E_EXPIRED = "the package's signed expiry has passed", "FAILED_PRECONDITION"
    E_VERSION_UNSUPPORTED = "the package needs a newer rtd", "FAILED_PRECONDITION"
    E_METADATA_INVALID = "metadata.json is not valid bounded JSON of the expected shape", "INVALID_ARGUMENT"
    E_CONFIG_INVALID = "config.pbtxt is not a valid model configuration", "INVALID_ARGUMENT"
    E_ENSEMBLE_INVALID = "the ensemble's steps or maps do not fit the tenant's models", "INVALID_ARGUMENT"
    # safe intake (loader)
    E_PATH_UNSAFE = "a path is absolute, escapes its directory or is not clean UTF-8", "INVALID_ARGUMENT"
    E_LINK_FORBIDDEN = "symlinks and hardlinks are refused", "INVALID_ARGUMENT"
    E_SPECIAL_FILE = "only regular files are accepted", "INVALID_ARGUMENT"
    E_ARCHIVE_LIMIT = "the archive exceeds a member, size or compression-ratio cap", "INVALID_ARGUMENT"
    E_ARCHIVE_INVALID = "the archive is malformed or holds duplicate members", "INVALID_ARGUMENT"
    E_FORMAT_FORBIDDEN = "the file is pickle or another executable format, refused by content", "INVALID_ARGUMENT"
    # ONNX guards (loader, run inside the worker)
    E_ONNX_PARSE = "the model is not a parseable ONNX protobuf", "INVALID_ARGUMENT"
    E_ONNX_LIMIT = "the model exceeds a size, node, function or nesting cap", "INVALID_ARGUMENT"
    E_ONNX_INVALID = "a tensor's bytes do not match its dims and type", "INVALID_ARGUMENT"
    E_ONNX_EXTERNAL_DATA = "external tensor data is refused or malformed", "INVALID_ARGUMENT"
    E_ONNX_OP_FORBIDDEN = "the model uses a domain or op outside the allow-list", "INVALID_ARGUMENT"
    # executor (kernels)
    E_MODEL_INVALID = "the model graph is malformed (dangling names, missing attributes, bad types)", "INVALID_ARGUMENT"
    E_OP_UNSUPPORTED = "the executor has no kernel for an op at this opset", "INVALID_ARGUMENT"
    E_INPUT_INVALID = "an input's name, dtype or shape does not match the model", "INVALID_ARGUMENT"
    E_RESOURCE_EXHAUSTED = "more memory or processes are needed than a limit allows", "RESOURCE_EXHAUSTED"
    # confinement (sandbox)
    E_POLICY_INVALID = "the sandbox policy has unknown keys, wrong types or impossible values", "INVALID_ARGUMENT"
    E_LAYER_UNAVAILABLE = "a mandatory confinement layer is not available on this host", "FAILED_PRECONDITION"
    E_CONTAINMENT = "a confinement layer failed to apply", "INTERNAL"
    E_SANDBOX_KILLED = "the confined process was killed by a confinement layer", "UNAVAILABLE"
    E_ARCH_UNSUPPORTED = "unsupported architecture: rtd knows the syscall numbers of x86_64 and aarch64 only", "FAILED_PRECONDITION"
    E_SYSCALL_REFUSED = "the GPU worker's seccomp filter refused a call the driver or CUDA made: the filter, not the model, failed", "INTERNAL"
    E_GPU_UNATTRIBUTED = "NVML cannot attribute GPU memory to rtd's workers, so no GPU budget is enforced", "FAILED_PRECONDITION"
    # serving (daemon)
    E_UNAUTHENTICATED = "missing or unknown credentials", "UNAUTHENTICATED"
    E_MODEL_NOT_FOUND = "no such model for this tenant", "NOT_FOUND"
    E_MODEL_UNAVAILABLE = "the model is not ready", "UNAVAILABLE"
    E_MODEL_FAILED = "the model crashed its worker repeatedly and is marked failed", "FAILED_PRECONDITION"
    E_REQUEST_INVALID = "the request is malformed", "INVALID_ARGUMENT"
    E_BUDGET_EXCEEDED = "a budget of the tenant or the supervisor is spent", "RESOURCE_EXHAUSTED"
    E_MESSAGE_TOO_LARGE = "the message exceeds max_message_bytes", "RESOURCE_EXHAUSTED"
    E_STORAGE_FULL = "the state directory has no room left", "RESOURCE_EXHAUSTED"
    E_DEADLINE = "the request's deadline passed", "DEADLINE_EXCEEDED"
    E_WORKER_CRASHED = "the tenant's worker died", "UNAVAILABLE"
    E_WORKER_PROTOCOL = "the worker sent a malformed reply and was killed", "UNAVAILABLE"
    E_UNIMPLEMENTED = "this call is not offered by rtd", "UNIMPLEMENTED"
    E_STATE_LOCKED = "another rtd serves this state directory", "FAILED_PRECONDITION"
    E_STATE_DAMAGED = "a state file of this tenant and its last good copy are damaged or gone: loads are refused until an operator repairs it", "FAILED_PRECONDITION"
    E_REPOSITORY_UNAVAILABLE = "the tenant's model repository cannot be read or did not answer in time", "UNAVAILABLE"
    E_LISTEN_FAILED = "an address to listen on could not be bound", "UNAVAILABLE"
    # the operator's side (rtctl, rtd serve)
    E_USAGE = "the command line is not valid", "INVALID_ARGUMENT"
    E_RTD_CONFIG_INVALID = "the daemon's configuration is refused", "FAILED_PRECONDITION"
    E_DAEMON_UNREACHABLE = "the daemon is not reachable", "UNAVAILABLE"
    E_STATE_MISSING = "no rtd state directory there", "FAILED_PRECONDITION"
    E_NOT_A_PACKAGE = "not a package: a signed model directory or .tar/.tar.gz is expected", "INVALID_ARGUMENT"
    E_PATH_NOT_FOUND = "no such file or directory", "NOT_FOUND"
    E_PATH_EXISTS = "the file exists and is never overwritten", "ALREADY_EXISTS"
    E_PERMISSION_DENIED = "the file system refused access", "PERMISSION_DENIED"
    E_IO = "a file could not be read or written", "INTERNAL"
    E_INTERRUPTED = "interrupted", "CANCELLED"
    E_INTERNAL = "internal error", "INTERNAL"


class RtdError(Exception):
    """A refusal: a stable code, its one-line reason, and what in particular went wrong."""

    def __init__(self, code: Code, detail: str = ""):
        self.code = code
        self.detail = detail if len(detail) <= MAX_DETAIL else detail[: MAX_DETAIL - 1] + "…"
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.code.name}: {self.code.reason}" + (f" ({self.detail})" if self.detail else "")

    def to_json(self) -> dict:
        return {"code": self.code.name, "reason": self.code.reason, "detail": self.detail}


def storage_error(number: int, what: str, why: str | None = None) -> RtdError:
    """A write the system refused (`number` its errno): E_STORAGE_FULL where the disk or a quota is full, else
    E_INTERNAL, saying what was being written and why (the errno's own words unless `why`)."""
    code = Code.E_STORAGE_FULL if number in (errno.ENOSPC, errno.EDQUOT) else Code.E_INTERNAL
    return RtdError(code, f"{what}: {why or os.strerror(number)}")

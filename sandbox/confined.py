"""run_confined: compute fn(*args) in a freshly confined child with every layer of the
policy and return its JSON-safe result. The child is forked from the caller (which must
be root and should have no threads) and answers over a socketpair in length-prefixed
JSON; nothing is ever unpickled."""
import itertools
import json
import os
import signal
import socket
import struct
import time

from rtd.errors import Code, RtdError
from rtd.sandbox import contain
from rtd.sandbox.policy import TenantIdentity, load_policy

DEFAULT_IDENTITY = TenantIdentity(name="run-confined", uid=60999, gid=60999)
MAX_REPLY = 64 << 20
_counter = itertools.count()


class SandboxKilled(Exception):
    """The confined child died by a signal; `layer` names the confinement layer if one did it."""

    def __init__(self, signal: int, layer: str | None, reason: str):
        self.signal, self.layer, self.reason = signal, layer, reason
        super().__init__(f"{Code.E_SANDBOX_KILLED.name}: {reason} (signal {signal}, layer {layer})")


class ConfinedError(Exception):
    """fn raised inside the sandbox; carries the exception's type name and message."""

    def __init__(self, type_name: str, message: str):
        self.type_name, self.message = type_name, message
        super().__init__(f"{type_name}: {message}")


def send_json(sock: socket.socket, obj):
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("<I", len(data)) + data)


def recv_json(sock: socket.socket):
    """One length-prefixed JSON message, or None at EOF."""
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf
    head = exact(4)
    if head is None:
        return None
    (size,) = struct.unpack("<I", head)
    if size > MAX_REPLY:
        raise RtdError(Code.E_WORKER_PROTOCOL, f"reply of {size} bytes exceeds {MAX_REPLY}")
    body = exact(size)
    return None if body is None else json.loads(body)


def _answer(fn):
    def target(sock, *args):
        try:
            reply = {"ok": True, "result": fn(*args)}
            data = json.dumps(reply)
        except RtdError as e:
            data = json.dumps({"ok": False, "rtd": e.code.name, "detail": e.detail})
        except Exception as e:   # reported to the caller, who re-raises it as ConfinedError
            data = json.dumps({"ok": False, "type": type(e).__name__, "message": str(e)})
        send_json(sock, json.loads(data))
    return target


def run_confined(fn, *args, policy=None, identity: TenantIdentity | None = None, timeout: float = 60.0):
    """fn(*args) in a fresh confined child; its JSON-safe result, SandboxKilled if a signal ended
    it, ConfinedError/RtdError if fn raised, RtdError(E_CONTAINMENT...) if confinement failed."""
    policy = policy or load_policy()
    identity = identity or DEFAULT_IDENTITY
    worker = f"rc{os.getpid()}-{next(_counter)}"
    cg, layers, bpf = contain.prepare(policy, identity, worker)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    helper, reports, killed, status = None, None, False, None
    try:
        spec = contain.Spec(policy, identity, cg.procs_files, layers, bpf)
        helper, report_fd = contain.launch(spec, contain.Job(_answer(fn), args, theirs.fileno()))
        theirs.close()
        reports = contain.Reports(report_fd)
        deadline = time.monotonic() + timeout
        reports.expect_ready(timeout)
        ours.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            reply = recv_json(ours)
        except socket.timeout:
            reply, killed = None, True
            cg.kill()
        reports.drain(max(0.5, deadline - time.monotonic()))
        status = contain.reap(helper, 5.0)
        final = contain.exit_status(*contain.ended(status, reports), cg.oom_kills(), killed,
                                     policy.limits.cpu_seconds)
    finally:
        theirs.close()
        ours.close()
        if helper is not None and status is None:
            cg.kill()
            os.kill(helper, signal.SIGKILL)
            contain.reap(helper, 5.0)
        if reports is not None:
            reports.close()
        cg.remove()
    if killed:
        raise SandboxKilled(signal.SIGKILL, None, f"wall-clock timeout after {timeout} s")
    if final.signal is not None:
        raise SandboxKilled(final.signal, final.layer, final.reason)
    if reply is None:
        raise RtdError(Code.E_WORKER_CRASHED, f"confined child gave no reply ({final.reason})")
    if reply["ok"]:
        return reply["result"]
    if "rtd" in reply:
        raise RtdError(Code[reply["rtd"]], reply["detail"])
    raise ConfinedError(reply["type"], reply["message"])

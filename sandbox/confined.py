"""run_confined: compute fn(*args) in a freshly confined child with every layer of the
policy and return its JSON-safe result. The child is forked from the caller (which must
be root and should have no threads) and answers with one Kind.RESULT frame, the result in
its head (heads are at most wire.MAX_HEAD, 1 MiB); nothing is ever unpickled, and a reply
of any other shape is E_WORKER_PROTOCOL. Its cgroups are those of an rtd instance of its
own, rc<pid>, apart from any daemon's."""
import itertools
import os
import signal
import socket
import time

from rtd import wire
from rtd.errors import Code, RtdError
from rtd.sandbox import channel, contain, gpu
from rtd.sandbox.policy import TenantIdentity, load_policy
from rtd.wire import Kind

DEFAULT_IDENTITY = TenantIdentity(name="run-confined", uid=60999, gid=60999)
REPLIES = ({"ok": bool, "result": (dict, list, str, int, float, bool, type(None))},
           {"ok": bool, "rtd": str, "detail": str}, {"ok": bool, "type": str, "message": str})
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


def _answer(fn):
    def target(sock, *args):
        try:   # encoded here, so a result that is not JSON-safe or too big is fn's error
            reply = wire.encode(Kind.RESULT, 0, {"ok": True, "result": fn(*args)})
        except RtdError as e:
            reply = wire.encode(Kind.RESULT, 0, {"ok": False, "rtd": e.code.name, "detail": e.detail})
        except Exception as e:   # reported to the caller, who re-raises it as ConfinedError
            reply = wire.encode(Kind.RESULT, 0, {"ok": False, "type": type(e).__name__, "message": str(e)[:4096]})
        wire.write(sock, reply)
    return target


def _receive_reply(sock: socket.socket) -> dict | None:
    """The child's RESULT head, or None when it closed the socket without one."""
    reader = wire.Reader(sock, max_body=0)   # the result travels in the head
    try:
        frame = reader.recv()
    except EOFError:
        return None
    finally:
        reader.close()
    try:
        reply = channel.expect(frame, Kind.RESULT, "result")
    except RtdError as e:
        raise RtdError(Code.E_WORKER_PROTOCOL, e.detail) from None
    if (not any(channel.fits(reply, shape) for shape in REPLIES) or reply["ok"] is not ("result" in reply)
            or reply.get("rtd", "E_INTERNAL") not in Code.__members__):
        raise RtdError(Code.E_WORKER_PROTOCOL, f"malformed result: {reply!r:.80}")
    return reply


def run_confined(fn, *args, policy=None, identity: TenantIdentity | None = None, timeout: float = 60.0,
                 driver: gpu.Driver = gpu.DRIVER):
    """fn(*args) in a fresh confined child; its JSON-safe result, SandboxKilled if a signal ended
    it, ConfinedError/RtdError if fn raised, RtdError(E_CONTAINMENT...) if confinement failed.
    A policy that grants GPUs takes their nodes, libraries and initialiser from `driver`."""
    policy = policy or load_policy()
    identity = identity or DEFAULT_IDENTITY
    instance = f"rc{os.getpid()}"
    cg, layers, bpf, grant = contain.prepare(policy, identity, instance, f"{instance}-{next(_counter)}", driver=driver)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    helper, reports, killed, status = None, None, False, None
    try:
        spec = contain.Spec(policy, identity, cg.procs_files, layers, bpf, grant,
                            gpu.initializer(grant.init) if grant else None)
        helper, report_sock = contain.launch(spec, contain.Job(_answer(fn), args, theirs.fileno()))
        theirs.close()
        reports = contain.Reports(report_sock)
        deadline = time.monotonic() + timeout
        reports.expect_ready(timeout)
        ours.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            reply = _receive_reply(ours)
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

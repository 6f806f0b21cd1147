"""A GPU worker's refused calls end as containment errors, never as the model's crash, with real
confined GPU workers on a host without a GPU (the fake driver of tests/sandbox: real device
nodes, libraries, version; a no-op initialiser where CUDA's runs):

- a call the GPU filter learns (refused with EPERM, recorded by the SIGSYS handler) while the
  worker handles a frame turns the frame's failure into E_SYSCALL_REFUSED naming the call
  (daemon/worker.py's answer path, with a stand-in for CUDA that makes the driver's call and
  fails as CuPy does), and only that frame's;
- a GPU worker the filter kills (SIGSYS) ends as Ending.CONTAINMENT: a request in flight is told
  E_CONTAINMENT, and its model version counts no crash (daemon/lifecycle.py), where the same
  kill of a CPU worker is a crash."""
import asyncio
import ctypes
import errno
import io
import os
import shutil
import socket
import types

import pytest

from rtd import wire
from rtd.daemon.worker import main as worker
from rtd.daemon.serving.channel import WorkerChannel
from rtd.daemon.observe.events import EventLog
from rtd.daemon.serving.instances import Ending, Instance
from rtd.daemon.serving.lifecycle import ModelVersion
from rtd.daemon.serving.scheduler import Slots
from rtd.daemon.serving.services import TenantServices
from rtd.daemon.observe.metrics import Metrics
from rtd.errors import Code
from rtd.sandbox import TenantIdentity, load_policy, seccomp, sigsys
from rtd.sandbox.syscalls import libc
from rtd.sandbox.zygote import Zygote
from tests.sandbox.sandbox_workers import fake_gpu_driver

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="device nodes (mknod) and confined workers need root")
GPU0 = load_policy({"limits": {"gpu_devices": [0], "gpu_memory_bytes": 1 << 30}})
XFER = seccomp.nvidia_ioctl(211) | 0x18 << 16                                   # NV_ESC_IOCTL_XFER_CMD: learned
CONTROL = seccomp.nvidia_ioctl(seccomp.NVIDIA_IOCTLS["NV_ESC_RM_CONTROL"])   # allowed


def no_cuda(ordinals, memory_bytes):
    """Where CUDA initialises in a GPU worker: nothing to do on this host."""


@pytest.fixture(scope="module")
def driver():
    fake = fake_gpu_driver(f"{__name__}:no_cuda", "570.86.15")
    yield fake
    shutil.rmtree(os.path.dirname(fake.dev_root))


class CudaStandIn:
    """What the worker's model does in a frame, standing in for CUDA: the driver's ioctl, then
    the failure CuPy raises when the driver's library reports one; "ok" answers."""

    def __init__(self, cmd: int | None):
        self.cmd = cmd

    def handle(self, frame):
        if self.cmd is None:
            return {"fine": True}, {}
        fd = os.memfd_create("nvidiactl", os.MFD_CLOEXEC)
        libc.ioctl(fd, ctypes.c_ulong(self.cmd), ctypes.c_void_p(0))
        os.close(fd)
        raise RuntimeError("cudaErrorOperatingSystem: OS call failed or operation not supported on this OS")


def answer_frames(sock, cmds: list):
    """A confined GPU worker's loop as daemon/worker.serve runs it, the model's part played by
    CudaStandIn: frame i makes command cmds[i]'s ioctl."""
    arena, refusals, frames = wire.Arena(), sigsys.Refusals(), wire.Reader(sock, wire.PeerArena())
    for cmd in cmds:
        worker._answer(sock, arena, frames.recv(), CudaStandIn(cmd), refusals)


def test_a_call_the_filter_refused_during_a_frame_is_that_frames_syscall_refused_error(zygote):
    ours, theirs = socket.socketpair()
    handle = zygote.spawn(f"{__name__}:answer_frames", policy=GPU0, identity=TenantIdentity("gpu-contain", 61040, 61040),
                          sock=theirs, args=([XFER, None, CONTROL],))
    theirs.close()
    replies, heads = wire.Reader(ours), []
    for request_id in range(3):
        wire.send(ours, wire.Kind.INFER, request_id, {})
        heads.append(replies.recv().head)
    ours.close()
    assert handle.wait(10).code == 0
    refused, fine, other = heads
    assert refused["code"] == "E_SYSCALL_REFUSED", refused
    assert refused["detail"].startswith(f"ioctl {XFER:#x} (NVIDIA 211 NV_ESC_IOCTL_XFER_CMD") and "then E_INTERNAL: RuntimeError" in refused["detail"]
    assert fine == {"fine": True}   # answered: the refusal before it is not its doing
    assert other["code"] == "E_INTERNAL"   # the allowed ioctl reached the kernel (ENOTTY): no refusal to name


def call_on_request(sock, call: str):
    """A worker that says hello, then makes `call` (a raw system call) when a frame comes."""
    wire.send(sock, wire.Kind.OK, 0, {"hello": []})
    frame = wire.Reader(sock, wire.PeerArena()).recv()
    number = {"unshare": 272, "getpriority": 140}[call] if os.uname().machine == "x86_64" else {"unshare": 97, "getpriority": 141}[call]
    libc.syscall(ctypes.c_long(number), ctypes.c_long(0x10000000 if call == "unshare" else 0), ctypes.c_long(0))
    wire.send(sock, wire.Kind.OK, frame.request_id, {"survived": ctypes.get_errno() == errno.EPERM})


def ended_by(zygote, policy, device: str, call: str):
    """A confined worker made `call` while serving a request: (the Instance, what the request was told)."""
    ours, theirs = socket.socketpair()
    handle = zygote.spawn(f"{__name__}:call_on_request", policy=policy, identity=TenantIdentity("gpu-contain", 61040, 61040),
                          sock=theirs, args=(call,))
    theirs.close()
    assert wire.Reader(ours).recv().head == {"hello": []}

    async def serve():
        ended = []
        instance = Instance(0, ended.append, policy.limits)
        instance.device, instance.handle, instance.channel = device, handle, WorkerChannel(ours, instance._lost)
        reply = instance.send(wire.Kind.INFER, {}, {}, 60, lambda _: None)
        try:
            return instance, (await reply).head
        except Exception:
            return instance, await instance.failure()
    return asyncio.run(serve())


@pytest.fixture(scope="module")
def zygote(driver):
    z = Zygote.start(preload=(__name__,), spares=False, driver=driver)
    yield z
    z.close()


def test_a_gpu_worker_killed_by_its_filter_is_a_containment_error_and_a_cpu_worker_a_crash(zygote):
    instance, told = ended_by(zygote, GPU0, "cuda", "unshare")
    assert instance.ending == Ending.CONTAINMENT and instance.layer == "seccomp", (instance.reason, instance.layer)
    assert told.code is Code.E_CONTAINMENT and "outside the GPU filter's lists" in told.detail
    instance, told = ended_by(zygote, load_policy(), "cpu", "unshare")
    assert instance.ending == Ending.CRASHED and told.code is Code.E_SANDBOX_KILLED


def test_in_audit_mode_the_same_unknown_call_is_refused_and_the_worker_serves_on(zygote):
    audit = load_policy({"unsafe_gpu_audit": True, "limits": {"gpu_devices": [0], "gpu_memory_bytes": 1 << 30}})
    instance, told = ended_by(zygote, audit, "cuda", "getpriority")
    assert told == {"survived": True} and instance.ending is None
    instance.stop(Ending.STOPPED, "test over")


def version_counting(events: io.StringIO) -> ModelVersion:
    """A ModelVersion with the least of services the ending path reads: limits, events, metrics."""
    limits = types.SimpleNamespace(max_instances=4, restart_backoff_s=3600.0, restart_backoff_max_s=3600.0, crash_limit=1,
                                   resource_error_window_s=60.0, request_timeout_s=60.0, max_message_bytes=1 << 20)
    services = TenantServices("acme", limits, types.SimpleNamespace(cpu_cores=1, gpu_devices=[0]), EventLog(events), Metrics(),
                              spawn=None, make_room=None, slots=Slots(1))
    owner = types.SimpleNamespace(name="m", version_changed=lambda version: None)
    package = types.SimpleNamespace(config=None, version_dir="1", model=types.SimpleNamespace(size=1))
    return ModelVersion(owner, package, held=None, services=services)


def test_a_containment_ending_counts_no_crash_toward_crash_limit(zygote):
    events = io.StringIO()

    async def count():
        version = version_counting(events)
        for policy, device in ((GPU0, "cuda"), (load_policy(), "cpu")):
            instance, _ = await asyncio.get_running_loop().run_in_executor(None, ended_by, zygote, policy, device, "unshare")
            version.instances.append(instance)
            version._ended(instance)
            yield version.crashes
    async def main():
        return [c async for c in count()]
    assert asyncio.run(main()) == [0, 1]   # crash_limit 1: only the CPU worker's kill would fail the model
    log = events.getvalue()
    assert "event=containment tenant=acme model=m version=1 code=E_CONTAINMENT" in log and "event=crash tenant=acme" in log

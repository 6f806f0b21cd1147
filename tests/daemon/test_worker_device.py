"""A worker compiles for the device its LOAD names: "cuda" for a tenant whose policy lists GPUs
(the supervisor sends it), "cpu" otherwise. On a host without CuPy or a GPU a "cuda" load is
refused with one line (E_OP_UNSUPPORTED, the reason), and the worker keeps serving; a device
it does not know is a protocol error. Real confined workers from the zygote."""
import asyncio
import os
import socket

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtd import wire
from rtd.daemon.serving.channel import WorkerChannel
from tests.daemon import worker_calls
from rtd.daemon.serving.instances import WORKER_ENTRY
from rtd.errors import Code, RtdError
from rtd.kernels import backend_cupy
from rtd.sandbox import TenantIdentity, Zygote, load_policy
from tests.daemon.conftest import NEEDS_ROOT

NO_GPU = backend_cupy.unavailable_reason()
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason=NEEDS_ROOT)


def relu_model_fd() -> int:
    graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    fd = os.memfd_create("model", os.MFD_CLOEXEC)
    os.write(fd, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return fd


def load_with_device(zygote, device: str):
    """(the LOAD's refusal or None, the reply to a CPU load after it) in one worker."""
    async def main():
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        handle = zygote.spawn(WORKER_ENTRY, policy=load_policy({}), identity=TenantIdentity("device", 61993, 61993), sock=theirs)
        theirs.close()
        channel = WorkerChannel(ours, lambda error: None)
        fd = relu_model_fd()
        try:
            try:
                await channel.request(wire.Kind.LOAD, {"external": [], "threads": 1, "device": device}, fds=[fd])
                refusal = None
            except RtdError as e:
                refusal = e
            if refusal is None or refusal.code is Code.E_WORKER_PROTOCOL:
                return refusal, None
            await channel.request(wire.Kind.LOAD, {"external": [], "threads": 1, "device": "cpu"}, fds=[fd])
            y = (await worker_calls.infer(channel, {"X": np.array([-1, 2], np.float32)}))["Y"]
            return refusal, y
        finally:
            os.close(fd)
            channel.close()
            handle.kill()
    return asyncio.run(main())


@pytest.fixture(scope="module")
def zygote():
    z = Zygote.start(preload=("rtd.daemon.worker.main",), instance="idevice")
    yield z
    z.close()


@pytest.mark.skipif(NO_GPU is None, reason="this host has a GPU: the refusal is for hosts without one")
def test_a_cuda_load_without_a_gpu_is_refused_in_one_line_and_the_worker_serves_on(zygote):
    refusal, y = load_with_device(zygote, "cuda")
    assert refusal is not None and refusal.code is Code.E_OP_UNSUPPORTED, refusal
    assert refusal.detail == f"device cuda unavailable: {NO_GPU}"
    np.testing.assert_array_equal(y, [0, 2])   # the refused load left no model behind: a CPU one loads


def test_an_unknown_device_is_a_protocol_error(zygote):
    refusal, _ = load_with_device(zygote, "tpu")
    assert refusal is not None and refusal.code is Code.E_WORKER_PROTOCOL and "device 'tpu'" in refusal.detail

"""A worker runs no more kernel threads than the cores its tenant was granted: the supervisor
sends the count with LOAD (the policy's whole cpu_cores, at least 1); the compiled kernels take
that many, and BLAS is held to one thread through controls found in the zygote (finding them
reads /proc/self/maps, which a confined worker cannot), so two pools never fight over the cores.
The worker reports both in its PING reply."""
import asyncio
import os
import socket

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd import wire
from rtd.daemon.serving.channel import WorkerChannel
from tests.daemon import worker_calls
from rtd.daemon.serving.instances import WORKER_ENTRY
from rtd.sandbox import TenantIdentity, Zygote, load_policy
from tests.daemon.conftest import NEEDS_ROOT

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason=NEEDS_ROOT),
              pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: no second BLAS thread to withhold")]
K = 1024


def gemm_model_fd() -> int:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((K, K)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", K])], [w])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    fd = os.memfd_create("model", os.MFD_CLOEXEC)
    os.write(fd, data)
    return fd


def kernel_threads(zygote, threads: int) -> tuple:
    async def main():
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        handle = zygote.spawn(WORKER_ENTRY, policy=load_policy({"limits": {"cpu_cores": float(threads)}}),
                              identity=TenantIdentity("threads", 61992, 61992), sock=theirs)
        theirs.close()
        channel = WorkerChannel(ours, lambda error: None)
        fd = gemm_model_fd()
        try:
            await channel.request(wire.Kind.LOAD, {"external": [], "threads": threads}, fds=[fd])
            y = (await worker_calls.infer(channel, {"X": np.ones((4, K), np.float32)}))["Y"]
            assert y.shape == (4, K)
            head = (await channel.request(wire.Kind.PING, {}, {})).head
            return head["blas_threads"], head["kernel_threads"]
        finally:
            os.close(fd)
            channel.close()
            handle.kill()
    return asyncio.run(main())


def test_kernel_threads_follow_the_tenants_cores_and_blas_stays_single():
    zygote = Zygote.start(preload=("rtd.daemon.worker.main",), instance="ithreads")
    try:
        granted = {cores: kernel_threads(zygote, cores) for cores in (1, 2)}
    finally:
        zygote.close()
    assert granted == {1: (1, 1), 2: (1, 2)}, granted   # BLAS single-threaded inside the kernels' own threads

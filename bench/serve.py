"""Serving overhead, side by side in one run (needs root: real confined workers).

1. Per-request latency of one small MLP: in-process `compile_model(...).run`, a plain Python
   gRPC echo server (same message sizes, its own process, same machine), and rtd over gRPC
   on its Unix socket. Overhead over the echo = rtd p50 − echo p50 − in-process p50.
2. rtd throughput with 1, 4 and 16 concurrent clients (threads, one channel each).
3. A 64 MB tensor round trip supervisor ↔ confined worker (memfd frames) vs memcpy.

    sudo .venv/bin/python bench/serve.py [--requests 2000] [--seconds 5]
"""
import argparse
import concurrent.futures
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from rtd.daemon import frames
from rtd.daemon.client import Client
from rtd.daemon.config import Limits, TenantConfig, token_hash
from rtd.daemon.metrics import Metrics
from rtd.daemon.pool import TenantWorker
from rtd.kernels import compile_model
from rtd.loader import keys, pack
from rtd.proto import grpc_service_pb2 as pb
from rtd.sandbox import Zygote

ECHO_SERVICE = "inference.GRPCInferenceService"


def mlp(width: int = 64) -> bytes:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["H"]), helper.make_node("Add", ["H", "B"], ["Z"]),
         helper.make_node("Relu", ["Z"], ["Y"])], "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", width])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def echo_server(path: str) -> None:
    """A plain Python gRPC server answering ModelInfer with the inputs as outputs."""
    def infer(request, context):
        response = pb.ModelInferResponse(model_name=request.model_name, id=request.id)
        for t in request.inputs:
            response.outputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
        response.raw_output_contents.extend(request.raw_input_contents)
        return response
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(8))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(ECHO_SERVICE, {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(infer, pb.ModelInferRequest.FromString,
                                                          lambda m: m.SerializeToString())})])
    server.add_insecure_port(f"unix:{path}")
    server.start()
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM})


def percentiles(samples: list) -> tuple[float, float]:
    s = sorted(samples)
    return s[len(s) // 2] * 1e6, s[min(len(s) - 1, int(len(s) * 0.99))] * 1e6


def time_calls(fn, n: int) -> list:
    for _ in range(min(50, n)):
        fn()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def throughput(client_factory, call, clients: int, seconds: float) -> float:
    stop, counts = time.monotonic() + seconds, [0] * clients

    def run(i):
        client = client_factory()
        while time.monotonic() < stop:
            call(client)
            counts[i] += 1
    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def start_daemon(root: str, model: bytes) -> tuple[subprocess.Popen, str, str]:
    key_dir, trust = os.path.join(root, "keys"), os.path.join(root, "trust")
    os.makedirs(trust)
    private, public = keys.write_keypair(key_dir)
    os.link(public, os.path.join(trust, "signing.pub.pem"))
    token = secrets.token_urlsafe(32)
    config = os.path.join(root, "rtd.toml")
    with open(config, "w") as f:
        f.write(f'state_dir = "state"\n[metrics]\nport = 0\n[limits]\nmax_queue = 64\nmax_concurrency = 16\n'
                f'[[tenant]]\nid = "bench"\ntoken_sha256 = ["{token_hash(token)}"]\ntrusted_keys = "{trust}"\n')
    log = open(os.path.join(root, "rtd.log"), "w+")
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "rtd"), "serve", "--config", config],
                            stderr=log, stdout=subprocess.DEVNULL)
    sock = os.path.join(root, "state", "rtd.sock")
    for _ in range(600):
        log.seek(0)
        if "serving on" in log.read():
            break
        time.sleep(0.1)
    client = Client(f"unix:{sock}", token)
    client.load("mlp", pack.package_files(model, name="mlp", version="1.0.0", private_key=keys.load_private(private)))
    return proc, f"unix:{sock}", token


def memfd_round_trip(zygote: Zygote, megabytes: int = 64, repeats: int = 5) -> dict:
    tenant = TenantConfig(id="benchrt", token_sha256=(), trusted_keys="/nonexistent", uid=61990, gid=61990,
                          policy={"limits": {"memory_bytes": 1 << 30}})
    worker = TenantWorker(tenant, zygote, Limits(), Metrics())
    big = np.random.default_rng(1).integers(0, 255, megabytes << 20, dtype=np.uint8)
    back = worker.echo({"t": big}, timeout=60)["t"]
    assert np.array_equal(back, big), "echo corrupted the tensor"
    trip = min(time_calls(lambda: worker.echo({"t": big}, timeout=60)["t"][::4096].sum(), repeats))
    worker.kill()
    dst = np.empty_like(big)
    copy = min(time_calls(lambda: np.copyto(dst, big), repeats))
    nbytes = big.nbytes
    return {"round_trip_ms": trip * 1e3, "memcpy_ms": copy * 1e3,
            "transfer_GBps": 2 * nbytes / trip / 1e9, "memcpy_GBps": nbytes / copy / 1e9,
            "ratio": (2 * nbytes / trip) / (nbytes / copy)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--echo-server", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        echo_server(args.echo_server)
        return 0
    frames.keep_large_buffers_warm()  # as rtd serve does
    zygote = Zygote.start(preload=("rtd.daemon.worker",))  # before any thread
    model = mlp()
    x = np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)
    root = tempfile.mkdtemp(prefix="rtd-bench-")
    echo_path = os.path.join(root, "echo.sock")
    echo = subprocess.Popen([sys.executable, __file__, "--echo-server", echo_path], stdout=subprocess.PIPE, text=True)
    echo.stdout.readline()
    daemon, url, token = start_daemon(root, model)
    try:
        compiled = compile_model(model)
        want = compiled.run({"X": x})["Y"]
        rtd_client = Client(url, token)
        np.testing.assert_allclose(rtd_client.infer("mlp", {"X": x})["Y"], want, rtol=1e-5, atol=1e-6)
        echo_client = Client(f"unix:{echo_path}", None)
        rows = {
            "in-process compile_model().run": time_calls(lambda: compiled.run({"X": x}), args.requests),
            "plain Python gRPC echo": time_calls(lambda: echo_client.infer("mlp", {"X": x}), args.requests),
            "rtd over gRPC (confined worker)": time_calls(lambda: rtd_client.infer("mlp", {"X": x}), args.requests),
        }
        print(f"latency, one [1,64] MLP request, {args.requests} requests each")
        stats = {name: percentiles(s) for name, s in rows.items()}
        for name, (p50, p99) in stats.items():
            print(f"  {name:34s} p50 {p50:8.1f} µs   p99 {p99:8.1f} µs")
        inproc, echo_p, rtd_p = (stats[k][0] for k in rows)
        print(f"  rtd overhead over the echo (p50): {rtd_p - echo_p - inproc:.1f} µs (goal ≤ 150 µs); "
              f"rtd/echo p50 ratio {rtd_p / echo_p:.2f}")
        print(f"throughput, {args.seconds:.0f} s each")
        for clients in (1, 4, 16):
            r = throughput(lambda: Client(url, token), lambda c: c.infer("mlp", {"X": x}), clients, args.seconds)
            e = throughput(lambda: Client(f"unix:{echo_path}", None), lambda c: c.infer("mlp", {"X": x}), clients, args.seconds)
            print(f"  {clients:2d} clients: rtd {r:8.0f} req/s   echo {e:8.0f} req/s   ratio {r / e:.2f}")
        rt = memfd_round_trip(zygote)
        print(f"64 MB tensor supervisor→worker→supervisor: {rt['round_trip_ms']:.1f} ms "
              f"({rt['transfer_GBps']:.2f} GB/s moved) vs memcpy {rt['memcpy_ms']:.1f} ms ({rt['memcpy_GBps']:.2f} GB/s): "
              f"{rt['ratio']:.2f}× memcpy bandwidth (goal ≥ 0.8×)")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        echo.send_signal(signal.SIGTERM)
        echo.wait(10)
        zygote.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory of a big model through a real `rtd serve`: its weights inline in model.onnx (the
guard's protobuf, then the executor's arrays) against the same weights as signed external
data (read-only views of the sealed memfd the supervisor holds, never copied in the worker).

    sudo .venv/bin/python bench/weights_memory.py [--mb 300] [--tenant-memory-mb 1024] [--via repository]

For each layout: load time, the supervisor's RSS before and after, and the worker's VmRSS
split into anonymous and shared (memfd) pages, its peak (VmHWM) and its memory cgroup's
usage and peak (what the tenant's limit counts), as multiples of the weights; then one
request, checked against onnxruntime. `--via repository` loads the package by name from the
tenant's model repository (read from disk into sealed memfds) instead of uploading it in one
gRPC message: the path for models too big to upload.
"""
import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from rtd.cli.client import Client
from rtd.daemon.config import token_hash
from rtd.loader import keys, pack

K = 8192


def _external(name: str, array: np.ndarray, f, offset: int) -> onnx.TensorProto:
    """A TensorProto whose data is `array`, written to `f` at `offset` (weights.bin)."""
    f.write(array.tobytes())
    tensor = onnx.TensorProto(name=name, dims=array.shape, data_type=TensorProto.FLOAT,
                              data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(array.nbytes))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def build(directory: str, megabytes: int, layouts: list) -> tuple[str, int]:
    """Y = X·W + b, W of about `megabytes`, with its data in weights.bin beside model.onnx
    (written directly: one protobuf cannot hold 2 GiB); and inline too, where asked."""
    n = max(1, (megabytes << 20) // (4 * K))
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((K, n), dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["Y"])]
    io = ([helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", K])],
          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", n])])
    for layout in ("inline", "external"):
        os.makedirs(os.path.join(directory, layout))
    with open(os.path.join(directory, "external", "weights.bin"), "wb") as f:
        initializers = [_external("W", w, f, 0), _external("b", b, f, w.nbytes)]
    model = helper.make_model(helper.make_graph(nodes, "big", *io, initializers), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, os.path.join(directory, "external", "model.onnx"))
    if "inline" in layouts:
        inline = helper.make_graph(nodes, "big", *io, [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
        onnx.save_model(helper.make_model(inline, opset_imports=[helper.make_opsetid("", 17)]),
                        os.path.join(directory, "inline", "model.onnx"))
    return os.path.join(directory, "external", "model.onnx"), w.nbytes + b.nbytes


def status_kib(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        return {line.split(":")[0]: int(line.split()[1]) for line in f if line.split(":")[0] in
                ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")}


def run(root: str, layout: str, model_path: str, weights: int, tenant_memory: int, via: str) -> dict:
    state = os.path.join(root, layout)
    os.makedirs(os.path.join(state, "trust"))
    private, public = keys.write_keypair(os.path.join(state, "keys"))
    os.link(public, os.path.join(state, "trust", "signing.pub.pem"))
    token, admin = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    big = 4 << 30
    config = os.path.join(state, "rtd.toml")
    with open(config, "w") as f:
        f.write(f'state_dir = "state"\n[admin]\ntoken_sha256 = ["{token_hash(admin)}"]\n'
                f"[limits]\nmax_message_bytes = {2 << 30}\ntenant_request_bytes = {big}\ntotal_request_bytes = {big}\n"
                f"tenant_package_bytes = {big}\ntotal_package_bytes = {big}\ntenant_disk_bytes = {big}\n"
                f'[[tenant]]\nid = "big"\ntoken_sha256 = ["{token_hash(token)}"]\ntrusted_keys = "trust"\n'
                f'model_repository = "repository"\n'
                f"uid = 61800\ngid = 61800\npolicy = {{ limits = {{ memory_bytes = {tenant_memory} }} }}\n")
    log = open(os.path.join(state, "rtd.log"), "w+")
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "rtd"), "serve", "--config", config],
                            stderr=log, stdout=subprocess.DEVNULL)
    try:
        for _ in range(600):
            log.seek(0)
            if "serving on" in log.read():
                break
            time.sleep(0.1)
        model_bytes = open(model_path, "rb").read()
        siblings = pack.external_files(model_bytes, os.path.dirname(model_path))
        files = pack.package_files(model_bytes, name="big", version="1.0.0", private_key=keys.load_private(private),
                                   siblings=siblings)
        del model_bytes, siblings
        if via == "repository":   # written where the operator's repository lives, then loaded by name
            for path, data in files.items():
                target = os.path.join(state, "repository", "big", path)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(data)
            files = {}
        client = Client(f"unix:{os.path.join(state, 'state', 'rtd.sock')}", token)
        before = status_kib(proc.pid)["VmRSS"]
        start = time.perf_counter()
        client.load("big", files)
        load_s = time.perf_counter() - start
        del files
        x = np.random.default_rng(1).standard_normal((4, K), dtype=np.float32)
        y = client.infer("big", {"X": x}, timeout=300)["Y"]
        want = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
        error = float(np.abs(y - want).max() / max(1e-6, float(np.abs(want).max())))
        status = json.loads(client._admin("Status", admin))
        (instance,) = status["tenants"][0]["models"]["big"]["serving"]["instances"]
        worker = status_kib(instance["pid"])
        supervisor = status_kib(proc.pid)
        client.close()
        return {"layout": layout, "load_s": load_s, "supervisor_before_mib": before / 1024,
                "supervisor_after_mib": supervisor["VmRSS"] / 1024, "supervisor_peak_mib": supervisor["VmHWM"] / 1024,
                "worker": {k: v / 1024 for k, v in worker.items()},
                "cgroup_mib": (instance.get("memory_bytes") or 0) / 2**20, "weights_mib": weights / 2**20,
                "max_rel_error": error}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=300, help="weights, MiB")
    parser.add_argument("--tenant-memory-mb", type=int, default=1024, help="the tenant's memory limit, MiB")
    parser.add_argument("--via", choices=("upload", "repository"), default="upload", help="how the package reaches rtd")
    parser.add_argument("--layouts", default="external,inline", help="which of external,inline to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rtd-weights-") as root:
        os.chmod(root, 0o755)
        external, weights = build(root, args.mb, args.layouts.split(","))
        inline = os.path.join(root, "inline", "model.onnx")
        print(f"weights {weights / 2**20:.0f} MiB; tenant memory limit {args.tenant_memory_mb} MiB; via {args.via}")
        for layout, path in (("external data", external), ("inline", inline)):
            if layout.split()[0] not in args.layouts.split(","):
                continue
            try:
                r = run(root, layout.split()[0], path, weights, args.tenant_memory_mb << 20, args.via)
            except Exception as e:   # a refusal (OOM kill at load, a budget) is a result too
                print(f"{layout:14s} not served: {type(e).__name__}: {str(e)[:200]}")
                continue
            w, m = r["worker"], r["weights_mib"]
            print(f"{layout:14s} load {r['load_s']:.1f} s; worker VmRSS {w['VmRSS']:.0f} MiB ({w['VmRSS'] / m:.2f}× weights: "
                  f"anon {w['RssAnon']:.0f}, memfd/shmem {w['RssShmem']:.0f}, file {w['RssFile']:.0f}), peak VmHWM "
                  f"{w['VmHWM']:.0f} MiB ({w['VmHWM'] / m:.2f}×); worker cgroup {r['cgroup_mib']:.0f} MiB "
                  f"({r['cgroup_mib'] / m:.2f}×); supervisor RSS {r['supervisor_before_mib']:.0f} → "
                  f"{r['supervisor_after_mib']:.0f} MiB (peak {r['supervisor_peak_mib']:.0f}); "
                  f"max relative error vs onnxruntime {r['max_rel_error']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

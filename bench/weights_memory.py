"""Memory of a big model through a real `rtd serve`: its weights inline in model.onnx (the
guard's protobuf, then the executor's arrays) against the same weights as signed external
data (read-only views of the sealed memfd the supervisor holds, never copied in the worker).

    sudo .venv/bin/python bench/weights_memory.py [--mb 300] [--tenant-memory-mb 1024]

For each layout: load time, the supervisor's RSS before and after, and the worker's VmRSS
split into anonymous and shared (memfd) pages, its peak (VmHWM) and its memory cgroup's
usage and peak (what the tenant's limit counts), as multiples of the weights; then one
request, checked against onnxruntime.
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

from rtd.daemon.client import Client
from rtd.daemon.config import token_hash
from rtd.loader import keys, pack

K = 8192


def build(directory: str, megabytes: int) -> tuple[str, int]:
    """Y = X·W + b, W of about `megabytes`; saved twice: inline and with external data."""
    n = max(1, (megabytes << 20) // (4 * K))
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((K, n), dtype=np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(n, dtype=np.float32), "b")
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["Y"])],
                              "big", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", n])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    os.makedirs(os.path.join(directory, "inline"))
    os.makedirs(os.path.join(directory, "external"))
    onnx.save_model(model, os.path.join(directory, "inline", "model.onnx"))
    onnx.save_model(model, os.path.join(directory, "external", "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    return os.path.join(directory, "external", "model.onnx"), (K * n + n) * 4


def status_kib(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        return {line.split(":")[0]: int(line.split()[1]) for line in f if line.split(":")[0] in
                ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")}


def run(root: str, layout: str, model_path: str, weights: int, tenant_memory: int) -> dict:
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rtd-weights-") as root:
        os.chmod(root, 0o755)
        external, weights = build(root, args.mb)
        inline = os.path.join(root, "inline", "model.onnx")
        print(f"weights {weights / 2**20:.0f} MiB; tenant memory limit {args.tenant_memory_mb} MiB")
        for layout, path in (("external data", external), ("inline", inline)):
            try:
                r = run(root, layout.split()[0], path, weights, args.tenant_memory_mb << 20)
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

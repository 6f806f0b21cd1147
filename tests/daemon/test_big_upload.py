"""A 300 MB package uploaded to a real `rtd serve` with only limits.max_message_bytes raised, over
gRPC (one RepositoryModelLoad message, as tritonclient sends it) and over REST (base64 JSON, as
tritonclient.http sends it): the request is spooled to disk as it arrives and each file sealed from
the spool, so the supervisor's resident memory peaks under +64 MB (VmHWM, reset before the upload),
the package budget is charged once, the model serves exactly its weights, the other tenant answers
as usual meanwhile, and SIGTERM stops the daemon within its drain grace."""
import base64
import concurrent.futures
import json
import os
import signal
import subprocess
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd.loader import pack
from tests.daemon.conftest import Daemon, mlp

ELEMENTS = 300 << 18              # 300 MiB of FP32 weights
MESSAGE_BYTES = 450 << 20        # above the REST body (base64: 4/3 of the package); every other limit as it is
RSS_GROWTH = 64 << 20
DRAIN_GRACE_S = 3.0
X = np.array([[1, 2, 3, 4]], np.float32)


def weights() -> np.ndarray:
    return (np.arange(ELEMENTS, dtype=np.int64) % 65521).astype(np.float32)


def package(d: Daemon, tmp_path, name: str) -> dict:
    """Y = Gather(W, I) with W of 300 MB in an external data file beside the model, signed."""
    w = numpy_helper.from_array(weights(), "W")
    graph = helper.make_graph([helper.make_node("Gather", ["W", "I"], ["Y"])], "big",
                              [helper.make_tensor_value_info("I", TensorProto.INT64, ["n"])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n"])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    directory = tmp_path / name
    directory.mkdir()
    onnx.save_model(model, str(directory / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    model_bytes = (directory / "model.onnx").read_bytes()
    return pack.package_files(model_bytes, name=name, version="1.0.1", counter=1, private_key=d.keys["acme"],
                              siblings=pack.external_files(model_bytes, str(directory)))


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith(field + ":"))


def reset_peak(pid: int) -> int:
    """Reset the process's peak resident size (VmHWM) to what it holds now; returns that."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return status_kb(pid, "VmRSS")


def beta_round(d: Daemon, counter: int) -> float:
    started = time.monotonic()
    client = d.client("beta")
    client.load("b2", d.package("beta", mlp(4), "b2", counter=counter))
    client.index()
    client.infer("b", {"X": X})
    client.unload("b2")
    return time.monotonic() - started


@pytest.fixture
def big_daemon(tmp_path):
    d = Daemon(tmp_path / "d", memory_bytes=2 << 30,
               limits={"max_message_bytes": MESSAGE_BYTES, "drain_grace_s": DRAIN_GRACE_S})
    d.start()
    d.client("beta").load("b", d.package("beta", mlp(5), "b"))
    yield d
    stopped = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=60) == 0
    assert time.monotonic() - stopped < DRAIN_GRACE_S + 10


def check_served(d: Daemon, name: str) -> None:
    index = np.array([0, 1, 65520, 65521, ELEMENTS - 1], np.int64)
    np.testing.assert_array_equal(d.client("acme").infer(name, {"I": index})["Y"], weights()[index])


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_a_300_mb_package_streams_to_disk_with_only_max_message_bytes_raised(big_daemon, tmp_path, protocol):
    d, pid = big_daemon, big_daemon.proc.pid
    files = package(d, tmp_path, "big")
    size = sum(len(b) for b in files.values())
    assert size > 300 << 20
    usual = max(beta_round(d, i) for i in (1, 2))
    if protocol == "rest":
        body = tmp_path / "load.json"
        with open(body, "w") as f:
            json.dump({"parameters": {f"file:{p}": base64.b64encode(b).decode() for p, b in files.items()}}, f)
        assert os.path.getsize(body) > 400 << 20
        upload = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "--unix-socket", os.path.join(d.state, "rtd-rest.sock"),
                  "-H", f"Authorization: Bearer {d.tokens['acme']}", "--data-binary", f"@{body}",
                  "http://rtd/v2/repository/models/big/load"]
    before = reset_peak(pid)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        if protocol == "grpc":
            loading = pool.submit(d.client("acme").load, "big", files, 300)
        else:
            loading = pool.submit(subprocess.run, upload, capture_output=True, timeout=300)
        rounds = []
        while not loading.done():
            rounds.append(beta_round(d, 3 + len(rounds)))
        done = loading.result()
    peak = status_kb(pid, "VmHWM")
    print(f"\n{protocol}: {size} bytes in {sum(rounds) if rounds else 0:.1f}+ s; supervisor VmRSS before {before >> 20} MiB, "
          f"VmHWM during {peak >> 20} MiB (+{(peak - before) >> 20} MiB); beta's rounds max {max(rounds or [0]):.2f} s "
          f"(usually {usual:.2f} s)")
    if protocol == "rest":
        assert done.returncode == 0 and done.stdout.endswith(b"\n200"), (done.stdout[-300:], done.stderr)
    assert peak - before < RSS_GROWTH, f"the supervisor's resident memory grew by {(peak - before) >> 20} MiB"
    assert rounds and max(rounds) < usual * 3 + 10, f"beta's rounds took {max(rounds):.1f} s (usually {usual:.2f} s)"
    check_served(d, "big")
    usage = d.tenant("acme")["budgets"]["package_bytes"]["used"]
    assert size <= usage < size + (1 << 20), f"{usage} bytes of package budget held for a {size}-byte package"
    d.client("acme").unload("big")
    assert d.tenant("acme")["budgets"]["package_bytes"]["used"] == 0

"""Package verification throughput against the hash-bound anchors, side by side in one run.

Builds a signed package around a ~400 MB ONNX model in a temporary directory (deleted at the
end), then alternates rounds of
  sha256sum  <the manifest's files>         (coreutils)
  openssl dgst -sha256 <the same files>     (OpenSSL: the hash-bound limit on this machine)
  rtd verify_package(model dir)             (read once into sealed memfds, hashed while read,
                                             manifest + RSA-PSS + metadata checks)
  rtd verify_package(model.tar)             (plain tar intake, for information)
over a warm page cache, and reports the median time, throughput and ratios to openssl. The
clock covers verify_package until it returns the package (releasing the memfds afterwards is
not timed; the daemon keeps them while the model is loaded).
Goal: verify_package >= 0.9x openssl dgst.

    .venv/bin/python bench/verify.py [--mb 400] [--rounds 5]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from rtd.loader import TrustStore, keys, pack, verify_package


def big_model(megabytes: int) -> bytes:
    count = megabytes * (1 << 20) // 4
    weights = numpy_helper.from_array(np.arange(count, dtype=np.float32).reshape(1, count), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, count])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, count])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "big", [x], [y], [weights])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def timed(fn) -> float:
    """Seconds `fn` took; a package it returns is released after the clock stops."""
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    if hasattr(result, "close"):
        result.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="rtd-bench-verify-")
    try:
        key = keys.generate()
        files = pack.package_files(big_model(args.mb), name="big", version="1.0.0", private_key=key)
        model_dir = os.path.join(work, "big")
        pack.write_package(files, model_dir, "big")
        pack.write_package(files, os.path.join(work, "big.tar"), "big")
        trust_dir = os.path.join(work, "trust")
        os.makedirs(trust_dir)
        with open(os.path.join(trust_dir, "signing.pub.pem"), "wb") as f:
            f.write(keys.public_pem(key.public_key()))
        trust = TrustStore(trust_dir)
        version_dir = os.path.join(model_dir, "1")
        listed = [os.path.join(version_dir, n) for n in ("metadata.json", "model.onnx")]
        total = sum(os.path.getsize(p) for p in listed)

        def verify(source):
            return verify_package(source, trust=trust, tenant="bench", rollback=None)

        contenders = {
            "sha256sum": lambda: subprocess.run(["sha256sum", *listed], check=True, capture_output=True),
            "openssl dgst -sha256": lambda: subprocess.run(["openssl", "dgst", "-sha256", *listed], check=True,
                                                           capture_output=True),
            "rtd verify_package (dir)": lambda: verify(model_dir),
            "rtd verify_package (tar)": lambda: verify(os.path.join(work, "big.tar")),
        }
        times = {name: [] for name in contenders}
        for fn in contenders.values():   # warm the page cache and imports
            timed(fn)
        for _ in range(args.rounds):
            for name, fn in contenders.items():
                times[name].append(timed(fn))
        anchor = statistics.median(times["openssl dgst -sha256"])
        print(f"package: {total / 1e6:.1f} MB hashed ({args.mb} MiB initializer), {args.rounds} rounds, median\n")
        print("| contender | median s | MB/s | × openssl |")
        print("|---|---|---|---|")
        for name, samples in times.items():
            median = statistics.median(samples)
            print(f"| {name} | {median:.3f} | {total / median / 1e6:.0f} | {anchor / median:.2f} |")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

"""Package verification throughput against the hash-bound anchors, side by side in one run.

Builds a signed package around a ~400 MB ONNX model in a temporary directory (deleted at the
end), then alternates rounds of
  sha256sum  <the manifest's files>         (coreutils)
  openssl dgst -sha256 <the same files>     (OpenSSL: the hash-bound limit on this machine)
  rtd verify_package(model dir)             (read once into sealed memfds, hashed while read,
                                             manifest + RSA-PSS + metadata checks)
  rtd verify_package(model.tar)             (plain tar intake, for information)
  floor: sha256 in-process, no copy         (pread into one buffer + hashlib: the hash alone)
  floor: memfd population only, no hash     (sendfile into a fresh memfd: the copy alone)
over a warm page cache, and reports median wall time, throughput, CPU seconds (user+sys of this
process and its children, all threads) and both ratios to openssl. On a shared machine the CPU
ratio is the steadier one: wall time there mostly measures how much of a core each contender got.
The clock covers verify_package until it returns the package (releasing the memfds afterwards is
not timed; the daemon keeps them while the model is loaded).
Goal: verify_package >= 0.9x openssl dgst.

--strategies adds the copy+hash strategies measured for loader/sealed.py on model.onnx, each
producing a sealed memfd of the same bytes and digest:
  pread, hash, write   (shipped, sealed.seal_from_fd) read 1 MiB into a private buffer, hash the
                       buffer, write it to the memfd
  sendfile, hash map   sendfile 1 MiB into the memfd, hash it through a private mapping (before)
  copier thread ahead  a helper thread sendfiles 8 MiB chunks ahead while the caller hashes
  shared mapping       preadv straight into a writable shared mapping of the memfd, hash it

    .venv/bin/python bench/verify.py [--mb 400] [--rounds 7] [--strategies]
"""
import argparse
import fcntl
import hashlib
import mmap
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from rtd.loader import TrustStore, keys, pack, sealed, verify_package

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL


def big_model(megabytes: int) -> bytes:
    count = megabytes * (1 << 20) // 4
    weights = numpy_helper.from_array(np.arange(count, dtype=np.float32).reshape(1, count), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, count])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, count])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "big", [x], [y], [weights])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(fn) -> tuple[float, float, object]:
    """(wall s, CPU s, result) of `fn`; a result with .close() is released after the clocks stop."""
    cpu, start = cpu_seconds(), time.perf_counter()
    result = fn()
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    digest = getattr(result, "sha256", None)
    if hasattr(result, "close"):
        result.close()
    return elapsed, cpu, digest


def _hash_only(paths: list[str]) -> None:
    buf = memoryview(bytearray(1 << 20))
    for path in paths:
        fd, digest = os.open(path, os.O_RDONLY), hashlib.sha256()
        while n := os.readv(fd, [buf]):
            digest.update(buf[:n])
        os.close(fd)


def _populate_only(paths: list[str]) -> None:
    for path in paths:
        src, fd, size, done = os.open(path, os.O_RDONLY), os.memfd_create("bench"), os.path.getsize(path), 0
        while done < size:
            done += os.sendfile(fd, src, done, min(8 << 20, size - done))
        os.close(src)
        os.close(fd)


def _shipped(path: str) -> sealed.SealedFile:
    src = os.open(path, os.O_RDONLY)
    try:
        return sealed.seal_from_fd("model.onnx", src, os.path.getsize(path))
    finally:
        os.close(src)


class _Held:
    """A strategy's result: the sealed memfd and its digest, released after the clock stops."""

    def __init__(self, fd: int, digest):
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
        self.fd, self.sha256 = fd, digest.hexdigest()

    def close(self) -> None:
        os.close(self.fd)


def _strategy(path: str, fill) -> _Held:
    src, size = os.open(path, os.O_RDONLY), os.path.getsize(path)
    fd, digest = os.memfd_create("bench", os.MFD_ALLOW_SEALING), hashlib.sha256()
    try:
        os.ftruncate(fd, size)
        fill(src, fd, size, digest)
        return _Held(fd, digest)
    finally:
        os.close(src)


def _copier_ahead(src: int, fd: int, size: int, digest) -> None:
    copied, wake = [0], threading.Condition()

    def copy():
        done = 0
        while done < size:
            done += os.sendfile(fd, src, done, min(8 << 20, size - done))
            with wake:
                copied[0] = done
                wake.notify()
    helper_thread = threading.Thread(target=copy)
    helper_thread.start()
    with mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ) as mapping, memoryview(mapping) as view:
        hashed = 0
        while hashed < size:
            with wake:
                wake.wait_for(lambda hashed=hashed: copied[0] > hashed)
                upto = copied[0]
            for start in range(hashed, upto, 1 << 20):
                digest.update(view[start:min(start + (1 << 20), upto)])
            hashed = upto
    helper_thread.join()


def _sendfile_hash_mapping(src: int, fd: int, size: int, digest) -> None:
    with mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ) as mapping, memoryview(mapping) as view:
        for start in range(0, size, 1 << 20):
            n = os.sendfile(fd, src, start, min(1 << 20, size - start))
            digest.update(view[start:start + n])


def _shared_mapping(src: int, fd: int, size: int, digest) -> None:
    with mmap.mmap(fd, size, mmap.MAP_SHARED) as mapping, memoryview(mapping) as view:
        for start in range(0, size, 1 << 20):
            n = os.preadv(src, [view[start:start + (1 << 20)]], start)
            digest.update(view[start:start + n])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--strategies", action="store_true", help="also time the copy+hash strategies")
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

        def openssl():
            subprocess.run(["openssl", "dgst", "-sha256", *listed], check=True, capture_output=True)

        contenders = {
            "sha256sum": lambda: subprocess.run(["sha256sum", *listed], check=True, capture_output=True),
            "openssl dgst -sha256": openssl,
            "rtd verify_package (dir)": lambda: verify(model_dir),
            "rtd verify_package (tar)": lambda: verify(os.path.join(work, "big.tar")),
            "floor: sha256 in-process, no copy": lambda: _hash_only(listed),
            "floor: memfd population only, no hash": lambda: _populate_only(listed),
        }
        if args.strategies:
            model = listed[1]
            expected = timed(lambda: _shipped(model))[2]
            contenders.update({
                "model.onnx: pread, hash, write (shipped)": lambda: _shipped(model),
                "model.onnx: sendfile, hash via mapping": lambda: _strategy(model, _sendfile_hash_mapping),
                "model.onnx: copier thread ahead": lambda: _strategy(model, _copier_ahead),
                "model.onnx: shared mapping": lambda: _strategy(model, _shared_mapping),
            })
        walls, cpus = {name: [] for name in contenders}, {name: [] for name in contenders}
        load_before = os.getloadavg()
        for warm in [True] + [False] * args.rounds:   # round 0 warms the page cache and imports
            for name, fn in contenders.items():
                wall, cpu, digest = timed(fn)
                if args.strategies and name.startswith("model.onnx") and digest != expected:
                    raise SystemExit(f"{name} produced a different digest")
                if not warm:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        wall0, cpu0 = statistics.median(walls["openssl dgst -sha256"]), statistics.median(cpus["openssl dgst -sha256"])
        print(f"package: {total / 1e6:.1f} MB hashed ({args.mb} MiB initializer), {args.rounds} rounds, median; "
              f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after\n")
        print("| contender | wall s | MB/s | × openssl (wall) | CPU s | × openssl (CPU) |")
        print("|---|---|---|---|---|---|")
        for name in contenders:
            wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
            size = os.path.getsize(listed[1]) if name.startswith("model.onnx") else total
            scale = size / total   # a model.onnx-only row is compared with openssl's time for its share
            print(f"| {name} | {wall:.3f} | {size / wall / 1e6:.0f} | {wall0 * scale / wall:.2f} "
                  f"| {cpu:.3f} | {cpu0 * scale / cpu:.2f} |")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

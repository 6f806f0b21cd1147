"""A tenant that can write its own model repository, against a real `rtd serve` with two tenants:
acme plants FIFOs, sockets, device nodes, directories, links and a 10 GB sparse file where its
repository's files are expected, links and hard-links into beta's repository (a vendor key both
tenants trust signed beta's private model), and a link to a root-only file. Each is refused with
its own code, quickly, naming nothing outside acme's repository, and the secret file's content
appears in no answer and no log line; meanwhile beta's loads, unloads, index and inference answer
as usual, and SIGTERM stops the daemon within its drain grace. With `load = ["*"]` over such a
repository the daemon comes up at once for everyone and reports acme's broken models."""
import concurrent.futures
import os
import shutil
import signal
import socket
import stat
import time

import numpy as np
import pytest
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException

from rtd.errors import Code, RtdError
from rtd.loader import keys, pack
from tests.daemon.conftest import Daemon, mlp

SECRET = "TopSecretToken_7c3e91d2"
DRAIN_GRACE_S = 3.0
X = np.array([[1, 2, 3, 4]], np.float32)


def write_package(directory, files: dict) -> None:
    for path, data in files.items():
        os.makedirs(os.path.join(directory, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(directory, path), "wb") as f:
            f.write(data)


def secret_file(tmp_path) -> str:
    """A root-only file in a root-only directory, as /etc/shadow or a token would be."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    path = private / "token"
    path.write_text(f"{SECRET}\n")
    os.chmod(path, 0o600)
    return str(path)


def hostile_daemon(tmp_path, **kwargs) -> tuple[Daemon, str, object]:
    """A daemon whose tenants both trust a vendor key (beta's private model is signed with it)."""
    repo = tmp_path / "repo"
    d = Daemon(tmp_path / "d", repository=str(repo), limits={"drain_grace_s": DRAIN_GRACE_S, "repository_timeout_s": 5.0},
               **kwargs)
    vendor = keys.generate()
    for tenant in ("acme", "beta"):
        with open(os.path.join(d.trust[tenant], "vendor.pub.pem"), "wb") as f:
            f.write(keys.public_pem(vendor.public_key()))
    write_package(repo / "beta" / "private", pack.package_files(mlp(11), name="private", version="1.0.1", counter=1,
                                                                 private_key=vendor))
    return d, str(repo), vendor


def plant(repo: str, name: str, what: str, tmp_path, d: Daemon):
    """Model `name` in acme's repository with acme's own signed package, and one hostile thing; returns
    what must stay open while it is there (a listening socket)."""
    model_dir = os.path.join(repo, "acme", name)
    beta_private = os.path.join(repo, "beta", "private")
    if what == "symlink into beta's repository":
        os.makedirs(os.path.dirname(model_dir), exist_ok=True)
        os.symlink(beta_private, model_dir)
        return None
    if what == "hard links into beta's repository":
        for rel in ("config.pbtxt", "1/model.onnx", "1/metadata.json", "1/checksum.sha256", "1/checksum.sha256.sig"):
            if os.path.exists(os.path.join(beta_private, rel)):
                os.makedirs(os.path.dirname(os.path.join(model_dir, rel)), exist_ok=True)
                os.link(os.path.join(beta_private, rel), os.path.join(model_dir, rel))
        return None
    write_package(model_dir, d.package("acme", mlp(3), name, config=f'name: "{name}"\n'.encode()))
    config = os.path.join(model_dir, "config.pbtxt")
    if what == "version directory linked into beta's":
        shutil.rmtree(os.path.join(model_dir, "1"))
        os.symlink(os.path.join(beta_private, "1"), os.path.join(model_dir, "1"))
        return None
    if what == "model.onnx is a FIFO":
        os.unlink(os.path.join(model_dir, "1", "model.onnx"))
        os.mkfifo(os.path.join(model_dir, "1", "model.onnx"))
        return None
    if what == "model.onnx is a directory":
        os.unlink(os.path.join(model_dir, "1", "model.onnx"))
        os.mkdir(os.path.join(model_dir, "1", "model.onnx"))
        return None
    os.unlink(config)
    if what == "config.pbtxt is a FIFO":
        os.mkfifo(config)
    elif what == "config.pbtxt is a socket":
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(config)
        listener.listen()
        return listener
    elif what == "config.pbtxt is a device node":
        os.mknod(config, stat.S_IFCHR | 0o600, os.makedev(1, 5))   # /dev/zero's numbers: reading it never ends
    elif what == "config.pbtxt is a directory":
        os.mkdir(config)
    elif what == "config.pbtxt is a symlink to a root-only file":
        os.symlink(secret_file(tmp_path), config)
    elif what == "config.pbtxt is a 10 GB sparse file":
        with open(config, "wb") as f:
            f.truncate(10 << 30)
    elif what == "config.pbtxt holds text that is no config":
        with open(config, "w") as f:
            f.write(f"{SECRET} {{ nonsense\n")
    return None


CASES = {   # what acme plants -> the code of the refusal
    "config.pbtxt is a FIFO": Code.E_SPECIAL_FILE,
    "config.pbtxt is a socket": Code.E_SPECIAL_FILE,
    "config.pbtxt is a device node": Code.E_SPECIAL_FILE,
    "config.pbtxt is a directory": Code.E_SPECIAL_FILE,
    "config.pbtxt is a symlink to a root-only file": Code.E_LINK_FORBIDDEN,
    "config.pbtxt is a 10 GB sparse file": Code.E_CONFIG_INVALID,
    "config.pbtxt holds text that is no config": Code.E_CONFIG_INVALID,
    "model.onnx is a FIFO": Code.E_SPECIAL_FILE,
    "model.onnx is a directory": Code.E_FILE_UNLISTED,
    "symlink into beta's repository": Code.E_LINK_FORBIDDEN,
    "hard links into beta's repository": Code.E_LINK_FORBIDDEN,
    "version directory linked into beta's": Code.E_LINK_FORBIDDEN,
}


class Beta:
    """The other tenant's usual work, timed: load, index, inference, unload."""

    def __init__(self, d: Daemon):
        self.d, self.client, self.counter, self.times = d, d.client("beta"), 0, []

    def round(self) -> None:
        self.counter += 1
        for op in (lambda: self.client.load("b", self.d.package("beta", mlp(5), "b", counter=self.counter)),
                   lambda: self.client.index(), lambda: self.client.infer("b", {"X": X}), lambda: self.client.unload("b")):
            started = time.monotonic()
            op()
            self.times.append(time.monotonic() - started)


def assert_clean(text: str) -> None:
    assert SECRET not in text and "TopSecret" not in text, text


def test_hostile_files_in_one_tenants_repository_cost_that_tenant_only(tmp_path):
    d, repo, vendor = hostile_daemon(tmp_path)
    vendor_key = keys.fingerprint(vendor.public_key())[:16]
    d.start()
    acme = {"authorization": f"Bearer {d.tokens['acme']}"}
    client = tc.InferenceServerClient(d.url())
    beta = Beta(d)
    try:
        for _ in range(3):
            beta.round()
        usual = max(beta.times)
        marks = {t: d.registry().get(t, {}) for t in ("acme", "beta")}
        answers = []
        for i, (what, code) in enumerate(CASES.items()):
            name = "private" if "beta's" in what else f"h{i}"
            keep = plant(repo, name, what, tmp_path, d)
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                indexes = [pool.submit(client.get_model_repository_index, headers=acme) for _ in range(6)]
                load = pool.submit(client.load_model, name, headers=acme)
                beta.round()
                with pytest.raises(InferenceServerException) as e:
                    load.result(timeout=30)
                answers.append(str(e.value))
                assert code.name in str(e.value), (what, str(e.value))
                for index in indexes:   # answered meanwhile (before or after the refusal)
                    answers += [m.reason for m in index.result(timeout=30).models]
            for _ in range(2):          # the index says why the model is not loaded
                entry = [m for m in client.get_model_repository_index(headers=acme).models if m.name == name]
                assert entry and entry[0].state == "UNAVAILABLE" and code.name in entry[0].reason, (what, entry)
                answers.append(entry[0].reason)
            assert "beta" not in str(e.value) and vendor_key not in str(e.value)   # nothing of beta's is named
            if keep is not None:
                keep.close()
            path = os.path.join(repo, "acme", name)
            os.unlink(path) if os.path.islink(path) else shutil.rmtree(path)
        for answer in answers:
            assert_clean(answer)
        assert max(beta.times) < usual * 3 + 5, f"beta waited {max(beta.times):.1f} s (usually {usual:.2f} s)"
        for tenant, models in marks.items():   # no floor was lowered
            for name, entry in models.items():
                assert d.registry()[tenant][name]["counter"] >= entry["counter"]
    finally:
        stopped = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
        assert time.monotonic() - stopped < DRAIN_GRACE_S + 5, "SIGTERM did not stop the daemon within its drain grace"
    assert_clean(d.read_log())


def test_load_all_at_start_over_a_hostile_repository_delays_nobody(tmp_path):
    d, repo, _ = hostile_daemon(tmp_path, loads={"acme": ["*"], "beta": ["good"]})
    write_package(os.path.join(repo, "beta", "good"), d.package("beta", mlp(6), "good"))
    write_package(os.path.join(repo, "acme", "fine"), d.package("acme", mlp(7), "fine"))
    keep = [plant(repo, "private" if "beta's" in what else f"h{i}", what, tmp_path, d) for i, (what, _) in enumerate(CASES.items())
            if what != "hard links into beta's repository"]   # one model named private: the symlink one
    started = time.monotonic()
    d.start()
    try:
        assert time.monotonic() - started < 30
        d.wait_ready("beta", "good", timeout=60)
        np.testing.assert_array_equal(d.client("beta").infer("good", {"X": X})["Y"].shape, (1, 3))
        d.wait_ready("acme", "fine", timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(v in ("pending", "loading") for v in d.tenant("acme")["load_at_start"].values()):
            time.sleep(0.2)
        outcome = d.tenant("acme")["load_at_start"]
        assert outcome["fine"] == "loaded" and outcome["private"].startswith("not loaded: E_LINK_FORBIDDEN")
        for i, (what, code) in enumerate(CASES.items()):
            name = "private" if "beta's" in what else f"h{i}"
            if what != "hard links into beta's repository":
                assert outcome[name].startswith(f"not loaded: {code.name}"), (what, outcome[name])
        index = {m.name: m for m in d.client("acme").index()}
        assert index["fine"].state == "READY" and index["h0"].state == "UNAVAILABLE" and "E_SPECIAL_FILE" in index["h0"].reason
        assert d.status()["ready"]
        assert_clean(str(d.status()))
    finally:
        for k in keep:
            if k is not None:
                k.close()
        stopped = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
        assert time.monotonic() - stopped < DRAIN_GRACE_S + 5
    assert_clean(d.read_log())


def test_a_repository_that_is_no_directory_is_refused_for_its_tenant_only(tmp_path):
    d, repo, _ = hostile_daemon(tmp_path)
    os.makedirs(repo, exist_ok=True)
    os.symlink(secret_file(tmp_path), os.path.join(repo, "acme"))   # the operator's path, followed: a file, not a directory
    d.start()
    try:
        with pytest.raises(RtdError) as e:
            d.client("acme").index()
        assert e.value.code in (Code.E_SPECIAL_FILE, Code.E_REPOSITORY_UNAVAILABLE), e.value
        assert_clean(str(e.value))
        d.client("beta").load("b", d.package("beta", mlp(5), "b"))
        assert [m.name for m in d.client("beta").index()] == ["b", "private"]
    finally:
        assert d.stop() == 0

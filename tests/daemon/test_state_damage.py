"""The daemon's small state files damaged on disk, against a real `rtd serve` with two tenants:
acme's registry index, rollback marks, revocation list and trusted key emptied, truncated or
overwritten with garbage, with and without their last good copy, or deleted. With the copy the
daemon carries on from it (logged); without, acme's loads are refused E_STATE_DAMAGED naming the
file until `rtctl state repair`; no floor is ever lowered (a replayed older package is refused
throughout), beta's loads, unloads, index and inference answer as usual, and SIGTERM stops the
daemon within its drain grace."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rtd.errors import Code, RtdError
from rtd.files import write_durable
from rtd.loader import keys
from tests.daemon.conftest import Daemon, mlp

RTCTL = os.path.join(os.path.dirname(sys.executable), "rtctl")
DRAIN_GRACE_S = 3.0
X = np.array([[1, 2, 3, 4]], np.float32)


def damaged(good: bytes, how: str) -> bytes:
    return {"empty": b"", "truncated": good[:len(good) // 2], "garbage": b"\x00\xff{garbage\n" * 7}[how]


class Scene:
    """acme holds model a (counter 2) and left a mark at 5 for model u (unloaded); beta serves b."""

    def __init__(self, tmp_path):
        self.d = Daemon(tmp_path / "d", limits={"drain_grace_s": DRAIN_GRACE_S})
        self.d.start()
        self.admin = str(tmp_path / "admin.token")
        with open(self.admin, "w") as f:
            f.write(self.d.admin_token)
        acme = self.d.client("acme")
        acme.load("a", self.d.package("acme", mlp(1), "a", counter=2))
        acme.load("u", self.d.package("acme", mlp(2), "u", counter=5))
        acme.unload("u")
        self.d.client("beta").load("b", self.d.package("beta", mlp(3), "b"))
        self.beta_rounds, self.times = 0, []

    def restart(self) -> None:
        stopped = time.monotonic()
        self.d.proc.send_signal(signal.SIGTERM)
        assert self.d.proc.wait(timeout=30) == 0
        assert time.monotonic() - stopped < DRAIN_GRACE_S + 5, "SIGTERM did not stop the daemon within its drain grace"
        self.d.start()

    def beta_as_usual(self) -> None:
        client = self.d.client("beta")
        self.beta_rounds += 1
        started = time.monotonic()
        client.load("b2", self.d.package("beta", mlp(4), "b2", counter=self.beta_rounds))
        assert {m.name for m in client.index()} == {"b", "b2"}
        assert client.infer("b", {"X": X})["Y"].shape == (1, 3)
        client.unload("b2")
        self.times.append(time.monotonic() - started)
        assert self.times[-1] < 20, f"beta's round took {self.times[-1]:.1f} s"

    def refused(self, code: Code, name: str, counter: int, seed: int = 9) -> RtdError:
        with pytest.raises(RtdError) as e:
            self.d.client("acme").load(name, self.d.package("acme", mlp(seed), name, counter=counter))
        assert e.value.code is code, e.value
        return e.value

    def floors_hold(self) -> None:
        """No replay of an older package is accepted, whatever state the marks are in."""
        for name, counter in (("u", 4), ("a", 1)):
            with pytest.raises(RtdError) as e:
                self.d.client("acme").load(name, self.d.package("acme", mlp(8), name, counter=counter))
            assert e.value.code in (Code.E_ROLLBACK, Code.E_STATE_DAMAGED), e.value

    def repair(self) -> str:
        done = subprocess.run([RTCTL, "state", "repair", "--tenant", "acme", "--socket", self.d.socket,
                               "--admin-token-file", self.admin], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def stop(self) -> None:
        stopped = time.monotonic()
        self.d.proc.send_signal(signal.SIGTERM)
        assert self.d.proc.wait(timeout=30) == 0
        assert time.monotonic() - stopped < DRAIN_GRACE_S + 5


@pytest.fixture
def scene(tmp_path):
    s = Scene(tmp_path)
    yield s
    if s.d.proc.poll() is None:
        s.stop()


@pytest.mark.parametrize("how", ["empty", "truncated", "garbage"])
@pytest.mark.parametrize("name", ["registry.json", "rollback.json"])
def test_a_damaged_state_file_falls_back_to_its_copy_and_without_one_refuses_until_repaired(scene, name, how):
    d = scene.d
    path = d.state_file("acme", name)
    good = open(path, "rb").read()

    scene.d.proc.send_signal(signal.SIGTERM)   # 1. the file damaged, its copy there: carried on from the copy
    assert d.proc.wait(timeout=30) == 0
    open(path, "wb").write(damaged(good, how))
    d.start()
    assert d.client("acme").infer("a", {"X": X})["Y"].shape == (1, 3)
    assert any("acme" in line and "last good" in line for line in d.status()["damaged"]), d.status()["damaged"]
    assert d.tenant("acme")["state_damaged"] is None
    scene.floors_hold()
    scene.beta_as_usual()

    scene.restart()                            # 2. the file and its copy damaged: acme's loads refused, beta's not
    open(path, "wb").write(damaged(good, how))
    open(path + ".last-good", "wb").write(damaged(good, how))
    scene.restart()
    e = scene.refused(Code.E_STATE_DAMAGED, "n", 1)
    assert name in e.detail and "rtctl state repair --tenant acme" in e.detail
    assert name in d.tenant("acme")["state_damaged"]
    scene.floors_hold()
    scene.beta_as_usual()

    said = scene.repair()                      # 3. the operator's repair: loads again, floors as high as known
    assert name in said
    d.client("acme").load("n", d.package("acme", mlp(5), "n"))
    assert d.tenant("acme")["state_damaged"] is None
    scene.refused(Code.E_ROLLBACK, "a", 1)     # the registry's counters still raise the marks
    if name == "registry.json":
        scene.refused(Code.E_ROLLBACK, "u", 4)   # the marks file was intact: u's mark (kept only there) holds
    scene.beta_as_usual()
    scene.restart()
    assert d.tenant("acme")["state_damaged"] is None and d.client("acme").infer("n", {"X": X})["Y"].shape == (1, 3)


@pytest.mark.parametrize("name,other", [("rollback.json", "registry.json"), ("registry.json", "rollback.json")])
def test_a_state_file_gone_with_its_copy_is_noticed_and_refused(scene, name, other):
    d = scene.d
    scene.d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=30) == 0
    for copy in (name, name + ".last-good"):
        os.unlink(d.state_file("acme", copy))
    d.start()
    e = scene.refused(Code.E_STATE_DAMAGED, "n", 1)
    assert name in e.detail and other in e.detail     # gone, while the other one is there
    scene.floors_hold()
    scene.beta_as_usual()
    scene.repair()
    scene.refused(Code.E_ROLLBACK, "a", 1)
    d.client("acme").load("n", d.package("acme", mlp(5), "n"))


@pytest.mark.parametrize("how", ["empty", "truncated", "garbage"])
def test_a_damaged_revocation_list_never_unrevokes_and_without_its_copy_refuses(scene, how, tmp_path):
    d = scene.d
    old = keys.generate()                                    # a key acme once trusted, then revoked
    with open(tmp_path / "old.pub.pem", "wb") as f:
        f.write(keys.public_pem(old.public_key()))
    trust_cli = ["--config", d.config, "--tenant", "acme", "--admin-token-file", scene.admin]
    for action in ("add", "revoke"):
        done = subprocess.run([RTCTL, "trust", action, str(tmp_path / "old.pub.pem"), *trust_cli],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    revoked = os.path.join(d.trust["acme"], "revoked.txt")
    good = open(revoked, "rb").read()
    assert open(revoked + ".last-good", "rb").read() == good          # rtctl trust writes both copies

    def signed_by_old(counter: int) -> dict:
        from rtd.loader import pack
        return pack.package_files(mlp(6), name="o", version=f"1.0.{counter}", counter=counter, private_key=old)

    open(revoked, "wb").write(damaged(good, how))
    scene.restart()
    with pytest.raises(RtdError) as e:
        d.client("acme").load("o", signed_by_old(1))
    assert e.value.code is Code.E_KEY_REVOKED                        # still revoked: the copy holds it
    d.client("acme").load("n", d.package("acme", mlp(5), "n"))
    scene.beta_as_usual()

    open(revoked + ".last-good", "wb").write(damaged(good, how))
    scene.restart()
    if how == "empty":   # both emptied: a list of no revocation, but the daemon's record keeps what it revoked
        with pytest.raises(RtdError) as e:
            d.client("acme").load("o", signed_by_old(1))
        assert e.value.code is Code.E_KEY_REVOKED
        d.client("acme").load("n", d.package("acme", mlp(5), "n", counter=2))
        return
    e = scene.refused(Code.E_STATE_DAMAGED, "n", 2)
    assert "revoked.txt" in e.detail
    scene.beta_as_usual()
    write_durable(revoked, good, mode=0o644)                         # the operator puts the list right
    scene.repair()
    d.client("acme").load("n", d.package("acme", mlp(5), "n", counter=2))
    with pytest.raises(RtdError) as e:
        d.client("acme").load("o", signed_by_old(1))
    assert e.value.code is Code.E_KEY_REVOKED


def test_revocations_deleted_with_their_copy_still_hold(scene, tmp_path):
    d = scene.d
    old = keys.generate()
    with open(tmp_path / "old.pub.pem", "wb") as f:
        f.write(keys.public_pem(old.public_key()))
    for action in ("add", "revoke"):
        subprocess.run([RTCTL, "trust", action, str(tmp_path / "old.pub.pem"), "--config", d.config, "--tenant", "acme",
                        "--admin-token-file", scene.admin], check=True, capture_output=True, timeout=60)
    for copy in ("revoked.txt", "revoked.txt.last-good"):
        os.unlink(os.path.join(d.trust["acme"], copy))
    scene.restart()
    from rtd.loader import pack
    with pytest.raises(RtdError) as e:
        d.client("acme").load("o", pack.package_files(mlp(6), name="o", version="1.0.1", counter=1, private_key=old))
    assert e.value.code is Code.E_KEY_REVOKED
    for copy in ("revoked.json", "revoked.json.last-good"):          # the daemon's record damaged too: refused
        open(d.state_file("acme", copy), "wb").write(b"\x00garbage")
    scene.restart()
    assert "revoked.json" in scene.refused(Code.E_STATE_DAMAGED, "n", 1).detail
    scene.beta_as_usual()


def test_a_damaged_trusted_key_uses_its_copy_and_without_one_refuses(scene):
    d = scene.d
    [name] = [n for n in os.listdir(d.trust["acme"]) if n.endswith(".pub.pem") and n != "vendor.pub.pem"]
    path = os.path.join(d.trust["acme"], name)
    good = open(path, "rb").read()
    os.unlink(path)                                                   # (the fixture hard-links it from the key dir)
    write_durable(path, good, mode=0o644)
    open(path, "wb").write(good[:len(good) // 2])
    scene.restart()
    d.client("acme").load("n", d.package("acme", mlp(5), "n"))
    os.unlink(path + ".last-good")
    scene.restart()
    assert name in scene.refused(Code.E_STATE_DAMAGED, "n", 2).detail
    scene.beta_as_usual()
    open(path, "wb").write(good)
    scene.repair()
    d.client("acme").load("n", d.package("acme", mlp(5), "n", counter=2))

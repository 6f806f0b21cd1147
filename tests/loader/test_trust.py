"""Tenant trust stores and the rollback store, with real keys and real files."""
import json
import os

import pytest

from rtd.errors import Code, RtdError
from rtd.files import write_durable
from rtd.loader import RollbackStore, TrustStore, keys, pack, verify_package


@pytest.fixture
def upload(signer, model_bytes):
    return lambda counter=1: pack.package_files(model_bytes, name="adder", version=f"1.0.{counter}",
                                                private_key=signer, counter=counter)


def test_a_key_trusted_by_tenant_a_means_nothing_for_tenant_b(tmp_path, trust, upload):
    (tmp_path / "tenant-b").mkdir()
    (tmp_path / "tenant-b" / "other.pub.pem").write_bytes(keys.public_pem(keys.generate().public_key()))
    with verify_package(upload(), trust=trust, tenant="a", rollback=None):
        pass
    with pytest.raises(RtdError) as e:
        verify_package(upload(), trust=TrustStore(str(tmp_path / "tenant-b")), tenant="b", rollback=None)
    assert e.value.code is Code.E_KEY_UNTRUSTED


def test_malformed_revocation_list_refuses_every_key(trust_dir, upload):
    (trust_dir / "revoked.txt").write_text("not-a-fingerprint\n")
    with pytest.raises(RtdError) as e:
        verify_package(upload(), trust=TrustStore(str(trust_dir)), tenant="a", rollback=None)
    assert e.value.code is Code.E_STATE_DAMAGED and "revoked.txt: line 1 is not a fingerprint" in e.value.detail
    assert "not-a-fingerprint" not in str(e.value)


def test_a_damaged_or_emptied_revocation_list_falls_back_to_its_copy_and_never_unrevokes(trust_dir, signer, upload):
    fingerprint = keys.fingerprint(signer.public_key())
    write_durable(str(trust_dir / "revoked.txt"), f"{fingerprint}  # rotated out\n".encode())
    for damage in (b"\xff\xfe garbage", b"", None):     # garbage, emptied, deleted
        if damage is None:
            os.unlink(trust_dir / "revoked.txt")
        else:
            (trust_dir / "revoked.txt").write_bytes(damage)
        store = TrustStore(str(trust_dir))
        assert fingerprint in store.revoked and store.unusable is None, damage
        with pytest.raises(RtdError) as e:
            verify_package(upload(), trust=store, tenant="a", rollback=None)
        assert e.value.code is Code.E_KEY_REVOKED
    assert TrustStore(str(trust_dir)).problems, "the damaged file is reported"


def test_a_damaged_key_file_uses_its_copy_and_without_one_refuses_every_key(trust_dir, signer, upload):
    [name] = [n for n in os.listdir(trust_dir) if n.endswith(".pub.pem")]
    pem = (trust_dir / name).read_bytes()
    (trust_dir / name).unlink()
    write_durable(str(trust_dir / name), pem, mode=0o644)
    (trust_dir / name).write_bytes(pem[:40])                  # truncated
    with verify_package(upload(), trust=TrustStore(str(trust_dir)), tenant="a", rollback=None):
        pass
    os.unlink(trust_dir / (name + ".last-good"))
    store = TrustStore(str(trust_dir))
    assert store.unusable and name in store.unusable
    with pytest.raises(RtdError) as e:
        verify_package(upload(), trust=store, tenant="a", rollback=None)
    assert e.value.code is Code.E_STATE_DAMAGED


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_key_that_is_no_regular_file_is_never_followed_nor_opened(trust_dir, tmp_path, kind):
    secret = tmp_path / "secret.pem"
    secret.write_text("TOP-SECRET-NOT-A-KEY")
    target = trust_dir / "planted.pub.pem"
    os.symlink(secret, target) if kind == "symlink" else os.mkfifo(target)
    store = TrustStore(str(trust_dir))          # a FIFO would block a plain open(): this returns at once
    assert store.unusable and "planted.pub.pem" in store.unusable and "TOP-SECRET" not in store.unusable


def test_rollback_high_water_mark_per_tenant_and_model(tmp_path, trust, upload):
    store = RollbackStore(str(tmp_path / "rollback.json"))
    assert store.high_water("a", "adder") is None
    with verify_package(upload(2), trust=trust, tenant="a", rollback=store) as pkg:
        store.record("a", pkg.name, pkg.counter)
    assert store.high_water("a", "adder") == 2
    for counter in (1, 2):
        with pytest.raises(RtdError) as e:
            verify_package(upload(counter), trust=trust, tenant="a", rollback=store)
        assert e.value.code is Code.E_ROLLBACK
    with verify_package(upload(1), trust=trust, tenant="b", rollback=store):   # other tenant: own mark
        pass
    with verify_package(upload(1), trust=trust, tenant="a", rollback=store, allow_rollback=True) as pkg:
        store.record("a", pkg.name, pkg.counter)
    assert store.high_water("a", "adder") == 2, "recording an allowed rollback never lowers the mark"
    with verify_package(upload(3), trust=trust, tenant="a", rollback=store):
        pass


def test_rollback_store_is_persisted_atomically(tmp_path):
    path = tmp_path / "rollback.json"
    RollbackStore(str(path)).record("a", "m", 5)
    RollbackStore(str(path)).record("b", "m", 1)
    assert json.loads(path.read_text()) == {"a": {"m": {"counter": 5, "manifest_sha256": None}},
                                            "b": {"m": {"counter": 1, "manifest_sha256": None}}}
    assert RollbackStore(str(path)).high_water("a", "m") == 5
    assert sorted(os.listdir(tmp_path)) == ["rollback.json", "rollback.json.last-good"], "no temporary file is left behind"
    assert (tmp_path / "rollback.json.last-good").read_bytes() == path.read_bytes()


def test_corrupt_rollback_store_fails_closed(tmp_path, trust, upload):
    path = tmp_path / "rollback.json"
    path.write_text("{not json")
    with pytest.raises(RtdError) as e:
        verify_package(upload(), trust=trust, tenant="a", rollback=RollbackStore(str(path)))
    assert e.value.code is Code.E_STATE_DAMAGED and "rollback.json" in e.value.detail
    assert path.read_text() == "{not json"


@pytest.mark.parametrize("damage", [b"", b'{"a": {"adder": {"coun', b"\x00garbage", b"{}"], ids=["empty", "truncated", "garbage", "reset"])
def test_a_damaged_or_reset_rollback_file_never_lowers_a_mark(tmp_path, trust, upload, damage):
    path = tmp_path / "rollback.json"
    RollbackStore(str(path)).record("a", "adder", 3)
    path.write_bytes(damage)
    store = RollbackStore(str(path))
    assert store.high_water("a", "adder") == 3 and store.unusable is None
    with pytest.raises(RtdError) as e:
        verify_package(upload(2), trust=trust, tenant="a", rollback=store)
    assert e.value.code is Code.E_ROLLBACK
    os.unlink(tmp_path / "rollback.json.last-good")
    if os.path.exists(path):
        path.write_bytes(damage)
    store = RollbackStore(str(path))
    if damage == b"{}":            # a valid file: what it says holds (the daemon raises marks from its registry too)
        assert store.unusable is None
        return
    assert store.unusable                     # both copies gone or damaged: refused, never reset
    with pytest.raises(RtdError) as e:
        verify_package(upload(9), trust=trust, tenant="a", rollback=store)
    assert e.value.code is Code.E_STATE_DAMAGED
    store.repair()
    assert store.unusable is None and RollbackStore(str(path)).unusable is None

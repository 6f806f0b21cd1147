"""Tenant trust stores and the rollback store, with real keys and real files."""
import json
import os

import pytest

from rtd.errors import Code, RtdError
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
    assert e.value.code is Code.E_KEY_REVOKED


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
    assert sorted(os.listdir(tmp_path)) == ["rollback.json"], "no temporary file is left behind"


def test_corrupt_rollback_store_fails_closed(tmp_path, trust, upload):
    path = tmp_path / "rollback.json"
    path.write_text("{not json")
    with pytest.raises(RtdError) as e:
        verify_package(upload(), trust=trust, tenant="a", rollback=RollbackStore(str(path)))
    assert e.value.code is Code.E_INTERNAL
    assert path.read_text() == "{not json"

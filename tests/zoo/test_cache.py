"""The export cache: built once per key, rebuilt when the key changes, never left torn."""
import os

import pytest

from . import cache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "CACHE_DIR", str(tmp_path))
    return tmp_path


def test_builds_once_per_key_and_drops_stale_exports(cache_dir):
    calls = []

    def build():
        calls.append(1)
        return b"model-%d" % len(calls)

    first = cache.cached_model("net", build, ["source v1"])
    assert cache.cached_model("net", build, ["source v1"]) == first and len(calls) == 1
    second = cache.cached_model("net", build, ["source v2"])
    assert second != first and len(calls) == 2
    assert sorted(os.listdir(cache_dir)) == [os.path.basename(second)]  # the v1 export is gone
    with open(second, "rb") as f:
        assert f.read() == b"model-2"


def test_failed_build_leaves_nothing(cache_dir):
    def build():
        raise RuntimeError("exporter failed")

    with pytest.raises(RuntimeError):
        cache.cached_model("net", build, ["k"])
    assert os.listdir(cache_dir) == []


def test_other_models_with_a_common_prefix_survive(cache_dir):
    keep = cache.cached_model("minilm_qdyn", lambda: b"q", ["k"])
    cache.cached_model("minilm", lambda: b"a", ["k1"])
    cache.cached_model("minilm", lambda: b"b", ["k2"])
    assert os.path.exists(keep)

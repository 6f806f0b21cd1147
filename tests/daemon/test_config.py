"""The daemon's config, tenants and registry: validation refuses what it does not know,
tokens match only by hash, and the registry survives a reopen and never tears."""
import hashlib
import json
import os
import shutil

import pytest

from rtd.daemon import config
from rtd.daemon import main as rtd_main
from rtd.daemon.config import ConfigError
from rtd.daemon.state.registry import Registry
from rtd.daemon.serving.tenants import Tenants
from rtd.errors import Code, RtdError
from rtd.loader.sealed import seal_bytes

TOKEN = "t" * 43
GOOD = f"""
state_dir = "state"
[listen]
unix = "run/rtd.sock"
[metrics]
port = 9102
[admin]
token_sha256 = ["{hashlib.sha256(b'admin-token').hexdigest()}"]
[limits]
max_queue = 8
request_timeout_s = 2.5
[[tenant]]
id = "acme"
token_sha256 = ["{hashlib.sha256(TOKEN.encode()).hexdigest()}"]
trusted_keys = "trust/acme"
policy = {{ limits = {{ memory_bytes = 1000000 }} }}
"""


def test_good_config_parses_with_paths_relative_to_the_file(tmp_path):
    c = config.parse(GOOD, base=str(tmp_path))
    assert c.state_dir == str(tmp_path / "state") and c.unix_socket == str(tmp_path / "run/rtd.sock")
    assert c.limits.max_queue == 8 and c.limits.request_timeout_s == 2.5 and c.limits.max_concurrency == 4
    assert c.supervisor_nice == -10 and config.parse("supervisor_nice = -3\n" + GOOD).supervisor_nice == -3
    [t] = c.tenants
    assert (t.id, t.uid, t.gid, t.trusted_keys) == ("acme", 61000, 61000, str(tmp_path / "trust/acme"))


@pytest.mark.parametrize("change, message", [
    (("[limits]", "[limits]\nmax_qeueu = 3"), "unknown keys"),
    (("port = 9102", 'port = "9102"'), "metrics.port: expected int"),
    (("port = 9102", "port = 70000"), "0..65535"),
    (('unix = "run/rtd.sock"', 'unix = "run/rtd.sock"\nunix_mode = "rw"'), "octal"),
    (('id = "acme"', 'id = "ac me"'), "letters, digits"),
    (('[listen]\nunix = "run/rtd.sock"', '[listen]\ntcp = "0.0.0.0:1"'), "mTLS"),
    (("max_queue = 8", "max_queue = 0"), "must be positive"),
    (("max_queue = 8", "max_queue = true"), "expected int"),
    (('trusted_keys = "trust/acme"', 'trusted_keys = "trust/acme"\nuid = 0'), "never root"),
    (("state_dir", "stat_dir"), "state_dir: required"),
    ((hashlib.sha256(TOKEN.encode()).hexdigest(), "nothex"), "token hashes"),
    (("[metrics]", "[metrics"), "not TOML"),
    (("state_dir", "supervisor_nice = 5\nstate_dir"), "supervisor_nice: -20..0"),
    (("state_dir", "supervisor_nice = -21\nstate_dir"), "supervisor_nice: -20..0"),
])
def test_bad_configs_are_refused_naming_the_key(change, message):
    with pytest.raises(ConfigError, match=message):
        config.parse(GOOD.replace(*change, 1))


def test_duplicate_tenants_refused():
    tenant = GOOD[GOOD.index("[[tenant]]"):]
    with pytest.raises(ConfigError, match="duplicate"):
        config.parse(GOOD + tenant)


def test_a_token_two_tenants_share_is_refused():
    """Tenants are found by their tokens' digests: a token naming two would charge its calls to either."""
    other = GOOD[GOOD.index("[[tenant]]"):].replace('id = "acme"', 'id = "beta"').replace("trust/acme", "trust/beta")
    with pytest.raises(ConfigError, match="tenant 'beta': a token_sha256 of tenant 'acme' too"):
        config.parse(GOOD + other)
    tenants = Tenants(config.parse(GOOD + other.replace(hashlib.sha256(TOKEN.encode()).hexdigest(), hashlib.sha256(b"b" * 43).hexdigest())))
    assert tenants.authenticate([("authorization", f"Bearer {'b' * 43}")]).id == "beta"
    assert tenants.authenticate([("authorization", f"Bearer {TOKEN}")]).id == "acme"


def test_embedded_default_creates_keys_and_tokens_once(tmp_path, capsys):
    c = config.embedded_default(str(tmp_path / "s"))
    notes = capsys.readouterr().err
    assert "embedded default" in notes and "signing key" in notes and "token" in notes
    state = tmp_path / "s"
    assert oct(os.stat(state / "dev-keys" / "signing.pem").st_mode & 0o777) == "0o600"
    assert oct(os.stat(state / "dev.token").st_mode & 0o777) == "0o600"
    assert (state / "trust" / "dev" / "signing.pub.pem").read_bytes() == (state / "dev-keys" / "signing.pub.pem").read_bytes()
    token = (state / "dev.token").read_text().strip()
    assert len(token) >= 32 and Tenants(c).authenticate([("authorization", f"Bearer {token}")]).id == "dev"
    again = config.embedded_default(str(state))
    assert "created" not in capsys.readouterr().err and again.tenants == c.tenants


def test_rtd_serve_sets_max_message_bytes_of_the_embedded_default(tmp_path, capsys):
    state = str(tmp_path / "s")
    assert config.embedded_default(state).limits == config.Limits()
    big = config.embedded_default(state, max_message_bytes=1 << 30).limits
    assert big.max_message_bytes == 1 << 30 and big.tenant_request_bytes == big.tenant_response_bytes == 1 << 30
    small = config.embedded_default(state, max_message_bytes=4096).limits
    assert small.max_message_bytes == 4096 and small.tenant_request_bytes == config.Limits.tenant_request_bytes
    with pytest.raises(ConfigError, match="limits.max_message_bytes: must be positive"):
        config.embedded_default(state, max_message_bytes=0)
    assert rtd_main.main(["serve", "--state-dir", state, "--max-message-bytes", "-1"]) == 2
    assert "limits.max_message_bytes: must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rtd_main.main(["serve", "--config", "rtd.toml", "--max-message-bytes", "4096"])
    assert "set limits.max_message_bytes" in capsys.readouterr().err


def test_tokens_match_only_their_tenant_and_admin_is_separate(tmp_path):
    tenants = Tenants(config.parse(GOOD, base=str(tmp_path)))
    assert tenants.authenticate([("authorization", f"Bearer {TOKEN}")]).id == "acme"
    for metadata in ([], [("authorization", f"Bearer {TOKEN}x")], [("authorization", TOKEN)],
                     [("authorization", "Bearer admin-token")], [("x-token", TOKEN)]):
        with pytest.raises(RtdError) as e:
            tenants.authenticate(metadata)
        assert e.value.code == Code.E_UNAUTHENTICATED
    tenants.authenticate_admin([("authorization", "Bearer admin-token")])
    with pytest.raises(RtdError):
        tenants.authenticate_admin([("authorization", f"Bearer {TOKEN}")])


def sealed(data: bytes):
    return seal_bytes("test", data, len(data), Code.E_ARCHIVE_LIMIT)


class Pkg:
    """The fields of a VerifiedPackage the registry records: real sealed files, fixed identity fields."""
    def __init__(self, name, counter, model):
        self.name, self.version, self.version_dir, self.counter = name, f"1.0.{counter}", str(counter), counter
        self.manifest_sha256, self.key_fingerprint, self.config_text = "ab" * 32, "cd" * 32, None
        self.files = {f"{counter}/model.onnx": sealed(model), f"{counter}/metadata.json": sealed(b"{}")}


DISK = 1 << 20


def packages(registry):
    """(tenant, name, {path: bytes}) of every entry, read back from its blobs."""
    out = []
    for t, n, e in registry.listing():
        extents = registry.files_of(e)
        out.append((t, n, {rel: os.pread(x.fd, x.size, 0) for rel, x in extents.items()}))
        for x in extents.values():
            x.close()
    return sorted(out)


def index(tmp_path, tenant: str = "acme"):
    return tmp_path / "tenants" / tenant / "registry.json"


def test_registry_persists_dedups_and_collects_blobs(tmp_path):
    r = Registry(str(tmp_path))
    r.record("acme", "m", Pkg("m", 1, b"model-a"), DISK)
    r.record("beta", "m", Pkg("m", 1, b"model-a"), DISK)
    assert len(os.listdir(tmp_path / "blobs")) == 2            # identical bytes stored once
    reopened = Registry(str(tmp_path))
    assert [(t, n, f["1/model.onnx"]) for t, n, f in packages(reopened)] == [
        ("acme", "m", b"model-a"), ("beta", "m", b"model-a")]
    reopened.record("acme", "m", Pkg("m", 2, b"model-b"), DISK)
    reopened.forget("beta", "m")
    assert [(t, n, sorted(f)) for t, n, f in packages(Registry(str(tmp_path)))] == [
        ("acme", "m", ["2/metadata.json", "2/model.onnx"])]
    assert len(os.listdir(tmp_path / "blobs")) == 2
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]   # no temporary file outlives a write
    for tenant in ("acme", "beta"):
        assert (index(tmp_path, tenant).with_suffix(".json.last-good").read_bytes() == index(tmp_path, tenant).read_bytes())


def test_a_foreign_or_garbage_index_is_set_aside_and_the_last_good_one_used(tmp_path):
    r = Registry(str(tmp_path))
    r.record("acme", "m", Pkg("m", 1, b"model-a"), DISK)
    r.record("acme", "n", Pkg("n", 1, b"model-n"), DISK)
    r.record("beta", "o", Pkg("o", 1, b"model-o"), DISK)
    last_good = index(tmp_path).with_suffix(".json.last-good")
    for garbage in (json.dumps({"format": 99}), json.dumps({"format": 3, "tenant": "beta", "models": {}}), "", "{not json",
                    "\xff\xfe"):
        index(tmp_path).write_text(garbage)
        reopened = Registry(str(tmp_path))
        assert [(t, n) for t, n, _ in reopened.listing()] == [("acme", "m"), ("acme", "n"), ("beta", "o")]
        assert any("restored the last good registry" in line for line in reopened.damaged), reopened.damaged
        assert not reopened.unusable
        # set aside, and written again from what is served from now on
        assert index(tmp_path).read_bytes() == last_good.read_bytes()
        reopened.record("acme", "n", Pkg("n", 1, b"model-n"), DISK)
    assert len([p for p in os.listdir(index(tmp_path).parent) if ".damaged-" in p]) >= 1
    index(tmp_path).write_text("")
    last_good.write_text("[]")
    broken = Registry(str(tmp_path))   # both unusable: that tenant's index is refused until repaired, the other's serves
    assert [(t, n) for t, n, _ in broken.listing()] == [("beta", "o")] and "acme" in broken.unusable
    assert "registry.json" in broken.unusable["acme"] and "not JSON" in broken.unusable["acme"]
    blobs = sorted(os.listdir(tmp_path / "blobs"))
    broken.forget("beta", "o")
    assert sorted(os.listdir(tmp_path / "blobs")) == blobs, "no blob is collected while a tenant's index is unknown"
    broken.repair("acme")
    assert Registry(str(tmp_path)).unusable == {}


def test_the_earlier_layout_is_split_into_one_index_per_tenant(tmp_path):
    r = Registry(str(tmp_path))
    r.record("acme", "m", Pkg("m", 1, b"model-a"), DISK)
    r.record("beta", "o", Pkg("o", 1, b"model-o"), DISK)
    earlier = {"format": 2, "tenants": {t: json.loads(index(tmp_path, t).read_text())["models"] for t in ("acme", "beta")}}
    shutil.rmtree(tmp_path / "tenants")
    (tmp_path / "registry.json").write_text(json.dumps(earlier))
    split = Registry(str(tmp_path))
    assert [(t, n) for t, n, _ in split.listing()] == [("acme", "m"), ("beta", "o")] and not split.unusable
    assert not (tmp_path / "registry.json").exists() and (tmp_path / "registry.json.migrated").exists()


def test_a_missing_blob_costs_only_its_model(tmp_path):
    r = Registry(str(tmp_path))
    r.record("acme", "m", Pkg("m", 1, b"model-a"), DISK)
    r.record("beta", "m", Pkg("m", 1, b"model-b"), DISK)
    [entry] = [e for t, _, e in r.listing() if t == "beta"]
    os.unlink(tmp_path / "blobs" / entry["files"]["1/model.onnx"])
    (tmp_path / "blobs" / ".0123456789abcdef.a1b2c3d4").write_bytes(b"torn")   # a write killed mid-way
    reopened = Registry(str(tmp_path))
    assert [(t, n) for t, n, _ in reopened.listing()] == [("acme", "m")]
    assert reopened.damaged == ["beta/m: 1 blob(s) missing, dropped"]
    assert not [p for p in os.listdir(tmp_path / "blobs") if p.startswith(".")]


def test_the_disk_budget_is_per_tenant_and_a_refused_record_changes_nothing(tmp_path):
    r = Registry(str(tmp_path))
    r.record("acme", "m", Pkg("m", 1, b"a" * 600), 1000)
    before = index(tmp_path).read_bytes(), sorted(os.listdir(tmp_path / "blobs"))
    with pytest.raises(RtdError) as e:
        r.record("acme", "n", Pkg("n", 1, b"b" * 600), 1000)
    assert e.value.code == Code.E_BUDGET_EXCEEDED and "disk_bytes" in e.value.detail
    assert (index(tmp_path).read_bytes(), sorted(os.listdir(tmp_path / "blobs"))) == before
    r.record("beta", "n", Pkg("n", 1, b"b" * 600), 1000)       # another tenant's budget is its own

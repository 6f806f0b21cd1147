"""Policy parsing: protective defaults, per-tenant overrides, refusals with E_POLICY_INVALID."""
import pytest

from rtd.errors import Code, RtdError
from rtd.sandbox import Policy, TenantIdentity, load_policy


def test_defaults_protect():
    p = load_policy()
    assert p.strict and not p.unsafe_disable_seccomp and not p.disable_userns
    assert {"namespaces", "mounts", "memory", "pids", "privileges", "seccomp"} <= set(p.mandatory)
    assert p.limits.memory_bytes == 1 << 30 and p.limits.pids == 64


def test_overrides_merge_per_key():
    p = load_policy({"limits": {"memory_bytes": 256 << 20}, "strict": False})
    assert p.limits.memory_bytes == 256 << 20 and p.limits.pids == 64 and not p.strict


def test_round_trip_through_json_safe_dict():
    p = load_policy({"limits": {"cpu_cores": 0.5, "gpu_devices": [0, 2], "gpu_memory_bytes": 1 << 30}})
    assert Policy.from_dict(p.to_dict()) == p and p.limits.gpu_devices == (0, 2)


@pytest.mark.parametrize("overrides, needle", [
    ({"memroy": 1}, "unknown key 'memroy'"),
    ({"limits": {"memory": 1}}, "unknown key limits.'memory'"),
    ({"limits": {"pids": "64"}}, "limits.pids has the wrong type"),
    ({"limits": {"pids": True}}, "limits.pids has the wrong type"),
    ({"strict": 1}, "strict has the wrong type"),
    ({"limits": {"gpu_memory_bytes": 1 << 30}}, "a GPU needs a memory budget"),
    ({"limits": {"gpu_devices": [0]}}, "a GPU needs a memory budget"),
    ({"limits": {"gpu_devices": [1, 0], "gpu_memory_bytes": 1}}, "distinct GPU indices"),
    ({"limits": {"gpu_devices": [0, 0], "gpu_memory_bytes": 1}}, "distinct GPU indices"),
    ({"limits": {"gpu_devices": ["0"], "gpu_memory_bytes": 1}}, "limits.gpu_devices has the wrong type"),
    ({"limits": {"memory_bytes": 1024}}, "limits.memory_bytes=1024 outside"),
    ({"limits": {"cpu_cores": 0}}, "limits.cpu_cores=0.0 outside"),
    ({"limits": {"cpu_cores": float("nan")}}, "limits.cpu_cores has the wrong type"),
    ({"limits": {"pids": -1}}, "limits.pids=-1 outside"),
    ({"mandatory": ["seccomp", "magic"]}, "unknown layer 'magic'"),
    ({"ro_binds": ["usr"]}, "ro_binds entry 'usr'"),
    ({"ro_binds": ["/usr/../etc"]}, "ro_binds entry"),
    ({"cgroup_parent": "rtd"}, "cgroup_parent 'rtd'"),
    ({"limits": 5}, "limits. must be a table"),
])
def test_refusals_name_the_problem(overrides, needle):
    with pytest.raises(RtdError) as e:
        load_policy(overrides)
    assert e.value.code is Code.E_POLICY_INVALID
    assert needle in e.value.detail


def test_bad_policy_file(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text("strict = [")
    with pytest.raises(RtdError) as e:
        load_policy(path=bad)
    assert e.value.code is Code.E_POLICY_INVALID


@pytest.mark.parametrize("name, uid, gid", [("acme", 0, 61000), ("acme", 61000, 0), ("a/b", 61000, 61000),
                                            ("", 61000, 61000), ("acme", "61000", 61000)])
def test_tenant_identity_refuses_root_and_odd_names(name, uid, gid):
    with pytest.raises(RtdError) as e:
        TenantIdentity(name, uid, gid)
    assert e.value.code is Code.E_POLICY_INVALID

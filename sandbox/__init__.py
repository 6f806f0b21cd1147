"""Confinement of worker processes: namespaces, cgroups, seccomp, privileges, the launcher.

Public interface: Zygote (start, spawn, prepare, spares, settle, close; + WorkerHandle), Policy,
load_policy, TenantIdentity, ExitStatus, SandboxKilled, ConfinedError, run_confined, host_report,
and for a daemon's start: cleanup_instance(detect_layout(), policy.cgroup_parent, instance)."""
from rtd.sandbox.cgroup import cleanup_instance, detect_layout
from rtd.sandbox.confined import ConfinedError, SandboxKilled, run_confined
from rtd.sandbox.contain import ExitStatus
from rtd.sandbox.host import host_report
from rtd.sandbox.policy import Policy, TenantIdentity, load_policy
from rtd.sandbox.zygote import WorkerHandle, Zygote

__all__ = ["ConfinedError", "ExitStatus", "Policy", "SandboxKilled", "TenantIdentity", "WorkerHandle", "Zygote",
           "cleanup_instance", "detect_layout", "host_report", "load_policy", "run_confined"]

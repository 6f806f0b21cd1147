"""Confinement of worker processes: namespaces, cgroups, seccomp, privileges, the launcher.

Public interface: Zygote (spawn, prepare, spares, settle, close; + WorkerHandle), Policy,
load_policy, TenantIdentity, ExitStatus, SandboxKilled, ConfinedError, run_confined, host_report."""
from rtd.sandbox.confined import ConfinedError, SandboxKilled, run_confined
from rtd.sandbox.contain import ExitStatus
from rtd.sandbox.host import host_report
from rtd.sandbox.policy import Policy, TenantIdentity, load_policy
from rtd.sandbox.zygote import WorkerHandle, Zygote

__all__ = ["ConfinedError", "ExitStatus", "Policy", "SandboxKilled", "TenantIdentity", "WorkerHandle", "Zygote",
           "host_report", "load_policy", "run_confined"]

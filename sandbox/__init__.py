"""Confinement of worker processes: namespaces, cgroups, seccomp, privileges, the launcher."""

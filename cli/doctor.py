"""rtctl doctor: what this host enforces (kernel, cgroups, user namespaces, seccomp, dmem,
GPU, and which GPU memory limit a GPU tenant gets and what it does not cover), then the escape battery, each attempt inside a worker confined by the production
policy: attempt → the layer observed to stop it (from the signal that killed the worker, or
the errno and the call that got it) → the layers expected after it → result. Exits 1 if
anything escaped."""
import json
import logging

from rtd.daemon.observe import gpu_watch
from rtd.cli.output import show, table
from rtd.sandbox import host_report, load_policy
from rtd.sandbox.escapes import BY_NAME, run_battery
from rtd.sandbox.syscalls import check_architecture


def register(commands) -> None:
    p = commands.add_parser("doctor", help="report what this host enforces and run the escape battery")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--policy", help="policy file (default: the shipped production policy)")
    p.set_defaults(func=doctor)


def doctor(args) -> int:
    logging.getLogger("rtd.sandbox").setLevel(logging.ERROR)   # the table says what is missing
    report = host_report()
    report["nvml_gpus"] = gpu_watch.probe()
    if not args.json:
        show(_host_table(report))
    check_architecture()   # no battery where workers cannot be confined: the line says why
    results = run_battery(load_policy(path=args.policy))
    escaped = [r.name for r in results if not r.blocked]
    if args.json:
        print(json.dumps({"ok": not escaped, "host": report, "escaped": escaped,
                          "battery": [r.__dict__ for r in results]}, indent=2))
        return 1 if escaped else 0
    battery = table(f"escape battery: {len(results)} attempts, each in a confined worker (production policy)",
                    "attempt", "stopped by (observed)", "expected after it", "result")
    for r in results:
        verdict = f"[green]blocked[/green] ({r.how})" if r.blocked else f"[bold red]ESCAPED[/bold red] ({r.how})"
        observed = r.layer or ("[yellow]unattributed[/yellow]" if r.blocked else "-")
        stops = BY_NAME[r.name].stops
        after = stops[stops.index(r.layer) + 1:] if r.layer in stops else stops
        battery.add_row(r.name, observed, ", ".join(after) or "none", verdict)
    show(battery)
    show(f"[bold red]{len(escaped)} escaped: {', '.join(escaped)}[/bold red]" if escaped
         else f"[green]all {len(results)} attempts blocked[/green]")
    return 1 if escaped else 0


def _host_table(report: dict):
    host = table(f"rtd doctor — kernel {report['kernel']}, cgroups {report['cgroup']['mode']}", "layer", "on this host")
    style = "green" if report["architecture"].startswith("supported") else "red"
    host.add_row("architecture", f"[{style}]{report['architecture']}[/{style}]")
    for layer, state in report["layers"].items():
        style = "green" if state.startswith("enforced") else "yellow" if state.startswith("advisory") else "red"
        host.add_row(layer, f"[{style}]{state}[/{style}]")
    host.add_row("cgroup hierarchies", f"v2 {report['cgroup']['v2_root']} controllers "
                 f"{report['cgroup']['v2_controllers'] or 'none'}; v1 {sorted(report['cgroup']['v1_controllers'])}")
    for hierarchy, base in report["cgroup"]["writable"].items():
        style = "green" if base["writable"] else "red"
        host.add_row(f"cgroup {hierarchy}", f"[{style}]{base['base']} "
                     f"{'writable' if base['writable'] else 'NOT writable: workers cannot start'}[/{style}]")
    host.add_row("dmem", str(report["dmem"]))
    for row, key in (("GPU devices", "gpu"), ("GPU driver libraries", "gpu_libraries")):
        found = report[key]
        host.add_row(row, ", ".join(found) if isinstance(found, list) else f"[yellow]{found}[/yellow]")
    style = "green" if report["gpu_seccomp"].startswith("compiles") else "red"
    host.add_row("GPU seccomp filter", f"[{style}]{report['gpu_seccomp']}[/{style}]")
    gate = report["gpu_driver"]
    style = "green" if gate.startswith("enforced") else "red" if gate.startswith("refuses") else "yellow"
    host.add_row("GPU driver gate", f"[{style}]{gate}[/{style}]")
    limit = report["gpu_memory_limit"]
    style = "green" if limit.startswith("enforced") else "yellow" if limit.startswith("advisory") else "red"
    host.add_row("GPU memory limit", f"[{style}]{limit}[/{style}]")
    style = "red" if report["nvml_gpus"].startswith("cannot attribute") else "default"
    host.add_row("NVML", f"[{style}]{report['nvml']}; {report['nvml_gpus']}[/{style}]")
    host.add_row("MPS", str(report["mps"]))
    host.add_row("CPU kernels", "[green]compiled (kernels/native, built at install)[/green]" if report["cpu_kernels"] == "compiled"
                 else "[yellow]numpy (the compiled kernels are not installed: slower, same results)[/yellow]")
    return host

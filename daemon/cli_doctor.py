"""rtctl doctor: what this host enforces (kernel, cgroups, user namespaces, seccomp, dmem,
GPU), then the escape battery, each attempt inside a worker confined by the production
policy: attempt → blocked by which layer → result. Exits 1 if anything escaped."""
import json
import logging

from rich.console import Console
from rich.table import Table

from rtd.sandbox import host_report, load_policy
from rtd.sandbox.escapes import BY_NAME, run_battery


def register(commands) -> None:
    p = commands.add_parser("doctor", help="report what this host enforces and run the escape battery")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--policy", help="policy file (default: the shipped production policy)")
    p.set_defaults(func=doctor)


def doctor(args) -> int:
    logging.getLogger("rtd.sandbox").setLevel(logging.ERROR)   # the table says what is missing
    report = host_report()
    results = run_battery(load_policy(path=args.policy))
    escaped = [r.name for r in results if not r.blocked]
    if args.json:
        print(json.dumps({"ok": not escaped, "host": report, "escaped": escaped,
                          "battery": [r.__dict__ for r in results]}, indent=2))
        return 1 if escaped else 0
    console = Console()
    host = Table(title=f"rtd doctor — kernel {report['kernel']}, cgroups {report['cgroup']['mode']}")
    host.add_column("layer")
    host.add_column("on this host")
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
    console.print(host)
    battery = Table(title=f"escape battery: {len(results)} attempts, each in a confined worker (production policy)")
    for col in ("attempt", "blocked by", "next layer", "result"):
        battery.add_column(col)
    for r in results:
        verdict = f"[green]blocked[/green] ({r.how})" if r.blocked else f"[bold red]ESCAPED[/bold red] ({r.how})"
        battery.add_row(r.name, r.layer or "-", ", ".join(BY_NAME[r.name].stops[1:]) or "none", verdict)
    console.print(battery)
    console.print(f"[bold red]{len(escaped)} escaped: {', '.join(escaped)}[/bold red]" if escaped
                  else f"[green]all {len(results)} attempts blocked[/green]")
    return 1 if escaped else 0

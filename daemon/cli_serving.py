"""rtctl load / run / list / unload / status: the serving commands, spoken over the daemon's
gRPC (KServe v2 messages, tenant token; status also needs the admin token). Without
--socket/--url and --token*, they use the embedded default's state dir ($RTD_STATE_DIR or
./state): its socket, dev.token and admin.token."""
import json
import os

import grpc
import numpy as np
from rich.console import Console
from rich.table import Table

from rtd.daemon.client import Client, default_state_dir, read_token
from rtd.errors import Code, RtdError
from rtd.loader import metadata as package_metadata
from rtd.loader.intake import read_package

PREVIEW = 6


def _connection(parser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument("--socket", help="daemon Unix socket (default STATE/rtd.sock)")
    group.add_argument("--url", help="host:port of a TCP listener (mTLS: --tls-ca/--tls-cert/--tls-key)")
    group.add_argument("--tls-ca"), group.add_argument("--tls-cert"), group.add_argument("--tls-key")
    group.add_argument("--token", help="tenant bearer token (prefer --token-file)")
    group.add_argument("--token-file", help="file holding the tenant token (default STATE/dev.token)")
    group.add_argument("--state-dir", help="embedded default's state dir (default $RTD_STATE_DIR or ./state)")


def _client(args) -> Client:
    state = args.state_dir or default_state_dir()
    token = args.token or read_token(args.token_file or os.path.join(state, "dev.token"))
    if args.url:
        creds = None
        if args.tls_ca:
            def read(p):
                with open(p, "rb") as f:
                    return f.read()
            creds = grpc.ssl_channel_credentials(read(args.tls_ca), args.tls_key and read(args.tls_key),
                                                 args.tls_cert and read(args.tls_cert))
        return Client(args.url, token, creds)
    return Client(f"unix:{args.socket or os.path.join(state, 'rtd.sock')}", token)


def _package_files(path: str) -> tuple[str, dict]:
    """Read a package (dir or tar) with the loader's safe intake; (signed name, files)."""
    fileset = read_package(path)
    try:
        files = {rel: sealed.bytes() for rel, sealed in fileset.files.items()}
    finally:
        fileset.close()
    meta = [data for rel, data in files.items() if rel.endswith("/" + "metadata.json")]
    if len(meta) != 1:
        raise RtdError(Code.E_FILE_MISSING, "the package has no single <version>/metadata.json")
    return package_metadata.parse(meta[0])["name"], files


def cmd_load(args) -> int:
    name, files = _package_files(args.package)
    size = sum(len(b) for b in files.values())
    with _client(args) as client, Console(stderr=True).status(f"uploading {name} ({size / 1e6:.1f} MB, verified by the daemon)"):
        client.load(args.name or name, files)
    print(json.dumps({"ok": True, "loaded": args.name or name}) if args.json else f"loaded {args.name or name}")
    return 0


def _read_inputs(specs: list[str]) -> dict:
    inputs = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name:
            raise RtdError(Code.E_REQUEST_INVALID, f"--input {spec!r}: expected NAME=FILE.npy")
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise RtdError(Code.E_REQUEST_INVALID, f"--input {name}: {e}") from None
    return inputs


def cmd_run(args) -> int:
    inputs = _read_inputs(args.input)
    with _client(args) as client:
        outputs = client.infer(args.model, inputs, args.output or None, timeout=args.timeout)
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
        for name, value in outputs.items():
            np.save(os.path.join(args.output_dir, f"{name}.npy"), value, allow_pickle=False)
    if args.json:
        print(json.dumps({"ok": True, "outputs": {n: {"dtype": v.dtype.name, "shape": list(v.shape),
                                                         "data": v.tolist() if v.size <= 4096 else None}
                                                     for n, v in outputs.items()}}))
        return 0
    table = Table(title=f"{args.model} outputs")
    for column in ("output", "dtype", "shape", "values"):
        table.add_column(column)
    for name, v in outputs.items():
        flat = v.reshape(-1)
        preview = np.array2string(flat[:PREVIEW], precision=4) + (" …" if flat.size > PREVIEW else "")
        table.add_row(name, v.dtype.name, str(list(v.shape)), preview)
    Console().print(table)
    return 0


def cmd_list(args) -> int:
    with _client(args) as client:
        models = client.index()
    if args.json:
        print(json.dumps([{"name": m.name, "version": m.version, "state": m.state, "reason": m.reason} for m in models]))
        return 0
    table = Table(title="models")
    for column in ("name", "version", "state", "reason"):
        table.add_column(column)
    for m in models:
        table.add_row(m.name, m.version, m.state, m.reason)
    Console().print(table)
    return 0


def cmd_unload(args) -> int:
    with _client(args) as client:
        client.unload(args.model)
    print(json.dumps({"ok": True, "unloaded": args.model}) if args.json else f"unloaded {args.model}")
    return 0


def cmd_status(args) -> int:
    state = args.state_dir or default_state_dir()
    admin = read_token(args.admin_token_file or os.path.join(state, "admin.token"))
    with _client(args) as client:
        status = client.status(admin)
    if args.json:
        print(json.dumps(status))
        return 0
    table = Table(title=f"rtd status (ready: {status['ready']})")
    for column in ("tenant", "model", "version", "state", "instances", "memory", "reason"):
        table.add_column(column)
    for t in status["tenants"]:
        limit = t["memory_limit_bytes"]
        if not t["models"]:
            table.add_row(t["tenant"], "-", "", "", "", f"0 of {limit / 2**20:.0f} MiB", "")
        for name, m in t["models"].items():
            instances = (m["serving"] or {}).get("instances", [])
            live = [i for i in instances if i["live"]]
            memory = sum(i["memory_bytes"] or 0 for i in live)
            configured = (m["serving"] or {}).get("configured_instances", 0)
            table.add_row(t["tenant"], name, m["version"], m["state"], f"{len(live)}/{configured} live",
                          f"{memory / 2**20:.1f} MiB", m["reason"])
    Console().print(table)
    for line in status["damaged"]:
        Console(stderr=True).print(f"[yellow]state directory: {line}[/yellow]")
    return 0


def register(commands) -> None:
    load = commands.add_parser("load", help="upload a signed package to the daemon")
    load.add_argument("package", help="package directory or .tar/.tar.gz")
    load.add_argument("--name", help="model name (default: the signed name)")
    run = commands.add_parser("run", help="run one inference request")
    run.add_argument("model")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", required=True)
    run.add_argument("--output", action="append", default=[], metavar="NAME", help="only these outputs")
    run.add_argument("--output-dir", help="write each output as NAME.npy here")
    run.add_argument("--timeout", type=float, default=60.0, help="seconds")
    listing = commands.add_parser("list", help="the tenant's models")
    unload = commands.add_parser("unload", help="unload a model")
    unload.add_argument("model")
    status = commands.add_parser("status", help="tenants, workers, confinement layers, memory, restarts (admin)")
    status.add_argument("--admin-token-file", help="default STATE/admin.token")
    for parser, func in ((load, cmd_load), (run, cmd_run), (listing, cmd_list), (unload, cmd_unload), (status, cmd_status)):
        _connection(parser)
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.set_defaults(func=func)

"""rtctl load / run / list / unload / status: the serving commands, spoken over the daemon's
gRPC (KServe v2 messages, tenant token; status needs the admin token only). Without
--socket/--url and --token*, they use the embedded default's state dir (--state-dir,
$RTD_STATE_DIR or ~/.local/state/rtd): its socket, dev.token and admin.token."""
import collections
import json
import os
import re
import time

import grpc
import numpy as np
from rich.console import Console

from rtd.cli.output import show, table
from rtd.cli.package import check_package_path
from rtd.cli.client import Client, read_token
from rtd.daemon.config import default_state_dir
from rtd.proto import TRACE_OUTPUT
from rtd.errors import Code, RtdError
from rtd.loader import metadata as package_metadata
from rtd.loader.intake import read_package

PREVIEW = 6


def _connection(parser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument("--socket", help="daemon Unix socket (default STATE/rtd.sock)")
    group.add_argument("--url", help="host:port of a TCP listener (mTLS: --tls-ca/--tls-cert/--tls-key)")
    group.add_argument("--tls-ca", help="CA certificate (PEM) the daemon's TLS certificate must chain to")
    group.add_argument("--tls-cert", help="this client's certificate (PEM) for mTLS")
    group.add_argument("--tls-key", help="this client's private key (PEM) for mTLS")
    group.add_argument("--token", help="tenant bearer token (prefer --token-file)")
    group.add_argument("--token-file", help="file holding the tenant token (default STATE/dev.token)")
    group.add_argument("--state-dir", help="embedded default's state dir (default $RTD_STATE_DIR or ~/.local/state/rtd)")


def state_dir(explicit: str | None) -> str:
    """The state directory `rtd serve` made (the embedded default's), or E_STATE_MISSING."""
    state = os.path.abspath(explicit) if explicit else default_state_dir()
    if not os.path.isdir(state):
        raise RtdError(Code.E_STATE_MISSING, f"{state}: start `rtd serve` (it creates it), or pass --state-dir "
                                             "or set RTD_STATE_DIR to the one it uses")
    return state


def _client(args, tenant: bool = True) -> Client:
    token = None
    if tenant:
        token = args.token or read_token(args.token_file or os.path.join(state_dir(args.state_dir), "dev.token"),
                                         "--token-file")
    if args.url:
        creds = None
        if args.tls_ca:
            def read(p):
                with open(p, "rb") as f:
                    return f.read()
            creds = grpc.ssl_channel_credentials(read(args.tls_ca), args.tls_key and read(args.tls_key),
                                                 args.tls_cert and read(args.tls_cert))
        return Client(args.url, token, creds)
    return Client(f"unix:{args.socket or os.path.join(state_dir(args.state_dir), 'rtd.sock')}", token)


def _package_files(path: str) -> tuple[str, dict]:
    """Read a package (dir or tar) with the loader's safe intake; (signed name, files)."""
    fileset = read_package(check_package_path(path))
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
        try:
            client.load(args.name or name, files)
        except RtdError as e:
            if e.code != Code.E_KEY_UNTRUSTED:
                raise
            raise RtdError(e.code, f"{e.detail}; trust the signing key first: rtctl trust add KEY.pub.pem") from None
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


def _file_name(output: str, taken: set, directory: str) -> str:
    """OUTPUT.npy with every character but letters, digits, '-', '_' and '.' made '_' and no leading
    dot: exporters name outputs 'save_infer_model/scale_0.tmp_1' (paddle2onnx), and a package's output
    name must never choose where rtctl writes ('../x'); a clash gets a numeric suffix."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", output).lstrip(".")[:200] or "output"
    name, n = f"{stem}.npy", 1
    while os.path.join(directory, name) in taken:
        n += 1
        name = f"{stem}_{n}.npy"
    return name


def cmd_run(args) -> int:
    inputs = _read_inputs(args.input)
    with _client(args) as client:
        start = time.perf_counter()
        outputs = client.infer(args.model, inputs, args.output or None, timeout=args.timeout)
        latency_ms = (time.perf_counter() - start) * 1e3
    files = {}
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
        for name, value in outputs.items():
            files[name] = os.path.join(args.output_dir, _file_name(name, set(files.values()), args.output_dir))
            np.save(files[name], value, allow_pickle=False)
    if args.json:   # every value, and where --output-dir wrote it
        print(json.dumps({"ok": True, "latency_ms": round(latency_ms, 3), "outputs": {
            n: {"dtype": v.dtype.name, "shape": list(v.shape), "data": v.tolist(), **({"file": files[n]} if n in files else {})}
            for n, v in outputs.items()}}))
        return 0
    result = table(f"{args.model} outputs ({latency_ms:.1f} ms round trip)", "output", "dtype", "shape",
                   "values" if not files else "file")
    for name, v in outputs.items():
        flat = v.reshape(-1)
        preview = np.array2string(flat[:PREVIEW], precision=4) + (" …" if flat.size > PREVIEW else "")
        result.add_row(name, v.dtype.name, str(list(v.shape)), files.get(name, preview))
    show(result)
    return 0


def cmd_profile(args) -> int:
    """One request timed step by step inside the tenant's own worker: its Chrome trace to --out
    (chrome://tracing, ui.perfetto.dev) and the slowest steps on the terminal."""
    inputs = _read_inputs(args.input)
    with _client(args) as client:
        outputs = client.infer(args.model, inputs, args.output or None, timeout=args.timeout, profile=True)
    document = outputs[TRACE_OUTPUT].reshape(-1)[0]
    try:
        events = json.loads(document)["traceEvents"]
    except (ValueError, KeyError, TypeError):
        raise RtdError(Code.E_WORKER_PROTOCOL, "the trace that came back is not a Chrome trace") from None
    with open(args.out, "wb") as f:
        f.write(document)
    steps = collections.Counter()
    for event in events:
        if isinstance(event, dict) and event.get("cat") == "op":
            steps[str(event.get("name"))] += float(event.get("dur", 0))
    total = sum(steps.values())
    if args.json:
        print(json.dumps({"ok": True, "trace": args.out, "steps": len(events) - 1, "total_us": round(total, 1),
                          "slowest": [{"step": n, "us": round(us, 1)} for n, us in steps.most_common(PREVIEW)]}))
        return 0
    result = table(f"{args.model}: {total / 1e3:.2f} ms in the worker, trace in {args.out}", "step", "µs", "share")
    for name, us in steps.most_common(PREVIEW):
        result.add_row(name, f"{us:.1f}", f"{us / total:.0%}" if total else "-")
    show(result)
    return 0


def cmd_list(args) -> int:
    with _client(args) as client:
        models = client.index()
    if args.json:
        print(json.dumps([{"name": m.name, "version": m.version, "state": m.state, "reason": m.reason} for m in models]))
        return 0
    result = table("models", "name", "version", "state", "reason")
    for m in models:
        result.add_row(m.name, m.version, m.state, m.reason)
    show(result)
    return 0


def cmd_unload(args) -> int:
    with _client(args) as client:
        client.unload(args.model)
    print(json.dumps({"ok": True, "unloaded": args.model}) if args.json else f"unloaded {args.model}")
    return 0


def admin_token(args) -> str:
    return read_token(args.admin_token_file or os.path.join(state_dir(args.state_dir), "admin.token"),
                      "--admin-token-file")


def cmd_status(args) -> int:
    with _client(args, tenant=False) as client:
        status = client.status(admin_token(args))
    if args.json:
        print(json.dumps(status))
        return 0
    result = table(f"rtd status (ready: {status['ready']})", "tenant", "model", "version", "state", "instances",
                   "memory", "reason")
    for t in status["tenants"]:
        limit = t["memory_limit_bytes"]
        if not t["models"]:
            result.add_row(t["tenant"], "-", "", "", "", f"0 of {limit / 2**20:.0f} MiB", "")
        for name, m in t["models"].items():
            instances = (m["serving"] or {}).get("instances", [])
            live = [i for i in instances if i["live"]]
            memory = sum(i["memory_bytes"] or 0 for i in live)
            configured = (m["serving"] or {}).get("configured_instances", 0)
            result.add_row(t["tenant"], name, m["version"], m["state"], f"{len(live)}/{configured} live",
                           f"{memory / 2**20:.1f} MiB", m["reason"])
    show(result)
    for line in status["damaged"]:
        show(f"[yellow]state directory: {line}[/yellow]", stderr=True)
    for t in status["tenants"]:
        if t.get("state_damaged"):
            show(f"[red]{t['tenant']}: loads refused: {t['state_damaged']} (rtctl state repair --tenant {t['tenant']})[/red]",
                 stderr=True)
        for name, outcome in (t.get("load_at_start") or {}).items():
            if outcome not in ("loaded", "pending", "loading"):
                show(f"[yellow]{t['tenant']}: load at start of {name}: {outcome}[/yellow]", stderr=True)
    return 0


def cmd_repair(args) -> int:
    """rtctl state repair: the operator's decision that a tenant's damaged state files be written
    again from what the daemon knows now (its loads are refused until then)."""
    with _client(args, tenant=False) as client:
        done = client.repair(admin_token(args), args.tenant)
    if args.json:
        print(json.dumps({"tenant": args.tenant, "done": done}))
        return 0
    for line in done:
        show(f"{args.tenant}: {line}")
    return 0


def register(commands) -> None:
    load = commands.add_parser("load", help="upload a signed package to the daemon")
    load.add_argument("package", help="package directory or .tar/.tar.gz")
    load.add_argument("--name", help="model name (default: the signed name)")
    run = commands.add_parser("run", help="run one inference request")
    run.add_argument("--output-dir", help="write each output as NAME.npy here (characters outside [A-Za-z0-9._-] become _)")
    profile = commands.add_parser("profile", help="run one request timed step by step in the worker; write its Chrome trace")
    profile.add_argument("--out", default="trace.json", help="where the Chrome trace goes (default trace.json)")
    for parser in (run, profile):   # what makes the request, the same for both
        parser.add_argument("model")
        parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", required=True,
                            help="an input tensor from a .npy file (repeat for each input)")
        parser.add_argument("--output", action="append", default=[], metavar="NAME", help="only these outputs")
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds")
    listing = commands.add_parser("list", help="the tenant's models")
    unload = commands.add_parser("unload", help="unload a model")
    unload.add_argument("model")
    status = commands.add_parser("status", help="tenants, workers, confinement layers, memory, restarts (admin)")
    status.add_argument("--admin-token-file", help="file holding the admin token (default STATE/admin.token); "
                        "no tenant token is needed")
    state = commands.add_parser("state", help="the daemon's durable state of a tenant (admin)")
    repair = state.add_subparsers(dest="action", required=True, metavar="ACTION").add_parser(
        "repair", help="write a tenant's damaged registry index or rollback marks again from what the daemon knows, "
                       "and read its trust store again; its loads are refused until this is done (admin)")
    repair.add_argument("--tenant", default="dev", help="tenant id (default dev, the embedded default's)")
    repair.add_argument("--admin-token-file", help="file holding the admin token (default STATE/admin.token)")
    for parser, func in ((load, cmd_load), (run, cmd_run), (profile, cmd_profile), (listing, cmd_list), (unload, cmd_unload),
                         (status, cmd_status), (repair, cmd_repair)):
        _connection(parser)
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.set_defaults(func=func)

"""`rtd serve [--config FILE]`: wire the daemon together and run it until SIGTERM.

Order matters: the sandbox zygote is forked FIRST, before any thread exists (forking a
threaded process is unsafe); then the soft fd limit is raised to the hard one, the event
loop starts, the supervisor restores its models, the listeners come up, systemd hears
READY=1, and only then each tenant's `load` list loads from its model repository, in the
background (a tenant's repository delays nobody else). WATCHDOG=1 pings come from the event loop itself, so a stuck loop
stops them. SIGHUP reloads tenant tokens and trust stores (a bad config keeps the old one
and says why); SIGTERM/SIGINT drain: no new connections or calls, requests in flight
finish within `drain_grace_s`, then the workers and the zygote stop.
"""
import os

# Workers are thread-frugal: the compiled kernels run their own pool (one thread per core of the
# tenant's) and BLAS runs single-threaded inside it. OpenBLAS sizes its thread server from this
# variable when the library loads, here, before any import below brings NumPy in; without it every
# worker would start one BLAS thread per host CPU (per OpenBLAS: NumPy's and SciPy's) against its
# tenant's pids limit.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import asyncio
import contextlib
import dataclasses
import fcntl
import grp
import hashlib
import resource
import signal
import socket
import sys
import time

from rtd import commandline
from rtd.daemon.transport import grpc_h2, rest_h1
from rtd.daemon.transport.contract import TransportLimits
from rtd.daemon.transport.table import ConnectionTable, tls_context
from rtd.daemon import config as configuration
from rtd.daemon.observe.events import EventLog
from rtd.daemon.fronts.grpc import Front
from rtd.daemon.fronts import rest as rest_front
from rtd.daemon.observe.metrics import Metrics
from rtd.daemon.observe.metrics_listener import MetricsListener
from rtd.daemon.serving.supervisor import Supervisor
from rtd.errors import Code, RtdError
from rtd.sandbox import Zygote, cleanup_instance, detect_layout, load_policy
from rtd.sandbox.syscalls import check_architecture

WORKER_MODULE = "rtd.daemon.worker.main"
DECODER_MODULE = "rtd.daemon.worker.upload"   # the confined upload decoder (serving/uploads.py)
LOCK_WAIT_S = 5.0
FD_RESERVE_FRACTION = 4   # a quarter of the fd limit stays for workers' sockets, memfds and files


def sd_notify(message: str) -> None:
    """Tell systemd (Type=notify) how we are; a no-op outside systemd."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    if path.startswith("@"):
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        s.connect(path)
        s.sendall(message.encode())


def instance_id(config: configuration.Config) -> str:
    """Names this daemon's cgroups: two daemons (two state dirs) on one host never share them."""
    return "i" + hashlib.sha256(os.path.realpath(config.state_dir).encode()).hexdigest()[:12]


def raise_fd_limit() -> int:
    """Soft fd limit up to the hard one; returns how many connections fit below it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft - max(64, soft // FD_RESERVE_FRACTION)


def raise_priority(nice: int) -> None:
    """Run the supervisor's thread at `nice`: calls of every tenant pass through its one event
    loop, which must not wait for CPU behind a tenant's flooding clients or busy workers. The
    fork server started before this keeps the daemon's own priority, and the confinement sets
    each tenant process to 0 whatever it inherits (sandbox/rlimits.py). Called before any thread
    starts, so the supervisor's threads share it. Without the privilege (rtd.service gives none:
    its Nice= sets it before the start), said once and left."""
    if os.getpriority(os.PRIO_PROCESS, 0) == nice:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as e:
        EventLog().emit("priority_unchanged", level="warning", nice=nice, reason=e.strerror)


async def _watchdog() -> None:
    usec = int(os.environ.get("WATCHDOG_USEC", "0") or 0)
    while usec > 0:
        sd_notify("WATCHDOG=1")
        await asyncio.sleep(usec / 2e6)


def _reload(supervisor: Supervisor, reread, events: EventLog, by: str) -> None:
    """SIGHUP or rtd.Admin/Reload (`by`): tokens and trust stores, all or nothing; a refusal
    keeps the old ones, is logged and raised."""
    try:
        supervisor.reload_config(reread())
    except (RtdError, OSError) as e:
        events.emit("reload_refused", level="error", by=by, reason=f"{type(e).__name__}: {e}"[:200])
        if isinstance(e, RtdError):
            raise
        raise RtdError(Code.E_IO, f"{e}; the old configuration stays") from None
    events.emit("reload", by=by, detail="tenant tokens and trust stores reloaded")


def _hangup(supervisor: Supervisor, reread, events: EventLog) -> None:
    with contextlib.suppress(RtdError):   # logged by _reload, and the old configuration stays
        _reload(supervisor, reread, events, "SIGHUP")


async def _listen_unix(table: ConnectionTable, path: str, make, config: configuration.Config) -> None:
    if os.path.exists(path):
        os.unlink(path)  # a stale socket from a previous run
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    await table.listen_unix(path, make)
    if config.unix_group:
        os.chown(path, -1, grp.getgrnam(config.unix_group).gr_gid)
    os.chmod(path, config.unix_mode)


async def _listen_tcp(table: ConnectionTable, address: str, context, make, choose: str = "another address") -> None:
    host, _, port = address.rpartition(":")
    try:
        await table.listen_tcp(host, int(port), context, make)
    except OSError as e:
        raise RtdError(Code.E_LISTEN_FAILED, f"{address}: {e.strerror}; stop what holds it or choose {choose}") from None


async def _serve(config: configuration.Config, reread, zygote: Zygote, max_connections: int) -> int:
    loop = asyncio.get_running_loop()
    events, metrics = EventLog(), Metrics()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    supervisor = Supervisor(config, zygote, metrics, events)
    loop.add_signal_handler(signal.SIGHUP, _hangup, supervisor, reread, events)
    limits = config.limits
    front = Front(supervisor, lambda: _reload(supervisor, reread, events, "admin"))
    table = ConnectionTable(TransportLimits(
        max_message_bytes=limits.max_message_bytes, max_connections=min(limits.max_connections, max_connections),
        max_connections_per_peer=limits.max_connections_per_peer,
        max_streams_per_connection=limits.max_streams_per_connection, auth_timeout_s=limits.connection_auth_timeout_s,
        idle_timeout_s=limits.connection_idle_s, send_timeout_s=limits.send_timeout_s), supervisor.ledger)
    watchdog = None
    listener = MetricsListener(metrics.exposition, lambda headers: supervisor.tenants.authenticate_metrics(headers))
    try:
        await supervisor.start()
        rest_routes = rest_front.Front(supervisor)

        def grpc(table, peer_of):
            return grpc_h2.Connection(table, front, peer_of)

        def rest(table, peer_of):
            return rest_h1.Connection(table, rest_routes, peer_of)
        addresses = []
        for path, make, what in ((config.unix_socket, grpc, ""), (config.rest_unix, rest, " (REST)")):
            if path:
                await _listen_unix(table, path, make, config)
                addresses.append(f"unix:{path}{what}")
        for address, make, alpn, what in ((config.tcp, grpc, "h2", ""), (config.rest_tcp, rest, "http/1.1", ", REST")):
            if address:
                await _listen_tcp(table, address, tls_context(config.tls_cert, config.tls_key, config.tls_client_ca, alpn), make)
                addresses.append(f"{address} (mTLS{what})")
        for address, make, what in ((config.unsafe_plaintext_tcp, grpc, ""), (config.unsafe_plaintext_rest_tcp, rest, "REST, ")):
            if address:
                await _listen_tcp(table, address, None, make)
                addresses.append(f"{address} ({what}plaintext: unsafe unless a mesh or proxy terminates mTLS)")
        for port, make, what, key in ((config.loopback_tcp, grpc, "gRPC", "grpc"), (config.loopback_rest_tcp, rest, "REST", "http")):
            if port:   # local users only, and every call carries its token (config refuses unsafe_anonymous here)
                await _listen_tcp(table, f"127.0.0.1:{port}", None, make,
                                  f"another: --{key}-port, or --no-tcp (listen.loopback_{'rest_' if key == 'http' else ''}tcp)")
                addresses.append(f"127.0.0.1:{port} ({what}, loopback, token required)")
        if config.metrics_unix:   # scraped on this loop: no lock needed
            await listener.start_unix(config.metrics_unix, config.metrics_unix_mode, config.metrics_unix_group)
            addresses.append(f"metrics unix:{config.metrics_unix} (mode {config.metrics_unix_mode:04o})")
        if config.metrics_port:
            await listener.start_tcp(config.metrics_address, config.metrics_port)
            addresses.append(f"metrics http://{config.metrics_address}:{config.metrics_port}/metrics (bearer token)")
        events.emit("start", models=sum(len(t.models) for t in supervisor.tenancies.values()),
                    max_connections=table.limits.max_connections)
        print(f"rtd: serving on {', '.join(addresses)}", file=sys.stderr, flush=True)
        sd_notify("READY=1")
        supervisor.load_at_start()   # each tenant's `load` list, in the background: nobody waits for another's repository
        watchdog = loop.create_task(_watchdog())
        await stop.wait()
        sd_notify("STOPPING=1")
        events.emit("stopping", grace_s=limits.drain_grace_s)
        table.stop_accepting()
        await supervisor.drain(limits.drain_grace_s)
        deadline = loop.time() + 2.0
        while table.busy() and loop.time() < deadline:   # responses already built finish sending
            await asyncio.sleep(0.02)
        return 0
    finally:
        if watchdog is not None:
            watchdog.cancel()
        listener.close()
        table.close()
        for path in (config.unix_socket, config.rest_unix):
            if path and os.path.exists(path):
                os.unlink(path)


def lock_state_dir(state_dir: str) -> int:
    """One daemon per state directory: a second would share its instance id (and so kill its
    workers as leftovers), its socket and its registry. The lock goes with the process and
    its zygote; a predecessor killed a moment ago gets LOCK_WAIT_S to finish dying."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(state_dir, "rtd.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise RtdError(Code.E_STATE_LOCKED, f"{state_dir} is in use by another rtd serve; stop that one, "
                                                       "or give this one another --state-dir") from None
            time.sleep(0.05)


def serve(config: configuration.Config, reread) -> int:
    lock_state_dir(config.state_dir)
    instance = instance_id(config)
    zygote = Zygote.start(preload=(WORKER_MODULE, DECODER_MODULE), instance=instance)  # before any thread
    try:
        layout = detect_layout()
        for parent in {load_policy(t.policy or None).cgroup_parent for t in config.tenants}:
            cleanup_instance(layout, parent, instance)   # what a daemon killed before us left behind
        max_connections = raise_fd_limit()
        raise_priority(config.supervisor_nice)
        try:
            import uvloop
            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        code = runner(_serve(config, reread, zygote, max_connections))
    finally:
        zygote.close()
    EventLog().emit("stopped")
    return code


def main(argv=None) -> int:
    parser = commandline.Parser(prog="rtd", description="The rtd model runtime daemon.", epilog=commandline.EXIT_CODES,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve_cmd = commands.add_parser("serve", help="run the daemon")
    serve_cmd.add_argument("--config", help="TOML config; without it, the embedded development default")
    serve_cmd.add_argument("--state-dir", help="state dir of the embedded default "
                                               "(default $RTD_STATE_DIR or ~/.local/state/rtd)")
    serve_cmd.add_argument("--metrics-port", type=int, help="Prometheus listener on loopback, in place of the config's "
                                                            "(scrapes need the metrics or admin token; the embedded default "
                                                            "serves metrics on a Unix socket in its state dir); 0 turns it off")
    serve_cmd.add_argument("--model-repository", metavar="DIR",
                           help="embedded default: the dev tenant's Triton model repository (DIR/<model>/config.pbtxt and "
                                "DIR/<model>/<N>/, signed); tritonclient load_model(name) without files loads from it")
    serve_cmd.add_argument("--load-model", metavar="NAME", action="append", default=[],
                           help="embedded default: load this model of --model-repository at start (repeatable)")
    serve_cmd.add_argument("--max-message-bytes", type=int, metavar="N",
                           help="largest gRPC message of the embedded default, either way (default 268435456; "
                                "a package upload is one message); with --config, set limits.max_message_bytes there")
    serve_cmd.add_argument("--grpc-port", type=int, metavar="PORT",
                           help=f"embedded default: gRPC on 127.0.0.1:PORT (default {configuration.GRPC_PORT}, or a free "
                                "port when that one is taken; every call needs the dev or admin token)")
    serve_cmd.add_argument("--http-port", type=int, metavar="PORT",
                           help=f"embedded default: REST on 127.0.0.1:PORT (default {configuration.HTTP_PORT}, likewise)")
    serve_cmd.add_argument("--no-tcp", action="store_true", help="embedded default: Unix sockets only, no loopback TCP")
    serve_cmd.add_argument("--memory-bytes", type=int, metavar="N",
                           help="embedded default: the dev tenant's workers' memory together (the policy's "
                                "limits.memory_bytes, default 1073741824); a model past it is refused, naming it")
    serve_cmd.add_argument("--cpu-cores", type=float, metavar="C",
                           help="embedded default: the dev tenant's CPU quota in cores (limits.cpu_cores, default 1.0); "
                                "its workers run that many kernel threads")
    args = parser.parse_args(argv)
    keys = {"--max-message-bytes": (args.max_message_bytes is not None, "limits.max_message_bytes"),
            "--grpc-port": (args.grpc_port is not None, "listen.loopback_tcp"),
            "--http-port": (args.http_port is not None, "listen.loopback_rest_tcp"),
            "--no-tcp": (args.no_tcp, "no listen.loopback_tcp/loopback_rest_tcp"),
            "--memory-bytes": (args.memory_bytes is not None, "a tenant's policy limits.memory_bytes"),
            "--cpu-cores": (args.cpu_cores is not None, "a tenant's policy limits.cpu_cores")}
    given = [(flag, key) for flag, (on, key) in keys.items() if on]
    if args.config and given:
        parser.error("; ".join(f"{flag} shapes the embedded default; with --config, set {key}" for flag, key in given))
    if args.no_tcp and (args.grpc_port is not None or args.http_port is not None):
        parser.error("--no-tcp leaves no TCP port to choose")
    if args.config and (args.model_repository or args.load_model):
        parser.error("--model-repository/--load-model are for the embedded default; "
                     "a config file sets model_repository and each tenant's load list")
    if args.load_model and not args.model_repository:
        parser.error("--load-model names models of --model-repository")

    def reread() -> configuration.Config:
        try:
            if args.config:
                config = configuration.load(args.config)
            else:
                config = configuration.embedded_default(
                    args.state_dir, args.model_repository, tuple(args.load_model), args.max_message_bytes, tcp=not args.no_tcp,
                    grpc_port=args.grpc_port, http_port=args.http_port, memory_bytes=args.memory_bytes, cpu_cores=args.cpu_cores)
                # a reload keeps the ports this daemon listens on (its own listeners hold them now)
                args.grpc_port, args.http_port = config.loopback_tcp or None, config.loopback_rest_tcp or None
        except configuration.ConfigError as e:
            raise RtdError(Code.E_RTD_CONFIG_INVALID, str(e)) from None
        if args.metrics_port is None:
            return config
        if not 0 <= args.metrics_port < 65536:
            raise RtdError(Code.E_USAGE, "--metrics-port: 0..65535")
        if args.metrics_port and not (config.metrics_token_sha256 or config.admin_token_sha256):
            raise RtdError(Code.E_USAGE, "--metrics-port: TCP scrapes need metrics.token_sha256 or admin.token_sha256 in the config")
        return dataclasses.replace(config, metrics_port=args.metrics_port)

    def start(_) -> int:
        check_architecture()
        return serve(reread(), reread)
    return commandline.run(start, args)

if __name__ == "__main__":
    sys.exit(main())

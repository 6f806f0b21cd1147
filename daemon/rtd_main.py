"""`rtd serve [--config FILE]`: wire the daemon together and run it until SIGTERM.

Order matters: the sandbox zygote is forked FIRST, before any thread exists (forking a
threaded process is unsafe); then the supervisor restores its models, the gRPC listeners
come up, and only then systemd hears READY=1. WATCHDOG=1 pings follow while the daemon
runs; SIGTERM/SIGINT stop the listeners, the workers and the zygote cleanly.
"""
import argparse
import concurrent.futures
import grp
import os
import signal
import socket
import sys
import threading

import grpc
from grpc_health.v1 import health_pb2

from rtd.daemon import config as configuration
from rtd.daemon import frames
from rtd.daemon.grpc_front import build_server
from rtd.daemon.metrics import Metrics
from rtd.daemon.supervisor import Supervisor
from rtd.errors import RtdError
from rtd.sandbox import Zygote

WORKER_MODULE = "rtd.daemon.worker"
GRPC_THREADS = 32


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


def _watchdog(stop: threading.Event) -> None:
    usec = int(os.environ.get("WATCHDOG_USEC", "0") or 0)
    if usec <= 0:
        return
    while not stop.wait(usec / 2e6):
        sd_notify("WATCHDOG=1")


def _listen(server: grpc.Server, config: configuration.Config) -> list[str]:
    if os.path.exists(config.unix_socket):
        os.unlink(config.unix_socket)  # a stale socket from a previous run
    os.makedirs(os.path.dirname(config.unix_socket), mode=0o700, exist_ok=True)
    # a Unix socket stays on the local machine; the bearer token is the tenant gate
    server.add_insecure_port(f"unix:{config.unix_socket}")
    addresses = [f"unix:{config.unix_socket}"]
    if config.tcp:
        with open(config.tls_key, "rb") as k, open(config.tls_cert, "rb") as c, open(config.tls_client_ca, "rb") as ca:
            credentials = grpc.ssl_server_credentials([(k.read(), c.read())], root_certificates=ca.read(),
                                                      require_client_auth=True)
        server.add_secure_port(config.tcp, credentials)
        addresses.append(f"{config.tcp} (mTLS)")
    return addresses


def serve(config: configuration.Config) -> int:
    frames.keep_large_buffers_warm()  # inherited by the zygote and its workers
    zygote = Zygote.start(preload=(WORKER_MODULE,))  # before any thread
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    metrics = Metrics()
    supervisor = Supervisor(config, zygote, metrics)
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=GRPC_THREADS, thread_name_prefix="rtd-grpc")
    server = None
    try:
        supervisor.start()
        server, health = build_server(supervisor, executor)
        addresses = _listen(server, config)
        server.start()
        if config.unix_group:
            os.chown(config.unix_socket, -1, grp.getgrnam(config.unix_group).gr_gid)
        os.chmod(config.unix_socket, config.unix_mode)
        if config.metrics_port:
            metrics.serve(config.metrics_address, config.metrics_port)
            addresses.append(f"metrics http://{config.metrics_address}:{config.metrics_port}/metrics")
        health.set("", health_pb2.HealthCheckResponse.SERVING)
        print(f"rtd: serving on {', '.join(addresses)}", file=sys.stderr, flush=True)
        sd_notify("READY=1")
        watchdog = threading.Thread(target=_watchdog, args=(stop,), name="rtd-watchdog", daemon=True)
        watchdog.start()
        stop.wait()
        sd_notify("STOPPING=1")
        print("rtd: stopping", file=sys.stderr, flush=True)
        health.enter_graceful_shutdown()
        return 0
    finally:
        if server is not None:
            server.stop(grace=2).wait()
        supervisor.close()
        zygote.close()
        executor.shutdown(wait=False, cancel_futures=True)
        if os.path.exists(config.unix_socket):
            os.unlink(config.unix_socket)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rtd", description="The rtd model runtime daemon.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve_cmd = commands.add_parser("serve", help="run the daemon")
    serve_cmd.add_argument("--config", help="TOML config; without it, the embedded development default")
    serve_cmd.add_argument("--state-dir", help="state dir of the embedded default (default $RTD_STATE_DIR or ./state)")
    args = parser.parse_args(argv)
    try:
        config = configuration.load(args.config) if args.config else configuration.embedded_default(args.state_dir)
        return serve(config)
    except configuration.ConfigError as e:
        print(f"rtd: config refused: {e}", file=sys.stderr)
        return 2
    except RtdError as e:
        print(f"rtd: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""The daemon's configuration: TOML, validated once into frozen dataclasses.

With no config file, `embedded_default()` builds a development setup in a state directory
that is the same wherever rtd and rtctl start (`default_state_dir()`): gRPC, REST and metrics
on Unix sockets there (mode 0600 in a 0700 directory: the daemon's own user only), gRPC and
REST also on loopback TCP (Triton's ports 8001 and 8000, or free ones when those are taken:
what tritonclient needs a host:port for; every call still needs a token), one tenant `dev`
with a fresh signing key it trusts and a fresh bearer token, an admin token — all written
to the state dir — and says so on stderr. `rtd serve`'s flags tune it (EmbeddedOptions).
Unknown keys, wrong types and impossible values raise ConfigError naming the offending key;
the daemon refuses to start on them.
"""
import dataclasses
import hashlib
import json
import os
import re
import secrets
import socket
import sys
import tomllib

from rtd import beneath
from rtd.errors import Code, RtdError
from rtd.loader.layout import check_component
from rtd.statedir import default_state_dir

TENANT_UID_BASE = 61000
ALL_MODELS = "*"   # in a tenant's load list: every model of its repository
TOKEN_BYTES = 32  # 256 bits, well above the 128-bit floor
MAX_TOKEN_FILE = 4096


class ConfigError(ValueError):
    """The config file is malformed; the message names the offending key."""


@dataclasses.dataclass(frozen=True)
class TenantConfig:
    id: str
    token_sha256: tuple[str, ...]
    trusted_keys: str
    uid: int
    gid: int
    policy: dict = dataclasses.field(default_factory=dict)
    model_repository: str = ""     # DIR holding <model>/config.pbtxt + <N>/..., Triton's layout; "" = uploads only
    load_at_start: tuple[str, ...] = ()   # models loaded from the repository when rtd starts ("*": all of them)
    unsafe_anonymous: bool = False # calls without a token are this tenant's (only behind an authenticating proxy)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Every bound the supervisor keeps (systemd/rtd.toml documents each one)."""
    max_message_bytes: int = 256 << 20     # one gRPC message or REST body, either way
    max_request_elements: int = 1 << 22    # BYTES elements and JSON values one request may make a worker decode
    max_queue: int = 32                    # per tenant: inference and load requests waiting, running or being delivered
    max_concurrency: int = 4               # per tenant: requests in its workers at once
    max_models: int = 16                   # per tenant: loaded models
    max_instances: int = 8                 # per model: instance_group count
    request_timeout_s: float = 60.0        # a worker that answers no request for this long is hung
    load_timeout_s: float = 120.0
    repository_timeout_s: float = 10.0     # one reading of a tenant's model repository (index, version choice)
    crash_limit: int = 3                   # crashes or hangs in a row before a model is FAILED
    resource_error_window_s: float = 300.0  # memory-layer kills are counted over this window
    restart_backoff_s: float = 0.2
    restart_backoff_max_s: float = 10.0
    drain_grace_s: float = 10.0            # SIGTERM: how long requests in flight may finish
    # what one tenant may make the supervisor hold
    tenant_request_bytes: int = 256 << 20
    tenant_response_bytes: int = 256 << 20
    tenant_streams: int = 64
    tenant_connections: int = 32
    tenant_package_bytes: int = 2 << 30
    tenant_disk_bytes: int = 4 << 30
    # what all tenants together may make it hold
    total_request_bytes: int = 1 << 30
    total_response_bytes: int = 1 << 30
    total_package_bytes: int = 8 << 30
    # connections (capped below the fd limit at start)
    max_connections: int = 1024
    max_connections_per_peer: int = 128
    max_streams_per_connection: int = 100
    connection_auth_timeout_s: float = 5.0
    connection_idle_s: float = 300.0
    send_timeout_s: float = 30.0


@dataclasses.dataclass(frozen=True)
class Config:
    state_dir: str
    unix_socket: str
    unix_mode: int = 0o600         # who may connect besides root: e.g. 0o660 with unix_group
    unix_group: str = ""
    tcp: str = ""                  # "host:port"; requires tls_* (mTLS)
    unsafe_plaintext_tcp: str = "" # "host:port" without TLS: only behind a mesh or proxy that terminates mTLS
    rest_unix: str = ""            # KServe v2 REST on a Unix socket (same mode and group); "" = none
    rest_tcp: str = ""             # KServe v2 REST on "host:port"; requires tls_* (mTLS), like tcp
    unsafe_plaintext_rest_tcp: str = ""   # REST without TLS, as unsafe_plaintext_tcp
    loopback_tcp: int = 0          # gRPC on 127.0.0.1:PORT, plaintext: local users only, each call with its token
    loopback_rest_tcp: int = 0     # REST likewise
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    metrics_address: str = "127.0.0.1"
    metrics_port: int = 0          # > 0: a TCP metrics listener; every scrape needs a metrics or the admin token
    metrics_token_sha256: tuple[str, ...] = ()
    metrics_unix: str = ""         # a Unix-socket metrics listener, no token: its mode and group decide who reads
    metrics_unix_mode: int = 0o600
    metrics_unix_group: str = ""
    admin_token_sha256: tuple[str, ...] = ()
    tenants: tuple[TenantConfig, ...] = ()
    limits: Limits = Limits()
    # The supervisor's scheduling priority (nice; its tenants' processes run at 0): the one event
    # loop every tenant's calls pass through must not wait behind any tenant's own CPU work
    supervisor_nice: int = -10
    notes: tuple[str, ...] = ()    # what the embedded default created, for the operator


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _take(table: dict, where: str, key: str, kind, default=dataclasses.MISSING):
    if key not in table:
        if default is dataclasses.MISSING:
            raise ConfigError(f"{where}.{key}: required")
        return default
    value = table.pop(key)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise ConfigError(f"{where}.{key}: expected {'/'.join(k.__name__ for k in kinds)}")
    return value


def _no_extra(table: dict, where: str) -> None:
    if table:
        raise ConfigError(f"{where}: unknown keys {sorted(table)}")


def _hashes(values, where: str) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(h, str) and len(h) == 64 for h in values):
        raise ConfigError(f"{where}: expected a list of hex SHA-256 token hashes")
    try:
        return tuple(bytes.fromhex(h).hex() for h in values)
    except ValueError:
        raise ConfigError(f"{where}: not hex") from None


def _model_names(values, where: str) -> tuple[str, ...]:
    try:
        return tuple(v if v == ALL_MODELS else check_component(v) for v in values)
    except RtdError as e:
        raise ConfigError(f"{where}: {e.detail}: model names are single path components") from None


def _tenant(table: dict, index: int, base: str, repository: str) -> TenantConfig:
    where = f"tenant[{index}]"
    table = dict(table)
    tid = _take(table, where, "id", str)
    if not tid or not tid.replace("-", "").replace("_", "").isalnum() or len(tid) > 64:
        raise ConfigError(f"{where}.id: letters, digits, - and _ only, at most 64")
    own = _take(table, where, "model_repository", str, "")
    tenant = TenantConfig(
        id=tid,
        token_sha256=_hashes(_take(table, where, "token_sha256", list, []), f"{where}.token_sha256"),
        trusted_keys=os.path.join(base, _take(table, where, "trusted_keys", str)),
        uid=_take(table, where, "uid", int, TENANT_UID_BASE + index),
        gid=_take(table, where, "gid", int, TENANT_UID_BASE + index),
        policy=_take(table, where, "policy", dict, {}),
        model_repository=os.path.join(base, own) if own else os.path.join(repository, tid) if repository else "",
        load_at_start=_model_names(_take(table, where, "load", list, []), f"{where}.load"),
        unsafe_anonymous=_take(table, where, "unsafe_anonymous", bool, False),
    )
    _no_extra(table, where)
    if tenant.load_at_start and not tenant.model_repository:
        raise ConfigError(f"{where}.load: names models of a model repository, and none is configured")
    if not 0 < tenant.uid < 1 << 31 or not 0 < tenant.gid < 1 << 31:
        raise ConfigError(f"{where}: uid/gid must be positive (never root)")
    return tenant


def _mode(text: str, where: str) -> int:
    if not re.fullmatch(r"0?[0-7]{3}", text):
        raise ConfigError(f'{where}: octal permissions such as "0660"')
    return int(text, 8)


def _limits(table: dict) -> Limits:
    table, values = dict(table), {}
    for f in dataclasses.fields(Limits):
        kind = (int, float) if f.type == "float" or f.type is float else int
        values[f.name] = _take(table, "limits", f.name, kind, f.default)
        if values[f.name] <= 0:
            raise ConfigError(f"limits.{f.name}: must be positive")
    _no_extra(table, "limits")
    return Limits(**values)


def parse(text: str, base: str = ".", notes: tuple = ()) -> Config:
    """Validate a TOML config; relative paths are taken relative to `base`."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not TOML: {e}") from None
    state_dir = os.path.join(base, _take(doc, "config", "state_dir", str))
    listen = dict(_take(doc, "config", "listen", dict, {}))
    metrics = dict(_take(doc, "config", "metrics", dict, {}))
    admin = dict(_take(doc, "config", "admin", dict, {}))
    tenants = _take(doc, "config", "tenant", list, [])
    repository = _take(doc, "config", "model_repository", str, "")
    repository = os.path.join(base, repository) if repository else ""
    limits = _limits(_take(doc, "config", "limits", dict, {}))
    supervisor_nice = _take(doc, "config", "supervisor_nice", int, Config.supervisor_nice)
    if not -20 <= supervisor_nice <= 0:
        raise ConfigError("supervisor_nice: -20..0 (a nice value; tenants' processes run at 0)")
    metrics_unix = _take(metrics, "metrics", "unix", str, "")
    rest_unix = _take(listen, "listen", "rest_unix", str, os.path.join(state_dir, "rtd-rest.sock"))
    _no_extra(doc, "config")
    config = Config(
        state_dir=state_dir,
        unix_socket=os.path.join(base, _take(listen, "listen", "unix", str, os.path.join(state_dir, "rtd.sock"))),
        unix_mode=_mode(_take(listen, "listen", "unix_mode", str, "0600"), "listen.unix_mode"),
        unix_group=_take(listen, "listen", "unix_group", str, ""),
        tcp=_take(listen, "listen", "tcp", str, ""),
        unsafe_plaintext_tcp=_take(listen, "listen", "unsafe_plaintext_tcp", str, ""),
        rest_unix=rest_unix and os.path.join(base, rest_unix),
        rest_tcp=_take(listen, "listen", "rest_tcp", str, ""),
        unsafe_plaintext_rest_tcp=_take(listen, "listen", "unsafe_plaintext_rest_tcp", str, ""),
        loopback_tcp=_take(listen, "listen", "loopback_tcp", int, 0),
        loopback_rest_tcp=_take(listen, "listen", "loopback_rest_tcp", int, 0),
        tls_cert=_take(listen, "listen", "tls_cert", str, ""),
        tls_key=_take(listen, "listen", "tls_key", str, ""),
        tls_client_ca=_take(listen, "listen", "tls_client_ca", str, ""),
        metrics_address=_take(metrics, "metrics", "address", str, "127.0.0.1"),
        metrics_port=_take(metrics, "metrics", "port", int, 0),
        metrics_token_sha256=_hashes(_take(metrics, "metrics", "token_sha256", list, []), "metrics.token_sha256"),
        metrics_unix=metrics_unix and os.path.join(base, metrics_unix),
        metrics_unix_mode=_mode(_take(metrics, "metrics", "unix_mode", str, "0600"), "metrics.unix_mode"),
        metrics_unix_group=_take(metrics, "metrics", "unix_group", str, ""),
        admin_token_sha256=_hashes(_take(admin, "admin", "token_sha256", list, []), "admin.token_sha256"),
        tenants=tuple(_tenant(t, i, base, repository) for i, t in enumerate(tenants)),
        supervisor_nice=supervisor_nice,
        limits=limits,
        notes=tuple(notes),
    )
    for table, where in ((listen, "listen"), (metrics, "metrics"), (admin, "admin")):
        _no_extra(table, where)
    for key, address in (("tcp", config.tcp), ("rest_tcp", config.rest_tcp)):
        if address and not (config.tls_cert and config.tls_key and config.tls_client_ca):
            raise ConfigError(f"listen.{key}: TCP listeners need tls_cert, tls_key and tls_client_ca (mTLS)")
    if config.rest_unix and os.path.abspath(config.rest_unix) == os.path.abspath(config.unix_socket):
        raise ConfigError("listen.rest_unix: must differ from listen.unix")
    if not 0 <= config.metrics_port < 65536:
        raise ConfigError("metrics.port: 0..65535")
    for address, where in ((config.tcp, "listen.tcp"), (config.unsafe_plaintext_tcp, "listen.unsafe_plaintext_tcp"),
                           (config.rest_tcp, "listen.rest_tcp"),
                           (config.unsafe_plaintext_rest_tcp, "listen.unsafe_plaintext_rest_tcp")):
        host, _, port = address.rpartition(":")
        if address and not (host and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(f"{where}: expected host:port")
    if sum(t.unsafe_anonymous for t in config.tenants) > 1:
        raise ConfigError("tenant.unsafe_anonymous: at most one tenant may take calls without a token")
    for key, port in (("loopback_tcp", config.loopback_tcp), ("loopback_rest_tcp", config.loopback_rest_tcp)):
        if not 0 <= port < 65536:
            raise ConfigError(f"listen.{key}: a port, 1..65535 (0: none)")
        if port and any(t.unsafe_anonymous for t in config.tenants):   # every local user reaches loopback TCP
            raise ConfigError(f"listen.{key}: loopback TCP is open to every local user, so no tenant may be unsafe_anonymous")
    if config.loopback_tcp and config.loopback_tcp == config.loopback_rest_tcp:
        raise ConfigError("listen.loopback_rest_tcp: must differ from listen.loopback_tcp")
    if config.metrics_port and not (config.metrics_token_sha256 or config.admin_token_sha256):
        raise ConfigError("metrics.port: a TCP metrics listener needs metrics.token_sha256 (or admin.token_sha256): "
                          "scrapes without a token are refused")

    ids = [t.id for t in config.tenants]
    if len(set(ids)) != len(ids):
        raise ConfigError("tenant: duplicate ids")
    owners: dict = {}
    for tenant in config.tenants:   # a token names one tenant: its calls could be charged to either otherwise
        for digest in tenant.token_sha256:
            if owners.setdefault(digest, tenant.id) != tenant.id:
                raise ConfigError(f"tenant {tenant.id!r}: a token_sha256 of tenant {owners[digest]!r} too")
    return config


def load(path: str) -> Config:
    with open(path, encoding="utf-8") as f:
        return parse(f.read(), base=os.path.dirname(os.path.abspath(path)))


def _write_secret(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _ensure_token(path: str, notes: list) -> str:
    if not os.path.exists(path):
        _write_secret(path, (secrets.token_urlsafe(TOKEN_BYTES) + "\n").encode())
        notes.append(f"wrote a fresh token to {path}")
    try:   # beneath the state dir: a regular file, no link, no FIFO, a few bytes
        data = beneath.read_file(path, MAX_TOKEN_FILE, Code.E_RTD_CONFIG_INVALID, allow_links=True)
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8") from None
    except RtdError as e:
        raise ConfigError(e.detail) from None


def _ensure_signing_key(keys_dir: str, trust_dir: str, notes: list) -> None:
    if os.path.exists(os.path.join(keys_dir, "signing.pem")):
        return
    from rtd.loader import keys
    private, public = keys.write_keypair(keys_dir)
    with open(public, "rb") as src, open(os.path.join(trust_dir, os.path.basename(public)), "wb") as dst:
        dst.write(src.read())
    notes.append(f"created dev signing key {private} (trusted by tenant 'dev')")


def _message_limits(max_message_bytes: int | None) -> str:
    """The [limits] table for `rtd serve --max-message-bytes`: the budgets a single message is
    charged to are raised with it, so one message of that size fits."""
    if max_message_bytes is None:
        return ""
    budgets = ("tenant_request_bytes", "tenant_response_bytes", "total_request_bytes", "total_response_bytes")
    return f"[limits]\nmax_message_bytes = {max_message_bytes}\n" + "".join(
        f"{key} = {max(max_message_bytes, getattr(Limits, key))}\n" for key in budgets)


GRPC_PORT, HTTP_PORT = 8001, 8000   # Triton's: what a tritonclient example expects


def _port_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:`port` now (as asyncio binds: SO_REUSEADDR)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _loopback_port(chosen: int | None, default: int, what: str, flag: str, notes: list) -> int:
    """A port the operator chose (taken: refused when the listener starts), else Triton's
    default, else, when that one is taken (another daemon, another rtd), one the kernel picks."""
    if chosen is not None or _port_free(default):
        return default if chosen is None else chosen
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    notes.append(f"127.0.0.1:{default} is taken: {what} on 127.0.0.1:{port} instead ({flag} chooses one)")
    return port


def embedded_default(state_dir: str | None = None, model_repository: str | None = None,
                     load_at_start: tuple[str, ...] = (), max_message_bytes: int | None = None, *,
                     tcp: bool = True, grpc_port: int | None = None, http_port: int | None = None,
                     memory_bytes: int | None = None, cpu_cores: float | None = None) -> Config:
    """The no-config development setup; creates what it needs and reports it on stderr.
    `model_repository` is the dev tenant's Triton repository (DIR/<model>/...); `tcp` adds the
    loopback listeners (on `grpc_port` and `http_port` where given); `memory_bytes` and
    `cpu_cores` are the dev tenant's sandbox limits over the default policy's."""
    state_dir = os.path.abspath(state_dir or default_state_dir())
    notes = [f"no config given: embedded default, state in {state_dir} (--state-dir or RTD_STATE_DIR choose another)"]
    keys_dir, trust_dir = os.path.join(state_dir, "dev-keys"), os.path.join(state_dir, "trust", "dev")
    for d in (state_dir, keys_dir, trust_dir):
        os.makedirs(d, mode=0o700, exist_ok=True)
    _ensure_signing_key(keys_dir, trust_dir, notes)
    dev_token = _ensure_token(os.path.join(state_dir, "dev.token"), notes)
    admin_token = _ensure_token(os.path.join(state_dir, "admin.token"), notes)
    loopback = ""
    if tcp:
        loopback = (f"loopback_tcp = {_loopback_port(grpc_port, GRPC_PORT, 'gRPC', '--grpc-port', notes)}\n"
                    f"loopback_rest_tcp = {_loopback_port(http_port, HTTP_PORT, 'REST', '--http-port', notes)}\n")
    limits = {k: v for k, v in (("memory_bytes", memory_bytes), ("cpu_cores", cpu_cores)) if v is not None}
    text = f"""
state_dir = {state_dir!r}
[listen]
unix = {os.path.join(state_dir, "rtd.sock")!r}
{loopback}[metrics]
unix = {os.path.join(state_dir, "metrics.sock")!r}
[admin]
token_sha256 = [{token_hash(admin_token)!r}]
[[tenant]]
id = "dev"
token_sha256 = [{token_hash(dev_token)!r}]
trusted_keys = {trust_dir!r}
"""
    if limits:
        text += f"policy = {{ limits = {{ {', '.join(f'{k} = {v!r}' for k, v in limits.items())} }} }}\n"
    if model_repository:   # keys of the dev tenant's table: before any other table starts
        text += f"model_repository = {os.path.abspath(model_repository)!r}\nload = {json.dumps(list(load_at_start))}\n"
        notes.append(f"tenant 'dev' loads from the model repository {os.path.abspath(model_repository)}")
    text += _message_limits(max_message_bytes)
    config = parse(text, base=state_dir, notes=tuple(notes))
    for note in notes:
        print(f"rtd: {note}", file=sys.stderr)
    return config

"""rtctl trust add / list / revoke: a tenant's trust store, the directory of `*.pub.pem` keys
and `revoked.txt` that the loader verifies packages against (rtd.loader.trust).

The store is the embedded default's (STATE/trust/<tenant>) or, with --config, the one the
tenant's `trusted_keys` names. Files are replaced atomically (rtd.files). A revoked key
stays revoked: `add` refuses it. Each file is written with its `.last-good` copy
(rtd.files.write_durable), which the daemon reads in place of a damaged file. After a change
the running daemon re-reads its trust stores (rtd.Admin/Reload with the admin token, as SIGHUP
does), so the next load sees it."""
import contextlib
import datetime
import fcntl
import json
import os
import re
import sys

from rtd.daemon import config as configuration
from rtd.cli.output import show, table
from rtd.cli.serving import state_dir
from rtd.cli.client import Client, read_token
from rtd.errors import Code, RtdError
from rtd.beneath import Dir
from rtd.files import read_copies, write_durable
from rtd.loader import keys
from rtd.loader.trust import MAX_LIST_BYTES, REVOCATION_LIST, TrustStore, revocations

_HEX = re.compile(r"[0-9a-f]{16,64}")


class _Store:
    """Where a tenant's trust store is, and how to reach the daemon that reads it."""

    def __init__(self, args):
        self.tenant = args.tenant
        if args.config:
            try:
                config = configuration.load(args.config)
            except configuration.ConfigError as e:
                raise RtdError(Code.E_RTD_CONFIG_INVALID, f"{args.config}: {e}") from None
            tenants = {t.id: t for t in config.tenants}
            if args.tenant not in tenants:
                raise RtdError(Code.E_USAGE, f"no tenant {args.tenant!r} in {args.config} (it has {sorted(tenants)})")
            self.directory, self.socket = tenants[args.tenant].trusted_keys, config.unix_socket
            self.admin_token_file = args.admin_token_file
        else:
            state = state_dir(args.state_dir)
            self.directory, self.socket = os.path.join(state, "trust", args.tenant), os.path.join(state, "rtd.sock")
            self.admin_token_file = args.admin_token_file or os.path.join(state, "admin.token")
        if not os.path.isdir(self.directory):
            raise RtdError(Code.E_PATH_NOT_FOUND, f"no trust store for tenant {args.tenant!r} at {self.directory}")

    def read(self) -> TrustStore:
        return TrustStore(self.directory)

    @contextlib.contextmanager
    def changing(self):
        """Read, change, write with the store's directory locked: two rtctl at once lose no revocation."""
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.read()
        finally:
            os.close(fd)

    def tell_daemon(self) -> None:
        """Have the running daemon re-read its trust stores; say where nothing was told."""
        if not os.path.exists(self.socket):
            print(f"rtctl: no daemon at {self.socket}; it reads the trust store when it starts", file=sys.stderr)
            return
        if self.admin_token_file is None:
            print("rtctl: reload the daemon for this to take effect (systemctl reload rtd, or pass --admin-token-file)",
                  file=sys.stderr)
            return
        with Client(f"unix:{self.socket}", None) as client:
            try:
                client.reload(read_token(self.admin_token_file, "--admin-token-file"))
            except RtdError as e:
                if e.code != Code.E_DAEMON_UNREACHABLE:
                    raise
                print(f"rtctl: no daemon answers at {self.socket}; it reads the trust store when it starts",
                      file=sys.stderr)
                return
        print(f"rtctl: the daemon at {self.socket} re-read its trust stores", file=sys.stderr)


def _public_key(path: str):
    with open(path, "rb") as f:
        return keys.check_public(keys.load_public(f.read(1 << 20), path))


def _add(args) -> int:
    store = _Store(args)
    key = _public_key(args.key)
    fingerprint = keys.fingerprint(key)
    with store.changing() as trust:
        if trust.unusable or fingerprint in trust.revoked:
            raise RtdError(Code.E_KEY_REVOKED, f"key {fingerprint[:16]}... in {store.directory}: a revoked key is never "
                                               "trusted again; sign with a new key (rtctl keygen)")
        if fingerprint in trust.keys:
            print(f"already trusted by tenant {store.tenant}: {fingerprint} ({trust.files[fingerprint]})")
            return 0
        path = os.path.join(store.directory, f"{fingerprint[:16]}.pub.pem")
        write_durable(path, keys.public_pem(key), mode=0o644)
    print(f"trusted by tenant {store.tenant}: {fingerprint} ({path})")
    store.tell_daemon()
    return 0


def _fingerprint_of(what: str, trust: TrustStore) -> str:
    """A public key file, a full fingerprint, or an unambiguous prefix (16+ hex digits) of a trusted one."""
    if os.path.isfile(what):
        return keys.fingerprint(_public_key(what))
    if not _HEX.fullmatch(what):
        raise RtdError(Code.E_USAGE, f"{what!r} is neither a public key file nor a fingerprint (16 to 64 hex digits)")
    if len(what) == 64:
        return what
    matches = [f for f in trust.keys if f.startswith(what)]
    if len(matches) != 1:
        raise RtdError(Code.E_USAGE, f"{what} matches {len(matches)} trusted keys; give the full fingerprint")
    return matches[0]


def _list_text(data: bytes) -> bytes:
    revocations(data)   # refuses a damaged list
    return data


def _revoke(args) -> int:
    store = _Store(args)
    with store.changing() as trust:
        if trust.unusable:
            raise RtdError(Code.E_STATE_DAMAGED, f"{store.directory}: {trust.unusable}: fix it by hand first")
        fingerprint = _fingerprint_of(args.key, trust)
        if fingerprint in trust.revoked:
            print(f"already revoked for tenant {store.tenant}: {fingerprint}")
            return 0
        with Dir.open(store.directory) as d:   # the text it had (or its good copy's), comments and all
            old = read_copies(d, REVOCATION_LIST, _list_text, MAX_LIST_BYTES, allow_links=True).usable() or b""
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        line = f"{fingerprint}  # revoked {when} {trust.files.get(fingerprint, '')}".rstrip() + "\n"
        write_durable(os.path.join(store.directory, REVOCATION_LIST),
                      old + (b"\n" if old and not old.endswith(b"\n") else b"") + line.encode(), mode=0o644)
    print(f"revoked for tenant {store.tenant}: {fingerprint}")
    store.tell_daemon()
    return 0


def _list(args) -> int:
    store = _Store(args)
    trust = store.read()
    rows = []
    for fingerprint, key in sorted(trust.keys.items(), key=lambda item: trust.files[item[0]]):
        try:
            keys.check_public(key)
            state = "revoked" if fingerprint in trust.revoked else "refused: store damaged" if trust.unusable else "trusted"
        except RtdError as e:
            state = f"refused: {e.detail}"
        rows.append({"fingerprint": fingerprint, "file": trust.files[fingerprint], "state": state})
    rows += [{"fingerprint": f, "file": "", "state": "revoked"} for f in sorted(trust.revoked - set(trust.keys))]
    if args.json:
        print(json.dumps({"tenant": store.tenant, "directory": store.directory, "keys": rows,
                          "unusable": trust.unusable, "problems": trust.problems}))
        return 0
    result = table(f"tenant {store.tenant}: {store.directory}", "fingerprint (sha256 of the public key)", "file", "state")
    for row in rows:
        result.add_row(row["fingerprint"], row["file"], row["state"])
    show(result)
    for problem in trust.problems:
        show(f"[yellow]{problem}[/yellow]", stderr=True)
    if trust.unusable:
        show(f"[red]{trust.unusable}: every key is refused[/red]", stderr=True)
    return 0


def register(commands) -> None:
    trust = commands.add_parser("trust", help="add, list or revoke a tenant's trusted signing keys")
    actions = trust.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="trust a public key (signing.pub.pem from rtctl keygen) for a tenant")
    add.add_argument("key", help="public key file (PEM)")
    listing = actions.add_parser("list", help="a tenant's keys with their fingerprints and state")
    revoke = actions.add_parser("revoke", help="put a key on the tenant's revocation list (for good)")
    revoke.add_argument("key", help="public key file, fingerprint, or a unique prefix of 16+ hex digits")
    for parser, func in ((add, _add), (listing, _list), (revoke, _revoke)):
        parser.add_argument("--tenant", default="dev", help="tenant id (default dev, the embedded default's)")
        where = parser.add_mutually_exclusive_group()
        where.add_argument("--config", help="the daemon's TOML config: the tenant's trusted_keys and socket")
        where.add_argument("--state-dir", help="embedded default's state dir (default $RTD_STATE_DIR or ~/.local/state/rtd)")
        parser.add_argument("--admin-token-file", help="admin token to tell the running daemon (default STATE/admin.token)")
        parser.set_defaults(func=func)
    listing.add_argument("--json", action="store_true", help="machine-readable output")

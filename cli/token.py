"""rtctl token new: a fresh bearer token (256 random bits, as `rtd serve` makes its own) and
the `token_sha256` line a config file takes for it. The daemon stores only the hash; the
token itself goes to the client, best in a file of mode 0600 (--out)."""
import os

from rtd.errors import Code, RtdError

TOKEN_BYTES = 32   # rtd.daemon.config's: 256 bits


def _new(args) -> int:
    import hashlib
    import secrets
    token = secrets.token_urlsafe(TOKEN_BYTES)
    digest = hashlib.sha256(token.encode()).hexdigest()
    if args.out:
        try:
            fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            raise RtdError(Code.E_PATH_EXISTS, f"--out {args.out}: a token file is never replaced; choose another --out") from None
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        print(f"# token in {args.out} (0600): rtctl --token-file {args.out}, or tritonclient's Bearer header")
    else:
        print(f"token = {token}")
    print(f'token_sha256 = ["{digest}"]   # in the [[tenant]] (or [admin], [metrics]) table of rtd.toml')
    return 0


def register(commands) -> None:
    token = commands.add_parser("token", help="make a bearer token and the token_sha256 line of rtd.toml")
    actions = token.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = actions.add_parser("new", help="a fresh token and its token_sha256 line (the daemon keeps only the hash)")
    new.add_argument("--out", help="write the token to this file (mode 0600) instead of printing it")
    new.set_defaults(func=_new)

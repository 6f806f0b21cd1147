"""rtctl commands that make and check signed model packages: keygen, pack, sign, verify; and
`package_files`, a package as the `files` mapping tritonclient's `load_model` takes.

They run on the operator's side, outside the daemon, and use rtd.loader directly. What a
command needs is imported when it runs, so `rtctl --help` and the other commands never pay
for it (bench/cli.py measures each command).
"""
import json
import os

from rtd.errors import Code, RtdError

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")   # rtd.loader.intake's, checked equal by tests/test_cli_startup.py


def check_package_path(path: str) -> str:
    """A package is a model directory or a .tar/.tar.gz; a bare model file is told how to pack it."""
    if not os.path.exists(path):
        raise RtdError(Code.E_PATH_NOT_FOUND, path)
    if os.path.isfile(path) and not path.endswith(ARCHIVE_SUFFIXES):
        raise RtdError(Code.E_NOT_A_PACKAGE, f"{path} is a file; pack it first: rtctl pack {path} --name NAME "
                                             "--version X.Y.Z --key KEY.pem --out NAME.tar")
    return path


def package_files(path: str) -> dict[str, bytes]:
    """A signed package (its directory or .tar/.tar.gz) as {"file:<path>": bytes}: what
    tritonclient's `load_model(name, files=...)` takes (gRPC and HTTP alike), read with the
    loader's safe intake. The daemon verifies it as it verifies any upload."""
    from rtd.loader.intake import read_package
    from rtd.proto import FILE_PREFIX
    fileset = read_package(check_package_path(path))
    try:
        return {FILE_PREFIX + rel: sealed.bytes() for rel, sealed in fileset.files.items()}
    finally:
        fileset.close()


def _keygen(args) -> int:
    from rtd.loader import keys
    for name in (keys.PRIVATE_NAME, keys.PUBLIC_NAME):
        if os.path.lexists(os.path.join(args.out, name)):
            raise RtdError(Code.E_PATH_EXISTS, f"{os.path.join(args.out, name)}: keygen never replaces a key; "
                                               "choose another --out")
    private_path, public_path = keys.write_keypair(args.out, args.bits)
    with open(public_path, "rb") as f:
        fingerprint = keys.fingerprint(keys.load_public(f.read(), public_path))
    print(f"private key {private_path} (0600)\npublic key  {public_path}\nfingerprint {fingerprint}")
    return 0


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _usage_check(check, flag: str, value, expected: str) -> None:
    """A flag's value checked by the loader's own rule, refused naming the flag (not metadata.json)."""
    try:
        check(value)
    except RtdError:
        raise RtdError(Code.E_USAGE, f"{flag} {value}: expected {expected}") from None


def _pack(args) -> int:
    from rtd.loader import TrustStore, keys, metadata, pack, verify_package
    _usage_check(metadata.semver_key, "--version", args.version, "a semantic version X.Y.Z, e.g. 1.0.0")
    if args.min_rtd_version is not None:
        _usage_check(metadata.semver_key, "--min-rtd-version", args.min_rtd_version, "a semantic version X.Y.Z")
    if args.expires is not None:
        _usage_check(metadata.parse_timestamp, "--expires", args.expires, "a UTC time YYYY-MM-DDTHH:MM:SSZ")
    if args.counter < 1:
        raise RtdError(Code.E_USAGE, f"--counter {args.counter}: expected 1 or more (raise it for each new version)")
    if os.path.lexists(args.out) and not args.force:
        raise RtdError(Code.E_PATH_EXISTS, f"--out {args.out} exists; pass --force to replace it, or choose another --out")
    private_key = keys.load_private(args.key, unsafe_skip_validation=True)   # the package is verified below with its public half
    siblings = {}
    if args.model.endswith(".pbtxt"):   # an ensemble: its config is the package, its steps are other models
        if args.config or args.stages is not None:
            raise RtdError(Code.E_USAGE, "an ensemble's config.pbtxt is the package itself: no --config or --stages")
        files = pack.ensemble_files(_read(args.model), name=args.name, version=args.version, private_key=private_key,
                                    counter=args.counter, expires=args.expires, min_rtd_version=args.min_rtd_version)
    else:
        model = _read(args.model)
        siblings = pack.external_files(model, os.path.dirname(os.path.abspath(args.model)))
        config = _read(args.config)
        if args.stages is not None:
            if not 1 <= args.stages <= 8:
                raise RtdError(Code.E_USAGE, f"--stages {args.stages}: expected 1 to 8")
            config = pack.with_stages(config, args.stages)
        files = pack.package_files(model, name=args.name, version=args.version, private_key=private_key,
                                   counter=args.counter, expires=args.expires, config_bytes=config,
                                   min_rtd_version=args.min_rtd_version, siblings=siblings)
    # written beside --out under a temporary name (its suffix kept: it says archive or directory),
    # verified there, then moved into place: a failure leaves --out as it was
    staged = os.path.join(os.path.dirname(os.path.abspath(args.out)), f".rtctl-{os.getpid()}-{os.path.basename(args.out)}")
    try:
        pack.write_package(files, staged, args.name)
        trust = TrustStore(None)
        trust.keys[keys.fingerprint(private_key.public_key())] = private_key.public_key()
        with verify_package(staged, trust=trust, tenant="", rollback=None) as pkg:
            data = f", external data {', '.join(siblings)}" if siblings else ""
            done = f"packed {pkg.name} {pkg.version} (counter {pkg.counter}{data}) -> {args.out}"
        _replace(staged, args.out)
    finally:
        _remove(staged)
    print(done)
    return 0


def _remove(path: str) -> None:
    import shutil
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _replace(new: str, out: str) -> None:
    """Move `new` to `out`; what was at `out` (--force) goes only once `new` is there."""
    old = None
    if os.path.lexists(out):
        old = os.path.join(os.path.dirname(os.path.abspath(out)), f".rtctl-{os.getpid()}-old-{os.path.basename(out)}")
        os.rename(out, old)
    try:
        os.rename(new, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        _remove(old)


def _sign(args) -> int:
    from rtd.loader import keys, pack
    meta = pack.sign_version_dir(args.dir, keys.load_private(args.key), name=args.name, version=args.version)
    print(f"signed {meta['name']} {meta['version']} (counter {meta['counter']}) in {args.dir}")
    return 0


def _verify(args) -> int:
    from rtd.loader import TrustStore, verify_package
    trust = TrustStore(args.trust) if args.trust else TrustStore.from_pem_files(args.pubkey)
    with verify_package(check_package_path(args.package), trust=trust, tenant="", rollback=None, expected_name=args.name) as pkg:
        report = {"ok": True, "name": pkg.name, "version": pkg.version, "counter": pkg.counter,
                  "key": pkg.key_fingerprint, "manifest_sha256": pkg.manifest_sha256,
                  "files": {path: f.sha256 for path, f in sorted(pkg.files.items())}}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"OK {pkg.name} {pkg.version} counter {pkg.counter} signed by {pkg.key_fingerprint[:16]}")
    return 0


def register(commands) -> None:
    p = commands.add_parser("keygen", help="write an RSA-3072 signing key pair")
    p.add_argument("--out", required=True, help="directory for signing.pem (0600) and signing.pub.pem")
    p.add_argument("--bits", type=int, default=3072, help="RSA modulus size (default and least 3072)")
    p.set_defaults(func=_keygen)

    p = commands.add_parser("pack", help="build a signed package from an ONNX model (or an ensemble's config.pbtxt)")
    p.add_argument("model", help="the ONNX model file, or a config.pbtxt with platform \"ensemble\"")
    p.add_argument("--name", required=True, help="model name the package is signed for (what `rtctl run` calls)")
    p.add_argument("--version", required=True, help="semantic version X.Y.Z")
    p.add_argument("--key", required=True, help="private signing key (PEM)")
    p.add_argument("--out", required=True, help="model directory, or an archive ending in .tar/.tar.gz")
    p.add_argument("--force", action="store_true", help="replace --out if it exists (once the new package verifies)")
    p.add_argument("--counter", type=int, default=1, help="monotonic counter, also the version directory")
    p.add_argument("--expires", help="UTC expiry YYYY-MM-DDTHH:MM:SSZ")
    p.add_argument("--config", help="config.pbtxt to include")
    p.add_argument("--stages", type=int, help="serve the model cut into K pipeline stages, each its own worker "
                                              "(sets the config parameter rtd_stages)")
    p.add_argument("--min-rtd-version", dest="min_rtd_version", help="oldest rtd (X.Y.Z) that may load the package")
    p.set_defaults(func=_pack)

    p = commands.add_parser("sign", help="sign a Triton-layout version directory in place")
    p.add_argument("dir", help="the numeric version directory, e.g. repo/resnet/3")
    p.add_argument("--key", required=True, help="private signing key (PEM)")
    p.add_argument("--name", help="model name when metadata.json is absent (default: parent directory)")
    p.add_argument("--version", help="semantic version when metadata.json is absent (default: N.0.0)")
    p.set_defaults(func=_sign)

    p = commands.add_parser("verify", help="verify a package against trusted public keys")
    p.add_argument("package", help="package directory or .tar/.tar.gz")
    trust = p.add_mutually_exclusive_group(required=True)
    trust.add_argument("--pubkey", action="append", help="trusted public key (repeatable)")
    trust.add_argument("--trust", help="a tenant trust-store directory (*.pub.pem + revoked.txt)")
    p.add_argument("--name", help="require this model name")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_verify)

"""rtctl commands that make and check signed model packages: keygen, pack, sign, verify.

They run on the operator's side, outside the daemon, and use rtd.loader directly.
"""
import json
import os

from rtd.errors import Code, RtdError
from rtd.loader import TrustStore, keys, pack, verify_package
from rtd.loader.intake import ARCHIVE_SUFFIXES


def check_package_path(path: str) -> str:
    """A package is a model directory or a .tar/.tar.gz; a bare model file is told how to pack it."""
    if not os.path.exists(path):
        raise RtdError(Code.E_PATH_NOT_FOUND, path)
    if os.path.isfile(path) and not path.endswith(ARCHIVE_SUFFIXES):
        raise RtdError(Code.E_NOT_A_PACKAGE, f"{path} is a file; pack it first: rtctl pack {path} --name NAME "
                                             "--version X.Y.Z --key KEY.pem --out NAME.tar")
    return path


def _keygen(args) -> int:
    for name in (keys.PRIVATE_NAME, keys.PUBLIC_NAME):
        if os.path.lexists(os.path.join(args.out, name)):
            raise RtdError(Code.E_PATH_EXISTS, f"{os.path.join(args.out, name)}: keygen never replaces a key; "
                                               "choose another --out")
    private_path, public_path = keys.write_keypair(args.out, args.bits)
    print(f"private key {private_path} (0600)\npublic key  {public_path}\n"
          f"fingerprint {keys.fingerprint(keys.load_private(private_path).public_key())}")
    return 0


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _pack(args) -> int:
    private_key = keys.load_private(args.key)
    model = _read(args.model)
    siblings = pack.external_files(model, os.path.dirname(os.path.abspath(args.model)))
    files = pack.package_files(model, name=args.name, version=args.version, private_key=private_key,
                               counter=args.counter, expires=args.expires, config_bytes=_read(args.config),
                               min_rtd_version=args.min_rtd_version, siblings=siblings)
    pack.write_package(files, args.out, args.name)
    trust = TrustStore(None)
    trust.keys[keys.fingerprint(private_key.public_key())] = private_key.public_key()
    with verify_package(args.out, trust=trust, tenant="", rollback=None) as pkg:
        data = f", external data {', '.join(siblings)}" if siblings else ""
        print(f"packed {pkg.name} {pkg.version} (counter {pkg.counter}{data}) -> {args.out}")
    return 0


def _sign(args) -> int:
    meta = pack.sign_version_dir(args.dir, keys.load_private(args.key), name=args.name, version=args.version)
    print(f"signed {meta['name']} {meta['version']} (counter {meta['counter']}) in {args.dir}")
    return 0


def _verify(args) -> int:
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
    p.add_argument("--bits", type=int, default=keys.DEFAULT_BITS,
                   help=f"RSA modulus size (default {keys.DEFAULT_BITS}; at least {keys.MIN_BITS})")
    p.set_defaults(func=_keygen)

    p = commands.add_parser("pack", help="build a signed package from an ONNX model")
    p.add_argument("model", help="the ONNX model file")
    p.add_argument("--name", required=True, help="model name the package is signed for (what `rtctl run` calls)")
    p.add_argument("--version", required=True, help="semantic version X.Y.Z")
    p.add_argument("--key", required=True, help="private signing key (PEM)")
    p.add_argument("--out", required=True, help="model directory, or an archive ending in .tar/.tar.gz")
    p.add_argument("--counter", type=int, default=1, help="monotonic counter, also the version directory")
    p.add_argument("--expires", help="UTC expiry YYYY-MM-DDTHH:MM:SSZ")
    p.add_argument("--config", help="config.pbtxt to include")
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

"""RSA signing keys: generation, PEM files, fingerprints and the key policy.

The policy is fixed, not negotiated: RSA, modulus of 3072 bits or more, public exponent
65537. Anything else is refused with E_ALG_UNSUPPORTED when a key is loaded or used.
A key's fingerprint is the SHA-256 hex of its DER SubjectPublicKeyInfo.
"""
import hashlib
import os

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from rtd.errors import Code, RtdError

MIN_BITS = 3072
DEFAULT_BITS = 3072
PRIVATE_NAME = "signing.pem"
PUBLIC_NAME = "signing.pub.pem"


def check_public(key) -> rsa.RSAPublicKey:
    if not isinstance(key, rsa.RSAPublicKey):
        raise RtdError(Code.E_ALG_UNSUPPORTED, f"{type(key).__name__} keys are refused; use RSA")
    if key.key_size < MIN_BITS:
        raise RtdError(Code.E_ALG_UNSUPPORTED, f"RSA-{key.key_size} is shorter than {MIN_BITS} bits")
    if key.public_numbers().e != 65537:
        raise RtdError(Code.E_ALG_UNSUPPORTED, "the RSA public exponent must be 65537")
    return key


def check_private(key) -> rsa.RSAPrivateKey:
    if not isinstance(key, rsa.RSAPrivateKey):
        raise RtdError(Code.E_ALG_UNSUPPORTED, f"{type(key).__name__} keys are refused; use RSA")
    check_public(key.public_key())
    return key


def fingerprint(public_key) -> str:
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def generate(bits: int = DEFAULT_BITS) -> rsa.RSAPrivateKey:
    if bits < MIN_BITS:
        raise RtdError(Code.E_ALG_UNSUPPORTED, f"RSA-{bits} is shorter than {MIN_BITS} bits")
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def public_pem(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def write_keypair(directory: str, bits: int = DEFAULT_BITS) -> tuple[str, str]:
    """Write signing.pem (0600, created exclusively) and signing.pub.pem; return both paths."""
    key = generate(bits)
    os.makedirs(directory, exist_ok=True)
    private_path = os.path.join(directory, PRIVATE_NAME)
    public_path = os.path.join(directory, PUBLIC_NAME)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(private)
    with open(public_path, "xb") as out:
        out.write(public_pem(key.public_key()))
    return private_path, public_path


def load_private(path: str, *, unsafe_skip_validation: bool = False) -> rsa.RSAPrivateKey:
    """The signing key at `path`. `unsafe_skip_validation` skips OpenSSL's consistency check of
    its numbers (a tenth of a second and more), for a caller that verifies what it signed with
    the key's public half right after (`rtctl pack`): a damaged key fails there instead."""
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    try:
        key = serialization.load_pem_private_key(data, password=None, unsafe_skip_rsa_key_validation=unsafe_skip_validation)
    except (ValueError, TypeError) as e:
        raise RtdError(Code.E_ALG_UNSUPPORTED, f"{path}: not an unencrypted PEM private key ({e})") from None
    return check_private(key)


def load_public(data: bytes, what: str):
    """Parse a PEM public key; the key policy is applied where it is used, so a trust store
    can hold (and report) a refused key without failing for the others."""
    try:
        return serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise RtdError(Code.E_KEY_UNTRUSTED, f"{what}: not a PEM public key ({e})") from None

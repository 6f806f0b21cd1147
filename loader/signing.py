"""Signing and verifying the manifest: RSA-PSS, SHA-256, MGF1-SHA256, salt length 32. Nothing else.

The signature file `checksum.sha256.sig` is a small JSON envelope, strictly parsed:

  {"format": "rtd.sig/v1", "alg": "rsa-pss-sha256", "key": <signer's key fingerprint>,
   "manifest_sha256": <hex of the signed manifest>, "signature": <base64 of the raw signature>}

The raw signature covers the manifest bytes exactly (`openssl pkeyutl`/`dgst -sigopt
rsa_padding_mode:pss -sigopt rsa_pss_saltlen:32` checks it too). `key` only selects which
trusted key to try; `manifest_sha256` only sharpens the refusal code (a manifest edited after
signing reads E_DIGEST_MISMATCH). Neither is trusted: the signature decides. The envelope
must be byte-for-byte canonical (sorted keys, fixed layout, canonical base64), so no edit of
the signature file, however harmless it looks, is accepted.

`verify` raises and never returns a bool. Parameters are never auto-detected for acceptance;
when the fixed scheme fails, the trusted key is tried with PKCS#1 v1.5 and PSS with other salts
only to name the refusal E_ALG_UNSUPPORTED instead of E_SIG_INVALID.
"""
import base64
import binascii
import dataclasses
import hashlib
import re

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from rtd.errors import Code, RtdError
from rtd.loader import boundedjson, keys, layout

FORMAT = "rtd.sig/v1"
ALGORITHM = "rsa-pss-sha256"
SALT_LENGTH = 32
PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=SALT_LENGTH)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FIELDS = {"format", "alg", "key", "manifest_sha256", "signature"}


@dataclasses.dataclass(frozen=True)
class Envelope:
    key: str               # fingerprint of the key that claims to have signed
    manifest_sha256: str
    signature: bytes


def sign(private_key, manifest_bytes: bytes) -> bytes:
    """The envelope bytes for a manifest, signed with a policy-conforming RSA key."""
    keys.check_private(private_key)
    signature = private_key.sign(manifest_bytes, PSS, hashes.SHA256())
    return boundedjson.dumps({
        "format": FORMAT, "alg": ALGORITHM, "key": keys.fingerprint(private_key.public_key()),
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "signature": base64.b64encode(signature).decode()})


def read_envelope(data) -> Envelope:
    if len(data) == 0:
        raise RtdError(Code.E_SIG_MISSING, "checksum.sha256.sig is empty")
    max_bytes = layout.SMALL_CAPS[layout.SIGNATURE][0]
    env = boundedjson.loads(data, code=Code.E_SIG_INVALID, max_bytes=max_bytes, max_depth=1,
                            what="signature envelope")
    if set(env) != _FIELDS or env["format"] != FORMAT:
        raise RtdError(Code.E_SIG_INVALID, f"envelope must be {FORMAT} with exactly {sorted(_FIELDS)}")
    if env["alg"] != ALGORITHM:
        raise RtdError(Code.E_ALG_UNSUPPORTED, f"the envelope's alg is not {ALGORITHM}")
    for field in ("key", "manifest_sha256"):
        if not isinstance(env[field], str) or not _HEX64.fullmatch(env[field]):
            raise RtdError(Code.E_SIG_INVALID, f"envelope {field} is not SHA-256 hex")
    try:
        raw = base64.b64decode(env["signature"], validate=True) if isinstance(env["signature"], str) else b""
    except (binascii.Error, ValueError):   # ValueError: a str that is not ASCII
        raw = b""
    if not raw or base64.b64encode(raw).decode() != env["signature"]:
        raise RtdError(Code.E_SIG_INVALID, "envelope signature is not canonical base64")
    if boundedjson.dumps(env) != bytes(data):
        raise RtdError(Code.E_SIG_INVALID, "envelope is not in canonical form")
    return Envelope(env["key"], env["manifest_sha256"], raw)


def _other_scheme_verifies(public_key, message: bytes, signature: bytes) -> bool:
    """Whether a refused scheme (PKCS#1 v1.5, PSS with another salt) explains the failure."""
    attempts = [(padding.PKCS1v15(), hashes.SHA256()),
                (padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.AUTO), hashes.SHA256())]
    for pad, algorithm in attempts:
        try:
            public_key.verify(signature, message, pad, algorithm)
            return True
        except (InvalidSignature, ValueError, TypeError):
            continue
    return False


def verify(public_key, message: bytes, signature: bytes) -> None:
    """Return None when `signature` is RSA-PSS-SHA256 (salt 32) over `message` by `public_key`; raise otherwise."""
    keys.check_public(public_key)
    if len(signature) != (public_key.key_size + 7) // 8:
        raise RtdError(Code.E_SIG_INVALID, f"signature is {len(signature)} bytes for an RSA-{public_key.key_size} key")
    try:
        public_key.verify(signature, message, PSS, hashes.SHA256())
    except InvalidSignature:
        if _other_scheme_verifies(public_key, message, signature):
            raise RtdError(Code.E_ALG_UNSUPPORTED, "signed with PKCS#1 v1.5 or a PSS salt other than 32") from None
        raise RtdError(Code.E_SIG_INVALID, "RSA-PSS verification failed") from None

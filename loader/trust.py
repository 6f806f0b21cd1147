"""Who may sign for a tenant, and how far each model's counter has gone.

TrustStore: one tenant's trust root, a directory of `*.pub.pem` keys and `revoked.txt`
(key fingerprints, one per line; `#` comments and blank lines allowed). Each tenant has its
own directory, so a key trusted by tenant A means nothing for tenant B. A malformed
revocation list refuses every key (fail closed), never none.

RollbackStore: the persisted high-water mark of the counter per (tenant, model), with the
manifest digest of the package that set it, a JSON file replaced atomically (temporary
file, fsync, rename, fsync of the directory). A package below the mark is a rollback; one
at the mark is accepted only when it is the very package that set it (same manifest
digest), so re-sending what is loaded is not mistaken for a replay.
"""
import json
import os
import re
import threading

from rtd.errors import Code, RtdError
from rtd.files import write_atomic
from rtd.loader import keys

_FINGERPRINT = re.compile(r"[0-9a-f]{64}")
REVOCATION_LIST = "revoked.txt"


class TrustStore:
    def __init__(self, directory: str | None):
        self.directory = directory
        self.keys: dict[str, object] = {}       # fingerprint -> public key
        self.files: dict[str, str] = {}         # fingerprint -> the file it came from
        self.revoked: set[str] = set()
        self.revocation_error: str | None = None
        if directory is None:
            return
        for entry in sorted(os.listdir(directory)):
            if entry.endswith(".pub.pem"):
                with open(os.path.join(directory, entry), "rb") as f:
                    key = keys.load_public(f.read(1 << 20), entry)
                self.keys[keys.fingerprint(key)] = key
                self.files[keys.fingerprint(key)] = entry
        path = os.path.join(directory, REVOCATION_LIST)
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="strict") as f:
                for number, line in enumerate(f, 1):
                    line = line.split("#", 1)[0].strip()
                    if not line:
                        continue
                    if not _FINGERPRINT.fullmatch(line):
                        self.revocation_error = f"{REVOCATION_LIST} line {number} is not a fingerprint"
                        break
                    self.revoked.add(line)

    @classmethod
    def from_pem_files(cls, paths) -> "TrustStore":
        """A store trusting exactly these public key files (the operator's `rtctl verify --pubkey`)."""
        store = cls(None)
        for path in paths:
            with open(path, "rb") as f:
                key = keys.load_public(f.read(1 << 20), path)
            store.keys[keys.fingerprint(key)] = key
        return store

    def key_for(self, fingerprint: str):
        """The trusted, unrevoked public key with this fingerprint, or RtdError."""
        if self.revocation_error:
            raise RtdError(Code.E_KEY_REVOKED, self.revocation_error + "; every key is refused")
        if fingerprint in self.revoked:
            raise RtdError(Code.E_KEY_REVOKED, f"key {fingerprint[:16]}...")
        try:
            return self.keys[fingerprint]
        except KeyError:
            where = self.directory or "the public keys given"
            raise RtdError(Code.E_KEY_UNTRUSTED, f"key {fingerprint[:16]}... is not in {where}") from None


class RollbackStore:
    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        # Marks also kept in memory: what `record` raised (even if its write failed) and what
        # the caller knows from elsewhere (the daemon's registry), for a file that lags or was reset.
        self.floors: dict[tuple[str, str], tuple[int, str | None]] = {}

    def _read(self) -> dict:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except ValueError:   # fail closed: an unreadable store refuses every load, it never resets
            raise RtdError(Code.E_INTERNAL, f"{self.path} is not valid JSON") from None
        if not isinstance(data, dict):
            raise RtdError(Code.E_INTERNAL, f"{self.path} is not a rollback store")
        return data

    def _mark(self, tenant: str, name: str) -> tuple[int, str | None] | None:
        """The higher of the file's mark and the one in memory (at one counter: the one that knows its digest)."""
        return _higher(self._file_mark(tenant, name), self.floors.get((tenant, name)))

    def _file_mark(self, tenant: str, name: str) -> tuple[int, str | None] | None:
        mark = self._read().get(tenant, {}).get(name)
        if mark is None:
            return None
        if isinstance(mark, int):   # written before marks carried their digest
            return mark, None
        if not isinstance(mark, dict) or not isinstance(mark.get("counter"), int):
            raise RtdError(Code.E_INTERNAL, f"{self.path}: malformed mark for {tenant}/{name}")
        return mark["counter"], mark.get("manifest_sha256")

    def raise_floor(self, tenant: str, name: str, counter: int, manifest_sha256: str | None) -> None:
        """A mark known from elsewhere, held in memory only (it never lowers one)."""
        self.floors[(tenant, name)] = _higher(self.floors.get((tenant, name)), (counter, manifest_sha256))

    def high_water(self, tenant: str, name: str) -> int | None:
        mark = self._mark(tenant, name)
        return None if mark is None else mark[0]

    def check(self, tenant: str, name: str, counter: int, *, manifest_sha256: str | None = None,
              allow_rollback: bool = False) -> None:
        mark = self._mark(tenant, name)
        if mark is None or allow_rollback or counter > mark[0]:
            return
        if counter == mark[0] and manifest_sha256 is not None and manifest_sha256 == mark[1]:
            return   # the very package that set the mark, sent again
        raise RtdError(Code.E_ROLLBACK, f"counter {counter} <= high-water mark {mark[0]} for {tenant}/{name}; "
                                        f"a new package needs a higher counter (rtctl pack --counter {mark[0] + 1})")

    def record(self, tenant: str, name: str, counter: int, manifest_sha256: str | None = None) -> None:
        """Raise the mark to `counter` with the digest of the package at it (never lowers
        it); durable on return. The mark holds in memory even when writing it fails (OSError)."""
        with self._lock:
            self.raise_floor(tenant, name, counter, manifest_sha256)
            data = self._read()
            old = self._file_mark(tenant, name)
            new = _higher(old, (counter, manifest_sha256))
            if new == old:
                return
            data.setdefault(tenant, {})[name] = {"counter": new[0], "manifest_sha256": new[1]}
            write_atomic(self.path, json.dumps(data, sort_keys=True).encode())


def _higher(a: tuple | None, b: tuple | None) -> tuple | None:
    """The higher of two (counter, digest) marks; at one counter, the one that knows its digest."""
    if a is None or b is None:
        return a or b
    if a[0] != b[0]:
        return a if a[0] > b[0] else b
    return a if a[1] is not None else b

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
        self.revoked: set[str] = set()
        self.revocation_error: str | None = None
        if directory is None:
            return
        for entry in sorted(os.listdir(directory)):
            if entry.endswith(".pub.pem"):
                with open(os.path.join(directory, entry), "rb") as f:
                    key = keys.load_public(f.read(1 << 20), entry)
                self.keys[keys.fingerprint(key)] = key
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
            raise RtdError(Code.E_KEY_UNTRUSTED, f"key {fingerprint[:16]}... is not in {self.directory}") from None


class RollbackStore:
    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()

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
        mark = self._read().get(tenant, {}).get(name)
        if mark is None:
            return None
        if isinstance(mark, int):   # written before marks carried their digest
            return mark, None
        if not isinstance(mark, dict) or not isinstance(mark.get("counter"), int):
            raise RtdError(Code.E_INTERNAL, f"{self.path}: malformed mark for {tenant}/{name}")
        return mark["counter"], mark.get("manifest_sha256")

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
        it); durable on return."""
        with self._lock:
            data = self._read()
            marks = data.setdefault(tenant, {})
            old = self._mark(tenant, name) if name in marks else None
            if old is None or counter > old[0]:
                marks[name] = {"counter": counter, "manifest_sha256": manifest_sha256}
            elif counter == old[0] and old[1] is None and manifest_sha256 is not None:
                marks[name] = {"counter": counter, "manifest_sha256": manifest_sha256}
            else:
                return
            write_atomic(self.path, json.dumps(data, sort_keys=True).encode())

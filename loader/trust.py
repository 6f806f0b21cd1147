"""Who may sign for a tenant, and how far each model's counter has gone.

TrustStore: one tenant's trust root, a directory of `*.pub.pem` keys and `revoked.txt`
(key fingerprints, one per line; `#` comments and blank lines allowed). Each tenant has its
own directory, so a key trusted by tenant A means nothing for tenant B. A malformed
revocation list refuses every key (fail closed), never none.

RollbackStore: the persisted high-water mark of the counter per (tenant, model), a JSON file
replaced atomically (temporary file, fsync, rename, fsync of the directory).
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

    def high_water(self, tenant: str, name: str) -> int | None:
        return self._read().get(tenant, {}).get(name)

    def check(self, tenant: str, name: str, counter: int, *, allow_rollback: bool = False) -> None:
        mark = self.high_water(tenant, name)
        if mark is not None and counter <= mark and not allow_rollback:
            raise RtdError(Code.E_ROLLBACK, f"counter {counter} <= high-water mark {mark} for {tenant}/{name}")

    def record(self, tenant: str, name: str, counter: int) -> None:
        """Raise the high-water mark to `counter` (never lowers it); durable on return."""
        with self._lock:
            data = self._read()
            marks = data.setdefault(tenant, {})
            marks[name] = max(counter, marks.get(name, 0))
            write_atomic(self.path, json.dumps(data, sort_keys=True).encode())

"""Who may sign for a tenant, and how far each model's counter has gone.

TrustStore: one tenant's trust root, a directory of `*.pub.pem` keys and `revoked.txt`
(key fingerprints, one per line; `#` comments and blank lines allowed). Each tenant has its
own directory, so a key trusted by tenant A means nothing for tenant B. Every file is read
beneath the directory (rtd.beneath: no symlink, no FIFO, capped), and each may have a
`.last-good` copy (rtctl trust writes both): a damaged file is replaced by its copy, logged
in `problems`; a file with neither copy usable makes the store `unusable` and refuses every
key (fail closed) until it is repaired. Revocations are the union of revoked.txt and its
copy, so emptying or deleting the file revokes nothing back.

RollbackStore: the persisted high-water mark of the counter per (tenant, model), with the
manifest digest of the package that set it, in a JSON file and its last good copy (each
replaced atomically). The marks are read once and kept in memory, the higher of the two
copies for each model, so neither a damaged nor a reset file lowers one. A package below the
mark is a rollback; one at the mark is accepted only when it is the very package that set it
(same manifest digest), so re-sending what is loaded is not mistaken for a replay. When both
copies are damaged (or the caller knows the file existed and both are gone) the store is
`unusable`: every check is refused (E_STATE_DAMAGED, naming the file) until `repair()`.
"""
import json
import os
import re
import threading

from rtd.beneath import Dir
from rtd.errors import Code, RtdError
from rtd.files import LAST_GOOD, Copies, read_copies, set_aside, write_durable
from rtd.loader import keys

_FINGERPRINT = re.compile(r"[0-9a-f]{64}")
REVOCATION_LIST = "revoked.txt"
MAX_KEY_BYTES = 1 << 20
MAX_LIST_BYTES = 1 << 20
MAX_MARKS_BYTES = 64 << 20
REPAIR = "rtctl state repair"


def revocations(data: bytes) -> set[str]:
    """The fingerprints a revocation list names; ValueError naming the line that is not one."""
    try:
        text = data.decode("utf-8", "strict")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 (at byte {e.start})") from None
    revoked = set()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line and not _FINGERPRINT.fullmatch(line):
            raise ValueError(f"line {number} is not a fingerprint")
        revoked.add(line)
    revoked.discard("")
    return revoked


class TrustStore:
    def __init__(self, directory: str | None):
        self.directory = directory
        self.keys: dict[str, object] = {}       # fingerprint -> public key
        self.files: dict[str, str] = {}         # fingerprint -> the file it came from
        self.revoked: set[str] = set()
        self.problems: list[str] = []           # damaged files, each replaced by its last good copy
        self.unusable: str | None = None        # why every key is refused (a file with no usable copy)
        if directory is None:
            return
        try:
            with Dir.open(directory, "trusted_keys") as d:
                for name, _ in d.entries():
                    if name.endswith(".pub.pem"):
                        self._key(d, name)
                self._revocations(d)
        except RtdError as e:
            self.unusable = self.unusable or e.detail

    def _usable(self, copies: Copies):
        if copies.lost():
            self.unusable = self.unusable or copies.lost()
        elif copies.main is None and copies.last_good is not None:
            self.problems.append(f"{'; '.join(copies.problems) or copies.name + ': gone'}: its last good copy is used")
        return copies.usable()

    def _key(self, d: Dir, name: str) -> None:
        copies = read_copies(d, name, lambda data: keys.load_public(data, name), MAX_KEY_BYTES, allow_links=True)
        if copies.main is None and "file" not in copies.present:
            return   # removed since listed
        key = self._usable(copies)
        if key is not None:
            self.keys[keys.fingerprint(key)] = key
            self.files[keys.fingerprint(key)] = name

    def _revocations(self, d: Dir) -> None:
        copies = read_copies(d, REVOCATION_LIST, revocations, MAX_LIST_BYTES, allow_links=True)
        self._usable(copies)
        for value in (copies.main, copies.last_good):   # the union: a revocation is for good
            self.revoked |= value or set()

    @classmethod
    def from_pem_files(cls, paths) -> "TrustStore":
        """A store trusting exactly these public key files (the operator's `rtctl verify --pubkey`)."""
        store = cls(None)
        for path in paths:
            with open(path, "rb") as f:
                key = keys.load_public(f.read(MAX_KEY_BYTES), path)
            store.keys[keys.fingerprint(key)] = key
        return store

    def key_for(self, fingerprint: str):
        """The trusted, unrevoked public key with this fingerprint, or RtdError."""
        if self.unusable:
            raise RtdError(Code.E_STATE_DAMAGED, f"{self.unusable}: every key is refused until it is repaired")
        if fingerprint in self.revoked:
            raise RtdError(Code.E_KEY_REVOKED, f"key {fingerprint[:16]}...")
        try:
            return self.keys[fingerprint]
        except KeyError:
            where = "the tenant's trusted_keys" if self.directory else "the public keys given"
            raise RtdError(Code.E_KEY_UNTRUSTED, f"key {fingerprint[:16]}... is not in {where}") from None


def _marks(data: bytes) -> dict:
    """{(tenant, model): (counter, digest or None)} of a rollback file; ValueError naming what is malformed."""
    try:
        doc = json.loads(data)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    if not isinstance(doc, dict) or not all(isinstance(models, dict) for models in doc.values()):
        raise ValueError("not a rollback store: {tenant: {model: mark}}")
    marks = {}
    for tenant, models in doc.items():
        for name, mark in models.items():
            if isinstance(mark, int) and not isinstance(mark, bool):   # written before marks carried their digest
                marks[(tenant, name)] = (mark, None)
            elif (isinstance(mark, dict) and isinstance(mark.get("counter"), int) and not isinstance(mark["counter"], bool)
                  and (mark.get("manifest_sha256") is None or isinstance(mark["manifest_sha256"], str))):
                marks[(tenant, name)] = (mark["counter"], mark.get("manifest_sha256"))
            else:
                raise ValueError("a mark is malformed")
    return marks


class RollbackStore:
    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self.floors: dict[tuple[str, str], tuple[int, str | None]] = {}   # the marks in force
        self.problems: list[str] = []
        self.unusable: str | None = None
        directory, name = os.path.split(os.path.abspath(path))
        copies = Copies(name)
        if os.path.isdir(directory):
            with Dir.open(directory) as d:
                copies = read_copies(d, name, _marks, MAX_MARKS_BYTES)
        self.present = bool(copies.present)    # the file (or its copy) was ever written
        for marks in (copies.main, copies.last_good):
            for key, mark in (marks or {}).items():
                self.floors[key] = _higher(self.floors.get(key), mark)
        self.unusable = copies.lost()
        if copies.main is None and copies.last_good is not None:   # the file again from its copy, at once
            aside = set_aside(path)
            self.problems.append(f"{'; '.join(copies.problems) or name + ': gone'}: its last good copy is used"
                                 + (f" (the damaged file is kept as {os.path.basename(aside)})" if aside else ""))
            try:
                self._write()
            except OSError as e:
                self.problems.append(f"{name} could not be written again: {e.strerror}")

    def missing(self, why: str) -> None:
        """The caller knows the file was written once, and neither copy is there: refuse until repaired."""
        self.unusable = self.unusable or f"{os.path.basename(self.path)} and its last good copy are gone while {why}"

    def ensure(self) -> None:
        """Write the file if it never was, so that its absence later means it was lost."""
        with self._lock:
            if not self.present:
                self._write()

    def _refuse_if_unusable(self) -> None:
        if self.unusable:
            raise RtdError(Code.E_STATE_DAMAGED, f"until `{REPAIR}`: {self.unusable}")

    def raise_floor(self, tenant: str, name: str, counter: int, manifest_sha256: str | None) -> None:
        """A mark known from elsewhere, held in memory only (it never lowers one)."""
        self.floors[(tenant, name)] = _higher(self.floors.get((tenant, name)), (counter, manifest_sha256))

    def high_water(self, tenant: str, name: str) -> int | None:
        mark = self.floors.get((tenant, name))
        return None if mark is None else mark[0]

    def check(self, tenant: str, name: str, counter: int, *, manifest_sha256: str | None = None,
              allow_rollback: bool = False) -> None:
        self._refuse_if_unusable()
        mark = self.floors.get((tenant, name))
        if mark is None or allow_rollback or counter > mark[0]:
            return
        if counter == mark[0] and manifest_sha256 is not None and manifest_sha256 == mark[1]:
            return   # the very package that set the mark, sent again
        raise RtdError(Code.E_ROLLBACK, f"counter {counter} <= high-water mark {mark[0]} for {tenant}/{name}; "
                                        f"a new package needs a higher counter (rtctl pack --counter {mark[0] + 1})")

    def record(self, tenant: str, name: str, counter: int, manifest_sha256: str | None = None) -> None:
        """Raise the mark to `counter` with the digest of the package at it (never lowers
        it); durable on return. The mark holds in memory even when writing it fails (OSError),
        and an unusable store is not written until repaired."""
        with self._lock:
            old = self.floors.get((tenant, name))
            self.raise_floor(tenant, name, counter, manifest_sha256)
            if self.floors[(tenant, name)] != old or not self.present:
                self._write()

    def _write(self) -> None:
        if self.unusable:
            return
        doc: dict = {}
        for (tenant, name), (counter, digest) in sorted(self.floors.items()):
            doc.setdefault(tenant, {})[name] = {"counter": counter, "manifest_sha256": digest}
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), mode=0o700, exist_ok=True)
        write_durable(self.path, json.dumps(doc, sort_keys=True).encode())
        self.present = True

    def repair(self) -> str:
        """The operator's decision: the marks known now (both copies' and those raised since) become
        the file; the damaged copies are kept aside. Returns what was done."""
        with self._lock:
            kept = [os.path.basename(a) for a in (set_aside(self.path), set_aside(self.path + LAST_GOOD)) if a]
            self.unusable = None
            self._write()
        return (f"{os.path.basename(self.path)} written with {len(self.floors)} mark(s) known now"
                + (f"; kept {', '.join(kept)}" if kept else ""))


def _higher(a: tuple | None, b: tuple | None) -> tuple | None:
    """The higher of two (counter, digest) marks; at one counter, the one that knows its digest."""
    if a is None or b is None:
        return a or b
    if a[0] != b[0]:
        return a if a[0] > b[0] else b
    return a if a[1] is not None else b

"""The revocations a tenant's trust store has ever listed, as the daemon saw them:
`tenants/<tenant>/revoked.json` and its last good copy, under the state directory.

A tenant's revoked.txt is the operator's file; emptied or deleted (with its copy) it would
trust a revoked key again without a word. So the daemon keeps its own record of every
fingerprint it has seen revoked and adds it to the trust store it reads: a key once revoked
stays revoked. Both copies of this record damaged (or gone while the tenant's other state
is there) make `unusable`: the supervisor refuses the tenant's loads until it is repaired.
"""
import json
import os
import re
import threading

from rtd.beneath import Dir
from rtd.files import LAST_GOOD, Copies, read_copies, set_aside, write_durable

NAME = "revoked.json"
MAX_BYTES = 16 << 20
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")


def _parse(data: bytes) -> set[str]:
    try:
        doc = json.loads(data)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("revoked"), list) \
            or not all(isinstance(f, str) and _FINGERPRINT.fullmatch(f) for f in doc["revoked"]):
        raise ValueError('not {"revoked": [fingerprint, ...]}')
    return set(doc["revoked"])


class Revocations:
    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self.problems: list[str] = []
        directory = os.path.dirname(path)
        copies = Copies(NAME)
        if os.path.isdir(directory):
            with Dir.open(directory) as d:
                copies = read_copies(d, NAME, _parse, MAX_BYTES)
        self.known: set[str] = (copies.main or set()) | (copies.last_good or set())
        self.present = bool(copies.present)
        self.unusable = copies.lost()
        if copies.main is None and copies.last_good is not None:
            aside = set_aside(path)
            self.problems.append(f"{'; '.join(copies.problems) or NAME + ': gone'}: its last good copy is used"
                                 + (f" (the damaged file is kept as {os.path.basename(aside)})" if aside else ""))
            self._write()

    def remember(self, fingerprints) -> None:
        """Add what a trust store lists now; durable on return (nothing is written while unusable)."""
        with self._lock:
            if set(fingerprints) <= self.known and self.present:
                return
            self.known |= set(fingerprints)
            if not self.unusable:
                self._write()

    def _write(self) -> None:
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        write_durable(self.path, json.dumps({"revoked": sorted(self.known)}, indent=1).encode())
        self.present = True

    def repair(self, fingerprints) -> str:
        """The operator's decision: the record becomes what is known now (the damaged copies kept aside)."""
        with self._lock:
            kept = [os.path.basename(a) for a in (set_aside(self.path), set_aside(self.path + LAST_GOOD)) if a]
            self.known |= set(fingerprints)
            self.unusable = None
            self._write()
        return f"{NAME} written with {len(self.known)} revocation(s)" + (f"; kept {', '.join(kept)}" if kept else "")

"""The daemon's durable record of loaded packages: `registry.json` (tenant → model → version,
counter, manifest digest, file digests and sizes) and `blobs/<sha256>` (each verified file,
content-addressed), under the state directory.

One lock covers writing a package's blobs, replacing the index and collecting unreferenced
blobs, so no load or unload can collect another's blobs half-way. Every file is written
atomically and fsynced with its directory (rtd.files.write_atomic); the index that was
good before a change is kept as `registry.json.last-good`. A change is on disk before the
caller makes it visible, and a write that fails (ENOSPC: E_STORAGE_FULL) leaves the index
as it was and removes the blobs it added. Each tenant's blobs are bounded (disk_bytes).

On open, temporaries of an interrupted write are removed; an unreadable index falls back to
the last good one (the damaged file is set aside); an entry that is malformed or names a
missing blob costs that model only: it is dropped, and reported in `damaged`.
"""
import errno
import json
import logging
import os
import re
import threading
import time

from rtd.errors import Code, RtdError
from rtd.files import remove_temporaries, write_atomic

FORMAT = 2
_DIGEST = re.compile(r"[0-9a-f]{64}")
log = logging.getLogger("rtd.registry")


def _storage_error(e: OSError, what: str) -> RtdError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return RtdError(Code.E_STORAGE_FULL, f"{what}: {e.strerror}")
    return RtdError(Code.E_INTERNAL, f"{what}: {e.strerror}")


def _valid_entry(entry) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("files"), dict) and isinstance(entry.get("sizes"), dict)
            and isinstance(entry.get("counter"), int) and isinstance(entry.get("manifest_sha256"), str)
            and all(isinstance(k, str) and isinstance(v, str) and _DIGEST.fullmatch(v) for k, v in entry["files"].items())
            and set(entry["sizes"]) == set(entry["files"]) and all(isinstance(v, int) for v in entry["sizes"].values()))


class Registry:
    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, "registry.json")
        self.last_good = self.path + ".last-good"
        self.blobs = os.path.join(state_dir, "blobs")
        os.makedirs(self.blobs, mode=0o700, exist_ok=True)
        self.lock = threading.Lock()
        self.damaged: list[str] = []     # what opening could not use, for the operator
        for directory in (state_dir, self.blobs):
            for name in remove_temporaries(directory):
                log.warning("registry: removed %s, left by an interrupted write", os.path.join(directory, name))
        self.entries = self._open()

    # -- opening -------------------------------------------------------------------------------
    def _read(self, path: str) -> dict:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        if not isinstance(doc, dict) or doc.get("format") not in (1, FORMAT) or not isinstance(doc.get("tenants"), dict):
            raise ValueError("not an rtd registry")
        if doc["format"] == 1:   # format 1 kept no sizes: read them off the blobs
            for models in doc["tenants"].values():
                for entry in models.values() if isinstance(models, dict) else ():
                    if isinstance(entry, dict) and isinstance(entry.get("files"), dict):
                        entry["sizes"] = {rel: self._size(d) for rel, d in entry["files"].items()}
        return doc["tenants"]

    def _size(self, digest) -> int:
        try:
            return os.path.getsize(os.path.join(self.blobs, str(digest)))
        except OSError:
            return -1

    def _open(self) -> dict:
        if not os.path.exists(self.path) and not os.path.exists(self.last_good):
            return {}
        try:
            tenants = self._read(self.path)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            if os.path.exists(self.path):
                aside = f"{self.path}.damaged-{time.time_ns()}"
                os.replace(self.path, aside)
                self.damaged.append(f"registry.json unreadable ({type(e).__name__}: {str(e)[:100]}), kept as {aside}")
            else:
                self.damaged.append("registry.json missing beside its last good copy")
            try:
                tenants = self._read(self.last_good)
                self.damaged.append("restored the last good registry")
            except (OSError, ValueError, UnicodeDecodeError):
                self.damaged.append("no usable last good registry: starting empty")
                tenants = {}
        entries = {}
        for tenant, models in tenants.items():
            if not isinstance(models, dict):
                self.damaged.append(f"{tenant}: malformed, dropped")
                continue
            for name, entry in models.items():
                missing = [d for d in entry["files"].values()
                           if not os.path.exists(os.path.join(self.blobs, d))] if _valid_entry(entry) else ["?"]
                if missing:
                    self.damaged.append(f"{tenant}/{name}: " + ("malformed entry" if missing == ["?"] else
                                                                f"{len(missing)} blob(s) missing") + ", dropped")
                    continue
                entries.setdefault(tenant, {})[name] = entry
        for line in self.damaged:
            log.error("registry: %s", line)
        if self.damaged:   # what is served from now on is what the index says
            try:
                self._flush(entries)
            except OSError as e:
                self.damaged.append(f"could not rewrite registry.json: {e.strerror}")
        return entries

    # -- changes ---------------------------------------------------------------------------------
    def _flush(self, entries: dict) -> None:
        """Replace the index (the change is made, or not, by this one rename); then its copy,
        best effort: a copy that could not be written is an older good one, still valid."""
        data = json.dumps({"format": FORMAT, "tenants": entries}, indent=1, sort_keys=True).encode()
        write_atomic(self.path, data)
        try:
            write_atomic(self.last_good, data)
        except OSError as e:
            log.warning("registry: the last good copy lags one change behind (%s)", e.strerror)

    def tenant_bytes(self, tenant: str, entries: dict | None = None) -> int:
        files = {}
        for entry in (entries if entries is not None else self.entries).get(tenant, {}).values():
            files.update({d: entry["sizes"][rel] for rel, d in entry["files"].items()})
        return sum(files.values())

    def record(self, tenant: str, name: str, pkg, disk_limit: int) -> None:
        """Persist a verified package (replacing the model's older record); durable on return."""
        files = {rel: f for rel, f in pkg.files.items()}
        entry = {"version": pkg.version, "version_dir": pkg.version_dir, "counter": pkg.counter,
                 "manifest_sha256": pkg.manifest_sha256, "key_fingerprint": pkg.key_fingerprint,
                 "files": {rel: f.sha256 for rel, f in files.items()}, "sizes": {rel: f.size for rel, f in files.items()}}
        with self.lock:
            entries = {t: dict(m) for t, m in self.entries.items()}
            entries.setdefault(tenant, {})[name] = entry
            used = self.tenant_bytes(tenant, entries)
            if used > disk_limit:
                raise RtdError(Code.E_BUDGET_EXCEEDED, f"disk_bytes: tenant {tenant}'s packages would take {used} "
                                                       f"of {disk_limit} bytes of the state directory")
            added = []
            try:
                for f in files.values():
                    path = os.path.join(self.blobs, f.sha256)
                    if not os.path.exists(path):
                        write_atomic(path, f.data)
                        added.append(path)
                self._flush(entries)
            except OSError as e:
                for path in added:
                    os.unlink(path)
                raise _storage_error(e, "recording the package") from None
            self.entries = entries
            self._collect()

    def forget(self, tenant: str, name: str) -> None:
        """Drop a model's record; durable on return (nothing changes when the write fails)."""
        with self.lock:
            if name not in self.entries.get(tenant, {}):
                return
            entries = {t: dict(m) for t, m in self.entries.items()}
            del entries[tenant][name]
            try:
                self._flush(entries)
            except OSError as e:
                raise _storage_error(e, "forgetting the package") from None
            self.entries = entries
            self._collect()

    def _collect(self) -> None:
        """Delete blobs no entry refers to (lock held, after the index no longer names them)."""
        live = {d for models in self.entries.values() for e in models.values() for d in e["files"].values()}
        for digest in os.listdir(self.blobs):
            if digest not in live and _DIGEST.fullmatch(digest):
                try:
                    os.unlink(os.path.join(self.blobs, digest))
                except OSError:
                    pass   # collected on the next change

    # -- reading -------------------------------------------------------------------------------
    def listing(self) -> list[tuple[str, str, dict]]:
        """(tenant, name, entry) of every recorded package."""
        with self.lock:
            return [(t, n, dict(e)) for t, models in self.entries.items() for n, e in models.items()]

    def files_of(self, entry: dict) -> dict:
        """{relative path: bytes} of one entry, read back from its blobs."""
        out = {}
        for rel, digest in entry["files"].items():
            with open(os.path.join(self.blobs, digest), "rb") as f:
                out[rel] = f.read()
        return out

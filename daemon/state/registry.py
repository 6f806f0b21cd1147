"""The daemon's durable record of loaded packages, under the state directory: per tenant,
`tenants/<tenant>/registry.json` (model → version, counter, manifest digest, file digests
and sizes) with its last good copy, and `blobs/<sha256>` (each verified file,
content-addressed, shared by every tenant).

One lock covers writing a package's blobs, replacing an index and collecting unreferenced
blobs, so no load or unload can collect another's blobs half-way. Every file is written
atomically and fsynced with its directory (rtd.files): the index, then its last good copy. A
change is on disk before the caller makes it visible, and a write that fails (ENOSPC:
E_STORAGE_FULL) leaves the index as it was and removes the blobs it added. Blobs are copied
from the sealed memfds by the kernel, never through the supervisor's memory, and read back
as FileExtents of their open files. Each tenant's blobs are bounded (disk_bytes).

On open, temporaries of an interrupted write are removed; each tenant's index is read
beneath the state directory (rtd.beneath), else its last good copy (the damaged file is set
aside and logged); an entry that is malformed or names a missing blob costs that model only:
it is dropped, and reported in `damaged`. A tenant whose index and copy are both unusable is
`unusable`: none of its models is restored, the supervisor refuses its loads until an
operator repairs it (`repair`), and no blob is collected meanwhile (they may be its). A state
directory of the earlier layout (one registry.json for every tenant) is split once.
"""
import json
import logging
import os
import re
import threading

from rtd.beneath import Dir
from rtd.errors import Code, RtdError, storage_error
from rtd.files import LAST_GOOD, read_copies, remove_temporaries, set_aside, write_atomic, write_durable
from rtd.loader.sealed import FileExtent

FORMAT = 3
INDEX = "registry.json"
MAX_INDEX_BYTES = 64 << 20
_DIGEST = re.compile(r"[0-9a-f]{64}")
log = logging.getLogger("rtd.registry")


def _valid_entry(entry) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("files"), dict) and isinstance(entry.get("sizes"), dict)
            and isinstance(entry.get("counter"), int) and isinstance(entry.get("manifest_sha256"), str)
            and all(isinstance(k, str) and isinstance(v, str) and _DIGEST.fullmatch(v) for k, v in entry["files"].items())
            and set(entry["sizes"]) == set(entry["files"]) and all(isinstance(v, int) for v in entry["sizes"].values()))


def _index(tenant: str):
    """The parser of one tenant's index file: {model: entry}, or ValueError naming what is wrong."""
    def parse(data: bytes) -> dict:
        try:
            doc = json.loads(data)
        except UnicodeDecodeError:
            raise ValueError("not UTF-8") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("tenant") != tenant \
                or not isinstance(doc.get("models"), dict):
            raise ValueError(f"not the rtd registry of tenant {tenant}")
        return doc["models"]
    return parse


class Registry:
    def __init__(self, state_dir: str):
        self.state_dir = state_dir
        self.tenants_dir = os.path.join(state_dir, "tenants")
        self.blobs = os.path.join(state_dir, "blobs")
        for directory in (self.blobs, self.tenants_dir):
            os.makedirs(directory, mode=0o700, exist_ok=True)
        self.lock = threading.Lock()
        self.damaged: list[str] = []              # what opening could not use, for the operator
        self.unusable: dict[str, str] = {}        # tenant -> why its index and copy are both unusable
        self.written: set[str] = set()            # tenants whose index (or copy) exists on disk
        self.entries: dict[str, dict] = {}
        for name in remove_temporaries(self.blobs) + remove_temporaries(state_dir):
            log.warning("registry: removed %s, left by an interrupted write", name)
        self._split_earlier_layout()
        with Dir.open(self.tenants_dir) as tenants:
            for tenant, kind in tenants.entries():
                if kind == "a directory":
                    self._open(tenants, tenant)
        for line in self.damaged:
            log.error("registry: %s", line)

    def path(self, tenant: str) -> str:
        return os.path.join(self.tenants_dir, tenant, INDEX)

    # -- opening -------------------------------------------------------------------------------
    def _open(self, tenants: Dir, tenant: str) -> None:
        with tenants.subdir(tenant) as directory:
            for name in remove_temporaries(os.path.join(self.tenants_dir, tenant)):
                log.warning("registry: removed %s/%s, left by an interrupted write", tenant, name)
            copies = read_copies(directory, INDEX, _index(tenant), MAX_INDEX_BYTES)
        if copies.present:
            self.written.add(tenant)
        if copies.lost():
            self.unusable[tenant] = copies.lost()
            self.damaged.append(f"{tenant}: {copies.lost()}: none of its models restored, its loads refused until "
                                f"`rtctl state repair --tenant {tenant}`")
            return
        models = copies.usable() or {}
        if copies.main is None and copies.last_good is not None:
            aside = set_aside(self.path(tenant))
            self.damaged.append(f"{tenant}: {'; '.join(copies.problems) or INDEX + ': gone'}: restored the last good "
                                f"registry" + (f" (the damaged file is kept as {os.path.basename(aside)})" if aside else ""))
        entries = {}
        for name, entry in models.items():
            missing = [d for d in entry["files"].values()
                       if not os.path.exists(os.path.join(self.blobs, d))] if _valid_entry(entry) else ["?"]
            if missing:
                self.damaged.append(f"{tenant}/{name}: " + ("malformed entry" if missing == ["?"] else
                                                            f"{len(missing)} blob(s) missing") + ", dropped")
                continue
            entries[name] = entry
        self.entries[tenant] = entries
        if copies.present and (entries != models or copies.main is None):   # what is served from now on is what it says
            try:
                self._flush(tenant, entries)
            except OSError as e:
                self.damaged.append(f"{tenant}: could not rewrite {INDEX}: {e.strerror}")

    def _split_earlier_layout(self) -> None:
        """One registry.json for all tenants (format 1 or 2): each tenant's entries to its own
        index, once; the old files are kept as *.migrated."""
        old = os.path.join(self.state_dir, INDEX)
        with Dir.open(self.state_dir) as state:
            copies = read_copies(state, INDEX, _earlier_layout, MAX_INDEX_BYTES)
        if not copies.present:
            return
        tenants = copies.usable()
        if tenants is None:
            self.damaged.append(f"the earlier {INDEX} could not be split ({copies.lost()}); kept as {INDEX}.migrated")
            tenants = {}
        for tenant, models in tenants.items():
            if isinstance(models, dict) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tenant):
                for entry in models.values():   # format 1 kept no sizes: read them off the blobs
                    if isinstance(entry, dict) and isinstance(entry.get("files"), dict) and "sizes" not in entry:
                        entry["sizes"] = {rel: self._size(d) for rel, d in entry["files"].items()}
                self._flush(tenant, models)
        for path in (old, old + LAST_GOOD):
            if os.path.exists(path):
                os.replace(path, path + ".migrated")
        log.warning("registry: split the earlier %s into one index per tenant under tenants/", INDEX)

    def _size(self, digest) -> int:
        try:
            return os.path.getsize(os.path.join(self.blobs, str(digest)))
        except OSError:
            return -1

    # -- changes ---------------------------------------------------------------------------------
    def _flush(self, tenant: str, models: dict) -> None:
        """Replace a tenant's index (the change is made, or not, by this one rename); then its copy."""
        os.makedirs(os.path.join(self.tenants_dir, tenant), mode=0o700, exist_ok=True)
        data = json.dumps({"format": FORMAT, "tenant": tenant, "models": models}, indent=1, sort_keys=True).encode()
        write_durable(self.path(tenant), data)
        self.written.add(tenant)

    def tenant_bytes(self, tenant: str, models: dict | None = None) -> int:
        files = {}
        for entry in (models if models is not None else self.entries.get(tenant, {})).values():
            files.update({d: entry["sizes"][rel] for rel, d in entry["files"].items()})
        return sum(files.values())

    def record(self, tenant: str, name: str, pkg, disk_limit: int) -> None:
        """Persist a verified package (replacing the model's older record); durable on return."""
        files = {rel: f for rel, f in pkg.files.items()}
        entry = {"version": pkg.version, "version_dir": pkg.version_dir, "counter": pkg.counter,
                 "manifest_sha256": pkg.manifest_sha256, "key_fingerprint": pkg.key_fingerprint,
                 "files": {rel: f.sha256 for rel, f in files.items()}, "sizes": {rel: f.size for rel, f in files.items()}}
        with self.lock:
            models = {**self.entries.get(tenant, {}), name: entry}
            used = self.tenant_bytes(tenant, models)
            if used > disk_limit:
                raise RtdError(Code.E_BUDGET_EXCEEDED, f"disk_bytes: tenant {tenant}'s packages would take {used} "
                                                       f"of {disk_limit} bytes of the state directory")
            added = []
            try:
                for f in files.values():
                    path = os.path.join(self.blobs, f.sha256)
                    if not os.path.exists(path):
                        write_atomic(path, source_fd=f.fd, size=f.size)
                        added.append(path)
                self._flush(tenant, models)
            except OSError as e:
                for path in added:
                    os.unlink(path)
                raise storage_error(e.errno, "recording the package") from None
            self.entries[tenant] = models
            self._collect()

    def forget(self, tenant: str, name: str) -> None:
        """Drop a model's record; durable on return (nothing changes when the write fails)."""
        with self.lock:
            if name not in self.entries.get(tenant, {}):
                return
            models = {n: e for n, e in self.entries[tenant].items() if n != name}
            try:
                self._flush(tenant, models)
            except OSError as e:
                raise storage_error(e.errno, "forgetting the package") from None
            self.entries[tenant] = models
            self._collect()

    def repair(self, tenant: str) -> str:
        """The operator's decision: the tenant's index becomes what is known now (what it loaded
        since); the damaged copies are kept aside. Returns what was done."""
        with self.lock:
            kept = [os.path.basename(a) for a in (set_aside(self.path(tenant)), set_aside(self.path(tenant) + LAST_GOOD)) if a]
            models = self.entries.get(tenant, {})
            self._flush(tenant, models)
            self.entries[tenant] = models
            self.unusable.pop(tenant, None)
        return f"{INDEX} written with {len(models)} model(s)" + (f"; kept {', '.join(kept)}" if kept else "")

    def _collect(self) -> None:
        """Delete blobs no entry refers to (lock held, after the index no longer names them);
        none while a tenant's index is unusable: its blobs are not known."""
        if self.unusable:
            return
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
            return [(t, n, dict(e)) for t, models in sorted(self.entries.items()) for n, e in sorted(models.items())]

    def files_of(self, entry: dict) -> dict:
        """{relative path: FileExtent} of one entry's blobs, each open (the caller closes them)."""
        out = {}
        try:
            with Dir.open(self.blobs) as blobs:
                for rel, digest in entry["files"].items():
                    blob = blobs.open_file(digest, entry["sizes"][rel], Code.E_DIGEST_MISMATCH)
                    out[rel] = FileExtent(blob.fd, 0, blob.size, owned=True)
        except BaseException:
            for extent in out.values():
                extent.close()
            raise
        return out


def _earlier_layout(data: bytes) -> dict:
    try:
        doc = json.loads(data)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    if not isinstance(doc, dict) or doc.get("format") not in (1, 2) or not isinstance(doc.get("tenants"), dict):
        raise ValueError("not an rtd registry")
    return doc["tenants"]

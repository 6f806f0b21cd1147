"""Which verified packages each tenant has loaded, persisted in the state dir so a restart
restores every model without re-uploading.

Layout: `registry.json` (tenant → model → version, counter, manifest digest, file digests)
and `blobs/<sha256>` (each verified file's bytes, content-addressed). Every write is
atomic (tmp + fsync + rename + fsync of the directory), blobs before the index, so a crash
mid-write leaves either the old or the new registry, never a torn one. On restore each
package is verified again from its blobs against the tenant's current trust store, so a
key revoked since the load takes its models down with it.
"""
import hashlib
import json
import os
import threading

from rtd.errors import Code, RtdError
from rtd.files import write_atomic

FORMAT = 1


class Registry:
    """Persisted record of loaded packages; thread-safe, every mutation written through."""

    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, "registry.json")
        self.blobs = os.path.join(state_dir, "blobs")
        os.makedirs(self.blobs, mode=0o700, exist_ok=True)
        self.lock = threading.Lock()
        self.entries = self._read()

    def _read(self) -> dict:
        if not os.path.exists(self.path):
            return {}
        with open(self.path, "rb") as f:
            doc = json.loads(f.read())
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("tenants"), dict):
            raise RtdError(Code.E_INTERNAL, f"{self.path} is not an rtd registry")
        return doc["tenants"]

    def _flush(self) -> None:
        write_atomic(self.path, json.dumps({"format": FORMAT, "tenants": self.entries}, indent=1, sort_keys=True).encode())

    def _store_blob(self, data, digest: str) -> str:
        path = os.path.join(self.blobs, digest)
        if not os.path.exists(path):
            write_atomic(path, data)
        return digest

    def record(self, tenant: str, pkg) -> None:
        """Remember a fully loaded VerifiedPackage (replacing an older version of it)."""
        # the loader hashed each file's bytes once as it sealed them: those digests name the blobs
        files = {rel: self._store_blob(f.data, f.sha256) for rel, f in pkg.files.items()}
        if pkg.config_text is not None and "config.pbtxt" not in files:
            config = pkg.config_text.encode()
            files["config.pbtxt"] = self._store_blob(config, hashlib.sha256(config).hexdigest())
        entry = {"version": pkg.version, "version_dir": pkg.version_dir, "counter": pkg.counter,
                 "manifest_sha256": pkg.manifest_sha256, "key_fingerprint": pkg.key_fingerprint, "files": files}
        with self.lock:
            self.entries.setdefault(tenant, {})[pkg.name] = entry
            self._flush()
            self._collect()

    def forget(self, tenant: str, name: str) -> None:
        with self.lock:
            if self.entries.get(tenant, {}).pop(name, None) is not None:
                self._flush()
                self._collect()

    def packages(self) -> list[tuple[str, str, dict]]:
        """(tenant, name, files as {relative path: bytes}) for every recorded package."""
        with self.lock:
            items = [(t, n, dict(e["files"])) for t, models in self.entries.items() for n, e in models.items()]
        out = []
        for tenant, name, files in items:
            blobs = {}
            for rel, digest in files.items():
                with open(os.path.join(self.blobs, digest), "rb") as f:
                    blobs[rel] = f.read()
            out.append((tenant, name, blobs))
        return out

    def _collect(self) -> None:
        """Delete blobs no entry refers to (called with the lock held, after the flush)."""
        live = {d for models in self.entries.values() for e in models.values() for d in e["files"].values()}
        for digest in os.listdir(self.blobs):
            if digest not in live and len(digest) == 64:
                os.unlink(os.path.join(self.blobs, digest))

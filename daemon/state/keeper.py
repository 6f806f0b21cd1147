"""Each tenant's durable floors kept together: its registry index, its rollback marks, the daemon's
record of the keys it revoked and the trust store read with that record. The keeper says when a
tenant's state cannot be trusted to hold its floors (its loads are then refused, E_STATE_DAMAGED,
until the operator repairs it), raises the marks to what the registry holds at start, records a
verified load, and writes damaged files again from what it knows (`rtctl state repair`).
Everything here blocks on the disk: the supervisor calls it on the tenant's own threads.
"""
import os

from rtd.daemon.config import Config
from rtd.daemon.observe.events import EventLog
from rtd.daemon.state.registry import Registry
from rtd.daemon.state.revocations import Revocations
from rtd.errors import Code, RtdError
from rtd.loader import RollbackStore, TrustStore

REPAIR = "rtctl state repair --tenant {}"


class StateKeeper:
    def __init__(self, config: Config, events: EventLog):
        self.config, self.events = config, events
        self.registry = Registry(config.state_dir)
        self.rollback = {t.id: RollbackStore(os.path.join(self.registry.tenants_dir, t.id, "rollback.json"))
                         for t in config.tenants}
        self._split_earlier_marks()
        self.revocations = {t.id: Revocations(os.path.join(self.registry.tenants_dir, t.id, "revoked.json"))
                            for t in config.tenants}
        self.trust = {t.id: self.remembered(t.id, TrustStore(t.trusted_keys)) for t in config.tenants}

    def _split_earlier_marks(self) -> None:
        """A state directory of the earlier layout kept every tenant's marks in one rollback.json:
        each tenant's go to its own store, once, and the old file is kept as rollback.json.migrated."""
        old = os.path.join(self.config.state_dir, "rollback.json")
        if not (os.path.exists(old) or os.path.exists(old + ".last-good")):
            return
        earlier = RollbackStore(old)
        if earlier.unusable:
            self.registry.damaged.append(f"the earlier rollback.json could not be split: {earlier.unusable}")
        for (tenant, name), (counter, digest) in earlier.floors.items():
            if tenant in self.rollback:
                self.rollback[tenant].record(tenant, name, counter, digest)
        for path in (old, old + ".last-good"):
            if os.path.exists(path):
                os.replace(path, path + ".migrated")

    def remembered(self, tid: str, trust: TrustStore) -> TrustStore:
        """The store, revoking what it ever revoked (the daemon's record), its revocations recorded."""
        memory = self.revocations[tid]
        if not trust.unusable:
            try:
                memory.remember(trust.revoked)
            except OSError as e:   # held in memory; written with the next change
                self.events.emit("revocations_write_failed", tid, level="error", reason=e.strerror)
        trust.revoked |= memory.known
        return trust

    def damage(self, tid: str) -> str | None:
        """Why a tenant's durable state cannot be trusted to hold its floors (None: it can)."""
        trust = self.trust[tid]
        return (self.registry.unusable.get(tid) or self.rollback[tid].unusable or self.revocations[tid].unusable
                or (f"trusted_keys: {trust.unusable}" if trust.unusable else None))

    def refuse_damaged(self, tid: str) -> None:
        damage = self.damage(tid)
        if damage:
            raise RtdError(Code.E_STATE_DAMAGED, f"until `{REPAIR.format(tid)}`: {damage}")

    def raise_floors(self) -> None:
        """At start: a tenant's registry index and rollback marks vouch for each other (once it loaded
        anything both exist, so one gone while the other is there was lost, not never written), and
        the marks are raised at least as high as what the registry holds (rollback.json may lag or be
        reset): in memory first, then on disk if there is room."""
        for tid, marks in self.rollback.items():
            if not marks.present and tid in self.registry.written:
                marks.missing("its registry.json is there")
            if marks.floors and tid not in self.registry.written and tid not in self.registry.unusable:
                self.registry.unusable[tid] = "registry.json and its last good copy are gone while rollback.json holds marks"
        for tid, name, entry in self.registry.listing():
            marks = self.rollback.get(tid)
            if marks is None:
                continue
            marks.raise_floor(tid, name, entry["counter"], entry["manifest_sha256"])
            try:
                marks.record(tid, name, entry["counter"], entry["manifest_sha256"])
            except OSError as e:
                self.events.emit("rollback_write_failed", tid, level="error", model=name, reason=e.strerror)

    def report(self) -> None:
        """After the restore: each tenant's state problems joined to the registry's damage list
        (rtctl status shows it), and logged."""
        for tid, marks in self.rollback.items():
            self.registry.damaged += [f"{tid}: {line}" for line in marks.problems + self.revocations[tid].problems]
            self.registry.damaged += [f"{tid}: trusted_keys: {line}" for line in self.trust[tid].problems]
            if self.damage(tid):
                self.registry.damaged.append(f"{tid}: {self.damage(tid)}: its loads are refused until `{REPAIR.format(tid)}`")
        for line in self.registry.damaged:
            self.events.emit("registry_damaged", level="error", detail=line)

    def record(self, tid: str, name: str, pkg) -> None:
        """A verified load, on disk before it serves: marks first exist, then the index, then the marks."""
        self.rollback[tid].ensure()   # before the first index: an index without marks then means marks lost
        self.registry.record(tid, name, pkg, self.config.limits.tenant_disk_bytes)
        try:
            self.rollback[tid].record(tid, name, pkg.counter, pkg.manifest_sha256)
        except OSError as e:   # the start raises marks to the registry's counters again
            self.events.emit("rollback_write_failed", tid, level="error", model=name, reason=e.strerror)

    def reread_trust(self, config: Config) -> None:
        """Every tenant's trust store read again from a new config, with the daemon's record of
        revocations; a damaged one refuses its own tenant's loads, nobody else's."""
        self.trust = {t.id: self.remembered(t.id, TrustStore(t.trusted_keys)) for t in config.tenants}
        for tid, store in self.trust.items():
            if store.unusable:
                self.events.emit("trust_damaged", tid, level="error", reason=store.unusable)

    def repair(self, tid: str, trusted_keys: str) -> list[str]:
        """Each of the tenant's damaged state files written again from what the daemon knows now
        (the damaged copies kept aside), its trust store read again. Refused, changing nothing,
        while its trust store is still damaged. What was done, one line each."""
        done = []
        trust = TrustStore(trusted_keys)
        if trust.unusable:
            raise RtdError(Code.E_STATE_DAMAGED, f"trusted_keys: {trust.unusable}: fix or remove that file (rtctl trust "
                                                 "writes both copies), then repair again")
        if self.revocations[tid].unusable:
            done.append(self.revocations[tid].repair(trust.revoked))
        self.trust[tid] = self.remembered(tid, trust)
        if tid in self.registry.unusable:
            done.append(self.registry.repair(tid))
        if self.rollback[tid].unusable:
            for _, name, entry in (e for e in self.registry.listing() if e[0] == tid):
                self.rollback[tid].raise_floor(tid, name, entry["counter"], entry["manifest_sha256"])
            done.append(self.rollback[tid].repair())
        done.append(f"trusted_keys read again: {len(trust.keys)} key(s), {len(trust.revoked)} revocation(s)")
        self.events.emit("state_repaired", tid, level="warning", detail="; ".join(done))
        return done

"""What the daemon acknowledged, per (tenant, model name): the ground truth that the
restart and quiescence checks hold the daemon's state against.

For each name the book keeps `base`, the catalog keys the name may hold as far as the
daemon's answers tell (None: no model), the keys of operations in flight (`pending`), and
`floating` loads and unloads whose caller stopped waiting (a client deadline, a call cut
by a kill -9). The daemon finishes a load whatever its caller does, so a floating load may
still take effect after calls made since; it stops floating once a later load is
acknowledged (its higher counter makes the older package a rollback) or once the daemon's
state has been read back (`resolve`). An acknowledged load is `base == {key}`: it must be
there, answering as `key`, after any restart, until an unload of it is acknowledged."""
import collections
import dataclasses
import threading
import time

RECENT_PACKAGES = 3   # per name, for replays
HISTORY = 8           # per name: the last operations and outcomes, for the violations' messages


@dataclasses.dataclass
class Entry:
    base: set = dataclasses.field(default_factory=lambda: {None})
    pending: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    floating: set = dataclasses.field(default_factory=set)
    counter: int = 0                                  # the highest counter ever signed for the name
    recent: collections.deque = dataclasses.field(default_factory=lambda: collections.deque(maxlen=RECENT_PACKAGES))
    history: collections.deque = dataclasses.field(default_factory=lambda: collections.deque(maxlen=HISTORY))

    def note(self, what: str, key) -> None:
        self.history.append((time.monotonic(), f"{'unload' if key is None else f'load {key}'} {what}"))

    def possible(self) -> set:
        return self.base | set(self.pending) | self.floating


class Book:
    def __init__(self):
        self.lock = threading.Lock()
        self.entries: dict[tuple[str, str], Entry] = {}

    def _entry(self, tenant: str, name: str) -> Entry:
        return self.entries.setdefault((tenant, name), Entry())

    def next_counter(self, tenant: str, name: str) -> int:
        with self.lock:
            entry = self._entry(tenant, name)
            entry.counter += 1
            return entry.counter

    def remember(self, tenant: str, name: str, key, files: dict) -> None:
        """A package sent for the name, kept for replays."""
        with self.lock:
            self._entry(tenant, name).recent.append((key, files))

    def recent(self, tenant: str, name: str) -> list:
        with self.lock:
            return list(self._entry(tenant, name).recent)

    def begin(self, tenant: str, name: str, key) -> None:
        """A load of `key` (None: an unload) is about to be sent."""
        with self.lock:
            entry = self._entry(tenant, name)
            entry.pending[key] += 1
            entry.note("sent", key)

    def _end(self, entry: Entry, key) -> None:
        entry.pending[key] -= 1
        if entry.pending[key] <= 0:
            del entry.pending[key]

    def acked(self, tenant: str, name: str, key) -> None:
        with self.lock:
            entry = self._entry(tenant, name)
            self._end(entry, key)
            entry.note("acknowledged", key)
            entry.base = {key}
            if key is not None:
                entry.floating.clear()

    def refused(self, tenant: str, name: str, key, why: str = "") -> None:
        """The daemon refused the operation: nothing changed."""
        with self.lock:
            entry = self._entry(tenant, name)
            self._end(entry, key)
            entry.note(f"refused {why}", key)

    def unknown(self, tenant: str, name: str, key, why: str = "") -> None:
        """The caller stopped waiting: the operation may take effect, now or later."""
        with self.lock:
            entry = self._entry(tenant, name)
            self._end(entry, key)
            entry.note(f"unknown {why}", key)
            entry.floating.add(key)

    def resolve(self, tenant: str, name: str, key) -> None:
        """The daemon was seen holding `key` with nothing in flight."""
        with self.lock:
            entry = self._entry(tenant, name)
            entry.base, entry.floating = {key}, set()
            entry.note("seen", key)

    def possible(self, tenant: str, name: str) -> set:
        with self.lock:
            return self._entry(tenant, name).possible()

    def held(self, tenant: str, name: str):
        """The key of an acknowledged load nothing since may have undone, else None."""
        with self.lock:
            entry = self._entry(tenant, name)
            possible = entry.possible()
            return next(iter(possible)) if len(possible) == 1 else None

    def history(self, tenant: str, name: str) -> str:
        """The name's last operations, oldest first, for a violation's message."""
        with self.lock:
            now = time.monotonic()
            return "; ".join(f"{what} {now - t:.1f}s ago" for t, what in self._entry(tenant, name).history)

    def snapshot(self) -> dict:
        """{(tenant, name): (possible keys, operations in flight)}."""
        with self.lock:
            return {k: (e.possible(), sum(e.pending.values())) for k, e in self.entries.items()}

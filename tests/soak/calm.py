"""The calm tenant: only well-formed requests, every answer checked against onnxruntime, loads
and unloads it waits for. A failure it sees must be excused by the timeline (its worker
killed, the daemon down, the disk full) and is counted apart as `excused:<why>`; anything
else — a budget refusal, a deadline, the daemon's own E_INTERNAL — violates `calm never
refused`, and a wrong answer `calm answer right`.

`main` is asked without pause by CalmInfer and now and then replaced by a new version
(which must serve only once ready, with no request failing meanwhile); `c0`..`c2` are
loaded, checked and unloaded by CalmLifecycle, racing the hostile tenant's own churn."""
import time

from rtd.errors import Code, RtdError
from tests.soak.harness import CALM, Actor, seed_of
from tests.soak.tally import no_answer

MAIN = "main"
CHURNED = ("c0", "c1", "c2")
TIMEOUT_S = 30.0        # far above any answer's time: a calm request that hits it is starved
REPLACE_MAIN = 0.2      # share of lifecycle steps that replace main


def failed(soak, kind: str, error: RtdError, start: float) -> None:
    """A calm request failed: excused by the timeline, or a violation."""
    why = soak.timeline.excuse(error, start, time.monotonic())
    if why is not None:
        soak.tally.request(kind, f"excused:{why}")
        soak.tally.check("calm never refused", True)
        return
    soak.tally.request(kind, error.code.name)
    soak.tally.check("calm never refused", False, f"{kind}: {error}")


def answered(soak, kind: str) -> None:
    soak.tally.request(kind)
    soak.tally.check("calm never refused", True)


def load(soak, name: str) -> bool:
    """Load a new version of `name` and wait for it; check it answers as that version."""
    book = soak.book
    counter = book.next_counter(CALM, name)
    key = seed_of(CALM, name, counter)
    files = soak.package(CALM, name, key, counter)
    with soak.gate.call():   # the book is written inside the gate: no check sees a call half written
        book.begin(CALM, name, key)
        start = time.monotonic()
        try:
            soak.client(CALM).load(name, files)
        except RtdError as e:
            (book.unknown if no_answer(e) else book.refused)(CALM, name, key, e.code.name)
            failed(soak, "calm.load", e, start)
            return False
        book.acked(CALM, name, key)
    answered(soak, "calm.load")
    return infer(soak, name, 0, {key})


def unload(soak, name: str) -> None:
    book = soak.book
    with soak.gate.call():
        held = book.held(CALM, name)
        book.begin(CALM, name, None)
        start = time.monotonic()
        try:
            soak.client(CALM).unload(name)
        except RtdError as e:
            (book.unknown if no_answer(e) else book.refused)(CALM, name, None, e.code.name)
            if e.code == Code.E_MODEL_NOT_FOUND and held is not None:
                soak.tally.violation("acknowledged load vanished", f"{CALM}/{name} (key {held}): unload says {e}")
            failed(soak, "calm.unload", e, start)
            return
        book.acked(CALM, name, None)
    answered(soak, "calm.unload")


def infer(soak, name: str, index: int, keys: set | None = None) -> bool:
    """One checked request; the answer must be that of a version the name may hold."""
    with soak.gate.call():
        before = keys if keys is not None else soak.book.possible(CALM, name)
        start = time.monotonic()
        try:
            got = soak.client(CALM).infer(name, {"X": soak.catalog.inputs[index]}, timeout=TIMEOUT_S)["Y"]
        except RtdError as e:
            failed(soak, "calm.infer", e, start)
            return False
        keys = before | (set() if keys is not None else soak.book.possible(CALM, name))
    answered(soak, "calm.infer")
    return soak.tally.check("calm answer right", soak.catalog.which(keys, index, got) is not None,
                            f"{CALM}/{name} input {index}: {got.ravel()[:4]}… is no answer of versions {sorted(keys, key=str)}")


class CalmInfer(Actor):
    """Asks `main` without pause, or at --calm-rate requests/s (a schedule, not a sleep
    after each answer: the rate holds whatever the answers take, up to what they allow)."""
    low = high = 0.0

    def __init__(self, soak, name: str):
        super().__init__(soak, name)
        rate = soak.options.calm_rate
        self.interval, self.next = (1.0 / rate if rate > 0 else 0.0), time.monotonic()

    def step(self) -> None:
        if self.interval:
            self.next = max(self.next + self.interval, time.monotonic() - 1.0)   # no catching up after a pause
            self.soak.stop.wait(max(0.0, self.next - time.monotonic()))
        infer(self.soak, MAIN, self.rng.randrange(len(self.soak.catalog.inputs)))


class CalmLifecycle(Actor):
    element = "calm-churn"
    low, high = 1.0, 4.0

    def step(self) -> None:
        if self.rng.random() < REPLACE_MAIN:
            load(self.soak, MAIN)
            return
        name = self.rng.choice(CHURNED)
        if self.soak.book.held(CALM, name) is not None and self.rng.random() < 0.5:
            unload(self.soak, name)
        elif load(self.soak, name):
            infer(self.soak, name, self.rng.randrange(len(self.soak.catalog.inputs)))

"""The hostile tenants: what tests/daemon/test_budgets.py, test_lifecycle.py and
test_durable.py show one at a time, at random moments and all at once. Every outcome is
counted. A refusal is never a violation; these are: an answer that is wrong or should have
been a refusal (`hostile answer right`), the daemon's own E_INTERNAL (`no internal errors`),
a minute's deadline passing (`no request hangs`), a model the book says was acknowledged
and the daemon no longer knows (`acknowledged load vanished`), and an unload cut short by
its deadline that leaves memory and disk apart (`unload cut short settles`).

  HostileInfer   memory-bomb answers, responses beyond max_message_bytes, requests that
                 exhaust the worker's memory, wrong inputs, unknown models, churned models,
                 payloads the worker decodes (typed contents) and ones the supervisor refuses
                 from their header alone (BYTES contents for an FP32 input)
  DeadlineStorm  bursts of requests with 1-50 ms deadlines on the slow model
  RawAttack      raw HTTP/2 clients that never open their window or never read, asking
                 for 4 MiB responses until the response budget refuses them
  HostileChurn   loads, unloads (some with deadlines that cut them short, some of a model
                 busy with a request), reloads by name, replays of older packages,
                 packages beyond the disk budget
"""
import concurrent.futures
import time

import h2.exceptions
import numpy as np

from rtd.errors import Code, RtdError
from rtd.proto import grpc_service_pb2 as pb
from rtd.tensors import decode_response
from tests.daemon.rawh2 import RawClient
from tests.daemon.test_budgets import bomb_request
from tests.soak.harness import Actor, seed_of
from tests.soak.invariants import registry_names
from tests.soak.tally import no_answer, outcome_of

NAMES = ("m0", "m1", "m2", "m3")
CHURNED = (*NAMES, "slow")           # "slow" is churned too: unloading it drains the storms' requests
SHORT_DEADLINES = ("hostile.storm", "hostile.load_deadline", "hostile.unload_deadline", "hostile.unload_busy")
GRPC_NAMES = {0: "OK", 1: "CANCELLED", 4: "DEADLINE_EXCEEDED", 8: "RESOURCE_EXHAUSTED", 14: "UNAVAILABLE"}


def key_for(tenant: str, name: str, counter: int):
    return "slow" if name == "slow" else seed_of(tenant, name, counter)


def transport(error: RtdError) -> bool:
    """No answer from the daemon: the call's outcome is unknown."""
    return error.code == Code.E_DEADLINE or no_answer(error)


class Hostile(Actor):
    """An actor of one hostile tenant."""

    def __init__(self, soak, name: str, tenant: str):
        super().__init__(soak, name)
        self.tenant = tenant

    def call(self, kind: str, method: str, *args, before=None, after=None, **kwargs):
        """One counted call of a Client method, through the gate and on this generation's
        client; returns (result, error). `before()` and `after(error)` run inside the gate,
        so that no check sees the book with the call half written."""
        with self.soak.gate.call():
            if before is not None:
                before()
            try:
                result, error = getattr(self.soak.client(self.tenant), method)(*args, **kwargs), None
            except RtdError as e:
                result, error = None, e
            if after is not None:
                after(error)
        self.soak.tally.request(kind, "ok" if error is None else outcome_of(error))
        if error is not None:
            self.soak.tally.check("no internal errors", not (error.code == Code.E_INTERNAL and not error.detail),
                                  f"{self.tenant} {kind}: the daemon answered {error}")
            # a deadline of a minute (or none) passes only on a request nothing will ever answer
            self.soak.tally.check("no request hangs", kind in SHORT_DEADLINES or error.code != Code.E_DEADLINE,
                                  f"{self.tenant} {kind}: {error}")
        return result, error

    def vanished(self, name: str, error: RtdError, possible: set) -> None:
        if error.code == Code.E_MODEL_NOT_FOUND and None not in possible:
            self.soak.tally.violation("acknowledged load vanished", f"{self.tenant}/{name} (keys {possible}): {error}; "
                                      f"history: {self.soak.book.history(self.tenant, name)}")


class HostileInfer(Hostile):
    element = "hostile-infer"
    low, high = 0.01, 0.06
    KINDS = (("small", 35), ("slow", 15), ("churned", 20), ("oversized", 5), ("oom", 1), ("bad_input", 6),
             ("unknown", 3), ("typed", 4), ("wrong_contents", 3))

    def step(self) -> None:
        kinds, weights = zip(*self.KINDS)
        kind = self.rng.choices(kinds, weights)[0]
        if kind == "churned":
            self.churned(self.rng.choice(NAMES))
            return
        if kind in ("typed", "wrong_contents"):
            self.payload(kind)
            return
        bomb = {"V": np.full(1, 3, np.float32), "S": np.array([2, 3], np.int64)}
        name, inputs = {
            "small": ("bomb", bomb),
            "slow": ("slow", {"X": np.ones((32, 384), np.float32)}),
            "oversized": ("bomb", dict(bomb, S=np.array([4096, 4096], np.int64))),      # 64 MiB > max_message_bytes
            "oom": ("bomb", dict(bomb, S=np.array([30000, 30000], np.int64))),        # 3.6 GB > the tenant's memory
            "bad_input": ("bomb", dict(bomb, V=np.ones(1, np.int32))),
            "unknown": ("nope", bomb),
        }[kind]
        possible = self.soak.book.possible(self.tenant, name)
        result, error = self.call(f"hostile.{kind}", "infer", name, inputs, timeout=60)
        if error is not None:
            self.vanished(name, error, possible | self.soak.book.possible(self.tenant, name))
            if error.code == Code.E_MODEL_FAILED:
                self.call("hostile.reload", "load", name, {})
            return
        got = result["Y"]
        right = {"small": lambda: got.shape == (2, 3) and bool(np.all(got == 3)),
                 "slow": lambda: got.shape == (32, 384) and bool(np.allclose(got, 0.999 ** 12, rtol=1e-4))}.get(kind)
        # the other kinds must be refused: an answer to them is as wrong as a wrong answer
        self.soak.tally.check("hostile answer right", right is not None and right(), f"{self.tenant} {kind} answered {got.shape}")

    def payload(self, kind: str) -> None:
        """The slow model's input as typed fp32_contents (decoded by its worker, answered right), or
        as bytes_contents (refused from the header, never decoded)."""
        request = pb.ModelInferRequest(model_name="slow")
        tensor = request.inputs.add(name="X", datatype="FP32", shape=[32, 384])
        if kind == "typed":
            tensor.contents.fp32_contents.extend(np.ones(32 * 384, np.float32))
        else:
            tensor.contents.bytes_contents.extend([b"x"] * (32 * 384))
        result, error = self.call(f"hostile.{kind}", "call", "ModelInfer", request, 60)
        if kind == "wrong_contents":
            self.soak.tally.check("hostile answer right", error is not None and error.code == Code.E_REQUEST_INVALID,
                                  f"{self.tenant} {kind}: {error or 'answered'}")
        elif error is None:
            got = decode_response(result)["Y"]
            self.soak.tally.check("hostile answer right", got.shape == (32, 384) and bool(np.allclose(got, 0.999 ** 12, rtol=1e-4)),
                                  f"{self.tenant} typed answered {got.shape}")

    def churned(self, name: str) -> None:
        index = self.rng.randrange(len(self.soak.catalog.inputs))
        possible = self.soak.book.possible(self.tenant, name)
        result, error = self.call("hostile.churned", "infer", name, {"X": self.soak.catalog.inputs[index]}, timeout=60)
        keys = possible | self.soak.book.possible(self.tenant, name)
        if error is not None:
            self.vanished(name, error, keys)
            return
        self.soak.tally.check("hostile answer right", self.soak.catalog.which(keys, index, result["Y"]) is not None,
                              f"{self.tenant}/{name}: no answer of versions {sorted(keys, key=str)}")


class DeadlineStorm(Hostile):
    element = "deadline-storm"
    low, high = 4.0, 12.0
    CALLS = 24

    def __init__(self, soak, name: str, tenant: str):
        super().__init__(soak, name, tenant)
        self.pool = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix=f"{name}-call")

    def step(self) -> None:
        batch = {"X": np.ones((300, 384), np.float32)}
        timeouts = [0.001 if self.rng.random() < 0.4 else self.rng.uniform(0.001, 0.05) for _ in range(self.CALLS)]
        calls = [self.pool.submit(self.call, "hostile.storm", "infer", "slow", batch, None, t) for t in timeouts]
        for f in calls:
            f.result()
        self.soak.tally.event("deadline storm")


class RawAttack(Hostile):
    """A client that asks for 4 MiB answers and never takes them: window 0, or never reading."""
    element = "raw-h2"
    low, high = 2.0, 6.0

    def step(self) -> None:
        window = self.rng.random() < 0.5
        calls, hold = self.rng.randint(6, 16), self.rng.uniform(0.5, 6.0)   # send_timeout_s is 3: some are reset
        statuses, sent = {}, 0
        with self.soak.gate.call():
            try:
                raw = RawClient(self.soak.daemon.socket, self.soak.daemon.tokens[self.tenant], window=0 if window else 2**31 - 1)
            except OSError as e:
                self.soak.tally.request("hostile.raw", f"transport:{type(e).__name__}", calls)
                return
            try:
                for _ in range(calls):
                    raw.call("ModelInfer", bomb_request(1024, 1024))
                    sent += 1
                end = time.monotonic() + hold
                while time.monotonic() < end and self.soak.gate.up:
                    if window:
                        statuses.update(raw.statuses(0.3))
                    else:
                        time.sleep(0.2)
            except (OSError, EOFError, h2.exceptions.H2Error):
                pass   # the daemon went away, or closed the connection: what was answered is counted
            finally:
                raw.close()
        for code, _ in statuses.values():
            self.soak.tally.request("hostile.raw", f"grpc:{GRPC_NAMES.get(code, code)}")
        if sent > len(statuses):
            self.soak.tally.request("hostile.raw", "unanswered", sent - len(statuses))
        if calls > sent:
            self.soak.tally.request("hostile.raw", "transport:unsent", calls - sent)
        self.soak.tally.event("raw client")


class HostileChurn(Hostile):
    element = "hostile-churn"
    low, high = 0.2, 1.2
    OPS = (("load", 40), ("unload", 15), ("unload_deadline", 10), ("unload_busy", 5), ("load_deadline", 10),
           ("reload", 10), ("replay", 10), ("big", 5))

    def __init__(self, soak, name: str, tenant: str):
        super().__init__(soak, name, tenant)
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{name}-busy")

    def step(self) -> None:
        ops, weights = zip(*[(op, w) for op, w in self.OPS if op not in self.soak.options.skip])
        op = self.rng.choices(ops, weights)[0]
        name = self.rng.choice(CHURNED if op != "big" else NAMES)
        book, tenant = self.soak.book, self.tenant
        if op == "replay" and not book.recent(tenant, name):
            op = "load"
        if op == "unload_busy":
            self.unload_busy()
        elif op in ("unload", "unload_deadline"):
            timeout = self.rng.uniform(0.001, 0.3) if op == "unload_deadline" else None
            request = pb.RepositoryModelUnloadRequest(model_name=name)
            self.settle(name, None, f"hostile.{op}", "call", "RepositoryModelUnload", request, timeout)
        elif op == "reload":
            possible = book.possible(tenant, name)
            _, error = self.call("hostile.reload", "load", name, {})
            if error is not None:
                self.vanished(name, error, possible | book.possible(tenant, name))
        elif op == "replay":
            key, files = self.rng.choice(book.recent(tenant, name))   # older: E_ROLLBACK; the newest: accepted again
            self.settle(name, key, "hostile.replay", "load", name, files)
        else:
            counter = book.next_counter(tenant, name)
            key = "big" if op == "big" else key_for(tenant, name, counter)
            files = self.soak.package(tenant, name, key, counter)
            if op != "big":
                book.remember(tenant, name, key, files)
            timeout = self.rng.uniform(0.001, 0.05) if op == "load_deadline" else None
            self.settle(name, key, f"hostile.{op}", "load", name, files, timeout)

    def unload_busy(self) -> None:
        """An unload whose deadline passes while it waits for a request in flight: once that
        request is done, the unload must have ended one way or the other — the model gone,
        or still there and serving — and the daemon's memory must match its disk."""
        busy = self.pool.submit(self.call, "hostile.busy", "infer", "slow", {"X": np.ones((1500, 384), np.float32)},
                                timeout=60)
        time.sleep(0.05)
        error = self.settle("slow", None, "hostile.unload_busy", "call", "RepositoryModelUnload",
                            pb.RepositoryModelUnloadRequest(model_name="slow"), self.rng.uniform(0.01, 0.1))
        busy.result()
        if error is None or error.code != Code.E_DEADLINE:
            return
        generation, deadline, state = self.soak.generation, time.monotonic() + 3.0, "UNLOADING"
        while state == "UNLOADING" and time.monotonic() < deadline:
            time.sleep(0.1)
            index, _ = self.call("hostile.index", "index")
            state = next((m.state for m in index or () if m.name == "slow"), None)
        if self.soak.generation != generation or not self.soak.gate.up:
            return   # a restart in between says nothing
        on_disk = "slow" in registry_names(self.soak).get(self.tenant, set())
        self.soak.tally.check("unload cut short settles", state != "UNLOADING" and (state is not None) == on_disk,
                              f"{self.tenant}/slow 3 s after its unload's deadline passed and its last request ended: "
                              f"{state or 'gone'} in memory, {'in' if on_disk else 'not in'} registry.json")

    def settle(self, name: str, key, kind: str, method: str, *args):
        """Send a load of `key` (None: an unload) and write its outcome in the book."""
        book, tenant = self.soak.book, self.tenant
        possible = book.possible(tenant, name)

        def after(error):
            if error is None:
                book.acked(tenant, name, key)
            elif transport(error):
                book.unknown(tenant, name, key, outcome_of(error))
            else:
                book.refused(tenant, name, key, outcome_of(error))
        _, error = self.call(kind, method, *args, before=lambda: book.begin(tenant, name, key), after=after)
        if error is not None and key is None:
            self.vanished(name, error, possible)
        return error

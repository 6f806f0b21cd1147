"""One model version's request path, in one direction: queue → batch → tenant slot → instance
→ worker → one completion.

Requests arrive with their bodies unread (InferRequest). Without dynamic batching each runs
alone; with it (Triton's `max_batch_size` + `dynamic_batching { max_queue_delay_microseconds }`)
the requests that arrive within the delay go to one worker in one frame, up to max_batch_size
requests and, where the supervisor knows their rows (gRPC headers), up to max_batch_size
rows; the worker decodes them, runs those whose shapes agree as one execution and answers
each on its own (worker/infer.py). A frame holds one of the tenant's `max_concurrency` slots
from before it is sent until the worker answers — a client's deadline ends the wait, not the
work — and goes to the least busy live instance; one is started again if all were evicted.
The worker's answer is read here, once, bounded: a result per request, each a response's
bytes in the worker's arena (`{"rows", "json_length"}`) or a coded refusal, and the worker's
decode/run/encode times; anything else is E_WORKER_PROTOCOL and ends that instance.
"""
import asyncio
import collections
import dataclasses
import math
import time

import numpy as np

from rtd import wire
from rtd.daemon.observe.metrics import Timing
from rtd.daemon.serving.channel import Lost
from rtd.errors import Code, RtdError

MAX_DETAIL = 500


@dataclasses.dataclass
class InferRequest:
    """One inference request as the serving core sees it, whatever protocol brought it."""
    model: str
    version: str                 # "" for the serving one
    encoding: str                # "grpc" | "rest": how the worker reads `body` and writes the answer
    body: object                 # the request as received (the transport's body, or bytes-like), passed on unread
    deadline: float = math.inf   # time.monotonic(); inf: none (request_timeout_s still bounds the wait)
    inputs: dict | None = None   # {name: (wire dtype, shape)} from gRPC headers; None: the worker checks
    outputs: list | None = None  # outputs asked for (gRPC headers); None: all, or the worker knows
    rows: int | None = None      # the batch dim, where the headers tell it
    json_length: int | None = None   # REST: the inference header's length, where given
    received: float = 0.0        # time.monotonic() when its body was complete
    step: object = None          # a pipeline step (pipeline.StepCall): its own frame entry and tensors


@dataclasses.dataclass
class Answer:
    """A request's response: its bytes (a view of the worker's arena) and what the worker said of it."""
    body: np.ndarray
    rows: int
    json_length: int | None


@dataclasses.dataclass
class Handed:
    """A pipeline step's answer: the tensors it handed on, each a sealed memfd the supervisor
    passes to the next step unread ({name: wire.FdTensor}), and the client's request."""
    rows: int
    outputs: dict
    inputs: dict
    request: wire.FdTensor | None

    @classmethod
    def parse(cls, result: dict, tensors: dict) -> "Handed":
        def named(value) -> dict:
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(tensors.get(v), wire.FdTensor)
                                                      for k, v in value.items()):
                raise RtdError(Code.E_WORKER_PROTOCOL, "a step's answer names tensors that are not sealed memfds of its frame")
            return {k: tensors[v] for k, v in value.items()}
        rows, request = result.get("rows"), result.get("request")
        if type(rows) is not int or rows < 0 or (request is not None and not isinstance(tensors.get(request), wire.FdTensor)):
            raise RtdError(Code.E_WORKER_PROTOCOL, "a step's answer without its rows or request tensor")
        return cls(rows, named(result.get("outputs", {})), named(result.get("inputs", {})),
                   tensors[request] if request is not None else None)


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_exception(RtdError(Code.E_DEADLINE, "the deadline passed before the model answered"))
        future.exception()   # retrieved: the frame's callers may have gone


def _queued_too_long() -> RtdError:
    """A frame's deadline passed before it reached a worker (a slot or an instance too late)."""
    return RtdError(Code.E_DEADLINE, "expired while queued for a worker")


def _unanswered(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(False)


async def _until(loop, future: asyncio.Future, until: float, expire):
    """`await future`, with `expire(future)` called at `until` (time.monotonic(); inf: never) if
    it is still pending then. Every wait here ends this way: asyncio.Semaphore, Event, timeout
    and wait_for each ask asyncio for the running loop, a getpid() system call on Python 3.11."""
    timer = loop.call_later(until - time.monotonic(), expire, future) if until != math.inf else None
    try:
        return await future
    finally:
        if timer is not None:
            timer.cancel()


class _Pending:
    __slots__ = ("request", "timing", "future")

    def __init__(self, request: InferRequest, timing: Timing, future: asyncio.Future):
        self.request, self.timing, self.future = request, timing, future


def infer_frame(requests: list) -> tuple[dict, dict]:
    """(head, tensors) of the INFER frame that passes `requests` (InferRequest) to a worker
    unread: each body as the transport's body object makes it a tensor (a large one in its own
    sealed memfd), or a bytes-like body as it is."""
    head, tensors = {"requests": []}, {}
    for i, r in enumerate(requests):
        entry = {"encoding": r.encoding, "tensor": str(i), "json_length": r.json_length, "received": r.received}
        if r.body is not None:
            tensors[str(i)] = r.body.as_tensor() if hasattr(r.body, "as_tensor") else np.frombuffer(r.body, np.uint8)
        if r.step is not None:   # a pipeline's step: what it reads, hands on or answers (pipeline.py)
            more, step_tensors = r.step.entry(str(i))
            entry.update(more)
            tensors.update(step_tensors)
        head["requests"].append(entry)
    return head, tensors


def parse_answer(reply: wire.Frame, count: int, max_bytes: int, handing_on: frozenset = frozenset()) -> tuple[list, dict]:
    """A worker's INFER answer for `count` requests: ([Answer | RtdError], its times in ns); the
    requests at `handing_on` are pipeline steps that hand their tensors on (pipeline.Handed)."""
    results, ns = reply.head.get("results"), reply.head.get("ns")
    if not isinstance(results, list) or len(results) != count or not isinstance(ns, dict):
        raise RtdError(Code.E_WORKER_PROTOCOL, "an INFER answer without one result per request")
    times = {}
    for key in ("decode", "run", "encode"):
        value = ns.get(key)
        if type(value) is not int or not 0 <= value < 1 << 62:
            raise RtdError(Code.E_WORKER_PROTOCOL, f"an INFER answer's {key} time")
        times[key] = value
    out = []
    for i, result in enumerate(results):
        if not isinstance(result, dict):
            raise RtdError(Code.E_WORKER_PROTOCOL, "an INFER result is not an object")
        if "code" in result:
            code, detail = Code.__members__.get(result["code"]) if isinstance(result["code"], str) else None, result.get("detail")
            if code is None or not isinstance(detail, str):
                raise RtdError(Code.E_WORKER_PROTOCOL, "an INFER refusal without a known code and a detail")
            out.append(RtdError(code, detail[:MAX_DETAIL]))
            continue
        if i in handing_on:
            out.append(Handed.parse(result, reply.tensors))
            continue
        body, rows, json_length = reply.tensors.get(str(i)), result.get("rows"), result.get("json_length")
        if (not isinstance(body, np.ndarray) or body.dtype != np.uint8 or body.ndim != 1 or type(rows) is not int or rows < 0
                or (json_length is not None and (type(json_length) is not int or not 0 <= json_length <= body.size))):
            raise RtdError(Code.E_WORKER_PROTOCOL, "an INFER result without its response bytes, rows or JSON length")
        if body.size > max_bytes:
            raise RtdError(Code.E_WORKER_PROTOCOL, f"a response of {body.size} bytes, over max_message_bytes")
        out.append(Answer(body, rows, json_length))
    return out, times


class Slots:
    """A tenant's `max_concurrency` slots: a frame takes one before it goes to a worker and gives
    it back when the worker is through. Waiters are served in arrival order, each until its own
    deadline."""

    def __init__(self, count: int):
        self.free, self.waiting, self.loop = count, collections.deque(), None

    def locked(self) -> bool:
        return self.free == 0 or bool(self.waiting)

    def take(self) -> bool:
        """A slot now, if one is free and nobody waits for it."""
        if self.locked():
            return False
        self.free -= 1
        return True

    async def wait(self, until: float) -> bool:
        """A slot once one is given back (True), or False at `until` (time.monotonic())."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        waiter = self.loop.create_future()
        self.waiting.append(waiter)
        try:
            return await _until(self.loop, waiter, until, self._expire)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.release()   # handed this slot as the caller was cancelled: the next one gets it
            raise

    def _expire(self, waiter: asyncio.Future) -> None:
        if not waiter.done():
            waiter.set_result(False)
            self.waiting.remove(waiter)

    def release(self) -> None:
        """Give a slot back: to the first waiter still waiting, else to the free ones."""
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self.free += 1


class Scheduler:
    """`version` offers `instance(deadline)`, `answered()` and `protocol_error(instance, e)`;
    `slots` are the tenant's (Slots); `on_execution()` counts one execution."""

    def __init__(self, name: str, version, slots: Slots, limits, max_batch: int, delay_s: float | None,
                 on_execution):
        self.name, self.version, self.slots, self.limits = name, version, slots, limits
        self.max_batch, self.delay, self.on_execution = max_batch, delay_s, on_execution
        self.queue: collections.deque = collections.deque()
        self.forming: list = []                  # taken from the queue into the frame being gathered
        self.closed = False
        self.loop = asyncio.get_running_loop()   # once: asking asyncio for it is a getpid() system call
        self.arrived = self.loop.create_future()   # set when a request is queued (_arrival makes a new one to wait on)
        self.task = self.loop.create_task(self._gather()) if delay_s is not None else None

    async def submit(self, request: InferRequest, timing: Timing) -> Answer:
        """The request's answer, or its refusal; waiting ends at its deadline."""
        if self.closed:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.name} was unloaded")
        if self.max_batch > 0 and request.rows is not None and not 0 < request.rows <= self.max_batch:
            raise RtdError(Code.E_INPUT_INVALID, f"{self.name} batches along dim 0: the inputs' first dims must agree "
                                                 f"and be 1..{self.max_batch}")
        pending = _Pending(request, timing, self.loop.create_future())
        if self.task is None:   # no batching: the caller's own task takes its request to the worker and back
            await self._execute([pending])   # which ends its waits at the request's deadline
            return pending.future.result()
        self.queue.append(pending)
        if not self.arrived.done():
            self.arrived.set_result(True)
        # the wait ends at the deadline (or when the caller goes): a frame not yet formed leaves the request out
        return await _until(self.loop, pending.future, request.deadline, _expire)

    def close(self) -> None:
        self.closed = True
        if self.task is not None:
            self.task.cancel()
        for pending in (*self.forming, *self.queue):
            self._settle(pending, RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.name} was unloaded"))
        self.queue.clear()
        self.forming = []

    @staticmethod
    def _settle(pending: _Pending, outcome) -> None:
        if pending.future.done():
            return
        if isinstance(outcome, BaseException):
            pending.future.set_exception(outcome)
            pending.future.exception()   # retrieved: its caller may have gone
        else:
            pending.future.set_result(outcome)

    # -- batching ------------------------------------------------------------------------------
    async def _arrival(self, until: float) -> bool:
        """True once a request is queued, False at `until` (time.monotonic(); inf: no bound)."""
        self.arrived = self.loop.create_future()
        return await _until(self.loop, self.arrived, until, _unanswered)

    async def _gather(self) -> None:
        while True:
            while not self.queue:
                await self._arrival(math.inf)
            batch = self.forming = [self.queue.popleft()]
            rows = batch[0].request.rows or 1
            until = time.monotonic() + self.delay
            while len(batch) < self.max_batch and rows < self.max_batch:
                if not self.queue:
                    if not await self._arrival(until):
                        break
                    continue
                nxt = self.queue[0].request.rows or 1
                if rows + nxt > self.max_batch:
                    break
                batch.append(self.queue.popleft())
                rows += nxt
            self.forming, now = [], time.monotonic()
            batch = [p for p in batch if p.request.deadline > now and not p.future.done()]
            if batch:
                self.loop.create_task(self._execute(batch))

    # -- execution -----------------------------------------------------------------------------
    async def _execute(self, batch: list) -> None:
        """One frame to one worker, holding a slot from before it is sent until it is answered; the
        wait for its answer ends at the latest deadline of the frame's requests."""
        deadline = max(p.request.deadline for p in batch)
        queued_until = min(deadline, time.monotonic() + self.limits.request_timeout_s)
        if not self.slots.take() and not await self.slots.wait(queued_until):
            for p in batch:
                self._settle(p, _queued_too_long())
            return
        released = False

        def finished(answered: bool) -> None:   # when the worker is through, not when the callers give up
            nonlocal released
            if not released:
                released = True
                self.slots.release()
                if answered:
                    self.version.answered()
                    self.on_execution()
        try:
            instance = await self.version.instance(queued_until)
            if deadline <= time.monotonic():
                raise _queued_too_long()
            timing = batch[0].timing
            timing.computing(*(p.timing for p in batch[1:]))
            head, tensors = infer_frame([p.request for p in batch])
            handing_on = frozenset(i for i, p in enumerate(batch) if p.request.step is not None and p.request.step.hands_on)
            # stamped before the frame leaves: once it does, the woken worker may preempt this process and
            # answer before it runs on, and a later stamp would leave the worker's phases no span to fit in
            timing.sent()
            future = instance.send(wire.Kind.INFER, head, tensors, self.limits.request_timeout_s, finished)
        except BaseException as e:
            finished(False)
            if isinstance(e, RtdError) and e.code is Code.E_MODEL_UNAVAILABLE and deadline <= time.monotonic():
                e = _queued_too_long()   # no instance became ready before the deadline
            for p in batch:
                self._settle(p, e if isinstance(e, RtdError) else RtdError(Code.E_INTERNAL, type(e).__name__))
            if not isinstance(e, Exception):
                raise
            return
        for p in batch:
            p.request.body = None   # in the worker's hands now: the supervisor keeps no copy
        try:
            reply = await _until(self.loop, future, deadline, _expire)   # an answer after the deadline is dropped
            answers, ns = parse_answer(reply, len(batch), self.limits.max_message_bytes, handing_on)
        except Lost:
            failure = await instance.failure()
            for p in batch:
                self._settle(p, failure)
            return
        except RtdError as e:
            if e.code == Code.E_WORKER_PROTOCOL:
                self.version.protocol_error(instance, e)
            for p in batch:
                self._settle(p, e)
            return
        timing.answered(ns)
        for p, answer in zip(batch, answers):
            p.timing.took(timing)
            self._settle(p, answer)

"""Dynamic batching (Triton's `max_batch_size` + `dynamic_batching { max_queue_delay_microseconds }`):
requests for one model version that arrive within the delay are concatenated along the
batch dimension, run as one execution, and split back per request. Requests whose
non-batch dims or dtypes differ from the batch being formed wait for the next one; a
request whose deadline has passed by the time its batch runs is dropped from it.
"""
import asyncio
import collections
import math
import time

import numpy as np

from rtd.daemon.metrics import Timing
from rtd.errors import Code, RtdError


class _Pending:
    def __init__(self, inputs: dict, outputs: list | None, deadline: float, future: asyncio.Future, timing: Timing):
        self.inputs, self.outputs, self.deadline, self.future, self.timing = inputs, outputs, deadline, future, timing
        self.rows = next(iter(inputs.values())).shape[0]
        self.key = tuple((n, a.dtype.str, a.shape[1:]) for n, a in sorted(inputs.items()))


class Batcher:
    """One model version's batching queue and the task that drains it. `execute(inputs,
    outputs, deadline, timing)` runs one execution and returns {output: ndarray}."""

    def __init__(self, name: str, max_batch_size: int, delay_s: float, execute, on_execution=None):
        self.name, self.max_batch, self.delay, self.execute = name, max_batch_size, delay_s, execute
        self.on_execution = on_execution or (lambda: None)
        self.queue: collections.deque = collections.deque()   # waiting, in arrival order
        self.arrived = asyncio.Event()
        self.forming: list[_Pending] = []  # the batch being collected (and what did not fit it)
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._loop())

    async def submit(self, inputs: dict, outputs: list | None, deadline: float, timing: Timing) -> dict:
        if not inputs or any(a.ndim == 0 for a in inputs.values()):
            raise RtdError(Code.E_INPUT_INVALID, f"{self.name} batches along dim 0; inputs need one")
        rows = {a.shape[0] for a in inputs.values()}
        if len(rows) != 1 or not 0 < next(iter(rows)) <= self.max_batch:
            raise RtdError(Code.E_INPUT_INVALID, f"{self.name}: batch dim must agree across inputs and be 1..{self.max_batch}")
        if self.closed:
            raise RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.name} was unloaded")
        pending = _Pending(inputs, outputs, deadline, asyncio.get_running_loop().create_future(), timing)
        self.queue.append(pending)
        self.arrived.set()
        try:
            wait = None if deadline == math.inf else max(0.0, deadline - time.monotonic())
            return await asyncio.wait_for(asyncio.shield(pending.future), wait)
        except asyncio.TimeoutError:
            raise RtdError(Code.E_DEADLINE, "expired while batched") from None

    def close(self) -> None:
        self.closed = True
        self.task.cancel()
        for p in self.forming + list(self.queue):
            if not p.future.done():
                p.future.set_exception(RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.name} was unloaded"))
                p.future.exception()

    async def _next(self, timeout: float | None):
        """The next waiting request (it stays findable by close() throughout), or None."""
        if not self.queue:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), timeout)
            except asyncio.TimeoutError:
                return None
        item = self.queue.popleft()
        self.forming.append(item)
        return item

    async def _loop(self) -> None:
        while True:
            first = await self._next(None)
            batch, rows, skipped = [first], first.rows, []
            until = time.monotonic() + self.delay
            while rows < self.max_batch:
                item = await self._next(max(0.0, until - time.monotonic()))
                if item is None:
                    break
                if item.key == first.key and rows + item.rows <= self.max_batch:
                    batch.append(item)
                    rows += item.rows
                else:
                    skipped.append(item)
            self.queue.extendleft(reversed(skipped))   # first in line for the next batch
            self.forming = []
            now = time.monotonic()
            batch = [p for p in batch if p.deadline > now and not p.future.done()]
            if batch:
                asyncio.get_running_loop().create_task(self._run(batch))

    async def _run(self, batch: list) -> None:
        rows = sum(p.rows for p in batch)
        wanted = None if any(p.outputs is None for p in batch) else sorted({o for p in batch for o in p.outputs})
        timing = Timing(time.monotonic())   # the batch's: its members leave the queue when it computes
        timing.members = [p.timing for p in batch]
        inputs = {n: (batch[0].inputs[n] if len(batch) == 1 else np.concatenate([p.inputs[n] for p in batch]))
                  for n in batch[0].inputs}
        timing.prep_s = time.monotonic() - timing.start
        try:
            results = await self.execute(inputs, wanted, max(p.deadline for p in batch), timing)
            if any(np.ndim(v) == 0 or len(v) != rows for v in results.values()):
                raise RtdError(Code.E_MODEL_INVALID, f"{self.name}: an output does not keep the batch dimension")
            self.on_execution()
        except Exception as e:  # every request of the batch gets the same refusal
            for p in batch:
                p.timing.took(timing)
                if not p.future.done():
                    p.future.set_exception(e)
                    p.future.exception()
            return
        start = 0
        for p in batch:
            p.timing.took(timing)
            mine = {n: v[start: start + p.rows] for n, v in results.items() if p.outputs is None or n in p.outputs}
            start += p.rows
            if not p.future.done():
                p.future.set_result(mine)

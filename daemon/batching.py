"""Dynamic batching (Triton's `max_batch_size` + `dynamic_batching { max_queue_delay_microseconds }`):
requests for one model that arrive within the delay are concatenated along the batch
dimension, run as one execution in the worker, and split back per request. Requests
whose non-batch dims or dtypes differ from the batch being formed wait for the next one.
"""
import concurrent.futures
import queue
import threading
import time

import numpy as np

from rtd.errors import Code, RtdError


class _Pending:
    def __init__(self, inputs: dict, outputs: list | None, deadline: float):
        self.inputs, self.outputs, self.deadline = inputs, outputs, deadline
        self.rows = next(iter(inputs.values())).shape[0]
        self.key = tuple((n, a.dtype.str, a.shape[1:]) for n, a in sorted(inputs.items()))
        self.future = concurrent.futures.Future()


class Batcher:
    """One model's batching queue and the thread that drains it."""

    def __init__(self, name: str, max_batch_size: int, delay_s: float, run, on_execution=None):
        self.name, self.max_batch, self.delay = name, max_batch_size, delay_s
        self.run = run                    # run(inputs, outputs, deadline) -> {output: ndarray}
        self.on_execution = on_execution or (lambda rows: None)
        self.queue: queue.Queue = queue.Queue()
        self.held: list[_Pending] = []    # taken from the queue but not fitting the last batch
        self.closed = False
        self.thread = threading.Thread(target=self._loop, name=f"rtd-batch-{name}", daemon=True)
        self.thread.start()

    def submit(self, inputs: dict, outputs: list | None, deadline: float) -> dict:
        if not inputs or any(a.ndim == 0 for a in inputs.values()):
            raise RtdError(Code.E_INPUT_INVALID, f"{self.name} batches along dim 0; inputs need one")
        rows = {a.shape[0] for a in inputs.values()}
        if len(rows) != 1 or not 0 < next(iter(rows)) <= self.max_batch:
            raise RtdError(Code.E_INPUT_INVALID, f"{self.name}: batch dim must agree across inputs and be 1..{self.max_batch}")
        pending = _Pending(inputs, outputs, deadline)
        self.queue.put(pending)
        try:
            return pending.future.result(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
        except concurrent.futures.TimeoutError:
            raise RtdError(Code.E_DEADLINE, "expired while batched") from None

    def close(self) -> None:
        self.closed = True
        self.queue.put(None)
        self.thread.join(timeout=5)

    def _next(self, timeout: float | None):
        if self.held:
            return self.held.pop(0)
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _loop(self) -> None:
        while not self.closed:
            first = self._next(None)
            if first is None:
                continue
            batch, rows, skipped = [first], first.rows, []
            until = time.monotonic() + self.delay
            while rows < self.max_batch:
                item = self._next(max(0.0, until - time.monotonic()))
                if item is None:
                    break
                if item.key == first.key and rows + item.rows <= self.max_batch:
                    batch.append(item)
                    rows += item.rows
                else:
                    skipped.append(item)
            self.held = skipped + self.held
            self._execute(batch, rows)
        leftovers = self.held + [p for p in iter(lambda: self._next(0), None)]
        for p in leftovers:
            p.future.set_exception(RtdError(Code.E_MODEL_UNAVAILABLE, f"{self.name} was unloaded"))

    def _execute(self, batch: list, rows: int) -> None:
        wanted = None if any(p.outputs is None for p in batch) else sorted({o for p in batch for o in p.outputs})
        names = list(batch[0].inputs)
        inputs = {n: (batch[0].inputs[n] if len(batch) == 1 else np.concatenate([p.inputs[n] for p in batch]))
                  for n in names}
        try:
            results = self.run(inputs, wanted, min(p.deadline for p in batch))
            if any(np.ndim(v) == 0 or len(v) != rows for v in results.values()):
                raise RtdError(Code.E_MODEL_INVALID, f"{self.name}: an output does not keep the batch dimension")
            self.on_execution(rows)
        except Exception as e:  # every request of the batch gets the same refusal
            for p in batch:
                p.future.set_exception(e)
            return
        start = 0
        for p in batch:
            mine = {n: v[start: start + p.rows] for n, v in results.items() if p.outputs is None or n in p.outputs}
            start += p.rows
            p.future.set_result(mine)

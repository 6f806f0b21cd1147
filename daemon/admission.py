"""Per-tenant admission: a bounded number of requests waiting or running, a bounded number
running at once, and deadlines. Overload is answered RESOURCE_EXHAUSTED at once — the queue
never grows past its bound — and a request whose deadline passes while queued is refused."""
import contextlib
import threading
import time

from rtd.errors import Code, RtdError


class Gate:
    """The admission gate of one tenant."""

    def __init__(self, max_queue: int, max_concurrency: int):
        self.max_queue = max_queue
        self.pending = 0
        self.lock = threading.Lock()
        self.running = threading.BoundedSemaphore(max_concurrency)

    @contextlib.contextmanager
    def admit(self, deadline: float):
        with self.lock:
            if self.pending >= self.max_queue:
                raise RtdError(Code.E_OVERLOADED, f"{self.pending} requests already queued or running")
            self.pending += 1
        try:
            if not self.running.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise RtdError(Code.E_DEADLINE, "expired while queued")
            try:
                yield
            finally:
                self.running.release()
        finally:
            with self.lock:
                self.pending -= 1

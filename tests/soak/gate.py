"""The supervisor's up/down state as the actors see it. Actors make their calls inside
`gate.call()`, which waits while the daemon is down; the conductor closes the gate, kills
the supervisor at whatever point the calls in flight are, waits for those calls to end
(they fail: the connection is gone), restarts the daemon, runs its restart checks with no
actor calling, and opens the gate again."""
import contextlib
import threading
import time


class Stopped(Exception):
    """The soak is over: the actor waiting at the gate ends."""


class Gate:
    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.cond = threading.Condition()
        self.up = False
        self.busy = 0    # calls inside the gate

    @contextlib.contextmanager
    def call(self):
        with self.cond:
            while not self.up:
                if self.stop.is_set():
                    raise Stopped
                self.cond.wait(0.2)
            self.busy += 1
        try:
            yield
        finally:
            with self.cond:
                self.busy -= 1
                self.cond.notify_all()

    def open(self) -> None:
        with self.cond:
            self.up = True
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.up = False

    def drained(self, timeout: float) -> bool:
        """Wait until no call is inside the gate; False if some still is after `timeout`."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True

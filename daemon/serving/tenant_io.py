"""Where a tenant's file work runs: threads of its own, each call bounded in time.

Reading a tenant's model repository, verifying a package and recording it are work on files
the tenant controls or proportional to what it sent. Each tenant gets its own few threads
(`TenantIO`), so a tenant whose files are slow — a hung network mount, a huge package — makes
only itself wait: nothing of it runs on a pool another tenant needs. Each call has a time
limit; past it the caller gets E_REPOSITORY_UNAVAILABLE at once, a call not yet started never
starts (`abandon` releases what it was handed), and one still running finishes on its own, its
result handed to `discard` (a package's memfds are closed). A call owns what it is handed: an
fd given to it is closed by it, on its thread, never by a caller that stopped waiting. The threads are daemon threads: one stuck in the kernel never
keeps the daemon from stopping on SIGTERM. They run at the tenants' priority (nice 0), not the
supervisor's: hashing a large package is the tenant's work, and must not preempt another tenant's
workers the way the event loop's O(1) routing may.
"""
import asyncio
import concurrent.futures
import os
import queue
import threading

from rtd.errors import Code, RtdError
from rtd.sandbox.rlimits import TENANT_NICE

THREADS = 2   # one slow call leaves the tenant another


class TenantIO:
    def __init__(self, tenant: str, threads: int = THREADS):
        self.tenant, self.size = tenant, threads
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []

    def _start(self) -> None:
        while len(self.threads) < self.size:
            thread = threading.Thread(target=self._work, name=f"rtd-io-{self.tenant}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def _work(self) -> None:
        os.setpriority(os.PRIO_PROCESS, 0, TENANT_NICE)   # this thread only (Linux keeps a nice value per thread)
        while True:
            future, fn = self.queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as e:   # handed to the caller
                future.set_exception(e)

    async def run(self, fn, *args, timeout: float | None, what: str, discard=None, abandon=None, **kwargs):
        """fn(*args, **kwargs) on the tenant's threads, or E_REPOSITORY_UNAVAILABLE after `timeout` s
        (also when the caller is cancelled: `abandon()` if it never started, else `discard(result)` later)."""
        self._start()
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.queue.put((future, lambda: fn(*args, **kwargs)))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except BaseException as e:
            if future.cancel():
                if abandon is not None:
                    abandon()
            elif discard is not None:   # running: what it makes later goes
                future.add_done_callback(lambda f: f.cancelled() or f.exception() is not None or discard(f.result()))
            if isinstance(e, asyncio.TimeoutError):
                raise RtdError(Code.E_REPOSITORY_UNAVAILABLE, f"{what} took longer than {timeout:g} s") from None
            raise

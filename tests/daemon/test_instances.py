"""An instance's hang watchdog against a scripted worker on a real socket: the worker answers
pipelined requests in order, so a request is timed from when the one before it was answered,
not from when it was sent; a worker that sits on one request past request_timeout_s is hung."""
import asyncio
import socket
import threading
import time

from rtd import wire
from rtd.daemon.serving.channel import WorkerChannel
from rtd.daemon.serving.instances import Ending, Instance


class ScriptedWorker:
    """The worker's side of the socket: answers each request OK after its scripted delay."""

    def __init__(self, sock: socket.socket, delays: list[float]):
        self.sock, self.delays = sock, list(delays)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        reader = wire.Reader(self.sock)
        try:
            for delay in self.delays:
                frame = reader.recv()
                time.sleep(delay)
                wire.send(self.sock, wire.Kind.OK, frame.request_id, {})
            reader.recv()
        except (EOFError, OSError):
            pass


class Handle:
    """What an Instance asks of its process here: to be killed."""
    killed = False

    def kill(self):
        self.killed = True


def run_pipelined(delays: list[float], request_timeout: float) -> tuple[Instance, list]:
    async def main():
        ours, theirs = socket.socketpair()
        ScriptedWorker(theirs, delays)
        ended = []
        instance = Instance(0, ended.append)
        instance.handle, instance.channel = Handle(), WorkerChannel(ours, instance._lost)
        done = []
        futures = [instance.send(wire.Kind.INFER, {}, {}, request_timeout, done.append) for _ in delays]
        results = await asyncio.gather(*futures, return_exceptions=True)
        return instance, results, done
    return asyncio.run(main())


def test_a_request_queued_behind_another_is_not_hung():
    instance, results, done = run_pipelined([0.6, 0.6], request_timeout=1.0)   # the second ends 1.2 s after it was sent
    assert instance.ending is None and not instance.handle.killed
    assert all(isinstance(r, wire.Frame) for r in results) and done == [True, True]


def test_a_worker_that_sits_on_one_request_is_hung():
    instance, results, done = run_pipelined([0.3, 1.5], request_timeout=1.0)
    assert instance.ending == Ending.HUNG and instance.handle.killed and "request_timeout_s" in instance.reason
    assert isinstance(results[0], wire.Frame) and done == [True, False]

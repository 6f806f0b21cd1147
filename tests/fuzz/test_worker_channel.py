"""daemon/channel.py WorkerChannel on a real event loop (asyncio's and uvloop, which rtd serve
uses), whose fake worker — the other end of a socketpair — answers a few real requests with
a hostile stream (frames.py), then closes its socket or stays silent.

Property: nothing reaches the loop's exception handler; every request's future ends, in a
reply Frame of kind OK or an RtdError (Lost, or the code an ERROR frame named), and its
on_done runs exactly once (it releases the request's slot); on_lost fires exactly once, with
the error the channel holds; a worker that closes its socket is noticed without help; once
the channel and the loop are closed no fd is left open.
"""
import asyncio
import json
import os
import socket

import numpy as np
import uvloop
from hypothesis import strategies as st

from rtd import wire
from rtd.daemon.serving.channel import Lost, WorkerChannel
from rtd.errors import Code, RtdError
from rtd.wire import Kind

from . import frames
from .harness import assert_no_fd_leak, open_fds, run

requests = st.lists(st.tuples(st.sampled_from([Kind.INFER, Kind.PING, Kind.UNLOAD]),
                              st.dictionaries(frames.names, frames.arrays(), max_size=2)), max_size=3)


channel_cases = st.tuples(frames.streams(), requests, st.booleans())


async def _settle(channel: WorkerChannel, eof: bool) -> None:
    """Let the channel read everything sent (and, after EOF, notice it)."""
    for _ in range(60):
        await asyncio.sleep(0)
        if channel.lost is not None:
            return
    if eof:   # a closed socket is noticed at the first poll; this is margin
        for _ in range(10):
            await asyncio.sleep(0.005)
            if channel.lost is not None:
                return


async def _scenario(stream: frames.Stream, sent: list):
    worker, ours = frames.socketpair()
    lost, done = [], {}
    try:
        channel = WorkerChannel(ours, lost.append)
        futures = []
        for i, (kind, tensors) in enumerate(sent):
            done[i] = []
            futures.append(channel.request(kind, {"key": "m"}, tensors, on_done=done[i].append))
        frames.send(worker, stream)
        if stream.eof:
            worker.close()
        await _settle(channel, stream.eof)
        noticed_eof = channel.lost is not None
        channel.close()
        await asyncio.sleep(0)
    finally:
        worker.close()
    return channel, futures, lost, noticed_eof, done


def _check_ending(future: asyncio.Future) -> None:
    assert future.done(), "a request still waits after the channel was closed"
    error = future.exception()
    if error is None:
        frame = future.result()
        assert frame.kind == Kind.OK
        frames.check_frame(frame)
    else:
        assert isinstance(error, RtdError), f"{type(error).__name__} ended a request: {error!r}"


def _run_loop(scenario, use_uvloop: bool = False):
    """Run `scenario()` on a fresh loop; its result and what reached the loop's exception handler."""
    loop = uvloop.new_event_loop() if use_uvloop else asyncio.new_event_loop()
    escaped = []
    loop.set_exception_handler(lambda _, context: escaped.append(context))
    try:
        return loop.run_until_complete(scenario()), escaped
    finally:
        loop.close()


def check_channel(case) -> None:
    stream, sent, use_uvloop = case
    before = open_fds()
    with frames.bounded_address_space():
        (channel, futures, lost, noticed_eof, done), escaped = _run_loop(lambda: _scenario(stream, sent), use_uvloop)
    assert not escaped, f"escaped to the loop: {[(c.get('message'), c.get('exception')) for c in escaped]}"
    assert noticed_eof or not stream.eof, "the worker closed its socket and the channel never noticed"
    assert len(lost) == 1 and lost[0] is channel.lost and isinstance(channel.lost, Lost)
    future = None
    for i, future in enumerate(futures):
        _check_ending(future)
        assert len(done[i]) == 1, f"request {i + 1}: on_done ran {len(done[i])} times"
    del channel, futures, lost, future   # a reply's arrays keep the worker's arena mapped (and its fd)
    assert_no_fd_leak(before)


def test_worker_channel_survives_hostile_workers():
    loop = uvloop.new_event_loop()   # uvloop's first loop opens a pipe the process keeps
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    run(channel_cases, check_channel, default=150)


# -- regressions: bugs the fuzzer found ------------------------------------------------------------
def test_a_reply_that_fails_to_decode_loses_the_channel_and_fails_its_request():
    """Was: daemon/channel.py `_readable` caught EOFError, OSError and RtdError only; a reply
    whose decoding raised anything else (rtd/wire.py ValueError for shape [0, 2^39, 2^39]) went
    to the loop's exception handler: the channel was not lost, the request waited until
    request_timeout_s."""
    async def scenario():
        worker, ours = frames.socketpair()
        lost = []
        channel = WorkerChannel(ours, lost.append)
        future = channel.request(Kind.PING)
        head = {"tensors": [{"name": "x", "dtype": "float32", "shape": [0, 2**39, 2**39], "offset": 0}]}
        frames.send(worker, frames.Stream([frames.Segment(_frame(Kind.OK, 1, head))], eof=False))
        await _settle(channel, eof=False)
        state = (future.done(), channel.lost, list(lost))
        channel.close()
        worker.close()
        future.exception()
        return state

    (done, channel_lost, lost), escaped = _run_loop(scenario)
    assert not escaped, f"escaped to the loop: {[c.get('exception') for c in escaped]}"
    assert done and isinstance(channel_lost, Lost) and channel_lost.code == Code.E_WORKER_PROTOCOL
    assert lost == [channel_lost]


def test_a_reply_of_another_kind_fails_its_request_and_releases_its_slot():
    """Was: daemon/channel.py `_reply` popped the request, then refused a frame neither OK nor
    ERROR; `_lose` failed only the requests still waiting, so the popped one's future never
    ended and its on_done (which releases its slot) never ran."""
    async def scenario():
        worker, ours = frames.socketpair()
        done = []
        channel = WorkerChannel(ours, lambda error: None)
        future = channel.request(Kind.PING, on_done=done.append)
        worker.sendall(_frame(Kind.PING, 1, {}))   # request 1 answered with a frame of kind PING
        await _settle(channel, eof=False)
        state = (future.done(), list(done), channel.lost)
        channel.close()
        worker.close()
        return state

    (finished, done, lost), escaped = _run_loop(scenario)
    assert isinstance(lost, Lost) and lost.code == Code.E_WORKER_PROTOCOL and not escaped
    assert finished, "the request answered by a frame of the wrong kind never ends"
    assert done == [False]


def test_a_worker_that_dies_with_requests_unread_is_noticed_on_both_loops():
    """Was: under uvloop (what `rtd serve` runs) a worker that wrote part of a reply and died
    with a request unread was never noticed: libuv stops a poll handle on POLLERR after one
    callback and daemon/channel.py `_readable` read only once per callback."""
    async def scenario():
        worker, ours = socket.socketpair()
        channel = WorkerChannel(ours, lambda error: None)
        future = channel.request(Kind.PING)
        worker.sendall(wire.MAGIC)   # part of a reply, then the worker dies
        worker.close()
        try:
            await asyncio.wait_for(asyncio.shield(future), 1)
        except asyncio.TimeoutError:
            pass
        except RtdError:
            pass
        state = (future.done(), channel.lost)
        channel.close()
        future.exception()
        return state

    for use_uvloop in (False, True):
        (finished, lost), escaped = _run_loop(scenario, use_uvloop)
        assert finished and isinstance(lost, Lost) and lost.code == Code.E_WORKER_CRASHED, \
            f"{'uvloop' if use_uvloop else 'asyncio'}: worker gone 1 s ago, channel lost: {lost}"
        assert not escaped


def _frame(kind: Kind, request_id: int, head: dict) -> bytes:
    data = json.dumps(head).encode()
    return wire.HEADER.pack(wire.MAGIC, wire.VERSION, kind, 0, request_id, len(data), 0) + data


def test_replies_to_real_requests_resolve_them():
    """The honest path the fuzzer also walks: an OK reply resolves its request, an ERROR reply
    fails it with the named code, and neither loses the channel."""
    async def scenario():
        worker, ours = frames.socketpair()
        channel = WorkerChannel(ours, lambda error: None)
        ok, failed = channel.request(Kind.INFER, {"key": "m"}, {"x": np.ones(3, np.float32)}), channel.request(Kind.PING)
        wire.send(worker, Kind.OK, 1, {}, {"y": np.arange(4, dtype=np.int64)})
        wire.send(worker, Kind.ERROR, 2, {"code": "E_INPUT_INVALID", "detail": "no"})
        await asyncio.wait_for(asyncio.gather(ok, failed, return_exceptions=True), 5)
        assert channel.lost is None
        channel.close()
        worker.close()
        return ok.result(), failed.exception()

    frame, error = asyncio.run(scenario())
    np.testing.assert_array_equal(frame.tensors["y"], np.arange(4))
    assert isinstance(error, RtdError) and error.code == Code.E_INPUT_INVALID


def test_an_fd_closed_before_its_request_is_sent_fails_that_request_alone():
    """Was: daemon/serving/channel.py `request` dup'ed the caller's fds with os.dup, whose EBADF (a
    package closed while one of its instances restarted) escaped as OSError: a task's traceback
    in the daemon's log. The request fails E_MODEL_UNAVAILABLE; the channel serves on, and a
    file the request held is not leaked."""
    async def scenario():
        worker, ours = frames.socketpair()
        channel = WorkerChannel(ours, lambda error: None)
        gone = os.memfd_create("gone")
        os.close(gone)
        done = []
        refused = channel.request(Kind.LOAD, {}, fds=[gone], on_done=done.append)
        served = channel.request(Kind.PING)
        wire.send(worker, Kind.OK, 2, {"pong": True})
        await asyncio.wait_for(asyncio.gather(refused, served, return_exceptions=True), 5)
        assert channel.lost is None and channel.in_flight == 0 and done == [False]
        channel.close()
        worker.close()
        return refused.exception(), served.result()

    error, frame = asyncio.run(scenario())
    assert isinstance(error, RtdError) and error.code == Code.E_MODEL_UNAVAILABLE
    assert frame.head == {"pong": True}

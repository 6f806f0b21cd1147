"""Dynamic batching, in its two halves. The worker's (worker/infer.py `Serving.answer`, with a
real compiled model): the requests of one frame that agree in everything but the batch dim run
as one execution and are split back in order, each answered in its own encoding; mismatched
shapes run apart; one bad request is refused alone; a profiled one runs alone. The
scheduler's (serving/scheduler.py): requests within the delay go to one worker in one frame,
at most max_batch_size of them; a request whose deadline passed before its frame formed is
left out; closing fails what is still queued; a frame holds one of the tenant's slots until
the worker answers. The scheduler's worker here is the real Serving in this process, behind
a stand-in instance that answers a frame as the channel would."""
import asyncio
import json
import math
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtd import wire
from rtd.daemon.observe.metrics import Series, Timing
from rtd.daemon.serving.scheduler import Answer, InferRequest, Scheduler, Slots, infer_frame, parse_answer
from rtd.daemon.worker.infer import Serving
from rtd.daemon.worker.kserve_codec import Caps
from rtd.errors import Code, RtdError
from rtd.kernels import compile_model
from rtd.proto import TRACE_OUTPUT
from rtd.proto import grpc_service_pb2 as pb
from rtd.tensors import decode_response
from tests.daemon.worker_calls import grpc_body

W = np.arange(12, dtype=np.float32).reshape(3, 4) / 10


def scaled_model():
    """X[N, 3] · W[3, 4] → Y[N, 4] and its row sums S[N, 1]."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"]), helper.make_node("ReduceSum", ["Y", "axes"], ["S"], keepdims=1)], "scaled",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4]), helper.make_tensor_value_info("S", TensorProto.FLOAT, ["N", 1])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return compile_model(model.SerializeToString())


class Counted:
    """The compiled model, counting its executions (it still runs every one)."""

    def __init__(self, model):
        self.model, self.calls, self.dtypes = model, [], []
        self.inputs, self.outputs = model.inputs, model.outputs

    def run(self, feeds, record=None):
        self.calls.append({n: a.shape for n, a in feeds.items()})
        self.dtypes.append(str(feeds["X"].dtype))
        return self.model.run(feeds, record=record)


def serving(max_batch: int = 8) -> Serving:
    return Serving(Counted(scaled_model()), "scaled", "1", Caps(1 << 20), 1 << 20, max_batch)


def frame_of(requests: list) -> wire.Frame:
    head, tensors = infer_frame(requests)
    return wire.Frame(wire.Kind.INFER, 1, head, tensors, [])


def grpc(x: np.ndarray, outputs=(), **parameters) -> InferRequest:
    body = pb.ModelInferRequest.FromString(grpc_body("scaled", {"X": x}, outputs))
    for key, value in parameters.items():
        body.parameters[key].bool_param = value
    return InferRequest("scaled", "", "grpc", body.SerializeToString(), rows=x.shape[0] if x.ndim else None)


def rest(x: np.ndarray) -> InferRequest:
    doc = {"inputs": [{"name": "X", "datatype": "FP32", "shape": list(x.shape), "data": x.reshape(-1).tolist()}]}
    return InferRequest("scaled", "", "rest", json.dumps(doc).encode())


def answers(s: Serving, requests: list) -> list:
    head, tensors = s.answer(frame_of(requests))
    reply = wire.Frame(wire.Kind.OK, 1, head, {k: np.frombuffer(b"".join(bytes(p) for p in v.parts), np.uint8)
                                              for k, v in tensors.items()}, [])
    out, _ = parse_answer(reply, len(requests), 1 << 20)
    return out


def outputs_of(answer: Answer, encoding: str = "grpc") -> dict:
    if encoding == "grpc":
        return decode_response(pb.ModelInferResponse.FromString(answer.body.tobytes()))
    doc = json.loads(answer.body.tobytes()[:answer.json_length])
    return {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"]) for o in doc["outputs"]}


# -- the worker's half ---------------------------------------------------------------------------
def test_agreeing_requests_run_as_one_execution_and_get_their_own_rows():
    s = serving()
    xs = [np.full((i + 1, 3), i, np.float32) for i in range(3)]
    got = answers(s, [grpc(xs[0]), rest(xs[1]), grpc(xs[2])])
    assert s.model.calls == [{"X": (6, 3)}]
    for x, answer, encoding in zip(xs, got, ("grpc", "rest", "grpc")):
        out = outputs_of(answer, encoding)
        np.testing.assert_allclose(out["Y"], x @ W, rtol=1e-6)
        np.testing.assert_allclose(out["S"], (x @ W).sum(1, keepdims=True), rtol=1e-6)
        assert answer.rows == x.shape[0]


def test_mismatched_requests_run_apart_and_a_bad_one_is_refused_alone():
    s = serving()
    bad = InferRequest("scaled", "", "grpc", b"\xff\xff\xff")
    got = answers(s, [grpc(np.ones((1, 3), np.float32), outputs=["Y"]), bad, grpc(np.ones((2, 3), np.float64)),
                      grpc(np.ones((1, 3), np.float32))])
    assert isinstance(got[1], RtdError) and got[1].code == Code.E_REQUEST_INVALID
    assert isinstance(got[2], RtdError) and got[2].code == Code.E_INPUT_INVALID   # FP64 for an FP32 model
    assert set(outputs_of(got[0])) == {"Y"} and set(outputs_of(got[3])) == {"Y", "S"}
    assert s.model.calls == [{"X": (2, 3)}, {"X": (2, 3)}] and s.model.dtypes == ["float32", "float64"]


def test_rows_past_the_batch_size_and_inputs_without_a_batch_dim_are_refused():
    s = serving(max_batch=4)
    got = answers(s, [grpc(np.ones((5, 3), np.float32)), grpc(np.ones((4, 3), np.float32))])
    assert isinstance(got[0], RtdError) and got[0].code == Code.E_INPUT_INVALID
    assert outputs_of(got[1])["Y"].shape == (4, 4)
    with pytest.raises(RtdError) as e:   # a frame with more requests than the batch size is the supervisor's bug
        s.answer(frame_of([grpc(np.ones((1, 3), np.float32))] * 5))
    assert e.value.code == Code.E_WORKER_PROTOCOL


def test_a_profiled_request_runs_alone_and_carries_its_trace():
    s = serving()
    got = answers(s, [grpc(np.ones((1, 3), np.float32), rtd_profile=True), grpc(np.ones((1, 3), np.float32))])
    assert len(s.model.calls) == 2
    trace = outputs_of(got[0])[TRACE_OUTPUT]
    assert json.loads(trace.reshape(-1)[0])["traceEvents"] and TRACE_OUTPUT not in outputs_of(got[1])


# -- the scheduler's half ------------------------------------------------------------------------
class Version:
    """A version whose one instance is the real Serving in this process."""

    def __init__(self, s: Serving, delay: float = 0.0):
        self.serving, self.delay, self.frames, self.answered_count = s, delay, [], 0
        self.in_flight = 0

    async def instance(self, deadline):
        return self

    def answered(self):
        self.answered_count += 1

    def protocol_error(self, instance, error):
        raise AssertionError(error)

    def send(self, kind, head, tensors, timeout, on_done):
        frame = wire.Frame(kind, 1, head, tensors, [])
        self.frames.append(len(head["requests"]))
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        async def work():
            await asyncio.sleep(self.delay)
            answer_head, blobs = self.serving.answer(frame)
            on_done(True)
            future.set_result(wire.Frame(wire.Kind.OK, 1, answer_head, {
                k: np.frombuffer(b"".join(bytes(p) for p in v.parts), np.uint8) for k, v in blobs.items()}, []))
        loop.create_task(work())
        return future


class Limits:
    request_timeout_s, max_message_bytes = 10.0, 1 << 20


def scheduler(version: Version, slots: Slots, delay_s: float | None = 0.2, max_batch: int = 8) -> Scheduler:
    return Scheduler("scaled", version, slots, Limits, max_batch, delay_s, on_execution=lambda: None)


def submit(sched: Scheduler, request: InferRequest, timeout: float = 10, series: Series | None = None):
    timing = Timing(time.monotonic())
    if series is not None:
        timing.queue_in(series)
    request.deadline = time.monotonic() + timeout if timeout != math.inf else math.inf
    return sched.submit(request, timing)


def test_requests_within_the_delay_share_one_frame_and_leave_the_queue_together():
    async def main():
        version, series = Version(serving()), Series()
        sched = scheduler(version, Slots(4))
        xs = [np.full((1, 3), i, np.float32) for i in range(3)]
        got = await asyncio.gather(*(submit(sched, grpc(x), series=series) for x in xs))
        assert version.frames == [3] and version.serving.model.calls == [{"X": (3, 3)}] and series.pending == 0
        for x, answer in zip(xs, got):
            np.testing.assert_allclose(outputs_of(answer)["Y"], x @ W, rtol=1e-6)
        sched.close()
    asyncio.run(main())


def test_a_frame_holds_at_most_the_batch_size_and_unbatched_requests_go_alone():
    async def main():
        version = Version(serving(max_batch=2))
        sched = scheduler(version, Slots(4), max_batch=2)
        await asyncio.gather(*(submit(sched, grpc(np.ones((1, 3), np.float32))) for _ in range(5)))
        assert sorted(version.frames) == [1, 2, 2]
        sched.close()
        alone = Version(serving(max_batch=0))
        plain = scheduler(alone, Slots(4), delay_s=None, max_batch=0)
        await asyncio.gather(*(submit(plain, grpc(np.ones((1, 3), np.float32))) for _ in range(3)))
        assert alone.frames == [1, 1, 1]
    asyncio.run(main())


def test_a_slot_is_held_until_the_worker_answers_even_when_the_caller_gave_up():
    async def main():
        version, slots = Version(serving(), delay=0.3), Slots(1)
        sched = scheduler(version, slots, delay_s=None)
        with pytest.raises(RtdError) as e:
            await submit(sched, grpc(np.ones((1, 3), np.float32)), timeout=0.05)
        assert e.value.code == Code.E_DEADLINE and slots.locked()
        await asyncio.sleep(0.4)
        assert not slots.locked() and version.answered_count == 1
    asyncio.run(main())


def test_a_caller_that_goes_away_before_its_frame_forms_is_left_out_of_it():
    async def main():
        version = Version(serving())
        sched = scheduler(version, Slots(4), delay_s=0.1)
        gone = asyncio.ensure_future(submit(sched, grpc(np.ones((1, 3), np.float32))))
        kept = asyncio.ensure_future(submit(sched, grpc(np.full((1, 3), 2, np.float32))))
        await asyncio.sleep(0.01)
        gone.cancel()
        answer = await kept
        assert version.frames == [1] and gone.cancelled()
        np.testing.assert_allclose(outputs_of(answer)["Y"], np.full((1, 3), 2, np.float32) @ W, rtol=1e-6)
        sched.close()
    asyncio.run(main())


def test_slots_go_to_waiters_in_arrival_order_and_a_wait_ends_at_its_deadline():
    async def main():
        slots = Slots(1)
        assert slots.take() and not slots.take() and slots.locked()
        start = time.monotonic()
        expired = await slots.wait(start + 0.05)
        assert expired is False and time.monotonic() - start >= 0.05 and not slots.waiting   # gone from the queue
        first = asyncio.ensure_future(slots.wait(time.monotonic() + 10))
        second = asyncio.ensure_future(slots.wait(time.monotonic() + 10))
        await asyncio.sleep(0)
        slots.release()   # the held slot goes to the first waiter, not to the free count
        await asyncio.sleep(0)
        assert first.done() and first.result() is True and not second.done() and slots.free == 0
        slots.release()
        assert await second is True
        slots.release()
        assert slots.free == 1 and not slots.locked()
    asyncio.run(main())


def test_a_slot_handed_to_a_waiter_that_was_cancelled_meanwhile_goes_to_the_next():
    async def main():
        slots = Slots(1)
        assert slots.take()
        cancelled = asyncio.ensure_future(slots.wait(time.monotonic() + 10))
        behind = asyncio.ensure_future(slots.wait(time.monotonic() + 10))
        await asyncio.sleep(0)
        slots.release()      # handed to the first waiter ...
        cancelled.cancel()   # ... whose caller gives up before it runs again
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert await asyncio.wait_for(behind, 1) is True and slots.free == 0
        slots.release()
        assert slots.free == 1
    asyncio.run(main())


def test_expired_requests_are_left_out_and_closing_fails_the_queue():
    async def main():
        version = Version(serving())
        sched = scheduler(version, Slots(4), delay_s=0.05)
        with pytest.raises(RtdError) as e:
            await submit(sched, grpc(np.ones((1, 3), np.float32)), timeout=0.01)
        assert e.value.code == Code.E_DEADLINE
        await asyncio.sleep(0.1)
        assert version.frames == []                      # its frame formed after its deadline: never sent
        blocked = scheduler(version, Slots(4), delay_s=60)
        waiting = asyncio.ensure_future(submit(blocked, grpc(np.ones((1, 3), np.float32))))
        await asyncio.sleep(0.01)
        blocked.close()
        with pytest.raises(RtdError) as e:
            await waiting
        assert e.value.code == Code.E_MODEL_UNAVAILABLE
        with pytest.raises(RtdError) as e:
            await submit(blocked, grpc(np.ones((1, 3), np.float32)))
        assert e.value.code == Code.E_MODEL_UNAVAILABLE
        sched.close()
    asyncio.run(main())


@pytest.mark.parametrize("head, why", [
    ({"results": [], "ns": {"decode": 0, "run": 0, "encode": 0}}, "one result per request"),
    ({"results": [{"code": "E_NOT_A_CODE", "detail": "x"}], "ns": {"decode": 0, "run": 0, "encode": 0}}, "known code"),
    ({"results": [{"rows": 1, "json_length": None}], "ns": {"decode": 0, "run": 0, "encode": 0}}, "response bytes"),
    ({"results": [{"rows": 1, "json_length": None}], "ns": {"decode": -1, "run": 0, "encode": 0}}, "decode time"),
])
def test_a_worker_answer_is_parsed_once_and_bounded(head, why):
    with pytest.raises(RtdError) as e:
        parse_answer(wire.Frame(wire.Kind.OK, 1, head, {}, []), 1, 1 << 20)
    assert e.value.code == Code.E_WORKER_PROTOCOL and why in e.value.detail

"""Dynamic batching on its own: requests within the delay run as one execution, split back
in order; mismatched shapes wait for their own batch; a failed execution fails each of its
requests; a request whose deadline passed before its batch ran is left out of it; closing
fails what is still queued. The runner is a plain coroutine of the inputs."""
import asyncio
import time

import numpy as np
import pytest

from rtd.daemon.batching import Batcher
from rtd.daemon.metrics import Series, Timing
from rtd.errors import Code, RtdError


class Runner:
    def __init__(self, fail=False, delay=0.0):
        self.calls, self.fail, self.delay = [], fail, delay

    async def __call__(self, inputs, outputs, deadline, timing):
        self.calls.append({n: a.shape for n, a in inputs.items()})
        timing.computing()
        timing.input_end = time.monotonic()
        await asyncio.sleep(self.delay)
        timing.output_start = time.monotonic()
        if self.fail:
            raise RtdError(Code.E_WORKER_CRASHED, "boom")
        return {"Y": inputs["X"] * 2, "S": inputs["X"].sum(axis=1, keepdims=True)}


def run(coro):
    return asyncio.run(coro)


async def submit_all(batcher, arrays, outputs=None, timeout=10):
    deadline = time.monotonic() + timeout
    return await asyncio.gather(*(batcher.submit({"X": a}, outputs, deadline, Timing(time.monotonic())) for a in arrays),
                                return_exceptions=True)


def test_concurrent_requests_share_one_execution_and_get_their_own_rows():
    async def main():
        runner = Runner()
        batcher = Batcher("m", 8, 0.3, runner)
        arrays = [np.full((i + 1, 3), i, np.float32) for i in range(3)]
        results = await submit_all(batcher, arrays)
        for a, r in zip(arrays, results):
            np.testing.assert_array_equal(r["Y"], a * 2)
            np.testing.assert_array_equal(r["S"], a.sum(axis=1, keepdims=True))
        assert len(runner.calls) == 1 and runner.calls[0]["X"] == (6, 3)
        batcher.close()
    run(main())


def test_members_are_pending_until_their_batch_computes_and_take_its_phases():
    async def main():
        series, seen = Series(), []

        async def runner(inputs, outputs, deadline, timing):
            seen.append(series.pending)        # still queued: the slot and instance are not yet had
            timing.computing()
            seen.append(series.pending)
            timing.input_end = timing.output_start = time.monotonic()
            return {"Y": inputs["X"]}
        batcher = Batcher("m", 8, 0.2, runner)
        timings = [Timing(time.monotonic()) for _ in range(3)]
        for t in timings:
            t.queue_in(series)
        await asyncio.gather(*(batcher.submit({"X": np.ones((1, 3), np.float32)}, None, time.monotonic() + 5, t)
                               for t in timings))
        assert seen == [3, 0] and series.pending == 0
        assert len({t.compute_start for t in timings}) == 1 and all(t.prep_s >= 0 and t.input_end for t in timings)
        batcher.close()
    run(main())


def test_requested_outputs_only_and_mismatched_shapes_run_separately():
    async def main():
        runner = Runner()
        batcher = Batcher("m", 8, 0.3, runner)
        results = await submit_all(batcher, [np.ones((1, 3), np.float32), np.ones((1, 5), np.float32)], outputs=["Y"])
        assert [set(r) for r in results] == [{"Y"}, {"Y"}]
        assert sorted(c["X"] for c in runner.calls) == [(1, 3), (1, 5)]
        batcher.close()
    run(main())


def test_batch_limit_and_refusals():
    async def main():
        batcher = Batcher("m", 4, 0.01, Runner())
        for bad in ({"X": np.ones((5, 3), np.float32)}, {"X": np.float32(1)}, {}):
            with pytest.raises(RtdError) as e:
                await batcher.submit(bad, None, time.monotonic() + 5, Timing(time.monotonic()))
            assert e.value.code == Code.E_INPUT_INVALID
        batcher.close()
    run(main())


def test_a_failed_execution_fails_every_request_in_it():
    async def main():
        batcher = Batcher("m", 8, 0.3, Runner(fail=True))
        results = await submit_all(batcher, [np.ones((1, 3), np.float32)] * 3)
        assert [r.code for r in results] == [Code.E_WORKER_CRASHED] * 3
        batcher.close()
    run(main())


def test_outputs_must_keep_the_batch_dimension():
    async def main():
        async def wrong(inputs, outputs, deadline, timing):
            return {"Y": np.ones(7)}
        batcher = Batcher("m", 8, 0.01, wrong)
        with pytest.raises(RtdError) as e:
            await batcher.submit({"X": np.ones((2, 3), np.float32)}, None, time.monotonic() + 5, Timing(time.monotonic()))
        assert e.value.code == Code.E_MODEL_INVALID
        batcher.close()
    run(main())


def test_expired_requests_are_left_out_and_closing_fails_the_queue():
    async def main():
        runner = Runner(delay=0.2)
        batcher = Batcher("m", 8, 0.05, runner)
        short = await submit_all(batcher, [np.ones((1, 3), np.float32)], timeout=0.01)
        assert short[0].code == Code.E_DEADLINE
        await asyncio.sleep(0.1)
        assert runner.calls == []                      # its batch formed after its deadline: never ran
        waiting = asyncio.ensure_future(submit_all(batcher, [np.ones((1, 3), np.float32)]))
        await asyncio.sleep(0.01)
        batcher.close()
        [closed] = await waiting
        assert closed.code == Code.E_MODEL_UNAVAILABLE
        late = await submit_all(batcher, [np.ones((1, 3), np.float32)])
        assert late[0].code == Code.E_MODEL_UNAVAILABLE
    run(main())

"""Dynamic batching on its own: requests within the delay run as one execution, split back
in order; mismatched shapes wait for their own batch; a failed execution fails each of its
requests; closing fails what is still queued. The runner is a plain function of the inputs."""
import concurrent.futures
import threading
import time

import numpy as np
import pytest

from rtd.daemon.batching import Batcher
from rtd.errors import Code, RtdError


class Runner:
    def __init__(self, fail=False):
        self.calls, self.fail, self.lock = [], fail, threading.Lock()

    def __call__(self, inputs, outputs, deadline):
        with self.lock:
            self.calls.append({n: a.shape for n, a in inputs.items()})
        if self.fail:
            raise RtdError(Code.E_WORKER_CRASHED, "boom")
        return {"Y": inputs["X"] * 2, "S": inputs["X"].sum(axis=1, keepdims=True)}


def _submit_all(batcher, arrays, outputs=None):
    deadline = time.monotonic() + 10
    with concurrent.futures.ThreadPoolExecutor(len(arrays)) as pool:
        futures = [pool.submit(batcher.submit, {"X": a}, outputs, deadline) for a in arrays]
        return [f.result() for f in futures]


def test_concurrent_requests_share_one_execution_and_get_their_own_rows():
    runner = Runner()
    batcher = Batcher("m", 8, 0.3, runner)
    arrays = [np.full((i + 1, 3), i, np.float32) for i in range(3)]
    results = _submit_all(batcher, arrays)
    for a, r in zip(arrays, results):
        np.testing.assert_array_equal(r["Y"], a * 2)
        np.testing.assert_array_equal(r["S"], a.sum(axis=1, keepdims=True))
    assert len(runner.calls) == 1 and runner.calls[0]["X"] == (6, 3)
    batcher.close()


def test_requested_outputs_only_and_mismatched_shapes_run_separately():
    runner = Runner()
    batcher = Batcher("m", 8, 0.3, runner)
    results = _submit_all(batcher, [np.ones((1, 3), np.float32), np.ones((1, 5), np.float32)], outputs=["Y"])
    assert [set(r) for r in results] == [{"Y"}, {"Y"}]
    assert sorted(c["X"] for c in runner.calls) == [(1, 3), (1, 5)]
    batcher.close()


def test_batch_limit_and_refusals():
    batcher = Batcher("m", 4, 0.01, Runner())
    for bad in ({"X": np.ones((5, 3), np.float32)}, {"X": np.float32(1)}, {}):
        with pytest.raises(RtdError) as e:
            batcher.submit(bad, None, time.monotonic() + 5)
        assert e.value.code == Code.E_INPUT_INVALID
    batcher.close()


def test_a_failed_execution_fails_every_request_in_it():
    batcher = Batcher("m", 8, 0.3, Runner(fail=True))
    with pytest.raises(RtdError) as e:
        _submit_all(batcher, [np.ones((1, 3), np.float32)] * 3)
    assert e.value.code == Code.E_WORKER_CRASHED
    batcher.close()


def test_outputs_must_keep_the_batch_dimension():
    batcher = Batcher("m", 8, 0.01, lambda i, o, d: {"Y": np.ones(7)})
    with pytest.raises(RtdError) as e:
        batcher.submit({"X": np.ones((2, 3), np.float32)}, None, time.monotonic() + 5)
    assert e.value.code == Code.E_MODEL_INVALID
    batcher.close()

"""The compiled kernels' thread pool (kernels/native/parallel.c): shares a helper has not claimed when the caller
is done with its own are run by the caller, helpers spin a while between jobs, then sleep. Whoever runs a share,
its bounds are the same: thousands of back-to-back jobs, and jobs from two Python threads at once (one of them
finds the pool busy and runs alone), give the one-thread bytes every time."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rtd.kernels.native import compiled

pytestmark = pytest.mark.skipif(compiled is None, reason="the compiled kernels are not built")

OUTER, IN, OUT, INNER = 8, 32, 64, 64   # 32,768 outputs of two taps: just enough for resample.c to split


def _job(seed: int):
    """A resample call over its own buffers (the GIL released while it runs) and its output."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(OUTER * IN * INNER).astype(np.float32)
    y = np.empty(OUTER * OUT * INNER, np.float32)
    index = np.concatenate([np.arange(OUT) // 2, np.minimum(np.arange(OUT) // 2 + 1, IN - 1)]).astype(np.int64)
    weights = rng.random(2 * OUT).astype(np.float32)
    ffi, lib = compiled.ffi, compiled.lib
    args = (ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", y, require_writable=True), y.size,
            ffi.from_buffer("int64_t[]", index), index.size, ffi.from_buffer("float[]", weights), weights.size,
            OUTER, IN, OUT, INNER, 2)

    def run():
        y[:] = np.nan
        assert lib.rtd_resample_f32(*args) == 0
        return y.copy()
    return run


def test_back_to_back_jobs_and_concurrent_callers_give_the_one_thread_bytes(native_threads):
    jobs = [_job(seed) for seed in range(2)]
    native_threads(1)
    want = [job() for job in jobs]
    native_threads(2)
    for turn in range(2000):   # jobs microseconds apart: helpers still spinning, or late and finding their share taken
        np.testing.assert_array_equal(jobs[turn % 2](), want[turn % 2])

    def caller(k: int) -> int:   # how many of its runs differ from the one-thread bytes
        return sum(not np.array_equal(jobs[k](), want[k]) for _ in range(300))
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(caller, range(2))) == [0, 0]

"""The row- and column-parallel GEMM (kernels/native/gemm.c) against NumPy: plain and transposed
weights, bias and ReLU, one and two threads (rows split when there are many, columns when there
are few), refusals for what it does not take, lengths checked again at the C boundary."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtd.kernels import native
from rtd.kernels.native import gemm as native_gemm

pytestmark = pytest.mark.skipif(native.compiled is None, reason="rtd was installed without its compiled kernels")


# every example sets its own threads: the fixture, shared by the examples, puts one thread back after the last
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 300), st.one_of(st.integers(1, 70), st.integers(250, 600)), st.integers(1, 300), st.booleans(),
       st.booleans(), st.booleans(),
       st.sampled_from([1, 2]), st.integers(0, 2**31 - 1))
def test_gemm_rows_equals_numpy(native_threads, m, k, n, transposed, with_bias, relu, threads, seed):  # @given fills the rightmost ones
    """Plain, and with the weight packed once (kept, then used again)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32).T if transposed else rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32) if with_bias else None
    native_threads(threads)
    got = native_gemm.gemm_rows(a, w, bias, relu)
    packed = [native_gemm.gemm_rows(a, w, bias, relu, constant=True) for _ in range(2)]
    want = a.astype(np.float64) @ w.astype(np.float64) + (bias if with_bias else 0)
    want = np.maximum(want, 0) if relu else want
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    np.testing.assert_allclose(packed[0], want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    np.testing.assert_array_equal(packed[1], packed[0])   # the kept panels: the same sums again


def test_big_products_split_among_threads_give_the_one_thread_result(native_threads):
    rng = np.random.default_rng(3)
    for m, n in ((16, 2048), (2048, 16)):   # few rows: columns split; many rows: rows split
        a, w = rng.standard_normal((m, 512), dtype=np.float32), rng.standard_normal((512, n), dtype=np.float32)
        results = []
        for threads in (1, 2):
            native_threads(threads)
            results.append(native_gemm.gemm_rows(a, w, None))
        np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-4)


def test_what_it_does_not_take_is_refused():
    a, w = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    assert native_gemm.gemm_rows(a.astype(np.float64), w) is None
    assert native_gemm.gemm_rows(a, np.ones((4, 5), np.float32)) is None          # inner sizes differ
    assert native_gemm.gemm_rows(np.ones((4, 6), np.float32)[:, ::2], w) is None    # a strided a
    assert native_gemm.gemm_rows(a, np.ones((3, 10), np.float32)[:, ::2]) is None   # neither C nor F order
    assert native_gemm.gemm_rows(a, w, np.ones(4, np.float32)) is None              # a bias of another length
    assert native_gemm.gemm_rows(a, w, out=np.empty((4, 4), np.float32)) is None
    assert native_gemm.gemm_rows(a, w) is not None


def test_the_c_boundary_checks_lengths_itself():
    ffi, lib = native.compiled.ffi, native.compiled.lib
    a, b, c = np.ones(12, np.float32), np.ones(15, np.float32), np.empty(20, np.float32)
    buf = lambda x: ffi.from_buffer("float[]", x, require_writable=True)   # noqa: E731
    assert lib.rtd_gemm_rows(buf(a), 12, buf(b), 15, 0, ffi.NULL, 0, buf(c), 20, 4, 3, 5, 0) == 0
    assert lib.rtd_gemm_rows(buf(a), 11, buf(b), 15, 0, ffi.NULL, 0, buf(c), 20, 4, 3, 5, 0) != 0
    assert lib.rtd_gemm_rows(buf(a), 12, buf(b), 15, 0, ffi.NULL, 0, buf(c), 19, 4, 3, 5, 0) != 0
    assert lib.rtd_gemm_rows(buf(a), 12, buf(b), 15, 0, buf(c), 4, buf(c), 20, 4, 3, 5, 0) != 0   # bias of 4 for 5 columns


@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("k,n", [(300, 1200), (59, 80), (200, 64)])
def test_a_lone_row_gives_the_bits_of_the_same_row_among_six(k, n, constant):
    """A one-row product (a GEMV: a recurrent cell's) runs four panels at once (gemm.c's wide_row), in place or
    from packed panels; each value still sums over k in the order and with the multiply-adds of the tile that
    computes it among more rows, so the bits are the same, and the last columns (fewer than four panels) too."""
    rng = np.random.default_rng(k + n)
    a, w = rng.standard_normal((6, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    one, six = native_gemm.gemm_rows(a[:1], w, bias, constant=constant), native_gemm.gemm_rows(a, w, bias, constant=constant)
    np.testing.assert_array_equal(one[0], six[0])
    np.testing.assert_allclose(one[0], a[0].astype(np.float64) @ w + bias, rtol=1e-4, atol=1e-4)

"""The compiled scatter-add of whole rows (kernels/native/scatter.c): np.add.at's bits over random rows with
repeats (the same float32 additions in the same order), the op taking it for a graph network's expanded
index, and the C boundary refusing what does not fit without writing anything."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtd.kernels.native import compiled
from rtd.kernels.native import scatter as native_scatter
from rtd.kernels.ops import _scatter

pytestmark = pytest.mark.skipif(compiled is None, reason="rtd was installed without its compiled kernels")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), m=st.integers(0, 40), width=st.lists(st.integers(1, 9), max_size=2), seed=st.integers(0, 2**31 - 1))
def test_rows_add_as_np_add_at_adds_them(n, m, width, seed):
    rng = np.random.default_rng(seed)
    out = (rng.standard_normal((n, *width)) * 1e3).astype(np.float32)
    rows = rng.integers(0, n, m)   # repeats: the order of the additions shows in the last bits
    updates = rng.standard_normal((m, *width)).astype(np.float32)
    want = out.copy()
    np.add.at(want, rows, updates)
    assert native_scatter.scatter_add_rows(out, rows, updates)
    assert np.array_equal(out, want)


def test_scatter_elements_takes_it_for_an_index_vector_expanded_over_features(monkeypatch):
    rng = np.random.default_rng(1)
    data, rows = rng.standard_normal((4, 33)).astype(np.float32), rng.integers(-4, 4, 50)
    updates = rng.standard_normal((50, 33)).astype(np.float32)
    want = data.copy()
    np.add.at(want, rows % 4, updates)
    calls = []
    monkeypatch.setattr(_scatter, "scatter_add_rows", lambda *a: calls.append(1) or native_scatter.scatter_add_rows(*a))
    got = _scatter.scatter_elements(np, data, np.repeat(rows[:, None], 33, axis=1), updates, 0, "add")
    assert calls and np.array_equal(got, want)


def test_the_c_boundary_refuses_what_does_not_fit_and_writes_nothing():
    ffi, lib = compiled.ffi, compiled.lib
    out, updates = np.zeros((3, 4), np.float32), np.ones((2, 4), np.float32)

    def call(rows, out_len=12, width=4, n_rows=None, updates_len=8):
        rows = np.asarray(rows, np.int64)
        return lib.rtd_scatter_add_rows_f32(ffi.from_buffer("float[]", out, require_writable=True), out_len, width,
                                            ffi.from_buffer("int64_t[]", rows), rows.size if n_rows is None else n_rows,
                                            ffi.from_buffer("float[]", updates), updates_len)
    assert call([0, 3]) == -1 and call([-1, 0]) == -1   # a row outside out
    assert call([0, 1], width=5) == -1 and call([0, 1], updates_len=7) == -1 and call([0, 1], n_rows=3) == -1
    assert call([0, 1], width=0) == -1
    assert not out.any()
    assert call([2, 2]) == 0 and out[2].tolist() == [2.0] * 4

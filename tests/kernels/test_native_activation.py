"""The compiled activations (kernels/native/activation.c): each within its stated error of the exact
function (float64) over a dense sweep, random values and the special ones; NaN and infinities as the
NumPy forms give them; the same bits in place, at any offset, and on one or two threads; what they do
not take is refused; the C checks its lengths."""
import numpy as np
import pytest
from scipy import special

from rtd.kernels import native
from rtd.kernels.native import activation as act

pytestmark = pytest.mark.skipif(native.compiled is None, reason="rtd was installed without its compiled kernels")

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 88.7, 88.8, -103.9, -104.0,
                    0.625, -0.625, 4.1, -4.1], np.float32)
X = np.concatenate([np.linspace(-120, 120, 240_001, dtype=np.float32), SPECIAL,
                    np.random.default_rng(0).standard_normal(100_000).astype(np.float32) * 3])
X64 = X.astype(np.float64)
SQRT_2_OVER_PI = np.sqrt(2 / np.pi)
with np.errstate(all="ignore"):
    EXACT = {act.EXP: np.exp(X64), act.SIGMOID: 1 / (1 + np.exp(-X64)), act.TANH: np.tanh(X64), act.ERF: special.erf(X64),
             act.GELU: X64 * 0.5 * (1 + special.erf(X64 / np.sqrt(2))), act.GELU_DIV: X64 * 0.5 * (1 + special.erf(X64 / np.sqrt(2))),
             act.GELU_TANH: 0.5 * X64 * (1 + np.tanh(SQRT_2_OVER_PI * (X64 + 0.044715 * X64 ** 3)))}
# (ulps, absolute): the bounds activation.h states
BOUNDS = {act.EXP: (1, None), act.TANH: (1.5, None), act.ERF: (4.5, None), act.SIGMOID: (None, 1e-7),
          act.GELU: (None, 6e-7), act.GELU_TANH: (None, 6e-7), act.GELU_DIV: (None, 6e-7)}


@pytest.mark.parametrize("op", sorted(EXACT))
def test_within_the_stated_error_of_the_exact_function(op):
    got = act.activation(op, X)
    exact = EXACT[op]
    with np.errstate(over="ignore"):
        rounded = exact.astype(np.float32)   # past float32's range: inf, as float32 gives it
    finite = np.isfinite(rounded)
    assert np.array_equal(np.isnan(got), np.isnan(exact))
    assert np.array_equal(got[~finite & ~np.isnan(exact)], rounded[~finite & ~np.isnan(exact)])
    ulps, absolute = BOUNDS[op]
    error = np.abs(got[finite].astype(np.float64) - exact[finite])
    if ulps is not None:
        tiny = np.finfo(np.float32).smallest_subnormal
        spacing = np.spacing(np.maximum(np.abs(exact[finite]), tiny).astype(np.float32)).astype(np.float64)
        assert (error / spacing).max() <= ulps
    else:
        assert error.max() <= absolute


@pytest.mark.parametrize("op", sorted(EXACT))
def test_the_same_bits_in_place_at_any_offset_and_on_two_threads(op, native_threads):
    want = act.activation(op, X)
    for start in (1, 3, 7):   # the tail and the vector body meet elsewhere: each element comes out the same
        np.testing.assert_array_equal(act.activation(op, X[start:start + 1001]), want[start:start + 1001])
    inplace = X.copy()
    assert act.activation(op, inplace, inplace) is inplace
    np.testing.assert_array_equal(inplace, want)
    native_threads(2)
    np.testing.assert_array_equal(act.activation(op, X), want)


def test_what_it_does_not_take_is_refused():
    x = np.ones(10, np.float32)
    assert act.activation(act.EXP, x.astype(np.float64)) is None
    assert act.activation(act.EXP, np.ones(20, np.float32)[::2]) is None      # strided
    assert act.activation(act.EXP, x, np.empty(9, np.float32)) is None        # another shape
    assert act.activation(act.EXP, np.ones(20, np.float32)[:10], np.ones(20, np.float32)[:10][1:]) is None
    shared = np.ones(20, np.float32)
    assert act.activation(act.EXP, shared[:10], shared[5:15]) is None         # a partial overlap


def test_the_c_boundary_checks_lengths_itself():
    ffi, lib = native.compiled.ffi, native.compiled.lib
    x, y = np.ones(8, np.float32), np.empty(8, np.float32)

    def call(op=act.EXP, x_len=8, y_len=8):
        return lib.rtd_activation_f32(op, ffi.from_buffer("float[]", x), x_len, ffi.from_buffer("float[]", y), y_len)
    assert call() == 0
    assert call(y_len=7) != 0
    assert call(op=99) != 0
    assert call(x_len=-1) != 0


@pytest.mark.parametrize("cols", [1, 7, 8, 130, 6906])
def test_softmax_rows_match_the_exact_softmax(cols):
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((5, cols)) * 20).astype(np.float32)
    x[1] = -3.4e38                                 # every term underflows without the shift: uniform
    x[2, 0] = np.nan                               # NaN propagates to its row
    exact = np.exp(x.astype(np.float64) - x.astype(np.float64).max(axis=1, keepdims=True))
    exact /= exact.sum(axis=1, keepdims=True)
    got = act.softmax_rows(x)
    assert np.isnan(got[2]).all() and not np.isnan(np.delete(got, 2, axis=0)).any()
    np.testing.assert_allclose(np.delete(got, 2, axis=0), np.delete(exact, 2, axis=0), rtol=1e-5, atol=1e-7)
    inplace = x.copy()
    assert act.softmax_rows(inplace, inplace) is inplace
    np.testing.assert_array_equal(inplace, got)


def test_the_divided_gelu_rounds_erfs_argument_as_the_graphs_division():
    """GELU_DIV's erf argument is x / float32 √2, as a Div-scaled exporter graph computes it, not x · 1/√2."""
    x = X[np.isfinite(X)]
    scaled = x / np.float32(np.sqrt(2))
    assert not np.array_equal(scaled, x * np.float32(np.sqrt(0.5)))   # the two forms do differ in the last bit
    gate = act.activation(act.ERF, scaled)
    gate += 1
    gate *= 0.5
    np.testing.assert_array_equal(act.activation(act.GELU_DIV, x), x * gate)

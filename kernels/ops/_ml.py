"""Shared pieces of the ai.onnx.ml kernels: the ops sklearn-onnx and onnxmltools emit.

Scores follow onnxruntime's ml kernels, which those converters are validated against: they
are float32 whatever the input type, and a classifier's post transform is one of NONE,
LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT. String tensors are object arrays; their elements
arrive as `bytes` (the KServe wire form) or `str` (an in-process caller) and are compared as
UTF-8 text; string outputs are `str` elements.
"""
import numpy as np

from rtd.errors import Code, RtdError

from .base import HostKernel

ML_DOMAIN = "ai.onnx.ml"
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")  # TreeEnsemble-5 numbers them in this order


class MlKernel(HostKernel):
    """An ai.onnx.ml op, computed by `compute` in NumPy on the host."""

    domain = ML_DOMAIN

    def choice(self, name: str, choices) -> None:
        if getattr(self, name) not in choices:
            self.refuse(f"{name}={getattr(self, name)!r}, expected one of {list(choices)}", Code.E_OP_UNSUPPORTED)

    def one_of(self, *names: str):
        """The one attribute of `names` the node sets (class labels given as ints or as strings)."""
        given = [n for n in names if getattr(self, n) is not None]
        if len(given) != 1:
            self.refuse(f"exactly one of {list(names)} must be set, got {given}")
        return getattr(self, given[0])

    def floats(self, name: str, as_tensor: str | None = None) -> np.ndarray | None:
        """A float list attribute (or its double `*_as_tensor` twin) as a flat float64 array."""
        tensor = getattr(self, as_tensor) if as_tensor else None
        if tensor is not None and getattr(self, name) is not None:
            self.refuse(f"both {name} and {as_tensor} are set")
        value = tensor if tensor is not None else getattr(self, name)
        return None if value is None else np.asarray(value, np.float64).reshape(-1)

    def features(self, x) -> np.ndarray:
        """The input as float32 rows [N, F] (a 1-D input is one row), as onnxruntime computes."""
        if x.dtype.kind not in "fiu":
            self.refuse(f"input dtype {x.dtype} is not numeric", Code.E_OP_UNSUPPORTED)
        x = x.reshape(1, -1) if x.ndim == 1 else x
        if x.ndim != 2:
            self.refuse(f"input must be [N, F], got shape {list(x.shape)}", Code.E_INPUT_INVALID)
        return x.astype(np.float32, copy=False)


def labels_array(labels) -> np.ndarray:
    """Class labels as the array a label output indexes: int64, or object of str."""
    if labels and isinstance(labels[0], str):
        return np.array(labels, dtype=object)
    return np.asarray(labels, np.int64)


def text(x: np.ndarray) -> np.ndarray:
    """A string tensor with every element as str (bytes decoded as UTF-8)."""
    out = np.empty(x.shape, dtype=object)
    out.reshape(-1)[:] = texts(x)
    return out


def texts(x: np.ndarray) -> list:
    """The elements of a string tensor, flattened, each as str (bytes decoded as UTF-8): a list
    comprehension, where np.vectorize spent ~20 µs setting itself up per call."""
    try:
        return [v.decode() if isinstance(v, bytes) else str(v) for v in x.reshape(-1).tolist()]
    except UnicodeDecodeError:
        raise RtdError(Code.E_INPUT_INVALID, "a string element is not UTF-8") from None


def finite(scores: np.ndarray, nan: float = 0.0) -> np.ndarray:
    """`np.nan_to_num(scores, nan=nan)` (each infinity to the largest finite value of its sign, NaN
    to `nan`) in four ufunc calls: NumPy's own spends ~15 µs of Python, a quarter of a tree
    classifier's whole run on one row."""
    if scores.dtype.kind != "f":
        return scores.copy()
    big = np.finfo(scores.dtype).max
    clipped = np.minimum(np.maximum(scores, -big), big)   # NaN passes through both
    return np.where(np.isnan(scores), scores.dtype.type(nan), clipped)


def logistic(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in x's type, then float32; in place in one new array (a tree classifier's single row
    spent 5 µs in four temporaries)."""
    e = np.negative(x)
    with np.errstate(over="ignore"):
        np.exp(e, out=e)
    np.add(e, 1.0, out=e)
    return np.divide(1.0, e, out=e).astype(np.float32, copy=False)


def probit(x: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2x - 1) with the approximation (a = 0.147) onnxruntime uses."""
    y = (2.0 * x.astype(np.float32) - 1.0).astype(np.float32)
    sign = np.where(y < 0, np.float32(-1), np.float32(1))
    with np.errstate(divide="ignore", invalid="ignore"):
        ln = np.log((1.0 - y) * (1.0 + y)).astype(np.float32)
        v = np.float32(2.0 / (np.pi * 0.147)) + np.float32(0.5) * ln
        erfinv = sign * np.sqrt(-v + np.sqrt(v * v - ln / np.float32(0.147)))
    return (np.float32(1.41421356) * erfinv).astype(np.float32)


def softmax(x: np.ndarray, zero: bool = False) -> np.ndarray:
    """Row softmax in x's type, then float32; with `zero`, entries that are (nearly) 0 stay 0 and take no
    share. A row whose total is not positive (all zero; NaN from an infinite score) is 0.5 throughout. The
    ufuncs are called directly and in place: NumPy's wrappers and temporaries took 12 µs of a one-row call."""
    e = np.subtract(x, np.maximum.reduce(x, axis=-1, keepdims=True))
    np.exp(e, out=e)
    if zero:
        e = np.where(np.abs(x) > 1e-7, e, 0)
    total = np.add.reduce(e, axis=-1, keepdims=True)
    if np.greater(total, 0).all():   # the usual case: nothing to silence or replace
        return np.divide(e, total, out=e).astype(np.float32, copy=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, e / total, np.float32(0.5)).astype(np.float32)


# the transforms whose first steps forest.c takes (forest.h: rtd_forest_predict_*), in TreeEnsemble-5's numbering
PREPARED = {"SOFTMAX": 1, "LOGISTIC": 2, "SOFTMAX_ZERO": 3}


def post_transform_prepared(e: np.ndarray, name: str, careful: bool) -> np.ndarray:
    """post_transform's result from what forest.c prepared for `name` (float32, written over): softmax rows less
    their greatest value (SOFTMAX_ZERO's dropped entries at -inf, whose exp is the 0 softmax gives them), logistic
    scores negated. `careful`: some row may need softmax's 0.5 or logistic's silenced overflow. The same steps
    as softmax and logistic from there, so the same bits; three ufunc calls for a one-row softmax instead of six."""
    if name == "LOGISTIC":
        if careful:
            with np.errstate(over="ignore"):
                np.exp(e, out=e)
        else:
            np.exp(e, out=e)
        np.add(e, 1.0, out=e)
        return np.divide(1.0, e, out=e)
    if name not in PREPARED:
        return post_transform(e, name)
    np.exp(e, out=e)
    total = np.add.reduce(e, axis=-1, keepdims=True)
    if not careful:
        return np.divide(e, total, out=e)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, e / total, np.float32(0.5)).astype(np.float32)


def post_transform(scores: np.ndarray, name: str) -> np.ndarray:
    if name == "LOGISTIC":
        return logistic(scores)
    if name in ("SOFTMAX", "SOFTMAX_ZERO"):
        return softmax(scores, zero=name == "SOFTMAX_ZERO")
    if name == "PROBIT":
        return probit(scores)
    return scores.astype(np.float32, copy=False)


def binary_scores(score: np.ndarray, name: str, mixed: bool) -> np.ndarray:
    """Two columns from one score column, as onnxruntime writes a binary classifier's scores:
    [1 - s, s] when weights are all positive (s is a probability), else [-s, s] (through the
    logistic when that is the transform); PROBIT transforms the one score."""
    s = score.reshape(-1, 1).astype(np.float32)
    if name == "PROBIT":
        return probit(s)
    if not mixed:
        return np.concatenate([1 - s, s], axis=1)
    if name == "LOGISTIC":
        return logistic(np.concatenate([-s, s], axis=1))   # element-wise: one call for both columns
    return np.concatenate([-s, s], axis=1)


def map_values(x: np.ndarray, table: dict, default, dtype) -> np.ndarray:
    """Each element of x looked up in `table` (missing: `default`), as an array of `dtype`.
    Strings are compared as text, each looked up (np.unique would sort them by Python comparisons);
    of numbers only the distinct values are looked up in Python."""
    if x.dtype == object:
        return np.array([table.get(v, default) for v in texts(x)], dtype=dtype).reshape(x.shape)
    distinct, inverse = np.unique(x.reshape(-1), return_inverse=True)
    mapped = np.array([table.get(v, default) for v in distinct.tolist()], dtype=dtype)
    return mapped[inverse].reshape(x.shape)

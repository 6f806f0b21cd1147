"""ai.onnx.ml LabelEncoder: a key → value lookup, the default for keys not listed.

Version 1 maps strings to their index in classes_strings (or indices back to strings);
version 2 takes keys and values as float, int64 or string lists; version 4 also as tensors.
"""
import numpy as np

from rtd.errors import Code

from ._ml import MlKernel, map_values

_TYPED = ("floats", "int64s", "strings")
_DTYPES = {"floats": np.float32, "int64s": np.int64, "strings": object}


class LabelEncoder_1(MlKernel):
    attributes = {"classes_strings": None, "default_int64": -1, "default_string": "_Unused"}

    def setup(self):
        classes = self.classes_strings or []
        self.to_int = {c: i for i, c in enumerate(classes)}
        self.to_str = dict(enumerate(classes))

    def compute(self, x):
        if x.dtype == object:
            return (map_values(x, self.to_int, self.default_int64, np.int64),)
        return (map_values(x.astype(np.int64), self.to_str, self.default_string, object),)


class LabelEncoder_2(MlKernel):
    attributes = {**{f"keys_{t}": None for t in _TYPED}, **{f"values_{t}": None for t in _TYPED},
                  "default_float": -0.0, "default_int64": -1, "default_string": "_Unused"}

    def setup(self):
        keys, self.key_dtype = self._typed("keys")
        values, self.value_dtype = self._typed("values")
        if len(keys) != len(values):
            self.refuse(f"{len(keys)} keys for {len(values)} values")
        self.table = dict(zip(keys, values))
        self.default = self._default()

    def _typed(self, what: str):
        """The one keys_*/values_* list the node sets, with its dtype."""
        self.one_of(*(f"{what}_{t}" for t in _TYPED))
        name = next(t for t in _TYPED if getattr(self, f"{what}_{t}") is not None)
        dtype = np.dtype(_DTYPES[name])
        return [v if dtype == object else dtype.type(v).item() for v in getattr(self, f"{what}_{name}")], dtype

    def _default(self):
        if self.value_dtype == object:
            return self.default_string
        return self.default_float if self.value_dtype.kind == "f" else self.default_int64

    def compute(self, x):
        if (x.dtype == object) != (self.key_dtype == object):
            self.refuse(f"input dtype {x.dtype} does not match the keys' type", Code.E_OP_UNSUPPORTED)
        if x.dtype != object:
            x = x.astype(self.key_dtype)
        return (map_values(x, self.table, self.default, self.value_dtype),)


class LabelEncoder_4(LabelEncoder_2):
    attributes = {**LabelEncoder_2.attributes, "keys_tensor": None, "values_tensor": None, "default_tensor": None}

    def _typed(self, what: str):
        tensor = getattr(self, f"{what}_tensor")
        if tensor is None:
            return super()._typed(what)
        if any(getattr(self, f"{what}_{t}") is not None for t in _TYPED):
            self.refuse(f"{what}_tensor and a {what}_* list are both set")
        tensor = np.asarray(tensor).reshape(-1)
        return tensor.tolist(), tensor.dtype if tensor.dtype != object else np.dtype(object)

    def _default(self):
        if self.default_tensor is None:
            return super()._default()
        return np.asarray(self.default_tensor).reshape(-1)[0]

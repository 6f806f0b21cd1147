"""ai.onnx.ml Imputer: elements equal to the replaced value (NaN when that is NaN) become the
imputed value (one for all columns, or one per column)."""
import numpy as np

from rtd.errors import Code

from ._ml import MlKernel


class Imputer_1(MlKernel):
    attributes = {"imputed_value_floats": None, "imputed_value_int64s": None, "replaced_value_float": 0.0,
                  "replaced_value_int64": 0}

    def setup(self):
        self.imputed = np.asarray(self.one_of("imputed_value_floats", "imputed_value_int64s"))

    def compute(self, x):
        if (x.dtype.kind == "f") != (self.imputed_value_floats is not None):
            self.refuse(f"input dtype {x.dtype} does not match the imputed values' type", Code.E_OP_UNSUPPORTED)
        if self.imputed.size not in (1, x.shape[-1]):
            self.refuse(f"{self.imputed.size} imputed values for {x.shape[-1]} columns", Code.E_INPUT_INVALID)
        if x.dtype.kind == "f":
            replaced = self.replaced_value_float
            hit = np.isnan(x) if np.isnan(replaced) else x == replaced
        else:
            hit = x == self.replaced_value_int64
        return (np.where(hit, self.imputed.astype(x.dtype), x),)

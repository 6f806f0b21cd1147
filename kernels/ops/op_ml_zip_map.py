"""ai.onnx.ml ZipMap, served as the probability tensor [N, classes] it wraps.

ONNX's result is a sequence of {label: probability} maps, which cannot travel over KServe v2;
rtd returns the float32 scores unchanged (column i is class label i) and declares the output
as that tensor (`kernels/model.py`); `rtctl pack` records the labels in the package metadata.
"""
import numpy as np

from rtd.errors import Code

from ._ml import MlKernel


class ZipMap_1(MlKernel):
    attributes = {"classlabels_int64s": None, "classlabels_strings": None}

    def setup(self):
        self.labels = self.one_of("classlabels_int64s", "classlabels_strings")

    def compute(self, x):
        if x.ndim != 2 or x.shape[1] != len(self.labels) or x.dtype != np.float32:
            self.refuse(f"expected float32 [N, {len(self.labels)}], got {x.dtype} {list(x.shape)}", Code.E_INPUT_INVALID)
        return (x,)

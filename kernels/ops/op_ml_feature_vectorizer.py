"""ai.onnx.ml FeatureVectorizer: the inputs' columns side by side as float32 [N, sum(inputdimensions)];
each input is cut or zero-padded to its declared width (a 1-D input is one column per sample)."""
import numpy as np

from rtd.errors import Code

from ._ml import MlKernel


class FeatureVectorizer_1(MlKernel):
    attributes = {"inputdimensions": None}

    def setup(self):
        if not self.inputdimensions or min(self.inputdimensions) < 0:
            self.refuse("inputdimensions must list one width (>= 0) per input")

    def compute(self, *inputs):
        if len(inputs) != len(self.inputdimensions):
            self.refuse(f"{len(inputs)} inputs for {len(self.inputdimensions)} inputdimensions", Code.E_MODEL_INVALID)
        columns = []
        for x, width in zip(inputs, self.inputdimensions):
            x = x.reshape(-1, 1) if x.ndim == 1 else x.reshape(x.shape[0], -1)
            block = np.zeros((x.shape[0], width), np.float32)
            block[:, :min(width, x.shape[1])] = x[:, :width]
            columns.append(block)
        if len({c.shape[0] for c in columns}) > 1:
            self.refuse(f"inputs have {[c.shape[0] for c in columns]} rows", Code.E_INPUT_INVALID)
        return (np.hstack(columns),)

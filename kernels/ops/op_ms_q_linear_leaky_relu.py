"""com.microsoft QLinearLeakyRelu: 8-bit x if x >= 0 else alpha * x, through a 256-entry table."""
import numbers

import numpy as np

from rtd.errors import Code, RtdError

from ._contrib import QLinearLookup


class QLinearLeakyRelu_1(QLinearLookup):
    attributes = {"alpha": 0.01}

    def setup(self):
        super().setup()
        if not isinstance(self.alpha, numbers.Real) or isinstance(self.alpha, bool) or not np.isfinite(self.alpha):
            raise RtdError(Code.E_MODEL_INVALID, f"QLinearLeakyRelu: attribute alpha={self.alpha!r} is not a finite float")
        self.alpha = np.float32(self.alpha)

    def transform(self, x):
        return np.where(x >= 0, x, x * self.alpha)

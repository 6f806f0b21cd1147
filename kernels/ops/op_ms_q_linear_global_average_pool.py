"""com.microsoft QLinearGlobalAveragePool: the 8-bit mean of each image (NCHW, or NHWC with channels_last)."""
from rtd.errors import Code, RtdError

from ._contrib import QLinearKernel, global_average_8bit
from ._quant import eight_bit


class QLinearGlobalAveragePool_1(QLinearKernel):
    attributes = {"channels_last": 0}

    def setup(self):
        if self.channels_last not in (0, 1):
            raise RtdError(Code.E_MODEL_INVALID, f"QLinearGlobalAveragePool: attribute channels_last={self.channels_last!r} is not 0 or 1")

    def run(self, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        dtype = eight_bit(self.op_type, x)
        if x.ndim < 3:
            raise RtdError(Code.E_INPUT_INVALID, f"QLinearGlobalAveragePool: input of rank {x.ndim}, at least 3 needed")
        params = self.params(dtype, x_scale, x_zero_point, y_scale, y_zero_point)
        return (global_average_8bit(self.xp, x, params, dtype, self.channels_last),)

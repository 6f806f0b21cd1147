"""ConvInteger: convolution of (x - x_zero_point) with (w - w_zero_point), exact int32 result."""
import numpy as np

from ._conv import IntegerConv
from .base import Kernel


class ConvInteger_10(IntegerConv, Kernel):
    attributes = IntegerConv.CONV_ATTRIBUTES

    def run(self, x, w, x_zero_point=None, w_zero_point=None):
        return (self.accumulate(x, x_zero_point, w, w_zero_point).astype(np.int32),)

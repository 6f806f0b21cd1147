"""The shared bases of Softmax, LogSoftmax and Hardmax: which axis they normalize along.

Before opset 13 the input is coerced to 2-D at `axis` ([prod(shape[:axis]), prod(shape[axis:])])
and normalized along that second dimension; from 13 on it is normalized along `axis` alone.
An op file defines `along(x, axis)` once on its `AlongAxis` class and derives the old version:
`class Softmax_13(AlongAxis)` and `class Softmax_1(Coerced2D, Softmax_13)`.
"""
import math

from ._axes import normalize_axis
from .base import Kernel


class AlongAxis(Kernel):
    attributes = {"axis": -1}

    def run(self, x):
        return (self.along(x, normalize_axis(self.axis, x.ndim, self.op_type)),)

    def along(self, x, axis):
        raise NotImplementedError


class Coerced2D(Kernel):
    attributes = {"axis": 1}

    def run(self, x):
        axis = normalize_axis(self.axis, x.ndim, self.op_type)
        rows = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
        return (self.along(rows, 1).reshape(x.shape),)

"""com.microsoft MatMulIntegerToFloat: (A - a_zp) @ (B - b_zp) * a_scale * b_scale + bias, in float."""
from ._contrib import MsKernel, integer_matmul_to_float


class MatMulIntegerToFloat_1(MsKernel):
    def run(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        return (integer_matmul_to_float(self.xp, a, a_zero_point, b, b_zero_point, a_scale * b_scale, bias),)

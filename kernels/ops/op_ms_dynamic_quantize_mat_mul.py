"""com.microsoft DynamicQuantizeMatMul: A quantized to uint8 on the fly, times quantized B, back to float."""
from ._contrib import MsKernel, dynamic_uint8, integer_matmul_to_float


class DynamicQuantizeMatMul_1(MsKernel):
    def run(self, a, b, b_scale, b_zero_point=None, bias=None):
        qa, a_scale, a_zero_point = dynamic_uint8(self.xp, a)
        return (integer_matmul_to_float(self.xp, qa, a_zero_point, b, b_zero_point, a_scale * b_scale, bias),)

"""com.microsoft Gelu: the exact (erf) GELU, as onnxruntime's fusion emits it."""
from ._contrib import MsKernel, gelu


class Gelu_1(MsKernel):
    def setup(self):
        self.gelu = gelu("none", self.xp)

    def run(self, x):
        return (self.gelu.compute(x),)

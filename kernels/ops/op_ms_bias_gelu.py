"""com.microsoft BiasGelu: GELU(a + bias), the bias added in place before the activation."""
from ._contrib import MsKernel, gelu


class BiasGelu_1(MsKernel):
    def setup(self):
        self.gelu = gelu("none", self.xp)

    def run(self, a, bias):
        s = a + bias
        return (self.gelu.compute(s, out=s),)

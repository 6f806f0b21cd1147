"""com.microsoft FastGelu: the tanh approximation of GELU, with an optional bias."""
from ._contrib import MsKernel, gelu


class FastGelu_1(MsKernel):
    def setup(self):
        self.gelu = gelu("tanh", self.xp)

    def run(self, x, bias=None):
        if bias is None:
            return (self.gelu.compute(x),)
        s = x + bias
        return (self.gelu.compute(s, out=s),)

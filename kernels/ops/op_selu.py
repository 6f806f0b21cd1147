"""Selu: gamma * x where x > 0, gamma * alpha * (exp(x) - 1) elsewhere — gamma times Elu."""
from .op_elu import Elu_6


class Selu_6(Elu_6):
    attributes = {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}

    @property
    def cuda(self):
        return f"{self.gamma!r} * ({super().cuda})"

    def compute(self, x, out=None):
        result = super().compute(x, out=out)
        result *= self.gamma
        return result

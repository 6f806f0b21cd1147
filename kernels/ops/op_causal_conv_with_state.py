"""CausalConvWithState: a depthwise causal 1-D convolution over (batch, channels, length) with a
carried state: the last k - 1 positions of past_state (zeros by default) followed by the input
are convolved with each channel's k taps (+ bias), optionally through SiLU; present_state is the
last k - 1 positions of that padded sequence. One multiply-add per tap over the whole tensor,
accumulated in float32 for half-precision inputs."""
import numpy as np

from rtd.errors import Code, RtdError

from .base import Kernel


class CausalConvWithState_27(Kernel):
    attributes = {"activation": "none"}

    def setup(self):
        if self.activation not in ("none", "silu", "swish"):
            raise RtdError(Code.E_MODEL_INVALID, f"CausalConvWithState: activation {self.activation!r} is not none, silu or swish")

    def run(self, x, weight, bias=None, past_state=None):
        xp = self.xp
        if x.ndim != 3 or weight.ndim != 3 or weight.shape[:2] != (x.shape[1], 1) or weight.shape[2] < 1 \
                or (bias is not None and bias.shape != (x.shape[1],)) \
                or (past_state is not None and past_state.shape != (x.shape[0], x.shape[1], weight.shape[2] - 1)):
            raise RtdError(Code.E_INPUT_INVALID, f"CausalConvWithState: input {list(x.shape)}, weight {list(weight.shape)}, "
                                                 f"bias {None if bias is None else list(bias.shape)}, "
                                                 f"past_state {None if past_state is None else list(past_state.shape)}")
        batch, channels, length = x.shape
        taps = weight.shape[2]
        if past_state is None:
            past_state = xp.zeros((batch, channels, taps - 1), x.dtype)
        padded = xp.concatenate([past_state.astype(x.dtype, copy=False), x], axis=2)
        work = np.float32 if x.dtype.itemsize < 4 else x.dtype
        w = weight[:, 0, :].astype(work)
        y = padded[:, :, :length].astype(work) * w[:, 0:1]
        for j in range(1, taps):
            y += padded[:, :, j:j + length] * w[:, j:j + 1]
        if bias is not None:
            y += bias.astype(work)[:, None]
        if self.activation != "none":
            with np.errstate(over="ignore"):
                y = y / (1 + xp.exp(-y))
        return y.astype(x.dtype, copy=False), padded[:, :, padded.shape[2] - (taps - 1):]

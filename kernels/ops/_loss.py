"""The shared computation of the loss ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss):
-input[n, target[n, d...], d...] weighted by weight[target], then reduced.

Targets equal to `ignore_index` weigh 0 and take any class; any other target outside [0, C) is
a bad input. "mean" divides by the summed weights of the targets counted (their number without
a weight), so a batch whose targets are all ignored has a NaN mean, as in onnx.reference.
"""
import numpy as np

from rtd.errors import Code, RtdError

from .base import Kernel

REDUCTIONS = ("none", "sum", "mean")


class Loss(Kernel):
    attributes = {"ignore_index": None, "reduction": "mean"}

    def setup(self):
        if self.reduction not in REDUCTIONS:
            raise RtdError(Code.E_MODEL_INVALID, f"{self.op_type}: reduction {self.reduction!r} is not one of {list(REDUCTIONS)}")

    def loss(self, log_probs, target, weight):
        xp = self.xp
        if log_probs.ndim < 2 or target.shape != log_probs.shape[:1] + log_probs.shape[2:] or target.dtype.kind not in "iu" \
                or (weight is not None and weight.shape != log_probs.shape[1:2]):
            raise RtdError(Code.E_INPUT_INVALID, f"{self.op_type}: input {list(log_probs.shape)}, target {target.dtype}"
                                                 f"{list(target.shape)}, weight {None if weight is None else list(weight.shape)}")
        classes = log_probs.shape[1]
        counted = xp.ones(target.shape, bool) if self.ignore_index is None else target != self.ignore_index
        index = xp.where(counted, target, 0).astype(xp.int64)
        if index.size and (int(index.min()) < 0 or int(index.max()) >= classes):
            raise RtdError(Code.E_INPUT_INVALID, f"{self.op_type}: a target is outside [0, {classes})")
        picked = xp.take_along_axis(log_probs, index[:, None], axis=1)[:, 0]
        weights = (xp.ones(target.shape, log_probs.dtype) if weight is None else weight[index]) * counted
        loss = -picked * weights
        if self.reduction == "sum":
            loss = loss.sum()
        elif self.reduction == "mean":
            with np.errstate(invalid="ignore", divide="ignore"):
                loss = loss.sum() / weights.sum()
        return xp.asarray(loss).astype(log_probs.dtype, copy=False)

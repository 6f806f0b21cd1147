"""SoftmaxCrossEntropyLoss: NegativeLogLikelihoodLoss of LogSoftmax(scores) over the class axis
1, and (second output) those log-probabilities."""
from ._loss import Loss
from .op_log_softmax import LogSoftmax_13


class SoftmaxCrossEntropyLoss_12(Loss):
    def setup(self):
        super().setup()
        self.log_softmax = LogSoftmax_13({"axis": 1}, self.xp)

    def run(self, scores, labels, weights=None):
        log_probs = self.log_softmax.run(scores)[0] if scores.ndim >= 2 else scores
        loss = self.loss(log_probs, labels, weights)
        return (loss, log_probs) if self.n_outputs == 2 else (loss,)

"""SequenceMap: apply `body` to the i-th element of each sequence input (tensors passed whole)."""
from .base import REQUIRED, Kernel


class SequenceMap_17(Kernel):
    attributes = {"body": REQUIRED}
    needs_scope = True

    def run(self, sequence, *additional, scope=None):
        body = self.body
        inputs = (sequence, *additional)
        outputs = [[] for _ in body.output_names]
        for i in range(len(sequence)):
            feeds = {name: (x[i] if isinstance(x, list) else x) for name, x in zip(body.input_names, inputs)}
            for acc, value in zip(outputs, body(feeds, scope)):
                acc.append(value)
        return tuple(outputs)

"""ai.onnx.ml LinearClassifier: scores = X @ coefficients^T + intercepts, a post transform, and
the label of the best score. A single score column s follows onnxruntime: the label is the
second class when s > 0, and with two class labels the scores are [1 - p, p], p being s through
the LOGISTIC or PROBIT transform (any other transform leaves s as it is)."""
import numpy as np

from rtd.errors import Code

from ._ml import POST_TRANSFORMS, MlKernel, labels_array, post_transform


class LinearClassifier_1(MlKernel):
    attributes = {"coefficients": None, "intercepts": None, "classlabels_ints": None, "classlabels_strings": None,
                  "multi_class": 0, "post_transform": "NONE"}

    def setup(self):
        self.choice("post_transform", POST_TRANSFORMS)
        self.labels = labels_array(self.one_of("classlabels_ints", "classlabels_strings"))
        if not self.coefficients:
            self.refuse("coefficients missing")
        self.coef = np.asarray(self.coefficients, np.float32)
        self.bias = np.asarray(self.intercepts or [], np.float32)
        if self.bias.size and self.coef.size % self.bias.size:
            self.refuse(f"{self.coef.size} coefficients for {self.bias.size} intercepts")
        if self.bias.size > 1 and self.bias.size != len(self.labels):
            self.refuse(f"{self.bias.size} score rows for {len(self.labels)} class labels")

    def compute(self, x):
        x = self.features(x)
        if self.coef.size % max(x.shape[1], 1) or (self.bias.size and self.coef.size != self.bias.size * x.shape[1]):
            self.refuse(f"{self.coef.size} coefficients do not fit {x.shape[1]} features", Code.E_INPUT_INVALID)
        scores = x @ self.coef.reshape(-1, x.shape[1]).T
        if self.bias.size:
            scores += self.bias
        if scores.shape[1] == 1:
            positive = (scores[:, 0] > 0).astype(np.int64)
            if len(self.labels) != 2:  # onnxruntime labels 0/1, as text for string labels
                names = np.array(["0", "1"], object) if self.labels.dtype == object else np.array([0, 1], np.int64)
                return names[positive], post_transform(scores, self.post_transform)
            p = post_transform(scores, self.post_transform) if self.post_transform in ("LOGISTIC", "PROBIT") else scores
            return self.labels[positive], np.hstack([1 - p, p]).astype(np.float32)
        return self.labels[np.argmax(scores, axis=1)], post_transform(scores, self.post_transform)

"""ai.onnx.ml SVMClassifier: one-vs-one decision values over support vectors (or a linear model
when vectors_per_class is absent), votes for the label, and with prob_a/prob_b libsvm's Platt
probabilities coupled across class pairs (multiclass_probability, iterated for all samples at
once). Labels and score columns follow onnxruntime, which sklearn-onnx's SVC converter targets."""
import numpy as np

from ._ml import POST_TRANSFORMS, MlKernel, binary_scores, labels_array, post_transform
from ._svm import SvmKernel


def coupled_probabilities(r: np.ndarray) -> np.ndarray:
    """libsvm's multiclass_probability: pairwise r [N, k, k] (r[i, j] = P(i | i or j)) → p [N, k]."""
    n, k = r.shape[:2]
    q = np.einsum("nit,nit->nt", r, r) - np.square(r[:, np.arange(k), np.arange(k)])
    q = np.einsum("nt,tj->ntj", q, np.eye(k)) - np.where(np.eye(k, dtype=bool), 0, r.transpose(0, 2, 1) * r)
    p = np.full((n, k), 1.0 / k)
    active = np.ones(n, bool)
    for _ in range(max(100, k)):
        qp = np.einsum("ntj,nj->nt", q, p)
        pqp = (p * qp).sum(axis=1)
        active &= np.abs(qp - pqp[:, None]).max(axis=1) >= 0.005 / k
        if not active.any():
            break
        for t in range(k):
            diff = np.where(active, (pqp - qp[:, t]) / q[:, t, t], 0.0)
            p[:, t] += diff
            pqp = (pqp + diff * (diff * q[:, t, t] + 2 * qp[:, t])) / np.square(1 + diff)
            qp = (qp + diff[:, None] * q[:, t, :]) / (1 + diff[:, None])
            p /= (1 + diff[:, None])
    return p


class SVMClassifier_1(MlKernel):
    attributes = {"classlabels_ints": None, "classlabels_strings": None, "coefficients": None, "kernel_params": None,
                  "kernel_type": "LINEAR", "post_transform": "NONE", "prob_a": None, "prob_b": None, "rho": None,
                  "support_vectors": None, "vectors_per_class": None}

    def setup(self):
        self.choice("post_transform", POST_TRANSFORMS)
        self.labels = labels_array(self.one_of("classlabels_ints", "classlabels_strings"))
        k = len(self.labels)
        self.coef = np.asarray(self.coefficients or [], np.float64)
        self.rho_ = np.asarray(self.rho or [], np.float64)
        self.all_positive = bool(self.coef.size) and self.coef.min() >= 0
        n_vectors = sum(self.vectors_per_class or [])
        self.svc = n_vectors > 0
        pairs = k * (k - 1) // 2
        if self.svc:
            if len(self.vectors_per_class) != k or min(self.vectors_per_class) < 0:
                self.refuse(f"vectors_per_class must give one count per class ({k})")
            self.kernel = SvmKernel(self.op_type, self.kernel_type, self.kernel_params, self.support_vectors, n_vectors)
            if self.coef.size != (k - 1) * n_vectors or self.rho_.size != pairs:
                self.refuse(f"{self.coef.size} coefficients and {self.rho_.size} rho for {k} classes, {n_vectors} vectors")
            self.starts = np.concatenate([[0], np.cumsum(self.vectors_per_class)])
            self.coef = self.coef.reshape(k - 1, n_vectors)
        elif not self.coef.size or self.coef.size % k or not self.rho_.size:
            self.refuse(f"{self.coef.size} coefficients and {self.rho_.size} rho for a linear {k}-class model")
        self.proba = self.svc and bool(self.prob_a)
        if self.proba and (len(self.prob_a) != pairs or len(self.prob_b or []) != pairs):
            self.refuse(f"prob_a and prob_b need {pairs} values each")

    def _pairwise(self, x):
        """Decision values [N, pairs] and votes [N, k] of every one-vs-one pair."""
        kx, k = self.kernel(x), len(self.labels)
        span = [slice(self.starts[i], self.starts[i + 1]) for i in range(k)]
        scores, votes = [], np.zeros((x.shape[0], k))
        for i in range(k):
            for j in range(i + 1, k):
                s = (self.rho_[len(scores)] + kx[:, span[i]] @ self.coef[j - 1, span[i]]
                     + kx[:, span[j]] @ self.coef[i, span[j]])
                votes[:, i] += s > 0
                votes[:, j] += s <= 0
                scores.append(s)
        return np.stack(scores, axis=1), votes

    def _probabilities(self, scores):
        k = len(self.labels)
        p = 1.0 / (1.0 + np.exp(scores * np.asarray(self.prob_a) + np.asarray(self.prob_b)))
        p = np.clip(p, 1e-7, 1 - 1e-7)
        r = np.zeros((scores.shape[0], k, k))
        i, j = np.triu_indices(k, 1)
        r[:, i, j], r[:, j, i] = p, 1 - p
        return coupled_probabilities(r)

    def compute(self, x):
        x = self.features(x)
        if self.svc:
            scores, votes = self._pairwise(x)
            if self.proba:
                scores = self._probabilities(scores)
            best = np.argmax(votes, axis=1)
        else:
            if self.coef.size != len(self.labels) * x.shape[1]:
                self.refuse(f"{self.coef.size} coefficients for {x.shape[1]} features")
            scores = x.astype(np.float64) @ self.coef.reshape(len(self.labels), -1).T + self.rho_[0]
            best = np.argmax(scores, axis=1)
            top = scores[np.arange(len(best)), best]
        if not self.svc and len(self.labels) == 2 and not self.prob_a:
            # onnxruntime's binary rule for a linear model: the second label once the top score passes
            # 0.5 (all coefficients >= 0) or 0 (otherwise). A support-vector model's label is its
            # vote's: there the rule's weight stays 0.
            best = np.where(top >= 0.5 if self.all_positive else top > 0, 1, best)
        label = self.labels[best]
        if scores.shape[1] == 1 and len(self.labels) == 2:
            return label, binary_scores(scores[:, 0], self.post_transform, mixed=True)
        return label, post_transform(scores.astype(np.float32), self.post_transform)

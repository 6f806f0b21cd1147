"""NonMaxSuppression: greedy per (batch, class) box selection by score, dropping boxes whose IoU with
a kept box exceeds the threshold; output rows are [batch, class, box] in selection order."""
import numpy as np

from .base import Kernel


def _corners(boxes, center_point_box):
    """(y1, x1, y2, x2) with min/max ordered, from either ONNX box format."""
    if center_point_box:
        xc, yc, w, h = boxes.T
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = boxes.T
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


class NonMaxSuppression_10(Kernel):
    on_device = False   # a loop over boxes on the host
    attributes = {"center_point_box": 0}

    def scalar(self, value, default, kind):
        """An optional one-element input as a Python number (absent or empty: the default)."""
        return default if value is None or value.size == 0 else kind(self.host(value).reshape(-1)[0])

    def run(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None):
        boxes, scores = self.host(boxes), self.host(scores)
        limit = self.scalar(max_output_boxes_per_class, 0, int)
        iou_limit = self.scalar(iou_threshold, 0.0, float)
        floor = self.scalar(score_threshold, None, float)
        selected = []
        for b in range(boxes.shape[0]):
            y1, x1, y2, x2 = _corners(boxes[b].astype(np.float64), self.center_point_box)
            area = (y2 - y1) * (x2 - x1)
            for c in range(scores.shape[1]):
                s = scores[b, c]
                order = np.argsort(-s, kind="stable")
                if floor is not None:
                    order = order[s[order] > floor]
                kept = 0
                while order.size and kept < limit:
                    i, rest = order[0], order[1:]
                    selected.append((b, c, i))
                    kept += 1
                    ih = np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest])
                    iw = np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest])
                    inter = np.where((ih > 0) & (iw > 0), ih * iw, 0.0)
                    union = area[i] + area[rest] - inter
                    iou = np.where((inter > 0) & (union > 0), inter / np.where(union > 0, union, 1), 0.0)
                    order = rest[iou <= iou_limit]
        return (self.xp.asarray(np.array(selected, np.int64).reshape(-1, 3)),)

"""The scikit-learn zoo: small models trained on fixed synthetic data and exported by
sklearn-onnx (and LightGBM's by onnxmltools) with their defaults (every classifier ends in a
ZipMap), plus their input feeds.

Exports are cached like the PyTorch zoo's (`cache.cached_model`), keyed by this file's source
and the library versions. No pickle anywhere: models are retrained from their seeds.
"""
import dataclasses
import inspect
import warnings
from collections.abc import Callable

import lightgbm
import numpy as np
import onnx
import onnxmltools
import onnxruntime
import pandas as pd
import sklearn
import skl2onnx
from onnxmltools.convert.common.data_types import FloatTensorType as MlFloatTensorType
from skl2onnx import convert_sklearn, to_onnx
from skl2onnx.common.data_types import FloatTensorType, StringTensorType
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier, RandomForestRegressor
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.svm import SVC, SVR

from .cache import cached_model

OPSETS = {"": 17, "ai.onnx.ml": 3}
FEATURES = 7
COLORS = np.array(["red", "green", "blue", "ochre"], dtype=object)


@dataclasses.dataclass(frozen=True)
class SklearnModel:
    name: str
    builder: Callable[[], bytes]
    feeds: Callable[[np.random.Generator, int], dict]

    def path(self) -> str:
        key = [inspect.getsource(inspect.getmodule(SklearnModel)), sklearn.__version__, skl2onnx.__version__,
               onnx.__version__, onnxruntime.__version__, lightgbm.__version__, onnxmltools.__version__]
        return cached_model(f"sk_{self.name}", self.builder, key)


def _data(classes: int | None, n: int = 300):
    """Fixed training data: features [n, FEATURES], and class ids (or a regression target)."""
    rng = np.random.default_rng(classes or 0)
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    score = x[:, 0] * 1.5 - x[:, 1] + 0.5 * x[:, 2] * x[:, 3]
    if classes is None:
        return x, score + 0.1 * rng.standard_normal(n)
    return x, np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))


def _export(model, x) -> bytes:
    return to_onnx(model, x[:1], target_opset=OPSETS).SerializeToString()


def build_logistic() -> bytes:
    x, y = _data(3)
    return _export(LogisticRegression(max_iter=500).fit(x, y), x)


def build_forest_classifier() -> bytes:
    x, y = _data(4)
    return _export(RandomForestClassifier(n_estimators=12, max_depth=6, random_state=0).fit(x, y), x)


def build_forest_regressor() -> bytes:
    x, y = _data(None)
    return _export(RandomForestRegressor(n_estimators=12, max_depth=6, random_state=0).fit(x, y), x)


def build_gradient_boosting() -> bytes:
    x, y = _data(2)
    return _export(GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0).fit(x, y), x)


def build_gradient_boosting_multiclass() -> bytes:
    x, y = _data(3)
    return _export(GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0).fit(x, y), x)


def build_svc() -> bytes:
    x, y = _data(3)
    with warnings.catch_warnings():  # scikit-learn 1.9 deprecates probability=True; the exported op is the same
        warnings.simplefilter("ignore", FutureWarning)
        return _export(SVC(probability=True, random_state=0).fit(x, y), x)


def build_svr() -> bytes:
    x, y = _data(None)
    return _export(SVR(C=3.0).fit(x, y), x)


def build_pipeline() -> bytes:
    """StandardScaler on the numbers, OneHotEncoder on a string column, string class labels."""
    x, y = _data(3)
    rng = np.random.default_rng(5)
    color = rng.choice(COLORS, size=len(x))
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(FEATURES)]).assign(color=color)
    labels = np.array(["low", "mid", "high"], dtype=object)[y]
    pipe = Pipeline([("prep", ColumnTransformer([("num", StandardScaler(), [f"f{i}" for i in range(FEATURES)]),
                                                 ("cat", OneHotEncoder(handle_unknown="ignore"), ["color"])])),
                     ("clf", LogisticRegression(max_iter=500))]).fit(frame, labels)
    inputs = [(f"f{i}", FloatTensorType([None, 1])) for i in range(FEATURES)] + [("color", StringTensorType([None, 1]))]
    return convert_sklearn(pipe, initial_types=inputs, target_opset=OPSETS).SerializeToString()


def _with_missing(x: np.ndarray, seed: int) -> np.ndarray:
    x = x.copy()
    x[np.random.default_rng(seed).random(x.shape) < 0.08] = np.nan
    return x


def _export_lightgbm(model, opset: int = 15) -> bytes:
    """onnxmltools supports opsets up to 15 for LightGBM."""
    return onnxmltools.convert_lightgbm(model, initial_types=[("X", MlFloatTensorType([None, FEATURES]))],
                                        target_opset=opset).SerializeToString()


def build_lightgbm_regressor() -> bytes:
    x, y = _data(None)
    return _export_lightgbm(lightgbm.LGBMRegressor(n_estimators=25, num_leaves=15, verbose=-1).fit(_with_missing(x, 1), y))


def build_lightgbm_classifier() -> bytes:
    x, y = _data(3)
    return _export_lightgbm(lightgbm.LGBMClassifier(n_estimators=15, num_leaves=7, verbose=-1).fit(_with_missing(x, 2), y))


def matrix_feeds(rng: np.random.Generator, batch: int) -> dict:
    return {"X": rng.standard_normal((batch, FEATURES)).astype(np.float32) * 1.5}


def missing_feeds(rng: np.random.Generator, batch: int) -> dict:
    """Features with NaNs, which tree ensembles send down their missing-value branches."""
    return {"X": _with_missing(matrix_feeds(rng, batch)["X"], int(rng.integers(1 << 30)))}


def pipeline_feeds(rng: np.random.Generator, batch: int) -> dict:
    """Numbers per column and a color column, including a color the encoder never saw."""
    x = rng.standard_normal((batch, FEATURES)).astype(np.float32)
    feeds = {f"f{i}": x[:, i:i + 1] for i in range(FEATURES)}
    feeds["color"] = rng.choice(np.append(COLORS, "mauve"), size=(batch, 1)).astype(object)
    return feeds


SKLEARN_ZOO: dict[str, SklearnModel] = {m.name: m for m in [
    SklearnModel("logistic", build_logistic, matrix_feeds),
    SklearnModel("forest_classifier", build_forest_classifier, matrix_feeds),
    SklearnModel("forest_regressor", build_forest_regressor, matrix_feeds),
    SklearnModel("gradient_boosting", build_gradient_boosting, matrix_feeds),
    SklearnModel("gradient_boosting_multiclass", build_gradient_boosting_multiclass, matrix_feeds),
    SklearnModel("svc", build_svc, matrix_feeds),
    SklearnModel("svr", build_svr, matrix_feeds),
    SklearnModel("pipeline", build_pipeline, pipeline_feeds),
    SklearnModel("lightgbm_regressor", build_lightgbm_regressor, missing_feeds),
    SklearnModel("lightgbm_classifier", build_lightgbm_classifier, missing_feeds),
]}


def zipmap_as_tensor(value, labels) -> np.ndarray:
    """onnxruntime's ZipMap result (a list of {label: probability}) as the [N, classes] tensor rtd serves."""
    return np.array([[row[label] for label in labels] for row in value], np.float32).reshape(len(value), len(labels))


def zipmap_labels(model: onnx.ModelProto, output: str) -> list | None:
    """The class labels of the ZipMap that produces `output`, None when no ZipMap does."""
    for node in model.graph.node:
        if node.op_type == "ZipMap" and output in node.output:
            attr = next(a for a in node.attribute if a.name.startswith("classlabels"))
            return [s.decode() for s in attr.strings] if attr.strings else list(attr.ints)
    return None

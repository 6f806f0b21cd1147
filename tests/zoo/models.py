"""The model zoo: ONNX models exported from the plain-PyTorch nets in `nets.py`, plus their inputs.

Each `ZooModel` names a builder (→ ONNX bytes), a feed maker (fresh random inputs for given
dims) and the dims to run at; more than one dims entry means the export has symbolic axes and
the same compiled model must serve each. Exports are cached by `cache.cached_model`.
Exporters and opsets are spread on purpose: TorchScript (`dynamo=False`, opsets 11–17) and
dynamo (opsets 18–20) emit different graphs for the same net.
"""
import dataclasses
import inspect
import io
import os
import tempfile
import warnings
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime
import torch
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

from . import nets
from .cache import cached_model
from .compare import DEEP_QUANTIZED_TOLERANCE, FLOAT_TOLERANCE, QOPERATOR_TOLERANCE, QUANTIZED_TOLERANCE


@dataclasses.dataclass(frozen=True)
class ZooModel:
    name: str
    builder: Callable[[], bytes]
    feeds: Callable[[np.random.Generator, dict], dict]
    dims: tuple[dict, ...]  # run at each; the first is the nominal (benchmark) size
    big: bool = False  # the bulk of the test file's time on 2 cores: marked slow
    tolerance: float = FLOAT_TOLERANCE  # scaled error allowed against onnxruntime (compare.py says why)
    depends: tuple[str, ...] = ()  # zoo models this one's builder derives from (part of its cache key)
    huge: bool = False  # minutes to build: only on request (bench/executor.py --models NAME; RTD_ZOO_HUGE=1 in tests)
    stepwise: bool = False  # dynamically quantized: the test checks it a quantization at a time (compare.py says why)

    def path(self) -> str:
        """The cached .onnx file, exported on first use; keyed by everything the export depends on."""
        key = [inspect.getsource(self.builder), inspect.getsource(nets), inspect.getsource(export),
               torch.__version__, onnx.__version__, onnxruntime.__version__]
        return cached_model(self.name, self.builder, key + [ZOO[d].path() for d in self.depends])


def export(module: torch.nn.Module, args: tuple, *, opset: int, inputs: list[str], outputs: list[str],
           dynamic: dict | None = None, dynamo: bool = False, keep_batchnorm: bool = False) -> bytes:
    """ONNX bytes of `module(*args)` from the TorchScript (`dynamo=False`) or the dynamo exporter.

    Both exporters fold BatchNorm into Conv for an eval() module; `keep_batchnorm` (TorchScript
    only) keeps BatchNormalization nodes so the executor's own folding is exercised.
    """
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(module, args, dynamo=True, opset_version=opset, input_names=inputs,
                                        output_names=outputs, dynamic_axes=dynamic, verbose=False)
            return program.model_proto.SerializeToString()
        buf = io.BytesIO()
        torch.onnx.export(module, args, buf, dynamo=False, opset_version=opset, input_names=inputs,
                          output_names=outputs, dynamic_axes=dynamic, do_constant_folding=True,
                          training=torch.onnx.TrainingMode.PRESERVE if keep_batchnorm else torch.onnx.TrainingMode.EVAL)
        return buf.getvalue()


# ---- feeds ----

def image_feeds(rng: np.random.Generator, dims: dict) -> dict:
    shape = (dims["batch"], 3, dims.get("height", 224), dims.get("width", 224))
    return {"image": rng.standard_normal(shape, dtype=np.float32)}


def token_feeds(rng: np.random.Generator, dims: dict, vocab: int = 30522) -> dict:
    """Random ids and a padding mask: each row keeps a random-length prefix (at least one token)."""
    batch, seq = dims["batch"], dims["seq"]
    lengths = rng.integers(1, seq + 1, size=batch)
    return {"input_ids": rng.integers(0, vocab, size=(batch, seq), dtype=np.int64),
            "attention_mask": (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)}


def vector_feeds(rng: np.random.Generator, dims: dict) -> dict:
    return {"x": rng.standard_normal((dims["batch"], 1024), dtype=np.float32)}


def tag_feeds(rng: np.random.Generator, dims: dict) -> dict:
    return {"tokens": rng.integers(0, 5000, size=(dims["batch"], dims["seq"]), dtype=np.int64)}


def branch_feeds(rng: np.random.Generator, dims: dict) -> dict:
    # the sign of the sum picks the branch: the random offset makes both likely across runs
    return {"x": rng.standard_normal((dims["batch"], 16), dtype=np.float32) + np.float32(rng.normal(0, 0.5))}


def control_flow_feeds(rng: np.random.Generator, dims: dict) -> dict:
    # the sign of the sum picks the If branch: the random scale makes both branches likely
    x = rng.standard_normal((dims["batch"], 16), dtype=np.float32) + np.float32(rng.normal(0, 2))
    return {"x": x, "steps": np.array(dims["steps"], dtype=np.int64)}


def small_image_feeds(rng: np.random.Generator, dims: dict) -> dict:
    return {"image": rng.standard_normal((dims["batch"], 3, 32, 32), dtype=np.float32)}


TABULAR_FEATURES = 40


def tabular_feeds(rng: np.random.Generator, dims: dict) -> dict:
    x = rng.standard_normal((dims["batch"], TABULAR_FEATURES), dtype=np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan   # missing values take each split's default side
    return {"X": x}


def _tabular(classes: int, n: int = 8000):
    """Fixed training rows for the tree ensembles: features [n, TABULAR_FEATURES] and class ids."""
    rng = np.random.default_rng(classes)
    x = rng.standard_normal((n, TABULAR_FEATURES)).astype(np.float32)
    score = x[:, 0] * 1.5 - x[:, 1] + 0.5 * x[:, 2] * x[:, 3] + np.sin(3 * x[:, 4]) + 0.3 * rng.standard_normal(n)
    x[rng.random(x.shape) < 0.05] = np.nan
    return x, np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))


def _export_trees(convert, model, **options) -> bytes:
    """onnxmltools' converter (LightGBM or XGBoost) at opset 15, ai.onnx.ml 3: TreeEnsembleClassifier."""
    from onnxmltools.convert.common.data_types import FloatTensorType
    return convert(model, initial_types=[("X", FloatTensorType([None, TABULAR_FEATURES]))], target_opset=15,
                   **options).SerializeToString()


# ---- builders (each one's source is part of its cache key) ----

_IMAGE = {"image": {0: "batch"}, "logits": {0: "batch"}}
_TOKENS = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
           "hidden": {0: "batch", 1: "seq"}, "pooled": {0: "batch"}}
_ENCODER_ARGS = (torch.zeros(2, 16, dtype=torch.long), torch.ones(2, 16, dtype=torch.long))


def build_resnet18() -> bytes:
    net = nets.perturbed_init(nets.ResNet(nets.BasicBlock, [2, 2, 2, 2]), seed=18)
    return export(net, (torch.randn(1, 3, 224, 224),), opset=17, inputs=["image"], outputs=["logits"], dynamic=_IMAGE)


def build_resnet18_dynamo() -> bytes:
    net = nets.perturbed_init(nets.ResNet(nets.BasicBlock, [2, 2, 2, 2]), seed=18)
    return export(net, (torch.randn(1, 3, 224, 224),), opset=18, inputs=["image"], outputs=["logits"],
                  dynamic=_IMAGE, dynamo=True)


def build_resnet50() -> bytes:
    net = nets.perturbed_init(nets.ResNet(nets.Bottleneck, [3, 4, 6, 3]), seed=50)
    return export(net, (torch.randn(1, 3, 224, 224),), opset=11, inputs=["image"], outputs=["logits"], dynamic=_IMAGE,
                  keep_batchnorm=True)


def build_bert_base() -> bytes:
    # opset 14: no LayerNormalization op yet, so the exporter spells it out (ReduceMean, Sub, Pow, Sqrt, Div)
    net = nets.perturbed_init(nets.Encoder(layers=12, hidden=768, heads=12), seed=768)
    return export(net, _ENCODER_ARGS, opset=14, inputs=["input_ids", "attention_mask"],
                  outputs=["hidden", "pooled"], dynamic=_TOKENS)


def build_minilm() -> bytes:
    net = nets.perturbed_init(nets.Encoder(layers=6, hidden=384, heads=12), seed=384)
    return export(net, _ENCODER_ARGS, opset=17, inputs=["input_ids", "attention_mask"],
                  outputs=["hidden", "pooled"], dynamic=_TOKENS)


def build_minilm_dynamo() -> bytes:
    net = nets.perturbed_init(nets.Encoder(layers=6, hidden=384, heads=12), seed=384)
    return export(net, _ENCODER_ARGS, opset=20, inputs=["input_ids", "attention_mask"],
                  outputs=["hidden", "pooled"], dynamic=_TOKENS, dynamo=True)


def build_mlp() -> bytes:
    net = nets.perturbed_init(nets.MLP(), seed=1024)
    return export(net, (torch.randn(64, 1024),), opset=13, inputs=["x"], outputs=["y"],
                  dynamic={"x": {0: "batch"}, "y": {0: "batch"}})


def build_mlp_dynamo() -> bytes:
    net = nets.perturbed_init(nets.MLP(), seed=1024)
    return export(net, (torch.randn(64, 1024),), opset=19, inputs=["x"], outputs=["y"],
                  dynamic={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=True)


def build_lstm_tagger() -> bytes:
    net = nets.perturbed_init(nets.RNNTagger(torch.nn.LSTM), seed=5000)
    return export(net, (torch.zeros(2, 12, dtype=torch.long),), opset=12, inputs=["tokens"], outputs=["tags"],
                  dynamic={"tokens": {0: "batch", 1: "seq"}, "tags": {0: "batch", 1: "seq"}})


def build_gru_tagger() -> bytes:
    net = nets.perturbed_init(nets.RNNTagger(torch.nn.GRU), seed=5001)
    return export(net, (torch.zeros(2, 12, dtype=torch.long),), opset=14, inputs=["tokens"], outputs=["tags"],
                  dynamic={"tokens": {0: "batch", 1: "seq"}, "tags": {0: "batch", 1: "seq"}})


def build_control_flow() -> bytes:
    net = torch.jit.script(nets.perturbed_init(nets.LoopThenBranch(), seed=16))
    return export(net, (torch.randn(2, 16), torch.tensor(3)), opset=13, inputs=["x", "steps"], outputs=["y"],
                  dynamic={"x": {0: "batch"}, "y": {0: "batch"}})


def build_cond_dynamo() -> bytes:
    net = nets.perturbed_init(nets.CondNet(), seed=17)
    return export(net, (torch.randn(4, 16),), opset=18, inputs=["x"], outputs=["y"], dynamic={"x": {0: "batch"}},
                  dynamo=True)


def build_detector() -> bytes:
    net = nets.perturbed_init(nets.TinyFPN(), seed=256)
    return export(net, (torch.randn(1, 3, 256, 256),), opset=11, inputs=["image"], outputs=["coarse", "fine"],
                  dynamic={"image": {0: "batch", 2: "height", 3: "width"}})


def build_small_cnn() -> bytes:
    net = nets.perturbed_init(nets.SmallCNN(), seed=32)
    return export(net, (torch.randn(1, 3, 32, 32),), opset=13, inputs=["image"], outputs=["logits"], dynamic=_IMAGE)


def build_branchy_cnn() -> bytes:
    net = nets.perturbed_init(nets.BranchyCNN(), seed=33)
    return export(net, (torch.randn(1, 3, 32, 32),), opset=13, inputs=["image"], outputs=["logits"], dynamic=_IMAGE)


def build_lightgbm_trees() -> bytes:
    """Gradient boosting as LightGBM grows it: 500 leaf-wise trees of up to 63 leaves (deep, unbalanced)."""
    import lightgbm
    import onnxmltools
    x, y = _tabular(2)
    model = lightgbm.LGBMClassifier(n_estimators=500, num_leaves=63, min_child_samples=5, verbose=-1, random_state=0,
                                     n_jobs=1)   # its OpenMP threads spin against a busy host: 12 s alone, minutes at load 7
    return _export_trees(onnxmltools.convert_lightgbm, model.fit(x, y), zipmap=False)


def build_lightgbm_large() -> bytes:
    """A LightGBM ensemble past 100 MB, where compile time and peak memory show: 5,200 leaf-wise regression
    trees of 255 leaves (2.6 M nodes; a regressor's hessian stays 1, so every tree grows all its leaves where a
    classifier's saturate). Training and onnxmltools' export took 16 minutes on a busy 2-core host (105 MB)."""
    import lightgbm
    import onnxmltools
    x, y = _tabular(5, n=20000)
    model = lightgbm.LGBMRegressor(n_estimators=5200, num_leaves=255, min_child_samples=2, learning_rate=0.02,
                                    subsample=0.8, subsample_freq=1, colsample_bytree=0.8, verbose=-1, random_state=0,
                                    n_jobs=1)
    return _export_trees(onnxmltools.convert_lightgbm, model.fit(x, y.astype(np.float32)))


def build_xgboost_trees() -> bytes:
    """Gradient boosting as XGBoost grows it: 3 classes x 150 depth-wise trees of depth 7."""
    import onnxmltools
    import xgboost
    x, y = _tabular(3)
    model = xgboost.XGBClassifier(n_estimators=150, max_depth=7, tree_method="hist", random_state=0, n_jobs=1)
    return _export_trees(onnxmltools.convert_xgboost, model.fit(x, y))


def _quantize(base: str, quantize) -> bytes:
    """Run an onnxruntime.quantization entry point file-to-file (its API takes paths)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "quantized.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize(ZOO[base].path(), out)
        return onnx.load(out).SerializeToString()


def build_minilm_qdyn() -> bytes:
    # MatMul → DynamicQuantizeLinear + MatMulInteger (+ Mul/Add to rescale); Gather embeddings → uint8 + Dequantize
    return _quantize("minilm", lambda src, dst: quantize_dynamic(src, dst, weight_type=QuantType.QUInt8))


def build_cnn_qdyn() -> bytes:
    # Conv → DynamicQuantizeLinear + ConvInteger; MatMul (if any) → MatMulInteger
    return _quantize("small_cnn", lambda src, dst: quantize_dynamic(src, dst, weight_type=QuantType.QUInt8))


def build_cnn_qdq() -> bytes:
    # static QDQ: QuantizeLinear/DequantizeLinear pairs around every Conv/Gemm, scales from 8 calibration images

    return _quantize("small_cnn", lambda src, dst: quantize_static(src, dst, _Calibration(), quant_format=QuantFormat.QDQ))


def build_cnn_qop() -> bytes:
    # static QOperator, uint8 activations, per-tensor int8 weights: QLinearConv/Add/Concat/Sigmoid/Mul/
    # LeakyRelu/AveragePool/GlobalAveragePool/MatMul between one QuantizeLinear and one DequantizeLinear
    return _quantize("branchy_cnn", lambda src, dst: quantize_static(src, dst, _Calibration(),
                                                                     quant_format=QuantFormat.QOperator))


def build_cnn_qop_s8() -> bytes:
    # the same with int8 activations and per-channel weights (QLinearConv's per-channel scales)
    return _quantize("branchy_cnn", lambda src, dst: quantize_static(
        src, dst, _Calibration(), quant_format=QuantFormat.QOperator, activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8, per_channel=True))


class _Calibration(CalibrationDataReader):
    """Eight fixed-seed images for quantize_static's range estimation."""

    def __init__(self):
        rng = np.random.default_rng(32)
        self.batches = iter([{"image": rng.standard_normal((1, 3, 32, 32), dtype=np.float32)} for _ in range(8)])

    def get_next(self):
        return next(self.batches, None)


ZOO: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("mlp", build_mlp, vector_feeds, ({"batch": 64}, {"batch": 7})),
    ZooModel("mlp_dynamo", build_mlp_dynamo, vector_feeds, ({"batch": 64}, {"batch": 3})),
    ZooModel("resnet18", build_resnet18, image_feeds, ({"batch": 1}, {"batch": 2})),
    ZooModel("resnet18_dynamo", build_resnet18_dynamo, image_feeds, ({"batch": 1}, {"batch": 2})),
    ZooModel("resnet50", build_resnet50, image_feeds, ({"batch": 1},), big=True),
    ZooModel("minilm", build_minilm, token_feeds, ({"batch": 1, "seq": 128}, {"batch": 8, "seq": 128},
                                                   {"batch": 3, "seq": 37})),
    ZooModel("minilm_dynamo", build_minilm_dynamo, token_feeds, ({"batch": 1, "seq": 128}, {"batch": 2, "seq": 45})),
    ZooModel("bert_base", build_bert_base, token_feeds, ({"batch": 1, "seq": 128}, {"batch": 8, "seq": 128}), big=True),
    ZooModel("lstm_tagger", build_lstm_tagger, tag_feeds, ({"batch": 2, "seq": 32}, {"batch": 5, "seq": 9})),
    ZooModel("gru_tagger", build_gru_tagger, tag_feeds, ({"batch": 2, "seq": 32}, {"batch": 3, "seq": 5})),
    ZooModel("control_flow", build_control_flow, control_flow_feeds,
             ({"batch": 4, "steps": 3}, {"batch": 1, "steps": 0}, {"batch": 6, "steps": 7})),
    ZooModel("cond_dynamo", build_cond_dynamo, branch_feeds, ({"batch": 4}, {"batch": 1}, {"batch": 9})),
    ZooModel("detector", build_detector, image_feeds, ({"batch": 1, "height": 256, "width": 256},
                                                       {"batch": 2, "height": 128, "width": 192})),
    ZooModel("small_cnn", build_small_cnn, small_image_feeds, ({"batch": 1}, {"batch": 4})),
    ZooModel("branchy_cnn", build_branchy_cnn, small_image_feeds, ({"batch": 1}, {"batch": 3})),
    ZooModel("lightgbm_trees", build_lightgbm_trees, tabular_feeds, ({"batch": 1}, {"batch": 500}, {"batch": 7})),
    ZooModel("lightgbm_large", build_lightgbm_large, tabular_feeds, ({"batch": 1}, {"batch": 500}, {"batch": 7}),
             huge=True),
    ZooModel("xgboost_trees", build_xgboost_trees, tabular_feeds, ({"batch": 1}, {"batch": 500}, {"batch": 7})),
    ZooModel("minilm_qdyn", build_minilm_qdyn, token_feeds, ({"batch": 1, "seq": 128}, {"batch": 2, "seq": 50}),
             tolerance=DEEP_QUANTIZED_TOLERANCE, depends=("minilm",), stepwise=True),
    ZooModel("cnn_qdyn", build_cnn_qdyn, small_image_feeds, ({"batch": 1}, {"batch": 4}),
             tolerance=QUANTIZED_TOLERANCE, depends=("small_cnn",), stepwise=True),
    ZooModel("cnn_qdq", build_cnn_qdq, small_image_feeds, ({"batch": 1}, {"batch": 4}),
             tolerance=QUANTIZED_TOLERANCE, depends=("small_cnn",)),
    ZooModel("cnn_qop", build_cnn_qop, small_image_feeds, ({"batch": 1}, {"batch": 4}),
             tolerance=QOPERATOR_TOLERANCE, depends=("branchy_cnn",)),
    ZooModel("cnn_qop_s8", build_cnn_qop_s8, small_image_feeds, ({"batch": 1}, {"batch": 4}),
             tolerance=QOPERATOR_TOLERANCE, depends=("branchy_cnn",)),
]}

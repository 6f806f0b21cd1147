"""Which values have shapes fixed by the input-shape signature alone (so a plan may rely on them).

Forward over the graph: feeds and constants have static shapes; an op's outputs do too when
its output shape is a function of its inputs' shapes (SHAPE_ONLY) or of its inputs' shapes and
the values of some parameter inputs that are themselves static values (SHAPE_PARAMS).
Everything else (NonZero, Unique, control flow, unknown ops) is treated as data-dependent, but for the
seeds the caller shows fixed (lower_signature: a Loop's carried values that keep their shapes).
"""
from ..ir import RTD_DOMAIN, Graph

_UNARY = """Abs Acos Acosh Asin Asinh Atan Atanh BitwiseNot Cast CastLike Ceil Celu Cos Cosh Elu Erf Exp
Floor Gelu HardSigmoid HardSwish Hardmax Identity IsInf IsNaN LeakyRelu Log LogSoftmax LpNormalization
MeanVarianceNormalization Mish Neg Not Reciprocal Relu Round Selu Shrink Sigmoid Sign Sin Sinh Softmax
Softplus Softsign Sqrt Tan Tanh ThresholdedRelu Swish QuantizeLinear DequantizeLinear Clip Dropout""".split()
_BINARY = """Add And BitShift BitwiseAnd BitwiseOr BitwiseXor Div Equal Greater GreaterOrEqual Less
LessOrEqual Max Mean Min Mod Mul Or PRelu Pow Sub Sum Where Xor""".split()
_STRUCTURAL = """ArgMax ArgMin AveragePool BatchNormalization Concat Conv ConvInteger ConvTranspose CumSum
DepthToSpace DynamicQuantizeLinear Einsum EyeLike Flatten GRU Gather GatherElements GatherND Gemm
GlobalAveragePool GlobalLpPool GlobalMaxPool GroupNormalization InstanceNormalization LRN LSTM
LayerNormalization LpPool MatMul MatMulInteger MaxPool QLinearConv QLinearMatMul RNN ReverseSequence
ScatterElements ScatterND Shape Size SpaceToDepth Transpose Trilu RMSNormalization""".split()
SHAPE_ONLY = frozenset(_UNARY + _BINARY + _STRUCTURAL)
# com.microsoft's 8-bit ops that onnxruntime's quantizer writes: shapes as their float twins' (DynamicQuantizeLSTM's as
# LSTM's: sequence_lens masks values, never the shape)
MICROSOFT_SHAPE_ONLY = frozenset("""QLinearAdd QLinearMul QLinearSigmoid QLinearLeakyRelu QLinearConcat QLinearAveragePool
QLinearGlobalAveragePool DynamicQuantizeLSTM""".split())
# ai.onnx.ml's lookups: each element mapped, the shape kept (a text model's embedding follows its LabelEncoder)
ML_SHAPE_ONLY = frozenset({"LabelEncoder"})
# op -> input positions whose values decide the output shape
SHAPE_PARAMS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 2, 3),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "OneHot": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
    "TopK": (1,), "Split": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "CenterCropPad": (1,),
    **{op: (1,) for op in "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare".split()},
}
NONDETERMINISTIC = frozenset("RandomNormal RandomNormalLike RandomUniform RandomUniformLike Bernoulli Multinomial".split())


def shape_fixed(node, shaped: set, static_values: set) -> bool:
    """Whether `node`'s output shapes follow from what is known: `shaped` names have fixed
    shapes, `static_values` names fixed values."""
    if node.domain == RTD_DOMAIN or (node.domain == "" and node.op_type in SHAPE_ONLY) \
            or (node.domain == "com.microsoft" and node.op_type in MICROSOFT_SHAPE_ONLY) \
            or (node.domain == "ai.onnx.ml" and node.op_type in ML_SHAPE_ONLY):
        return all(n in shaped for n in node.inputs if n)
    if node.domain == "" and node.op_type in SHAPE_PARAMS:
        params = SHAPE_PARAMS[node.op_type]
        return all((n in static_values) if i in params else (n in shaped) for i, n in enumerate(node.inputs) if n)
    return all(n in static_values for n in node.inputs if n) and node.op_type not in NONDETERMINISTIC and not node.implicit


def static_shapes(graph: Graph, static_values: set, seeds=()) -> set:
    """Names whose shapes the signature fixes (feeds, constants, the `seeds` shown fixed otherwise and what
    follows from them)."""
    shaped = set(graph.inputs) | set(graph.constants) | set(static_values) | set(seeds)
    for node in graph.nodes:
        if shape_fixed(node, shaped, static_values):
            shaped.update(n for n in node.outputs if n)
    return shaped

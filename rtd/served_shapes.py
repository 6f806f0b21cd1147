"""The shape an output is served with where its declaration says otherwise, stated once for the
worker's signature (kernels/model.py) and the metadata `rtctl pack` writes (loader/pack.py).

The ai.onnx.ml classifiers, regressors and tree ensembles answer one row per row of their first
input, but exporters do not always say so: onnxmltools declares a LightGBM classifier's label
output [1], and a batch of 8 comes back [8]. An output such an op makes (directly or through
Identity and Cast) is served with the first dim of that op's input. Imports nothing: the
operator's tooling stays light."""

ML_DOMAIN = "ai.onnx.ml"
ML_ROW_OPS = frozenset({"LinearClassifier", "LinearRegressor", "SVMClassifier", "SVMRegressor",
                        "TreeEnsemble", "TreeEnsembleClassifier", "TreeEnsembleRegressor"})
SAME_SHAPE_OPS = frozenset({"Identity", "Cast"})   # of the default domain: the shape they pass on is their input's
MAX_HOPS = 64


def row_source(output: str, producers: dict) -> str | None:
    """The first input of the ai.onnx.ml row op that makes `output` (through Identity and Cast),
    or None. `producers`: {value name: (domain, op_type, inputs)} of the main graph."""
    name = output
    for _ in range(MAX_HOPS):
        if name not in producers:
            return None
        domain, op_type, inputs = producers[name]
        if domain == ML_DOMAIN and op_type in ML_ROW_OPS:
            return inputs[0] if inputs else None
        if domain not in ("", "ai.onnx") or op_type not in SAME_SHAPE_OPS or not inputs:
            return None
        name = inputs[0]
    return None


def served_dims(output: str, declared, producers: dict, input_dims: dict):
    """`declared` (a list or tuple of dims, or None for an unknown rank) with its first dim made
    that of the row op's input where `output` comes from one (`input_dims`: {graph input: its
    declared dims}; an input the graph does not declare gives an unknown first dim, None)."""
    source = row_source(output, producers)
    if source is None or not declared:
        return declared
    rows = (input_dims.get(source) or [None])[0]
    return type(declared)([rows, *declared[1:]])

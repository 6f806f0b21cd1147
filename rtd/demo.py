"""A demo model and an input for it, for the README's flow and scripts/demo.sh:
`python -m rtd.demo [DIR]` writes DIR/model.onnx (Y = Relu(X·W + b), X of shape [N, 4])
and DIR/x.npy (two rows of X)."""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def model_bytes() -> bytes:
    w = numpy_helper.from_array(np.array([[1, -1, 0.5], [2, 0, -1], [0, 1, 1], [-1, 2, 0]], np.float32), "W")
    b = numpy_helper.from_array(np.array([0.1, -0.2, 0.3], np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["H"]), helper.make_node("Add", ["H", "B"], ["Z"]),
         helper.make_node("Relu", ["Z"], ["Y"])], "demo",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def main(directory: str = ".") -> None:
    with open(os.path.join(directory, "model.onnx"), "wb") as f:
        f.write(model_bytes())
    np.save(os.path.join(directory, "x.npy"), np.array([[1, 2, 3, 4], [0.5, -1, 2, 0]], np.float32), allow_pickle=False)
    print(f"wrote {os.path.join(directory, 'model.onnx')} and {os.path.join(directory, 'x.npy')}")


if __name__ == "__main__":
    main(*sys.argv[1:2])

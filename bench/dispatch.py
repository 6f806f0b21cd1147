"""Per-op dispatch cost, rtd against onnxruntime: a chain of 101 tiny nodes (1×16) minus a chain of 1,
divided by 100, for a few op types; element-wise chain fusion off, so each node is a step.

    .venv/bin/python bench/dispatch.py
"""
import time

import numpy as np
import onnxruntime
from onnx import TensorProto, helper

from rtd.kernels import compile_model

OPS = ("Relu", "Add", "Transpose")


def chain_model(op: str, length: int) -> bytes:
    nodes, previous = [], "x"
    for i in range(length):
        out = f"t{i}" if i < length - 1 else "y"
        nodes.append(helper.make_node(op, [previous, "x"] if op == "Add" else [previous], [out]))
        previous = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def microseconds(run, repeats: int = 2000) -> float:
    for _ in range(20):
        run()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats * 1e6


def main():
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    for op in OPS:
        short, long = chain_model(op, 1), chain_model(op, 101)
        rtd = [compile_model(m, disable_passes=("fuse_chains",)) for m in (short, long)]
        ort = [onnxruntime.InferenceSession(m, options, providers=["CPUExecutionProvider"]) for m in (short, long)]
        ours = [microseconds(lambda m=m: m.run(feeds)) for m in rtd]
        theirs = [microseconds(lambda s=s: s.run(None, feeds)) for s in ort]
        print(f"{op}: rtd {(ours[1] - ours[0]) / 100:.2f} µs per op (a run's fixed cost {ours[0]:.1f} µs); "
              f"onnxruntime {(theirs[1] - theirs[0]) / 100:.2f} µs per op ({theirs[0]:.1f} µs)")


if __name__ == "__main__":
    main()

"""The compiled CPU kernels (kernels/native) against the NumPy path and onnxruntime, side by side in one run.

For each depthwise layer: the NumPy path (tap-by-tap multiply-adds, then bias and ReLU, as the
executor runs without the compiled kernels), the compiled kernel called through its validating
wrapper, the whole one-layer model through rtd's compile_model, and onnxruntime on the same
model (1 intra-op thread, sequential, ORT_ENABLE_ALL). Every side's output is checked against
onnxruntime's before it is timed. Median ms over --runs runs after a warm-up; ratios to ORT.

    .venv/bin/python bench/native_kernels.py              # 30 runs each
    .venv/bin/python bench/native_kernels.py --runs 100
"""
import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rtd.kernels import compile_model  # noqa: E402
from rtd.kernels.native import path_in_force  # noqa: E402
from rtd.kernels.native.depthwise import depthwise_conv2d  # noqa: E402
from rtd.kernels.ops._conv import _depthwise  # noqa: E402
from rtd.kernels.ops._window import geometry  # noqa: E402

# (label, (N, C, H, W), k, stride, relu): the probe layer, then MobileNet-style depthwise layers
LAYERS = [
    ("probe 3x3 +bias +ReLU", (1, 64, 160, 160), 3, 1, True),
    ("probe 3x3 +bias", (1, 64, 160, 160), 3, 1, False),
    ("MobileNetV2 3x3 s1", (1, 144, 56, 56), 3, 1, True),
    ("MobileNetV2 3x3 s2", (1, 96, 112, 112), 3, 2, True),
    ("MobileNetV2 3x3 s1, 7x7 map", (1, 960, 7, 7), 3, 1, True),
    ("MobileNetV3 5x5 s1", (1, 240, 28, 28), 5, 1, True),
    ("batch 4, 3x3 s1", (4, 32, 80, 80), 3, 1, True),
]


def layer_model(c: int, k: int, stride: int, relu: bool, weights, bias) -> bytes:
    pad = k // 2
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["C" if relu else "Y"], group=c, kernel_shape=[k, k],
                              strides=[stride, stride], pads=[pad] * 4)]
    if relu:
        nodes.append(helper.make_node("Relu", ["C"], ["Y"]))
    graph = helper.make_graph(nodes, "depthwise", [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def median_ms(fn, runs: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def measure(shape, k, stride, relu, runs):
    rng = np.random.default_rng(0)
    n, c, h, w = shape
    x = rng.standard_normal(shape, dtype=np.float32)
    weights = rng.standard_normal((c, 1, k, k), dtype=np.float32)
    bias = rng.standard_normal(c, dtype=np.float32)
    out_shape, begin, end = geometry((h, w), (k, k), [stride] * 2, [1, 1], [k // 2] * 4)
    args = ([stride] * 2, [1, 1], begin, end, out_shape)

    def numpy_path():
        y = _depthwise(np, x, weights, [k, k], *args)
        y += bias.reshape(1, c, 1, 1)
        if relu:
            np.maximum(y, 0, out=y)
        return y

    model = layer_model(c, k, stride, relu, weights, bias)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    compiled = compile_model(model)
    sides = {"numpy": numpy_path, "C kernel": lambda: depthwise_conv2d(x, weights, bias, *args, relu=relu),
             "rtd model": lambda: compiled.run({"X": x})["Y"], "ORT 1t": lambda: session.run(None, {"X": x})[0]}
    expected = sides["ORT 1t"]()
    for name, fn in sides.items():
        np.testing.assert_allclose(fn(), expected, rtol=1e-4, atol=1e-4, err_msg=name)
    return {name: median_ms(fn, runs) for name, fn in sides.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = max(30, parser.parse_args().runs)
    print(f"# depthwise conv, 1 thread: rtd kernels {path_in_force()}, numpy {np.__version__}, onnxruntime "
          f"{onnxruntime.__version__}, {platform.machine()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
          f"median of {runs} runs (ms)")
    print("| layer | shape | numpy | C kernel | rtd model | ORT 1t | numpy/ORT | C/ORT | rtd model/ORT | numpy/C |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, shape, k, stride, relu in LAYERS:
        t = measure(shape, k, stride, relu, runs)
        ort = t["ORT 1t"]
        print(f"| {label} | {'×'.join(map(str, shape))} | {t['numpy']:.2f} | {t['C kernel']:.2f} | {t['rtd model']:.2f} | "
              f"{ort:.2f} | {t['numpy'] / ort:.2f}× | {t['C kernel'] / ort:.2f}× | {t['rtd model'] / ort:.2f}× | "
              f"{t['numpy'] / t['C kernel']:.1f}× |", flush=True)


if __name__ == "__main__":
    main()

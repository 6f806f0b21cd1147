"""Single 3×3 / 1×1 convolution layers (+ bias + ReLU) of the zoo's and real models' sizes, rtd's
`conv` (the compiled convolution where installed) against onnxruntime, one thread each, best of 40
runs taken in turn, by the calling thread's CPU clock (both run on it at one thread; the CPU clock is robust to other work on
the machine, the wall clock is not).

    .venv/bin/python bench/conv_layers.py
"""
import time

import numpy as np
import onnxruntime
import threadpoolctl
from onnx import TensorProto, helper, numpy_helper

from rtd.kernels.ops._conv import conv

LAYERS = [(3, 16, 256, 3, 2), (16, 32, 128, 3, 2), (32, 64, 64, 3, 2), (64, 128, 32, 3, 2), (192, 64, 32, 3, 1),
          (96, 32, 64, 3, 1), (64, 64, 32, 1, 1)]   # (in channels, out channels, input size, kernel, stride)


def best_microseconds(runs, repeats: int = 40) -> list[float]:
    """The best time of each of `runs`, timed in turn (one of each per round), so load that comes and goes
    on the machine falls on every side alike."""
    for run in runs:
        for _ in range(3):
            run()
    best = [float("inf")] * len(runs)
    for _ in range(repeats):
        for i, run in enumerate(runs):
            start = time.thread_time()
            run()
            best[i] = min(best[i], time.thread_time() - start)
    return [b * 1e6 for b in best]


def layer_row(c, m, size, k, s, rng, options) -> str:
    x = rng.random((1, c, size, size), dtype=np.float32)
    w, b = rng.random((m, c, k, k), dtype=np.float32), rng.random(m, dtype=np.float32)
    pad = k // 2
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[s, s]),
         helper.make_node("Relu", ["c"], ["y"])], "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    session = onnxruntime.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                           .SerializeToString(), options, providers=["CPUExecutionProvider"])
    ours, theirs = best_microseconds([lambda: conv(np, x, w, b, 1, [k, k], [s, s], None, [pad] * 4, "NOTSET", relu=True),
                                      lambda: session.run(None, {"x": x})])
    flops = 2 * m * c * k * k * ((size + 2 * pad - k) // s + 1) ** 2
    return (f"| {c}→{m} | {size}² | {k}×{k}/{s} | {ours:.0f} | {theirs:.0f} | {ours / theirs:.2f}× | "
            f"{flops / ours / 1e3:.0f} | {flops / theirs / 1e3:.0f} |")


def main():
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    rng = np.random.default_rng(0)
    print("| in→out channels | input | kernel/stride | rtd µs | onnxruntime µs | rtd/ORT | rtd GFLOP/s | ORT GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    with threadpoolctl.threadpool_limits(1):
        for c, m, size, k, s in LAYERS:
            print(layer_row(c, m, size, k, s, rng, options))


if __name__ == "__main__":
    main()

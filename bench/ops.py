"""Conv, MatMul/Gemm and pooling kernels: rtd vs onnxruntime on single-node models, side by side.

Shapes are ResNet-18's convolutions and pools (batch 1, 224x224) and BERT-base's projections
(seq 128, batch 1 and 8). Each case is one ONNX node with its weights as initializers, run by
`rtd.kernels.compile_model(...).run` and by an onnxruntime session (ORT_ENABLE_ALL, sequential,
intra_op_num_threads = T); rtd's BLAS pool is limited to T through threadpoolctl. Outputs are
compared before timing; the two sides alternate in blocks of 5 runs, so drift on a shared
machine hits both alike. Prints per-case medians (of >= --runs) and rtd/ORT ratios (below 1.0:
rtd is faster), and the geometric mean of the ratios per thread count.

On a machine shared with other work, wall-clock medians swing with preemption; `--clock cpu`
times each run by this process's CPU time instead (time.process_time), which preemption does
not inflate. It is a fair latency proxy at 1 thread only (at T threads it sums all threads).

    .venv/bin/python bench/ops.py                  # all cases, 1 and 2 threads, 30 runs each
    .venv/bin/python bench/ops.py --threads 1 --clock cpu
    .venv/bin/python bench/ops.py --threads 1 --runs 10 --only conv
"""
import os

# Set for other users of the machine, these select a slower OpenBLAS path; drop them before NumPy loads.
for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_name, None)

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import threadpoolctl  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rtd.kernels import compile_model  # noqa: E402

RNG = np.random.default_rng(0)


def _model(op, x, consts, opset=17, n_out=1, **attrs):
    inits = [numpy_helper.from_array(c, f"c{i}") for i, c in enumerate(consts)]
    node = helper.make_node(op, ["x"] + [t.name for t in inits], [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(n_out)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_case(c, m, size, k, stride=1, group=1):
    x = _rand(1, c, size, size)
    w = _rand(m, c // group, k, k) * np.float32(1 / math.sqrt(c * k * k / group))
    label = f"conv {c}->{m} {k}x{k} s{stride}{' g' + str(group) if group > 1 else ''} @{size}"
    return label, _model("Conv", x, [w, _rand(m)], kernel_shape=[k, k], strides=[stride] * 2,
                         pads=[k // 2] * 4, group=group), x


def cases():
    yield conv_case(3, 64, 224, 7, 2)
    yield conv_case(64, 64, 56, 3)
    yield conv_case(64, 128, 56, 3, 2)
    yield conv_case(128, 128, 28, 3)
    yield conv_case(64, 128, 56, 1, 2)
    yield conv_case(256, 256, 14, 3)
    yield conv_case(512, 512, 7, 3)
    yield conv_case(256, 64, 56, 1)
    yield conv_case(128, 128, 56, 3, 1, group=128)
    x = _rand(1, 64, 112, 112)
    yield "maxpool 3x3 s2 @112", _model("MaxPool", x, [], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4), x
    x = _rand(1, 512, 7, 7)
    yield "globalaveragepool 512 @7", _model("GlobalAveragePool", x, []), x
    for batch in (1, 8):
        for k, n in ((768, 768), (768, 3072), (3072, 768)):
            x = _rand(batch, 128, k)
            yield f"matmul b{batch} 128x{k} @ {k}x{n}", _model("MatMul", x, [_rand(k, n) * np.float32(k ** -0.5)]), x
    x = _rand(1, 12, 128, 64)
    yield "matmul scores 12x128x64 @ 64x128", _model("MatMul", x, [_rand(1, 12, 64, 128)]), x
    for rows in (128, 1024):
        x = _rand(rows, 768)
        yield f"gemm {rows}x768 @ (768x768)^T + b", _model("Gemm", x, [_rand(768, 768) * np.float32(768 ** -0.5),
                                                                         _rand(768)], transB=1), x
    x = _rand(64, 1024)
    yield "gemm mlp 64x1024 @ (1024x1024)^T + b", _model("Gemm", x, [_rand(1024, 1024) * np.float32(1 / 32),
                                                                     _rand(1024)], transB=1), x


def _median_pair(run_a, run_b, runs, clock):
    a, b = [], []
    for _ in range(max(1, runs // 5)):
        for fn, acc in ((run_a, a), (run_b, b)):
            for _ in range(5):
                t0 = clock()
                fn()
                acc.append(clock() - t0)
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--only", default="", help="substring of the case labels to keep")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = ap.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    selected = [c for c in cases() if args.only in c[0]]
    for threads in (int(t) for t in args.threads.split(",")):
        print(f"\n{threads} thread(s): median {args.clock}-clock ms over >= {args.runs} runs")
        print(f"{'case':44s} {'rtd':>9s} {'ORT':>9s} {'rtd/ORT':>8s}")
        ratios = []
        with threadpoolctl.threadpool_limits(threads):
            for label, model, x in selected:
                opts = ort.SessionOptions()
                opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
                opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
                rtd = compile_model(model)
                want = sess.run(None, {"x": x})[0]
                got = rtd.run({"x": x})["y0"]
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=label)
                for _ in range(3):  # warm-up: caches, scratch buffers, BLAS threads
                    rtd.run({"x": x})
                    sess.run(None, {"x": x})
                t_rtd, t_ort = _median_pair(lambda rtd=rtd, x=x: rtd.run({"x": x}), lambda sess=sess, x=x: sess.run(None, {"x": x}), args.runs,
                                              clock)
                ratios.append(t_rtd / t_ort)
                print(f"{label:44s} {t_rtd:9.3f} {t_ort:9.3f} {t_rtd / t_ort:8.2f}", flush=True)
        print(f"{'geometric mean of rtd/ORT':44s} {'':9s} {'':9s} {math.exp(statistics.mean(map(math.log, ratios))):8.2f}")


if __name__ == "__main__":
    main()

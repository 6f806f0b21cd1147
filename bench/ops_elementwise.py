"""Element-wise, activation, softmax and reduction kernels: rtd vs onnxruntime, side by side.

Each case is a one-node ONNX model run by `rtd.kernels.compile_model(...).run` and by an
onnxruntime session (CPU, `--threads` intra-op threads) on the same input in the same process.
Outputs are compared before anything is timed; the two are then called alternately, so both
see the same machine load, and each column is the best of those rounds. "rtd run" is the whole
executor (which may substitute its own fused kernels); "kernel" is this op's registered kernel
alone, element-wise ones writing into a reused output (`compute(..., out=buf)`), as the
planned executor calls them. Ratios below 1.0 mean rtd is faster.

    .venv/bin/python bench/ops_elementwise.py [--threads 1] [--min-time 0.5]
"""
import argparse
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from rtd.kernels import compile_model
from rtd.kernels.ops import Elementwise, lookup

RNG = np.random.default_rng(0)
BERT_HIDDEN = (8, 128, 768)
BERT_FFN = (8, 128, 3072)
BERT_SCORES = (8, 12, 128, 128)


def _case(name, op, x, *, consts=(), opset=21, n_out=1, **attrs):
    """(label, model bytes, feeds, in-place kernel call or None): consts become initializers."""
    inits = [numpy_helper.from_array(c, f"c{i}") for i, c in enumerate(consts)]
    node = helper.make_node(op, ["x"] + [t.name for t in inits], [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info(
        "x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)], [helper.make_empty_tensor_value_info(
            f"y{i}") for i in range(n_out)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    kernel = lookup("", op, opset)(attrs)
    if isinstance(kernel, Elementwise):
        out = kernel.compute(x, *consts)
        alone = lambda: kernel.compute(x, *consts, out=out)  # noqa: E731
    else:
        alone = lambda: kernel.run(x, *consts)  # noqa: E731
    return name, model.SerializeToString(), {"x": x}, alone


def cases():
    h = RNG.standard_normal(BERT_HIDDEN).astype(np.float32)
    f = RNG.standard_normal(BERT_FFN).astype(np.float32)
    s = RNG.standard_normal(BERT_SCORES).astype(np.float32) * 4
    bias = RNG.standard_normal(BERT_HIDDEN[-1:]).astype(np.float32)
    yield _case("Add hidden+bias [8,128,768]", "Add", h, consts=[bias])
    yield _case("Mul hidden*bias", "Mul", h, consts=[bias])
    yield _case("Div hidden/scalar", "Div", h, consts=[np.array(8.0, np.float32)])
    yield _case("Pow hidden^2", "Pow", h, consts=[np.array(2.0, np.float32)])
    yield _case("Sqrt |hidden|", "Sqrt", np.abs(h))
    yield _case("Relu ffn [8,128,3072]", "Relu", f)
    yield _case("Erf ffn", "Erf", f)
    yield _case("Gelu ffn (erf)", "Gelu", f, opset=20)
    yield _case("Gelu ffn (tanh)", "Gelu", f, opset=20, approximate="tanh")
    yield _case("Sigmoid ffn", "Sigmoid", f)
    yield _case("Tanh ffn", "Tanh", f)
    yield _case("Where(x>0) ffn", "Where", f > 0, consts=[np.float32(1.0) * np.ones(3072, np.float32),
                                                            np.zeros(1, np.float32)])
    yield _case("Softmax scores [8,12,128,128]", "Softmax", s, axis=-1)
    yield _case("LogSoftmax scores", "LogSoftmax", s, axis=-1)
    yield _case("ReduceMean hidden axis -1", "ReduceMean", h, consts=[np.array([-1], np.int64)])
    yield _case("ReduceSum hidden axis 1", "ReduceSum", h, consts=[np.array([1], np.int64)])
    yield _case("ReduceMax scores axis -1", "ReduceMax", s, consts=[np.array([-1], np.int64)])
    yield _case("ReduceLogSumExp scores -1", "ReduceLogSumExp", s, consts=[np.array([-1], np.int64)])
    yield _case("ArgMax scores axis -1", "ArgMax", s, axis=-1)
    yield _case("TopK k=5 scores axis -1", "TopK", s, consts=[np.array([5], np.int64)], n_out=2)
    yield _case("CumSum hidden axis 1", "CumSum", h, consts=[np.array(1, np.int64)])


def _best_of_alternating(fns, min_time):
    """Best seconds of each function, called in turn until min_time has passed (>= 10 rounds).

    The best, not the median: on a shared machine the slow samples measure the neighbours.
    """
    for fn in fns:
        fn()  # warm-up
    times, start = [[] for _ in fns], time.perf_counter()
    while len(times[0]) < 10 or time.perf_counter() - start < min_time:
        for fn, samples in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return [min(samples) for samples in times]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-time", type=float, default=0.5)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    print(f"| case | rtd run ms | ORT {args.threads}t ms | run/ORT | kernel ms | kernel/ORT |")
    print("|---|---|---|---|---|---|")
    ratios, kernel_ratios = [], []
    for name, model, feeds, alone in cases():
        ours = compile_model(model)
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        expected = session.run(None, feeds)
        got = ours.run(feeds)
        for want, have in zip(expected, got.values()):
            np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5, err_msg=name)
        fns = [lambda ours=ours, feeds=feeds: ours.run(feeds), lambda session=session, feeds=feeds: session.run(None, feeds), alone]
        t_rtd, t_ort, t_kernel = _best_of_alternating(fns, args.min_time)
        ratios.append(t_rtd / t_ort)
        kernel_ratios.append(t_kernel / t_ort)
        print(f"| {name} | {t_rtd * 1e3:.3f} | {t_ort * 1e3:.3f} | {t_rtd / t_ort:.2f} "
              f"| {t_kernel * 1e3:.3f} | {t_kernel / t_ort:.2f} |", flush=True)
    print(f"\ngeometric means: run/ORT {statistics.geometric_mean(ratios):.2f}, "
          f"kernel/ORT {statistics.geometric_mean(kernel_ratios):.2f}")


if __name__ == "__main__":
    main()

"""Tensor, indexing and resampling kernels: rtd vs onnxruntime on one-node models, side by side.

Cases are the ones that cost time in the zoo: Resize nearest/linear on detector-sized NCHW
maps, the BERT embedding Gather, and the shape plumbing of attention (Transpose, Concat,
Slice, Split, Pad, Expand, Cast). Each model runs through
`rtd.kernels.compile_model(...).run` and an onnxruntime session (sequential, intra_op
threads = T; rtd's BLAS limited to T by threadpoolctl) on the same inputs in one process.
Outputs are compared first; then the two sides alternate in blocks of 5 runs so drift on a
shared machine hits both. Prints medians and rtd/ORT ratios (below 1.0: rtd faster).

    .venv/bin/python bench/ops_tensor.py [--threads 1 2] [--runs 30]
"""
import argparse
import math
import statistics
import time

import numpy as np
import onnxruntime as ort
import threadpoolctl
from onnx import TensorProto, helper, numpy_helper, shape_inference

from rtd.kernels import compile_model

RNG = np.random.default_rng(0)


def _case(label, op, feeds: dict, consts=(), opset=19, n_out=1, consts_first=False, **attrs):
    """(label, model bytes, feeds): `consts` become initializers (None: an absent optional input)."""
    inits = [numpy_helper.from_array(np.asarray(c), f"c{i}") if c is not None else None for i, c in enumerate(consts)]
    const_names = [t.name if t is not None else "" for t in inits]
    names = const_names + list(feeds) if consts_first else list(feeds) + const_names
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    outputs = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_out)]
    graph = helper.make_graph([node], label, inputs, outputs, initializer=[t for t in inits if t is not None])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return label, shape_inference.infer_shapes(model).SerializeToString(), feeds


def cases():
    f32 = lambda *s: RNG.standard_normal(s).astype(np.float32)  # noqa: E731
    up2 = np.array([1, 1, 2, 2], np.float32)
    hidden = f32(8, 128, 768)
    yield _case("resize nearest 2x 1x256x40x40", "Resize", {"x": f32(1, 256, 40, 40)}, [None, up2], mode="nearest",
                coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    yield _case("resize nearest 2x 1x128x80x80", "Resize", {"x": f32(1, 128, 80, 80)}, [None, up2], mode="nearest")
    yield _case("resize linear 2x 1x64x160x160", "Resize", {"x": f32(1, 64, 160, 160)}, [None, up2], mode="linear")
    yield _case("resize linear 0.5x 1x64x160x160", "Resize", {"x": f32(1, 64, 160, 160)}, [None, np.array([1, 1, .5, .5], np.float32)],
                mode="linear")
    yield _case("resize cubic 2x 1x16x64x64", "Resize", {"x": f32(1, 16, 64, 64)}, [None, up2], mode="cubic")
    yield _case("gather embedding 30522x768 ids 8x128", "Gather", {"ids": RNG.integers(0, 30522, (8, 128))}, [f32(30522, 768)],
                consts_first=True, axis=0)
    yield _case("transpose 8x128x12x64 -> 0213", "Transpose", {"x": f32(8, 128, 12, 64)}, perm=[0, 2, 1, 3])
    yield _case("concat 4x 1x64x80x80 axis 1", "Concat", {f"x{i}": f32(1, 64, 80, 80) for i in range(4)}, axis=1)
    yield _case("slice 8x128x2304 -> [:, :, 768:1536]", "Slice", {"x": f32(8, 128, 2304)},
                [np.array([768]), np.array([1536]), np.array([2])])
    yield _case("split 8x128x2304 in 3", "Split", {"x": f32(8, 128, 2304)}, [np.array([768, 768, 768])], n_out=3, axis=2)
    yield _case("pad reflect 1x64x160x160 +1", "Pad", {"x": f32(1, 64, 160, 160)}, [np.array([0, 0, 1, 1, 0, 0, 1, 1])], mode="reflect")
    yield _case("expand 1x1x128x128 -> 8x12x128x128", "Expand", {"x": f32(1, 1, 128, 128)}, [np.array([8, 12, 128, 128])])
    yield _case("cast f32->f16 8x128x768", "Cast", {"x": hidden}, to=TensorProto.FLOAT16)
    yield _case("reshape 8x128x768 -> 8x128x12x64", "Reshape", {"x": hidden}, [np.array([8, 128, 12, 64])])


def _times(fn, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def bench(threads: int, runs: int):
    ratios = []
    print(f"\n## {threads} thread(s): median ms over {runs} runs\n")
    print("| case | rtd | onnxruntime | rtd/ORT |\n|---|---|---|---|")
    for label, model, feeds in cases():
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        ours = compile_model(model)
        with threadpoolctl.threadpool_limits(threads):
            mine = list(ours.run(feeds).values())
            theirs = session.run(None, feeds)
            for a, b in zip(mine, theirs):
                np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-4, atol=1e-5)
            rtd_t, ort_t = [], []
            for _ in range(math.ceil(runs / 5)):  # alternate blocks so machine drift hits both sides
                rtd_t += _times(lambda ours=ours, feeds=feeds: ours.run(feeds), 5)
                ort_t += _times(lambda session=session, feeds=feeds: session.run(None, feeds), 5)
        r, o = statistics.median(rtd_t) * 1e3, statistics.median(ort_t) * 1e3
        ratios.append(r / o)
        print(f"| {label} | {r:.3f} | {o:.3f} | {r / o:.2f} |", flush=True)
    print(f"\ngeometric mean rtd/ORT at {threads} thread(s): {math.exp(statistics.mean(map(math.log, ratios))):.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    for threads in args.threads:
        bench(threads, args.runs)


if __name__ == "__main__":
    main()

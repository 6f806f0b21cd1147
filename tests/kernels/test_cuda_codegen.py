"""The CUDA C that backend_cupy generates for fused element-wise chains compiles with nvcc.

No GPU is needed: nvcc compiles for sm_90 on the CPU. Every registered Elementwise kernel with
a `cuda` expression (and no required attributes) becomes a one-link chain; chains taken from
real plans check how links bind to each other.
"""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from rtd.kernels import compile_model
from rtd.kernels.backend_cupy import chain_body, chain_source
from rtd.kernels.ops import REQUIRED, Elementwise, lookup, supported

from kernel_graphs import model, node

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
INTEGER_OPS = {"BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitShift"}


def nvcc_compiles(source: str, tmp_path) -> None:
    if NVCC is None:
        pytest.skip("nvcc not found (looked on PATH and in /usr/local/cuda/bin)")
    path = tmp_path / "chains.cu"
    path.write_text(source)
    # plain nvcc, no --expt-relaxed-constexpr: the expressions use floating literals, so fmin/fmax
    # resolve to device overloads rather than <cmath>'s constexpr host templates for mixed types.
    done = subprocess.run([NVCC, "-c", "-arch=sm_90", "-o", str(tmp_path / "chains.o"), str(path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def one_link_chains():
    for (domain, op), versions in supported().items():
        cls = lookup(domain, op, versions[-1])
        if not issubclass(cls, Elementwise) or any(v is REQUIRED for v in cls.attributes.values()):
            continue
        kernel = cls({}, np)
        if getattr(kernel, "cuda", None) is None:
            continue
        arity = 1 + max(int(i) for i in re.findall(r"in(\d+)", kernel.cuda))
        dtype = np.int32 if op in INTEGER_OPS else np.float32
        yield op, kernel, arity, dtype


def test_every_cuda_expression_compiles_as_a_chain(tmp_path):
    sources = []
    chains = list(one_link_chains())
    assert len(chains) >= 20, "expected the element-wise ops to carry CUDA expressions"
    for k, (op, kernel, arity, dtype) in enumerate(chains):
        source = chain_source([(kernel, list(range(arity)))], [dtype] * arity, dtype, name=f"chain_{op}_{k}")
        sources.append(source if k == 0 else source.split("\n", 1)[1])  # one set of #includes
    nvcc_compiles("".join(sources), tmp_path)


def test_chains_from_a_real_plan_bind_previous_links_and_compile(tmp_path):
    nodes = [node("Add", ["x", "y"], ["a"]), node("Mul", ["a", "a"], ["b"]), node("Sigmoid", ["b"], ["c"]),
             node("Sub", ["y", "c"], ["d"]), node("Relu", ["d"], ["out"])]
    m = compile_model(model(nodes, [("x", [4, 3]), ("y", [4, 3])], [("out", None)]))
    feeds = {"x": np.ones((4, 3), np.float32), "y": np.ones((4, 3), np.float32)}
    m.run(feeds)
    (plan,) = m._plans.values()
    chain = next(fn.__self__ for fn, *_ in plan.steps if type(fn.__self__).__name__ == "ElementwiseChain")
    body = chain_body(chain.kernels, "float")
    assert len(chain.kernels) == 5 and body.count("x0") == 1 and body.count("x1") == 2  # y is read twice, x once
    nvcc_compiles(chain_source(chain.kernels, [np.float32, np.float32], np.float32), tmp_path)

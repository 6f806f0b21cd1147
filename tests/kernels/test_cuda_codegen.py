"""Every CUDA kernel rtd generates compiles with nvcc: element-wise chains (CuPy
ElementwiseKernel bodies, wrapped in an equivalent standalone kernel by chain_source), the
fused GELU's body, and the row kernels of the fused LayerNorm, Softmax and Attention steps
(cupy.RawKernel sources, compiled as they are).

No GPU is needed: nvcc compiles for sm_90 on the CPU. Every registered Elementwise kernel with
a `cuda` expression (and no required attributes) becomes a one-link chain; chains taken from
real plans check how links bind to each other; a transformer block's plan yields each kind of
fused step, and every source its GPU form would build is compiled.
"""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from rtd.kernels import compile_model
from rtd.kernels.cuda_source import ROW_TYPES, chain_body, chain_source, layernorm_source, softmax_source
from rtd.kernels.ops import REQUIRED, Elementwise, lookup, supported
from rtd.kernels.ops.op_gelu import Gelu_20

from kernel_graphs import model, node, transformer_block

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
    chain = next(k for k in plan.kernels if type(k).__name__ == "ElementwiseChain")   # a native step's kernel too
    body = chain_body(chain.kernels, "float")
    assert len(chain.kernels) == 5 and body.count("x0") == 1 and body.count("x1") == 2  # y is read twice, x once
    nvcc_compiles(chain_source(chain.kernels, [np.float32, np.float32], np.float32), tmp_path)


def test_fused_gelu_bodies_compile_in_both_forms(tmp_path):
    sources = [chain_source([(Gelu_20({"approximate": form}, np), [0])], [dtype], dtype, name=f"gelu_{form}_{k}")
               for form in ("none", "tanh") for k, dtype in enumerate(ROW_TYPES)]
    nvcc_compiles("".join([sources[0]] + [s.split("\n", 1)[1] for s in sources[1:]]), tmp_path)


@pytest.mark.parametrize("dtype", list(ROW_TYPES), ids=str)
def test_row_kernels_compile_as_cupy_receives_them(dtype, tmp_path):
    # no #include and nothing prepended: the text nvcc sees is the text NVRTC gets, and NVRTC reads no file
    assert "#include" not in layernorm_source(dtype) + softmax_source(dtype)
    nvcc_compiles(layernorm_source(dtype), tmp_path)
    nvcc_compiles(softmax_source(dtype), tmp_path)


def test_every_fused_step_of_a_transformer_plan_has_compiling_cuda(tmp_path):
    m = compile_model(transformer_block())
    m.run({"x": np.ones((2, 4, 8), np.float32)})
    (plan,) = m._plans.values()
    fused = [k for k in plan.kernels if type(k).__module__.endswith("fused")]
    kinds = {type(k).__name__ for k in fused}
    assert kinds == {"LayerNorm", "Attention", "MatMulBias", "Softmax", "Gelu", "ElementwiseChain"}, kinds
    sources = []
    for k, kernel in enumerate(fused):
        name = type(kernel).__name__
        if name == "ElementwiseChain":
            sources.append(chain_source(kernel.kernels, [np.float32] * kernel.arity, np.float32, name=f"chain_{k}"))
        elif name == "Gelu":
            sources.append(chain_source([(kernel.gelu, [0])], [np.float32], np.float32, name=f"gelu_{k}"))
        elif name == "MatMulBias":   # its activation; the products are cuBLAS's
            sources.append(chain_source([(kernel.activate.__self__, [0])], [np.float32], np.float32, name=f"act_{k}"))
        elif name in ("LayerNorm", "Softmax", "Attention"):
            sources.append((layernorm_source if name == "LayerNorm" else softmax_source)(np.float32))
    assert all(sources), "a fused step without a CUDA form"
    for source in sources:  # each alone: the row kernels share helper names
        nvcc_compiles(source, tmp_path)

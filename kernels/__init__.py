"""rtd's executor: ONNX graphs compiled to NumPy (CPU) and CuPy (GPU) plans.

    model = compile_model(onnx_bytes_or_path, device="cpu")   # refusals: RtdError with a Code
    model.inputs, model.outputs                               # [TensorSpec(name, dtype, shape)]
    model.run({name: ndarray}) -> {name: ndarray}             # thread-safe
    model.run(feeds, profile=True); model.write_trace(path)   # Chrome/Perfetto trace
    model.plan_stats(feeds)                                   # steps, fused ops, arena vs naive bytes

Pipeline: `ir.from_onnx` (functions inlined) → `lower.lower` (compile-time passes) → per input
shape signature: one traced run of `graph.GraphRunner`, `lower.lower_signature` (Shape-chain
folding, element-wise chains) → `plan.Plan` (slot-indexed steps, arena from `memory.place`),
on a GPU wrapped by `cuda_plan.CudaPlan` (its stream, a CUDA graph where shapes are static;
device set-up and generated kernels in `backend_cupy`, their CUDA C in `cuda_source`).
Control-flow bodies get plans of their own (`subgraph.PlannedSubgraph`). On the CPU the hot
kernels are C built at install time (`native`: rtd's own GEMM micro-kernel, the direct 2-D
convolution with its epilogue and fused chains, depthwise convolution, vectorised activations,
softmax and layer normalization, the element-wise chain interpreter, the LSTM and GRU recurrences),
threaded by a pool of their own sized to the tenant's cores.
`backend` is the onnx.backend.base.Backend the node tests run against.
"""
from . import backend
from .model import CompiledModel, TensorSpec, compile_model

__all__ = ["CompiledModel", "TensorSpec", "backend", "compile_model"]

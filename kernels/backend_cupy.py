"""The GPU backend: CuPy as the array module, generated CUDA for fused element-wise chains,
and a memory pool with a hard cap.

CuPy is optional: without it (or without a GPU) `array_module()` refuses with
E_OP_UNSUPPORTED. The CUDA source for a chain is plain text built from each link's `cuda`
expression, so it can be compile-checked with nvcc on a machine that has no GPU.
"""
import numpy as np

from rtd.errors import Code, RtdError

try:  # imported at module import, never lazily: workers run under seccomp
    import cupy
except ImportError as e:  # CPU-only hosts
    cupy, _IMPORT_ERROR = None, f"cupy not installed ({e.name})"
    OUT_OF_MEMORY: tuple = ()
else:
    _IMPORT_ERROR = None
    OUT_OF_MEMORY = (cupy.cuda.memory.OutOfMemoryError,)

_CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.float16): "half",
           np.dtype(np.int32): "int", np.dtype(np.int64): "long long", np.dtype(np.int8): "signed char",
           np.dtype(np.uint8): "unsigned char", np.dtype(np.bool_): "bool"}


def unavailable_reason() -> str | None:
    if cupy is None:
        return _IMPORT_ERROR
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except cupy.cuda.runtime.CUDARuntimeError as e:
        return f"CUDA runtime: {e}"
    return None


def array_module(memory_limit: int | None = None):
    """CuPy, its default pool capped at `memory_limit` bytes (a request past it: E_RESOURCE_EXHAUSTED)."""
    reason = unavailable_reason()
    if reason is not None:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"device cuda unavailable: {reason}")
    if memory_limit is not None:
        cupy.get_default_memory_pool().set_limit(size=memory_limit)
    return cupy


def to_host(value):
    return cupy.asnumpy(value) if cupy is not None and isinstance(value, cupy.ndarray) else value


def chain_body(links: list, ctype: str) -> str | None:
    """CUDA C statements computing a chain, one temporary per link, the last assigned to `out`.

    `links` is [(kernel, argspec)] as in ElementwiseChain: link k's `cuda` expression with in<i>
    bound to chain input x<j> or the previous link's temporary. None when a link has no CUDA form.
    """
    lines = []
    for k, (kernel, spec) in enumerate(links):
        expression = getattr(kernel, "cuda", None)
        if expression is None:
            return None
        for position in sorted(range(len(spec)), reverse=True):  # in10 before in1
            source = spec[position]
            operand = f"t{k - 1}" if source == -1 else ("0" if source is None else f"x{source}")
            expression = expression.replace(f"in{position}", operand)
        lines.append(f"{ctype} t{k} = ({ctype})({expression});")
    lines.append(f"out = t{len(links) - 1};")
    return " ".join(lines)


def chain_source(links: list, in_dtypes: list, out_dtype, name: str = "rtd_chain") -> str | None:
    """A complete CUDA C kernel (grid-stride loop over n contiguous elements) for a chain whose
    inputs already have the output's shape: what the nvcc compile check builds."""
    out_type = _CTYPES[np.dtype(out_dtype)]
    body = chain_body(links, out_type)
    if body is None:
        return None
    params = ", ".join(f"const {_CTYPES[np.dtype(d)]}* __restrict__ p{i}" for i, d in enumerate(in_dtypes))
    loads = "".join(f"    const {_CTYPES[np.dtype(d)]} x{i} = p{i}[i];\n" for i, d in enumerate(in_dtypes))
    return (
        "#include <cuda_fp16.h>\n"
        f'extern "C" __global__ void {name}({params}{", " if params else ""}{out_type}* __restrict__ out_, long long n) {{\n'
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n"
        f"{loads}    {out_type} out;\n    {body}\n    out_[i] = out;\n  }}\n}}\n"
    )


def chain_kernel(links: list, n_inputs: int, out_dtype):
    """A CuPy ElementwiseKernel computing the chain with broadcasting (inputs x0.., output out)."""
    body = chain_body(links, _CTYPES[np.dtype(out_dtype)])
    if body is None or cupy is None:
        return None
    params = ", ".join(f"T{i} x{i}" for i in range(n_inputs))
    return cupy.ElementwiseKernel(params, f"{_CTYPES[np.dtype(out_dtype)]} out", body, "rtd_chain")

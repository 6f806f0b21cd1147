"""The CUDA C that rtd generates, as plain text: element-wise chain bodies and the row kernels of
the fused LayerNorm and Softmax steps.

Kept apart from backend_cupy (which turns this text into CuPy kernels) so that nvcc can
compile-check every generated source on a machine without a GPU or CuPy. The row kernels
include no header: NVRTC then reads no file when it compiles them (a confined worker's
filter refuses most opens; the chains, as CuPy ElementwiseKernels, include CuPy's headers).
"""
import numpy as np

CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.float16): "half",
          np.dtype(np.int32): "int", np.dtype(np.int64): "long long", np.dtype(np.int8): "signed char",
          np.dtype(np.uint8): "unsigned char", np.dtype(np.bool_): "bool"}
# the row kernels' element types (half stays on CuPy's own ops: its C type differs between
# CuPy's headers and cuda_fp16.h, and these kernels include neither)
ROW_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
# -infinity by bit pattern: INFINITY is a <math.h> macro, and these kernels include no header
_NEG_INF = {"float": "__int_as_float(0xff800000)", "double": "__longlong_as_double(0xfff0000000000000LL)"}
ROW_THREADS = 256  # threads per row block: 8 warps, whose partial results meet in shared memory


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
    inputs already have the output's shape: what the nvcc compile check builds for the body
    that backend_cupy.chain_kernel hands to a CuPy ElementwiseKernel."""
    out_type = CTYPES[np.dtype(out_dtype)]
    body = chain_body(links, out_type)
    if body is None:
        return None
    params = ", ".join(f"const {CTYPES[np.dtype(d)]}* __restrict__ p{i}" for i, d in enumerate(in_dtypes))
    loads = "".join(f"    const {CTYPES[np.dtype(d)]} x{i} = p{i}[i];\n" for i, d in enumerate(in_dtypes))
    return (
        "#include <cuda_fp16.h>\n"
        f'extern "C" __global__ void {name}({params}{", " if params else ""}{out_type}* __restrict__ out_, long long n) {{\n'
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n"
        f"{loads}    {out_type} out;\n    {body}\n    out_[i] = out;\n  }}\n}}\n"
    )


def _block_reduce(t: str) -> str:
    """Block-wide sum and max of one value per thread (warp shuffles, then one warp over the
    warps' results); every thread gets the result. `shared` holds ROW_THREADS / 32 values."""
    return f"""
__device__ __forceinline__ {t} rtd_warp_sum({t} v) {{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}}
__device__ __forceinline__ {t} rtd_warp_max({t} v) {{
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}}
__device__ {t} rtd_block_sum({t} v, {t}* shared) {{
  v = rtd_warp_sum(v);
  __syncthreads();  /* the previous reduction's readers are done with shared */
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? shared[threadIdx.x] : ({t})0;
  if (threadIdx.x < 32) {{ v = rtd_warp_sum(v); if (threadIdx.x == 0) shared[0] = v; }}
  __syncthreads();
  return shared[0];
}}
__device__ {t} rtd_block_max({t} v, {t}* shared) {{
  v = rtd_warp_max(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? shared[threadIdx.x] : {_NEG_INF[t]};
  if (threadIdx.x < 32) {{ v = rtd_warp_max(v); if (threadIdx.x == 0) shared[0] = v; }}
  __syncthreads();
  return shared[0];
}}
"""


def layernorm_source(dtype) -> str:
    """`rtd_layernorm_<t>`: one block per row of `cols` contiguous values: y = (x - mean) /
    sqrt(var + eps) * gamma + beta, the variance over the centred values (two passes, like
    the unfused graph), gamma and beta one value per column (ones and zeros when the graph has none)."""
    t = ROW_TYPES[np.dtype(dtype)]
    return _block_reduce(t) + f"""
extern "C" __global__ void rtd_layernorm_{t}(const {t}* __restrict__ x, const {t}* __restrict__ gamma,
    const {t}* __restrict__ beta, {t}* __restrict__ y, long long cols, {t} eps) {{
  __shared__ {t} shared[{ROW_THREADS // 32}];
  const {t}* row = x + blockIdx.x * cols;
  {t}* out = y + blockIdx.x * cols;
  {t} s = 0;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += row[j];
  const {t} mean = rtd_block_sum(s, shared) / ({t})cols;
  {t} q = 0;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{ {t} d = row[j] - mean; q += d * d; }}
  const {t} inv_std = ({t})1 / sqrt(rtd_block_sum(q, shared) / ({t})cols + eps);
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
    {t} v = (row[j] - mean) * inv_std;
    out[j] = v * gamma[j] + beta[j];
  }}
}}
"""


def softmax_source(dtype) -> str:
    """`rtd_softmax_<t>`: one block per row of `cols` contiguous values: y = softmax(x * scale)
    with the row maximum subtracted first (y may be x: each thread rereads only its own
    elements after the reductions)."""
    t = ROW_TYPES[np.dtype(dtype)]
    return _block_reduce(t) + f"""
extern "C" __global__ void rtd_softmax_{t}(const {t}* x, {t}* y, long long cols, {t} scale) {{
  __shared__ {t} shared[{ROW_THREADS // 32}];
  const {t}* row = x + blockIdx.x * cols;
  {t}* out = y + blockIdx.x * cols;
  {t} m = {_NEG_INF[t]};
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) m = fmax(m, row[j] * scale);
  m = rtd_block_max(m, shared);
  {t} s = 0;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{ {t} e = exp(row[j] * scale - m); out[j] = e; s += e; }}
  const {t} inv = ({t})1 / rtd_block_sum(s, shared);
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) out[j] *= inv;
}}
"""

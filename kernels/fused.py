"""Kernels the lowering passes create (domain "rtd"): each replaces a pattern of ONNX nodes.

A fused kernel writes into buffers the memory planner hands it (`out`, and `scratch` for
chains) so the plan allocates nothing per call; given None it allocates its own. They are
not registered ops: models cannot name them, only the passes can.

On a GPU (xp is CuPy) each has one device form: GELU and element-wise chains are one
generated element-wise kernel, LayerNorm and Softmax (Attention's too) one row kernel
(backend_cupy), matrix products cuBLAS through xp.matmul. Where a row kernel does not fit
(half precision, a non-contiguous view, per-element gamma, Softmax off the last axis, an
attention mask) the same steps run as CuPy array ops, still on the device.
"""
import math

import numpy as np

from rtd.errors import Code, RtdError

from .backend_cupy import chain_kernel, layernorm_rows, rows_kernel_fits, softmax_rows
from .ir import Node
from .native.chain import Program
from .native.gemm import gemm_batched, gemm_panels, gemm_rows
from .ops._norm import compiled_layernorm, standardize
from .ops._softmax import softmax
from .ops._window import scratch
from .ops.op_gelu import Gelu_20
from .ops.op_relu import Relu_6


class Fused:
    """A pass-made kernel: `run(*inputs, *buffers) -> tuple`; `buffers` names its planned buffers."""

    needs_scope = False
    buffers = ("out",)
    arity = 1  # positional inputs before the buffers (absent trailing ones arrive as None)

    def __init__(self, attrs: dict, xp=np, make_kernel=None):
        self.__dict__.update(attrs)
        self.xp = xp
        self.setup(make_kernel)

    def setup(self, make_kernel) -> None:
        pass

    def buffer_shape(self, k: int, inputs: list, out: tuple) -> tuple:
        """(shape, dtype) of buffer k given the (shape, dtype) of the inputs and of the output."""
        return out


class OnDevice:
    """An Elementwise op kernel as one generated CuPy kernel per dtype (its `cuda` expression),
    falling back to the op's own compute where there is none (half precision)."""

    def __init__(self, op):
        self.op, self.kernels = op, {}

    def __call__(self, x, out):  # `out` may be x
        kernel = self.kernels.get(x.dtype, False)
        if kernel is False:
            kernel = self.kernels[x.dtype] = chain_kernel([(self.op, [0])], 1, x.dtype)
        return self.op.compute(x, out=out) if kernel is None else kernel(x, out)


def _activation(name, xp, gelu_scale_op, gelu_scale):
    """The element-wise op kernel a MatMulBias applies in place to its output (None: none); an Erf-form
    Gelu scales erf's argument as its graph did."""
    if name == "Relu":
        return Relu_6({}, xp)
    if name in ("Gelu", "GeluTanh"):
        gelu = Gelu_20({"approximate": "tanh" if name == "GeluTanh" else "none"}, xp)
        gelu.erf_scale_op, gelu.erf_scale = gelu_scale_op, gelu_scale
        return gelu
    return None


class Gelu(Fused):
    """x * Φ(x): the Erf form (approximate "none") or the Tanh form of exporters (the Gelu op's kernel)."""

    approximate = "none"
    scale_op, scale = "Mul", math.sqrt(0.5)  # the Erf form: how the exporter scaled x for erf (Mul or Div by scale)

    def setup(self, make_kernel):
        self.gelu = Gelu_20({"approximate": self.approximate}, self.xp)
        self.gelu.erf_scale_op, self.gelu.erf_scale = self.scale_op, self.scale
        self.on_device = OnDevice(self.gelu) if self.xp is not np else None

    def run(self, x, out=None):
        if self.on_device is not None:
            return (self.on_device(x, out if out is not None else self.xp.empty_like(x)),)
        return (self.gelu.compute(x, out=out),)


class MatMulBias(Fused):
    """MatMul(a, w) + bias, then an optional activation, in one output buffer (Gemm for any rank). With
    `packed_shape` (K, N), w is that weight's GEMM panels, the only form of it the model kept (lower/packing.py)."""

    arity = 3
    activation = None
    packed_shape = None
    gelu_scale_op, gelu_scale = Gelu_20.erf_scale_op, Gelu_20.erf_scale

    def setup(self, make_kernel):
        activate = _activation(self.activation, self.xp, self.gelu_scale_op, self.gelu_scale)
        if activate is None:
            self.activate = None
        elif self.xp is np:
            self.activate = activate.compute
        else:
            self.activate = OnDevice(activate)   # one generated pass over the product, in place

    def run(self, a, w, bias=None, out=None):
        xp, packed_shape = self.xp, self.packed_shape
        if packed_shape is not None or (xp is np and a.ndim >= 2 and w.ndim == 2 and a.dtype == np.float32):
            # rows shared among the threads. A strided a (a Transpose's view) is copied, not handed to np.matmul:
            # a native program, whose values are all contiguous, runs this GEMM on it, and a model's runs must
            # agree bit for bit
            a = np.ascontiguousarray(a)
            n = w.shape[1] if packed_shape is None else packed_shape[1]
            flat_bias = np.ascontiguousarray(bias.reshape(-1)) if bias is not None and bias.shape[-1:] == (bias.size,) else None
            rows_out = None if out is None else out.reshape(-1, n)
            if packed_shape is None:   # w: a constant, by the fusion
                rows = gemm_rows(a.reshape(-1, a.shape[-1]), w, flat_bias, out=rows_out, constant=True)
            else:   # w is the weight's only form: gemm_panels takes these rows or refuses them
                rows = gemm_panels(a.reshape(-1, a.shape[-1]), w, *packed_shape, flat_bias, rows_out)
            if rows is not None:
                out = rows.reshape(*a.shape[:-1], n) if out is None else out
                if bias is not None and flat_bias is None:
                    xp.add(out, bias, out=out)
                if self.activate is not None:
                    self.activate(out, out=out)
                return (out,)
        if a.ndim > 2 and a.flags.c_contiguous:  # one GEMM over all rows, not one per batch entry
            rows = a.reshape(-1, a.shape[-1])
            flat = xp.matmul(rows, w, out=None if out is None else out.reshape(rows.shape[0], w.shape[1]))
            out = flat.reshape(*a.shape[:-1], w.shape[1]) if out is None else out
        else:
            out = xp.matmul(a, w, out=out)
        if bias is not None:
            xp.add(out, bias, out=out)
        if self.activate is not None:
            self.activate(out, out=out)
        return (out,)


class LayerNorm(Fused):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""

    epsilon = 1e-5
    arity = 3

    def setup(self, make_kernel):
        self.identity: dict = {}  # (cols, dtype) -> (ones, zeros): the row kernel's gamma and beta when absent

    def _per_column(self, x, gamma, beta):
        """(gamma, beta) as one value per column for the row kernel, or None where they are not."""
        cols = x.shape[-1]
        if any(p is not None and (p.size != cols or p.shape[-1] != cols or p.dtype != x.dtype) for p in (gamma, beta)):
            return None
        if gamma is None or beta is None:
            key = (cols, x.dtype)
            if key not in self.identity:
                self.identity[key] = (self.xp.ones(cols, x.dtype), self.xp.zeros(cols, x.dtype))
            ones, zeros = self.identity[key]
            gamma, beta = ones if gamma is None else gamma, zeros if beta is None else beta
        return self.xp.ascontiguousarray(gamma).reshape(cols), self.xp.ascontiguousarray(beta).reshape(cols)

    def run(self, x, gamma=None, beta=None, out=None):
        if self.xp is not np and rows_kernel_fits(x) and (out is None or out.flags.c_contiguous and out.dtype == x.dtype):
            per_column = self._per_column(x, gamma, beta)
            if per_column is not None:
                return (layernorm_rows(x, *per_column, self.epsilon, out if out is not None else self.xp.empty_like(x)),)
        if self.xp is np:   # float32 rows: the compiled kernel a plan's program runs too (kernels/emit._layernorm)
            y = compiled_layernorm(x, gamma, beta, self.epsilon, out)
            if y is not None:
                return (y,)
        y, _, _ = standardize(self.xp, x, (x.ndim - 1,), self.epsilon, x.dtype, out=out)
        if gamma is not None:
            y *= gamma
        if beta is not None:
            y += beta
        return (y,)


class Softmax(Fused):
    axis = -1

    def run(self, x, out=None):
        axis = self.axis % x.ndim
        if self.xp is not np and axis == x.ndim - 1 and rows_kernel_fits(x) and (out is None or out.flags.c_contiguous):
            return (softmax_rows(x, 1.0, out if out is not None else self.xp.empty_like(x)),)
        return (softmax(self.xp, x, axis, out),)


class Attention(Fused):
    """softmax(scale(q @ kt) + mask) @ v with the score matrix computed in place."""

    scale = 1.0
    scale_op = "Mul"  # how the exporter applied it: Mul by scale or Div by scale
    buffers = ("out", "scores")
    arity = 4

    def buffer_shape(self, k, inputs, out):
        if k == 0:
            return out
        (q, dtype), (kt, _) = inputs[0], inputs[1]
        return np.broadcast_shapes(q[:-2], kt[:-2]) + (q[-2], kt[-1]), dtype

    def run(self, q, kt, v, mask=None, out=None, scores=None):
        s = None
        if self.xp is np and (mask is None or mask.dtype == np.float32) and v.dtype == np.float32 and v.shape[:-2] == q.shape[:-2]:
            # float32 on the CPU: the compiled batched GEMMs (whole products shared among the threads), then the
            # steps below: what a native program's ops compute (kernels/emit.py)
            s = gemm_batched(q, kt, out=scores)
        native = s is not None
        if not native:
            if not q.flags.c_contiguous:  # a head-split transpose: a contiguous copy is the faster GEMM operand
                packed = scratch("attention-q", q.shape, q.dtype, self.xp)
                self.xp.copyto(packed, q)
                q = packed
            s = self.xp.matmul(q, kt, out=scores)
            if self.xp is not np and mask is None and rows_kernel_fits(s):  # scale and softmax in one row pass
                softmax_rows(s, 1 / self.scale if self.scale_op == "Div" else self.scale, s)
                return (self.xp.matmul(s, v, out=out),)
        # scaled after the product, like the unfused graph: bit-equal scores keep quantized
        # models that requantize downstream on the interpreter's values
        if self.scale_op == "Div":
            s /= s.dtype.type(self.scale)
        else:
            s *= s.dtype.type(self.scale)
        if mask is not None:
            s += mask
        softmax(self.xp, s, s.ndim - 1, out=s)
        y = gemm_batched(s, v, out=out) if native else None
        return (self.xp.matmul(s, v, out=out) if y is None else y,)


class ConvActivation(Fused):
    """Conv(x, w, b), then `+ other` and/or Relu in place on the Conv's fresh output; or, with `links`
    (lower/chains.fuse_conv_chains), Conv(x, w, b), Relu if asked, then an element-wise chain whose input
    `chain_position` is the Conv's output and whose other inputs follow `other` (constants of one value or
    one per channel): the compiled convolution runs the chain on each output tile, else it runs after."""

    buffers = ()  # the Conv allocates its output; the rest is in place on it
    arity = 4
    relu = False
    links = None

    def setup(self, make_kernel):
        self.kernel = make_kernel(Node("Conv", "", [], [], self.conv))
        self.chain = None
        if self.links:
            self.chain = ElementwiseChain({"links": self.links, "shape": self.shape, "dtype": self.dtype}, self.xp, make_kernel)
            self.arity = 3 + self.chain.arity

    def run(self, x, w, b=None, other=None, *constants):
        if self.chain is not None:
            inputs = list(constants)
            inputs.insert(self.chain_position, None)
            finish = lambda y: self.chain.run(*[y if v is None else v for v in inputs], None, None)[0]  # noqa: E731
            return self.kernel.run_with_relu(x, w, b, self.relu, (self.chain.compiled, inputs, finish))
        if other is None:   # Conv+Relu: the Conv applies the ReLU (the compiled depthwise kernel in its one pass)
            return self.kernel.run_with_relu(x, w, b, self.relu)
        (y,) = self.kernel.run(x, w, b)
        if np.broadcast_shapes(y.shape, other.shape) == y.shape and y.flags.writeable:
            self.xp.add(y, other, out=y)
        else:  # `other` broadcasts y up: not in place
            y = self.xp.add(y, other)
        if self.relu:
            self.xp.maximum(y, y.dtype.type(0), out=y)
        return (y,)


class ElementwiseChain(Fused):
    """Element-wise kernels applied link after link, ping-ponging between `out` and `scratch`.

    `links` is [(node, argspec)]: argspec[i] is an index into the chain's inputs, -1 for the
    previous link's result, or None for an absent input. Every link's result has the chain's
    output shape and dtype (the fusion pass checks), so each writes into a planned buffer.
    """

    buffers = ("out", "scratch")

    def setup(self, make_kernel):
        self.kernels = [(make_kernel(node), spec) for node, spec in self.links]
        self.arity = 1 + max((i for _, spec in self.links for i in spec if i is not None), default=-1)
        # on a GPU the whole chain is one generated kernel (None on the CPU or without CUDA forms)
        self.gpu = chain_kernel(self.kernels, self.arity, self.dtype) if self.xp is not np else None
        # on the CPU a chain of the interpreter's ops runs compiled, block by block (None otherwise)
        self.compiled = Program.build(self.links, self.arity, self.dtype) if self.xp is np else None
        if self.gpu is None and self.compiled is None and len(self.kernels) == 1 \
                and self.kernels[0][1] == list(range(self.arity)):
            self.run = self._run_one  # the common single op without a compiled form: no operand shuffling

    def _run_one(self, *args):
        out = args[-1]
        if out is None:
            out = self.xp.empty(self.shape, self.dtype)
        result = self.kernels[0][0].compute(*args[:-1], out=out)
        if result is not out:
            self.xp.copyto(out, result)
        return (out,)

    def run(self, *args):
        inputs, out = args[: self.arity], args[self.arity]
        n = len(self.kernels)
        scratch = args[self.arity + 1] if n > 1 else None
        if out is None:
            out = self.xp.empty(self.shape, self.dtype)
        if self.gpu is not None:
            return (self.gpu(*inputs, out),)
        if self.compiled is not None and self.compiled(inputs, out) is not None:
            return (out,)
        if scratch is None and n > 1:
            scratch = self.xp.empty(self.shape, self.dtype)
        prev = None
        for k, (kernel, spec) in enumerate(self.kernels):
            target = out if (n - 1 - k) % 2 == 0 else scratch
            operands = [prev if i == -1 else (None if i is None else inputs[i]) for i in spec]
            prev = kernel.compute(*operands, out=target)
            if prev is not target:  # a kernel that ignored `out`: keep the result in our buffer
                self.xp.copyto(target, prev)
                prev = target
        return (prev,)


KERNELS = {cls.__name__: cls for cls in (Gelu, MatMulBias, LayerNorm, Softmax, Attention, ConvActivation, ElementwiseChain)}


def fused_kernel(node, xp, make_kernel):
    cls = KERNELS.get(node.op_type)
    if cls is None:
        raise RtdError(Code.E_OP_UNSUPPORTED, f"{node.op_type} (domain rtd)")
    return cls(node.attrs, xp, make_kernel)

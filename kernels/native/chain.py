"""The guarded call into the compiled element-wise chain interpreter (chain.c).

`Program.build(links)` turns a fused chain's links into the interpreter's opcode list, once, at
load; a chain with an op the interpreter has no loop for or a dtype other than float32 gets None
and runs link by link in NumPy. Transcendental links (Sigmoid, Tanh, Exp, Erf, Gelu) run the same
compiled code as those ops' kernels (native/activation.py), so both ways give the same bits.
A call checks each input's dtype, layout and how it broadcasts to the output (full size, a scalar,
repeating along one block of axes, or along two with a broadcast block between them) and returns None
for anything else.
"""

import numpy as np

from rtd.errors import Code, RtdError

from . import compiled

FLOAT32 = np.dtype(np.float32)
PREVIOUS, ABSENT = -1, -2
MAX_INPUTS = 16   # chain.c's
FLT_MAX = float(np.finfo(np.float32).max)
MIN_ELEMENTS = 2048   # measured: below this NumPy's per-link calls cost less than the wrapper
# op type -> (opcode, operand count, (alpha attribute, default), (beta attribute, default)); chain.h's numbers
OPCODES = {
    "Add": (0, 2, None, None), "Sub": (1, 2, None, None), "Mul": (2, 2, None, None), "Div": (3, 2, None, None),
    "Max": (4, 2, None, None), "Min": (5, 2, None, None), "Clip": (6, 3, None, None), "Relu": (7, 1, None, None),
    "LeakyRelu": (8, 1, ("alpha", 0.01), None), "HardSigmoid": (9, 1, ("alpha", 0.2), ("beta", 0.5)),
    "HardSwish": (10, 1, None, None), "Neg": (11, 1, None, None), "Abs": (12, 1, None, None),
    "Sigmoid": (13, 1, None, None), "Tanh": (14, 1, None, None), "Exp": (15, 1, None, None), "Erf": (16, 1, None, None),
    "Gelu": (17, 1, None, None),   # 18 with approximate="tanh"
    "Sqrt": (19, 1, None, None),
}
GELU_TANH = 18


def _layout(shape, out_shape) -> tuple | None:
    """chain.h's (len, inner, planes, stride) reading an input of `shape` broadcast to `out_shape`, or None.

    The output's axes (its size-1 ones left out) fall into blocks the input spans in full or broadcasts;
    trailing broadcast axes make `inner`, leading ones repeat the input. One spanned block is one plane of
    len = its size; two, apart by a broadcast block, are planes of the second's size, one per element of
    the first (an additive attention's (1, 96, 1, 512) + (1, 1, 96, 512)); more are left to NumPy.
    """
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    if len(shape) != len(out_shape) or any(s not in (1, o) for s, o in zip(shape, out_shape)):
        return None
    blocks: list = []   # [spanned, size] of consecutive output axes
    for s, o in zip(shape, out_shape):
        if o == 1:
            continue
        if blocks and blocks[-1][0] == (s == o):
            blocks[-1][1] *= o
        else:
            blocks.append([s == o, o])
    inner = blocks.pop()[1] if blocks and not blocks[-1][0] else 1
    if blocks and not blocks[0][0]:
        blocks.pop(0)
    if not blocks:
        return 1, 1, 1, 1
    if len(blocks) == 1:
        return blocks[0][1], inner, 1, 1
    if len(blocks) == 3:
        (_, planes), (_, between), (_, size) = blocks
        return size, inner, planes, between * size * inner
    return None


class Program:
    """A chain's opcode list and parameters, made once per fused kernel."""

    def __init__(self, links, params, arity):
        self.links, self.params, self.arity = links, params, arity
        self.link_buffer = compiled.ffi.from_buffer("int32_t[]", links)
        self.param_buffer = compiled.ffi.from_buffer("float[]", params)
        self.layouts: dict = {}   # input shapes -> (layouts, the same as one C array), or None

    @classmethod
    def build(cls, links, arity: int, dtype):
        """The program for [(node, spec)] links (ElementwiseChain's), or None when it has no C form."""
        if compiled is None or np.dtype(dtype) != FLOAT32 or not 0 < arity <= MAX_INPUTS:
            return None
        codes, params = [], []
        for node, spec in links:
            entry = OPCODES.get(node.op_type) if node.domain == "" else None
            if entry is None:
                return None
            opcode, count, alpha, beta = entry
            if node.op_type == "Gelu" and node.attrs.get("approximate", "none") != "none":
                opcode = GELU_TANH
            if node.op_type == "Clip" and ("min" in node.attrs or "max" in node.attrs):
                return None   # Clip-6's attribute limits: left to NumPy (rare)
            if node.op_type in ("Max", "Min") and len(spec) != 2 or len(spec) > count or len(spec) < 1:
                return None
            sources = [ABSENT if s is None else s for s in spec] + [ABSENT] * (3 - len(spec))
            if count < 3 and ABSENT in sources[:count]:
                return None
            codes += [opcode, *sources]
            params += [float(node.attrs.get(alpha[0], alpha[1])) if alpha else 0.0,
                       float(node.attrs.get(beta[0], beta[1])) if beta else 0.0]
        return cls(np.array(codes, np.int32), np.array(params, np.float32), arity)

    def __call__(self, inputs, out):
        """Run the chain into out (C-contiguous float32); None when an input does not fit, or when
        the output is too small for one pass to beat NumPy's few calls (the wrapper costs microseconds)."""
        if out.size < MIN_ELEMENTS or out.dtype != FLOAT32 or not out.flags.c_contiguous or len(inputs) != self.arity:
            return None
        key = tuple(getattr(x, "shape", None) for x in inputs)
        layouts = self.layouts.get(key)
        if layouts is None:
            found = [_layout(s, out.shape) if s is not None else None for s in key]
            layouts = self.layouts[key] = None if None in found else (
                found, compiled.ffi.new("int64_t[]", [n for f in found for n in f]))
        if layouts is None:
            return None
        found, flat = layouts
        ffi = compiled.ffi
        buffers = []
        for x, layout in zip(inputs, found):
            if layout[0] * layout[2] != x.size or x.dtype != FLOAT32:
                return None
            if not (x.flags.c_contiguous and x.flags.aligned):
                if x.size == out.size:
                    return None   # not worth a copy: NumPy's loops take strided operands
                x = np.ascontiguousarray(x)   # a small broadcast operand (e.g. a weight view): copied
            if x.size == out.size and np.may_share_memory(x, out) \
                    and x.ctypes.data != out.ctypes.data:
                return None   # a partial overlap: NumPy's ufuncs buffer it, the block loop would not
            buffers.append(ffi.from_buffer("float[]", x))
        status = compiled.lib.rtd_chain_f32(buffers, flat, len(buffers), self.link_buffer, self.param_buffer,
                                            len(self.params) // 2, ffi.from_buffer("float[]", out, require_writable=True),
                                            out.size)
        if status != 0:   # build() and the checks above make this unreachable; the C checks again all the same
            raise RtdError(Code.E_INTERNAL, f"chain interpreter refused its arguments (status {status})")
        return out

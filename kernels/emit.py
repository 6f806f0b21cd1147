"""The native form of a planned step: the program ops (native/program.py) that compute a node for one
shape signature, or None where the step stays a Python call.

`emit(node, kernel, step)` looks the node up in EMITTERS (by op type, "rtd" fused kernels included); an
emitter reads the node's attributes from its kernel, the shapes and dtypes the signature fixed and the
constants, and returns an `Emitted`: ops, plus outputs that are views of inputs (`aliases`, name ->
(input, byte offset)). It declines (None) anything it does not reproduce exactly as the kernel's own
run computes it: same compiled code for the arithmetic (convolution, GEMM, chains, activations,
softmax, recurrences), exact copies for data movement.

Data movement (Slice, Transpose, Concat, Pad, Split, Gather with constant indices, ...) is worked out by
running the op's own kernel once on arrays of element indices (`_probe`): where each output element
comes from, so the copies follow the kernel's semantics by construction; an affine map becomes one
strided copy (or a view), anything else an element gather from the probe's index table.
"""
import math
from typing import NamedTuple

import numpy as np

from .ir import RTD_DOMAIN, Node
from .native import compiled
from .native import conv as native_conv
from .native.chain import FLOAT32, OPCODES, Program, _layout
from .native.gemm import COLUMNS, PACKED, ROWS
from .native.gemm import _pack as pack_gemm
from .native.packed import packed
from .native.program import Constant, Op, Scratch, Value, reads, writes
from .ops._quant import frozen
from .ops._window import geometry

# program.h's opcodes
CONV, DEPTHWISE, GEMM, MATMUL, CHAIN, ACTIVATION, SOFTMAX, COPY, FILL, CAST, REDUCE, POOL, LSTM, GATHER = range(1, 15)
# move.h's element types, pool.h's reduction kinds
TYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int64): 2, np.dtype(np.int32): 3,
         np.dtype(np.int8): 4, np.dtype(np.uint8): 5, np.dtype(np.bool_): 6}
REDUCE_KINDS = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3}
MAX_DIMS = 8                 # move.h's RTD_MOVE_MAX_DIMS
FEW_ROWS = 4                 # gemm.c's: up to this many rows a transposed b is read as dot products
PROBE_ELEMENTS = 1 << 20     # data movement larger than this stays a NumPy call (the probe's index arrays)
GATHER_TABLE_ELEMENTS = 1 << 16   # an irregular movement's index table, at most
CHAIN_LINK_ADD, CHAIN_LINK_RELU = OPCODES["Add"][0], OPCODES["Relu"][0]


class Emitted(NamedTuple):
    ops: list
    aliases: dict   # output name -> (input name, byte offset): the output is a view of the input's bytes


class Step:
    """What an emitter knows of one step: the node, its kernel, the signature's shapes and the constants."""

    def __init__(self, node: Node, kernel, shapes: dict, constants: dict):
        self.node, self.kernel, self.shapes, self.constants = node, kernel, shapes, constants

    def shape(self, name: str) -> tuple:
        value = self.constants.get(name)
        return tuple(value.shape) if value is not None else tuple(self.shapes[name][0])

    def dtype(self, name: str) -> np.dtype:
        value = self.constants.get(name)
        return value.dtype if value is not None else np.dtype(self.shapes[name][1])

    def nbytes(self, name: str) -> int:
        return math.prod(self.shape(name)) * self.dtype(name).itemsize

    def constant(self, name: str):
        return self.constants.get(name) if name else None

    def input(self, i: int) -> str:
        return self.node.inputs[i] if i < len(self.node.inputs) else ""

    def output(self, i: int = 0) -> str:
        return self.node.outputs[i]


def emit(node: Node, kernel, shapes: dict, static: set, constants: dict) -> Emitted | None:
    """The node's program ops for this signature, or None (a Python call)."""
    if compiled is None:
        return None
    outputs = [o for o in node.outputs if o]
    if not outputs or any(o not in static or o not in shapes for o in outputs) \
            or any(n and (n not in static or (n not in shapes and n not in constants)) for n in node.inputs) or node.implicit:
        return None
    emitter = EMITTERS.get((node.domain, node.op_type))
    if emitter is None:
        return None
    step = Step(node, kernel, shapes, constants)
    if any(step.dtype(o) == object for o in outputs):
        return None
    return emitter(step)


# ---- views and data movement ----

def _alias(step: Step) -> Emitted | None:
    """Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output is the input's bytes."""
    x, y = step.input(0), step.output()
    if step.nbytes(x) != step.nbytes(y) or step.dtype(x) != step.dtype(y):
        return None
    return Emitted([], {y: (x, 0)})


def _probe(step: Step, data: tuple, sentinel: int | None) -> list | None:
    """Per output, the flat index (over the data inputs one after the other) of the element each output
    element copies, or -1 where it copies none (Pad's fill: the input at position `sentinel` is given as
    -1), from the op's kernel run on index arrays; data holds the input positions of the data inputs."""
    if any(math.prod(step.shape(o)) > PROBE_ELEMENTS for o in step.node.outputs if o):
        return None
    args, base = [], 0
    count = max(len(step.node.inputs), 0 if sentinel is None else sentinel + 1)
    for i, name in enumerate(step.node.inputs + [""] * (count - len(step.node.inputs))):
        if i == sentinel:
            args.append(np.array(-1, np.int64))
        elif i in data:
            size = math.prod(step.shape(name))
            args.append(np.arange(base, base + size, dtype=np.int64).reshape(step.shape(name)))
            base += size
        elif name and step.constant(name) is None:
            return None   # a parameter only known at run time
        else:
            args.append(step.constant(name) if name else None)
    try:
        results = step.kernel.run(*args)
    except Exception:   # a kernel that refuses index arrays keeps its NumPy call
        return None
    if len(results) < len([o for o in step.node.outputs if o]):
        return None
    return [np.asarray(r) for r in results]


def _affine(index: np.ndarray):
    """(origin, strides) when index = origin + sum(coord * stride), else None."""
    if index.size == 0:
        return 0, [0] * index.ndim
    origin = int(index.reshape(-1)[0])
    strides, grid = [], np.full((1,) * index.ndim, origin, np.int64)
    for axis, n in enumerate(index.shape):
        unit = [0] * index.ndim
        if n > 1:
            unit[axis] = 1
            stride = int(index[tuple(unit)]) - origin
        else:
            stride = 0
        strides.append(stride)
        shape = [1] * index.ndim
        shape[axis] = n
        grid = grid + (np.arange(n, dtype=np.int64) * stride).reshape(shape)
    return (origin, strides) if np.array_equal(np.broadcast_to(grid, index.shape), index) else None


def _repeats(index: np.ndarray):
    """index with every axis whose elements come in equal runs of f > 1 (nearest upsampling by a whole factor f)
    split into (n / f, f), so an affine test can find the zero stride of the repeats; None where no axis does."""
    shape = []
    for axis, n in enumerate(index.shape):
        line = index[(0,) * axis + (slice(None),) + (0,) * (index.ndim - axis - 1)]
        f = 1
        while f < n and line[f] == line[0]:
            f += 1
        shape += [n // f, f] if 1 < f < n and n % f == 0 else [n]
    return index.reshape(shape) if len(shape) > index.ndim else None


def _contiguous_strides(shape) -> list:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def _copy_params(size: int, shape, src_strides, dst_strides, src_origin: int, dst_origin: int) -> tuple | None:
    """COPY's parameters with size-1 axes dropped and runs that are contiguous on both sides merged."""
    dims = [(n, s, d) for n, s, d in zip(shape, src_strides, dst_strides) if n != 1]
    merged: list = []
    for n, s, d in dims:
        if merged and merged[-1][1] == s * n and merged[-1][2] == d * n:
            m = merged.pop()
            n, s, d = m[0] * n, s, d
        merged.append((n, s, d))
    if len(merged) > MAX_DIMS:
        return None
    return (size, len(merged), *[m[0] for m in merged], *[m[1] for m in merged], *[m[2] for m in merged], src_origin, dst_origin)


def _fill_bits(value, dtype: np.dtype) -> int:
    raw = np.zeros(8, np.uint8)
    raw[:dtype.itemsize] = np.frombuffer(np.asarray(value, dtype).tobytes(), np.uint8)
    return int(raw.view(np.int64)[0])


def _movement(data: tuple | None, fill_input: int | None = None):
    """An emitter for an op that only moves elements of its inputs at positions `data` (None: all of them;
    Pad: `fill_input` is the constant-value input, filling what no input element reaches)."""
    def emitter(step: Step) -> Emitted | None:
        positions = tuple(range(len(step.node.inputs))) if data is None else data
        if fill_input is not None and step.kernel.since < 11:
            return None   # Pad-2's value is an attribute: no sentinel to probe with
        names = [step.input(i) for i in positions]
        if any(not n for n in names) or len({step.dtype(n) for n in names}) != 1:
            return None
        dtype = step.dtype(names[0])
        if dtype not in TYPES or any(step.dtype(o) != dtype for o in step.node.outputs if o):
            return None
        probes = _probe(step, positions, fill_input)
        if probes is None:
            return None
        sizes = [math.prod(step.shape(n)) for n in names]
        bases = np.cumsum([0] + sizes)
        ops, aliases = [], {}
        for out, index in zip(step.node.outputs, probes):
            if not out:
                continue
            filled = index < 0
            if filled.any():
                value = step.constant(step.input(fill_input)) if step.input(fill_input) else None
                fill = 0 if value is None else np.asarray(value).reshape(-1)[0]
                ops.append(Op(FILL, (writes(Value(out)),), (dtype.itemsize, index.size, _fill_bits(fill, dtype))))
            for k, name in enumerate(names):
                inside = (index >= bases[k]) & (index < bases[k + 1])
                if not inside.any():
                    continue
                part = _part(step, out, name, index - bases[k], inside, dtype, len(names) == 1 and not filled.any())
                if part is None:
                    return None
                if isinstance(part, tuple):
                    aliases[out] = part
                else:
                    ops += part
        return Emitted(ops, aliases)
    return emitter


def _part(step: Step, out: str, name: str, index: np.ndarray, inside: np.ndarray, dtype: np.dtype, whole: bool):
    """The ops copying input `name`'s elements into `out` where `inside` (index: flat positions in the
    input), or (name, offset) when the output is a view of the input."""
    size = dtype.itemsize
    index, inside = index.reshape(index.shape or (1,)), inside.reshape(inside.shape or (1,))   # a scalar as one element
    where = np.nonzero(inside)
    lo = [int(w.min()) for w in where]
    hi = [int(w.max()) + 1 for w in where]
    box = tuple(slice(a, b) for a, b in zip(lo, hi))
    sub = index[box]
    out_strides = _contiguous_strides(index.shape)
    dst_origin = sum(a * s for a, s in zip(lo, out_strides))
    if int(inside[box].sum()) == sub.size and (affine := _affine(sub)) is not None:
        origin, strides = affine
        if whole and sub.shape == index.shape and [s for s, n in zip(strides, sub.shape) if n > 1] == \
                [s for s, n in zip(out_strides, sub.shape) if n > 1]:
            return name, origin * size   # a contiguous run of the input
        params = _copy_params(size, sub.shape, strides, out_strides, origin, dst_origin)
        if params is not None:
            return [Op(COPY, (reads(Value(name)), writes(Value(out))), params)]
    if whole and sub.shape == index.shape and (split := _repeats(index)) is not None \
            and (affine := _affine(split)) is not None:   # nearest upsampling by whole factors: zero strides
        params = _copy_params(size, split.shape, affine[1], _contiguous_strides(split.shape), affine[0], 0)
        if params is not None:
            return [Op(COPY, (reads(Value(name)), writes(Value(out))), params)]
    if not whole or index.size > GATHER_TABLE_ELEMENTS:
        return None
    table = np.ascontiguousarray(index.reshape(-1), np.int64)
    return [Op(GATHER, (reads(Value(name)), reads(Constant(table)), writes(Value(out))),
               (math.prod(step.shape(name)), size, table.size))]


def _gather(step: Step) -> Emitted | None:
    """Gather: constant indices are data movement; run-time int64 indices along axis 0 pick whole rows."""
    if step.constant(step.input(1)) is not None:
        return _movement((0,))(step)
    x, indices, y = step.input(0), step.input(1), step.output()
    axis = step.kernel.axis % max(len(step.shape(x)), 1)
    if axis != 0 or step.dtype(indices) != np.int64 or not step.shape(x):
        return None
    rows, row_bytes = step.shape(x)[0], step.nbytes(x) // max(step.shape(x)[0], 1)
    count = math.prod(step.shape(indices))
    if rows < 1 or row_bytes < 1:
        return None
    return Emitted([Op(GATHER, (reads(Value(x)), reads(Value(indices)), writes(Value(y))), (rows, row_bytes, count))], {})


def _resize(step: Step) -> Emitted | None:
    """Nearest-neighbour Resize only moves elements (a strided copy for whole factors); other modes compute."""
    return _movement((0,))(step) if step.kernel.mode == "nearest" else None


def _cast(step: Step) -> Emitted | None:
    x, y = step.input(0), step.output()
    source, target = step.dtype(x), step.dtype(y)
    if source == target:
        return Emitted([], {y: (x, 0)})
    if source not in TYPES or target not in TYPES or (target.kind in "iu" and target.itemsize == 1 and source.kind == "f"):
        return None
    return Emitted([Op(CAST, (reads(Value(x)), writes(Value(y))), (TYPES[source], TYPES[target], math.prod(step.shape(x))))], {})


# ---- arithmetic ----

def _chain_ops(step: Step, program: Program, inputs: list, out: str) -> list | None:
    """A CHAIN op computing `program` over `inputs` (names, None for absent) into `out`."""
    out_shape = step.shape(out)
    lengths, inners, operands = [], [], []
    for name in inputs:
        if not name or step.dtype(name) != FLOAT32:
            return None
        layout = _layout(step.shape(name), out_shape)
        if layout is None or layout[0] != math.prod(step.shape(name)):
            return None
        lengths.append(layout[0])
        inners.append(layout[1])
        operands.append(reads(Value(name)))
    return [Op(CHAIN, (reads(Constant(program.links)), reads(Constant(program.params)), writes(Value(out)), *operands),
               (len(program.params) // 2, len(inputs), *lengths, *inners))]


def _elementwise_chain(step: Step) -> Emitted | None:
    kernel = step.kernel
    if kernel.compiled is None or np.dtype(kernel.dtype) != FLOAT32 or tuple(kernel.shape) != step.shape(step.output()):
        return None
    ops = _chain_ops(step, kernel.compiled, step.node.inputs[:kernel.arity], step.output())
    return None if ops is None else Emitted(ops, {})


def _links(*links) -> Program:
    """A chain program from (opcode, sources) links."""
    codes = [v for opcode, sources in links for v in (opcode, *sources, *[-2] * (3 - len(sources)))]
    return Program(np.array(codes, np.int32), np.zeros(2 * len(links), np.float32), 0)


def _conv_ops(step: Step, conv_kernel, x: str, w: str, bias: str, y: str, relu: bool, chain=None) -> list | None:
    """The compiled convolution of x by constant weights w into y (float32), bias, ReLU and a fused chain
    (chain: (a chain Program, its input names with None for the convolution's output)) in its epilogue;
    depthwise ones through the depthwise kernel."""
    weights = step.constant(w)
    if weights is None or not frozen(weights) or step.dtype(x) != FLOAT32 or weights.dtype != FLOAT32 \
            or step.dtype(y) != FLOAT32 or (bias and (step.dtype(bias) != FLOAT32 or step.shape(bias) != (weights.shape[0],))):
        return None
    x_shape, w_shape, nd = step.shape(x), weights.shape, len(step.shape(x)) - 2
    k = list(conv_kernel.kernel_shape or w_shape[2:])
    if nd not in (1, 2) or len(k) != nd or tuple(w_shape[2:]) != tuple(k):
        return None
    out_shape, begin, end = geometry(x_shape[2:], k, conv_kernel.strides, conv_kernel.dilations, conv_kernel.pads,
                                     conv_kernel.auto_pad)
    if tuple(x_shape[:1]) + (w_shape[0],) + tuple(out_shape) != step.shape(y):
        return None
    row = (lambda dims, one: list(dims)) if nd == 2 else (lambda dims, one: [one] + list(dims))
    strides, dilations = list(conv_kernel.strides or [1] * nd), list(conv_kernel.dilations or [1] * nd)
    group, c, m = conv_kernel.group, x_shape[1], w_shape[0]
    if group == c == m and group > 1:
        if nd != 2:
            return None
        ops = _depthwise_ops(step, x, w, bias, y, relu, strides, dilations, begin, end, out_shape)
        if ops is None or chain is None:
            return ops
        # the chain after the depthwise kernel, in place on its output, as the kernel's run finishes it
        program, inputs = chain
        finished = _chain_ops(step, program, [y if name is None else name for name in inputs], y)
        return None if finished is None else ops + finished
    layout = native_conv.Conv2d(tuple(x_shape[:2]) + tuple(row(x_shape[2:], 1)), tuple(w_shape[:2]) + tuple(row(k, 1)), group,
                                row(k, 1), row(strides, 1), row(dilations, 1), row(begin, 0), row(end, 0), row(out_shape, 1))
    if not layout.usable:
        return None
    w4 = weights.reshape(layout.w_shape)
    panels = packed(weights, ("conv", m, group, weights.size), lambda: native_conv._pack(w4, m, group))
    scratch = compiled.lib.rtd_conv2d_scratch(*layout.geometry, 0, 0)
    chain_operands, chain_len, links = [reads(None)] * native_conv.CHAIN_INPUTS, [0] * native_conv.CHAIN_INPUTS, (None, None, 0)
    n_chain = 0
    if chain is not None:
        program, inputs = chain
        if len(inputs) > native_conv.CHAIN_INPUTS:
            return None
        for i, name in enumerate(inputs):
            if name is None:
                continue
            value = step.constant(name)
            padded = (1,) * (4 - len(step.shape(name))) + step.shape(name)
            if value is None or value.dtype != FLOAT32 or len(padded) != 4 or padded not in ((1, 1, 1, 1), (1, m, 1, 1)):
                return None
            chain_operands[i] = reads(Constant(np.ascontiguousarray(value).reshape(-1)))
            chain_len[i] = value.size
        links, n_chain = (Constant(program.links), Constant(program.params), len(program.params) // 2), len(inputs)
    return [Op(CONV, (reads(Value(x)), reads(Constant(w4)), reads(Value(bias) if bias else None), writes(Value(y)),
                      writes(Scratch("conv", scratch * 4)), reads(Constant(panels)), reads(None),
                      reads(links[0]), reads(links[1]), *chain_operands),
               (0, 0, 0, 0, links[2], *chain_len, n_chain, *layout.geometry, int(relu)))]


def _depthwise_ops(step, x, w, bias, y, relu, strides, dilations, begin, end, out_shape) -> list | None:
    """The compiled depthwise convolution (its scratch plane zeroed first, as its NumPy wrapper hands it over)."""
    x_shape, weights = step.shape(x), step.constant(w)
    (n, c, h, wd), (kh, kw), (oh, ow) = x_shape, weights.shape[2:], out_shape
    numbers = (n, c, h, wd, kh, kw, oh, ow, *strides, *dilations, *begin, *end)
    if weights.shape[:2] != (c, 1) or min(n, c, h, wd, oh, ow) < 1 or any(v >= native_conv.LIMIT for v in numbers) \
            or min(*strides, *dilations) < 1 or min(*begin, *end) < 0:
        return None
    for size, kk, s, d, b, e, o in zip((h, wd), (kh, kw), strides, dilations, begin, end, out_shape):
        if size + b + e < (kk - 1) * d + 1 or o != (size + b + e - (kk - 1) * d - 1) // s + 1:
            return None
    floats = compiled.lib.rtd_threads() * (h + begin[0] + end[0] + oh) * (wd + begin[1] + end[1])
    scratch = Scratch("depthwise", floats * 4)
    return [Op(FILL, (writes(scratch),), (4, floats, 0)),
            Op(DEPTHWISE, (reads(Value(x)), reads(Value(w)), reads(Value(bias) if bias else None), writes(Value(y)), writes(scratch)),
               (n, c, h, wd, kh, kw, oh, ow, strides[0], strides[1], dilations[0], dilations[1], begin[0], begin[1], end[0], end[1],
                int(relu)))]


def _conv(step: Step) -> Emitted | None:
    ops = _conv_ops(step, step.kernel, step.input(0), step.input(1), step.input(2), step.output(), False)
    return None if ops is None else Emitted(ops, {})


def _conv_activation(step: Step) -> Emitted | None:
    kernel, y = step.kernel, step.output()
    x, w, bias, other = (step.node.inputs + ["", "", "", ""])[:4]
    if kernel.chain is not None:
        if kernel.chain.compiled is None:
            return None
        inputs = list(step.node.inputs[4:4 + kernel.chain.arity - 1])
        inputs.insert(kernel.chain_position, None)
        ops = _conv_ops(step, kernel.kernel, x, w, bias, y, kernel.relu, (kernel.chain.compiled, inputs))
        return None if ops is None else Emitted(ops, {})
    ops = _conv_ops(step, kernel.kernel, x, w, bias, y, kernel.relu and not other)
    if ops is None:
        return None
    if other:   # y + other (then ReLU), in place on the convolution's output, as the kernel's NumPy adds do
        if np.broadcast_shapes(step.shape(y), step.shape(other)) != step.shape(y):
            return None
        links = [(CHAIN_LINK_ADD, (0, 1))] + ([(CHAIN_LINK_RELU, (-1,))] if kernel.relu else [])
        added = _chain_ops(step, _links(*links), [y, other], y)
        if added is None:
            return None
        ops += added
    return Emitted(ops, {})


def _gemm_ops(step: Step, a: str, w: str, bias: str | None, y: str, relu: bool) -> list | None:
    """y (rows, n) = a (rows, k) @ constant w (k, n) + bias (n) then ReLU: the GEMM with w packed once."""
    weights = step.constant(w)
    a_shape = step.shape(a)
    if weights is None or weights.ndim != 2 or weights.dtype != FLOAT32 or step.dtype(a) != FLOAT32 or len(a_shape) < 2 \
            or a_shape[-1] != weights.shape[0] or step.dtype(y) != FLOAT32 or min(*a_shape, weights.shape[1]) < 1:
        return None
    k, n = weights.shape
    rows = math.prod(a_shape[:-1])
    if math.prod(step.shape(y)) != rows * n or (bias and (step.dtype(bias) != FLOAT32 or math.prod(step.shape(bias)) != n
                                                         or step.shape(bias)[-1:] != (n,))):
        return None
    if weights.flags.c_contiguous:
        layout, source = ROWS, weights
    elif weights.T.flags.c_contiguous:
        layout, source = COLUMNS, weights.T
    else:
        return None
    panels = packed(weights, ("gemm", layout, k, n), lambda: pack_gemm(source, layout, k, n))
    return [Op(GEMM, (reads(Value(a)), reads(Constant(panels)), reads(Value(bias) if bias else None), writes(Value(y))),
               (PACKED, rows, k, n, int(relu)))]


def _matmul_bias(step: Step) -> Emitted | None:
    kernel = step.kernel
    gelu = kernel.activate.__self__.compiled_op() if kernel.activation in ("Gelu", "GeluTanh") else None
    if kernel.activation not in (None, "Relu", "Gelu", "GeluTanh") or (kernel.activation in ("Gelu", "GeluTanh") and gelu is None):
        return None   # an Erf-form GELU the graph scaled its own way runs the Erf op's erf, not the compiled GELU
    a, w, bias = (step.node.inputs + ["", ""])[:3]
    y = step.output()
    ops = _gemm_ops(step, a, w, bias, y, kernel.activation == "Relu")
    if ops is None:
        return None
    if gelu is not None:
        ops.append(Op(ACTIVATION, (reads(Value(y)), writes(Value(y))), (gelu,)))
    return Emitted(ops, {})


def _matmul(step: Step) -> Emitted | None:
    a, b, y = step.input(0), step.input(1), step.output()
    if step.constant(b) is not None and step.constant(b).ndim == 2:
        ops = _gemm_ops(step, a, b, None, y, False)
        return None if ops is None else Emitted(ops, {})
    a_shape, b_shape = step.shape(a), step.shape(b)
    if step.dtype(a) != FLOAT32 or step.dtype(b) != FLOAT32 or len(a_shape) < 2 or len(b_shape) < 2 or step.dtype(y) != FLOAT32:
        return None
    (m, k), (k2, n) = a_shape[-2:], b_shape[-2:]
    if k != k2 or min(m, k, n) < 1:
        return None
    batch = a_shape[:-2]
    if len(b_shape) == 2:   # every row of a against one b
        return Emitted([Op(MATMUL, (reads(Value(a)), reads(Value(b)), writes(Value(y))),
                           (1, math.prod(batch) * m, k, n, 0, 0, ROWS))], {})
    if b_shape[:-2] != batch and not (len(a_shape) == 2):
        return None
    count = math.prod(b_shape[:-2])
    a_step = 0 if len(a_shape) == 2 else m * k
    return Emitted([Op(MATMUL, (reads(Value(a)), reads(Value(b)), writes(Value(y))), (count, m, k, n, a_step, k * n, ROWS))], {})


def _softmax(step: Step) -> Emitted | None:
    x, y = step.input(0), step.output()
    shape = step.shape(x)
    axis = step.kernel.axis % max(len(shape), 1)
    if step.node.domain == "" and step.kernel.since < 13 and axis != len(shape) - 1:
        return None   # opsets 1-12 coerce to 2-D at the axis: the same rows only when it is the last
    if step.dtype(x) != FLOAT32 or not shape or axis != len(shape) - 1 or shape[-1] < 1:
        return None
    return Emitted([Op(SOFTMAX, (reads(Value(x)), writes(Value(y))), (math.prod(shape[:-1]), shape[-1]))], {})


def _gelu(step: Step) -> Emitted | None:
    """GELU as the compiled activation, where its kernel runs that too (the tanh form, or erf's argument scaled as one
    of activation.c's GELUs scales it)."""
    gelu = step.kernel.gelu if step.node.domain == RTD_DOMAIN else step.kernel
    x, y, op = step.input(0), step.output(), gelu.compiled_op()
    if step.dtype(x) != FLOAT32 or step.dtype(y) != FLOAT32 or op is None:
        return None
    return Emitted([Op(ACTIVATION, (reads(Value(x)), writes(Value(y))), (op,))], {})


def _reduce(step: Step) -> Emitted | None:
    x, y = step.input(0), step.output()
    shape, kernel = step.shape(x), step.kernel
    if step.dtype(x) != FLOAT32 or not shape or math.prod(shape) == 0:
        return None
    if step.node.op_type.startswith("Global"):
        axes = list(range(2, len(shape)))
        kind = REDUCE_KINDS["ReduceMean" if step.node.op_type == "GlobalAveragePool" else "ReduceMax"]
    else:
        kind = REDUCE_KINDS[step.node.op_type]
        if "axes" in kernel.attributes:
            axes = kernel.axes
        elif step.input(1):
            axes = step.constant(step.input(1))
            if axes is None:
                return None
            axes = np.asarray(axes).reshape(-1).tolist()
        else:
            axes = None
        if axes is not None and len(axes) == 0:
            if getattr(kernel, "noop_with_empty_axes", 0):
                return None
            axes = None
        axes = list(range(len(shape))) if axes is None else sorted(int(a) % len(shape) for a in axes)
    if not axes or axes != list(range(axes[0], axes[-1] + 1)):
        return None
    outer, r, inner = math.prod(shape[:axes[0]]), math.prod(shape[axes[0]:axes[-1] + 1]), math.prod(shape[axes[-1] + 1:])
    if outer * inner != math.prod(step.shape(y)):
        return None
    return Emitted([Op(REDUCE, (reads(Value(x)), writes(Value(y))), (kind, outer, r, inner))], {})


def _pool(step: Step) -> Emitted | None:
    """MaxPool (AveragePool stays NumPy's: pool.c sums a window in another order than its kernel does)."""
    x, y = step.input(0), step.output()
    kernel, shape = step.kernel, step.shape(x)
    a = kernel.__dict__
    if step.dtype(x) != FLOAT32 or len(shape) != 4 or len([o for o in step.node.outputs if o]) != 1 or a.get("storage_order", 0):
        return None
    k, strides, dilations = list(kernel.kernel_shape), list(kernel.strides or [1, 1]), list(a.get("dilations") or [1, 1])
    out_shape, begin, end = geometry(shape[2:], k, strides, dilations, kernel.pads, kernel.auto_pad, a.get("ceil_mode", 0))
    if tuple(shape[:2]) + tuple(out_shape) != step.shape(y) or len(k) != 2:
        return None
    return Emitted([Op(POOL, (reads(Value(x)), writes(Value(y))),
                       (*shape, *k, *out_shape, *strides, *dilations, begin[0], begin[1]))], {})


def _lstm(step: Step) -> Emitted | None:
    """The default LSTM (forward or reverse, one direction, no sequence lengths, peepholes, clip or layout
    change): the input projection as one GEMM with w packed once, then the compiled recurrence."""
    kernel = step.kernel
    inputs = step.node.inputs + [""] * 8
    x, w, r, b, lens, h0, c0, peephole = inputs[:8]
    if not kernel.default_acts or kernel.clip is not None or kernel.input_forget or kernel.__dict__.get("layout", 0) \
            or lens or peephole or kernel.direction == "bidirectional" or step.dtype(x) != FLOAT32:
        return None
    weights, recurrence = step.constant(w), step.constant(r)
    bias = step.constant(b) if b else None
    if weights is None or recurrence is None or (b and bias is None) or weights.dtype != FLOAT32 or recurrence.dtype != FLOAT32:
        return None
    seq, batch, size = step.shape(x)
    hidden = recurrence.shape[2]
    if weights.shape != (1, 4 * hidden, size) or recurrence.shape != (1, 4 * hidden, hidden) or min(seq, batch, hidden) < 1:
        return None
    if bias is not None and (bias.shape != (1, 8 * hidden) or bias.dtype != FLOAT32):
        return None
    g, nb = 4 * hidden, hidden * batch
    outputs = (step.node.outputs + ["", "", ""])[:3]
    # the projection X @ W^T as the kernel's NumPy path makes it (W^T a transposed view, read column by column):
    # dot products for a few rows, else W packed (once here, per call there: the same panels, the same sums)
    if seq * batch <= FEW_ROWS:
        weights_t, layout = Constant(np.ascontiguousarray(weights[0])), COLUMNS
    else:
        weights_t = Constant(packed(weights, ("gemm", COLUMNS, size, g), lambda: pack_gemm(weights[0], COLUMNS, size, g)))
        layout = PACKED
    combined = None if bias is None else Constant(np.ascontiguousarray(bias[:, :g] + bias[:, g:]).reshape(-1))
    reverse = kernel.direction == "reverse"
    ops = []
    projected = Scratch("projected", seq * batch * g * 4)
    ops.append(Op(GEMM, (reads(Value(x)), reads(weights_t), reads(combined), writes(projected)), (layout, seq * batch, size, g, 0)))
    xw = Scratch("xw", seq * g * batch * 4)
    # (seq, batch, 4H) -> (seq, 4H, batch), reversed in time for the reverse direction
    params = _copy_params(4, (seq, g, batch), ((-1 if reverse else 1) * batch * g, 1, g), (g * batch, batch, 1),
                          (seq - 1) * batch * g if reverse else 0, 0)
    ops.append(Op(COPY, (reads(projected), writes(xw)), params))
    h, c = Scratch("h", nb * 4), Scratch("c", nb * 4)
    for state, initial in ((h, h0), (c, c0)):
        if initial:   # (1, batch, H) -> (H, batch)
            ops.append(Op(COPY, (reads(Value(initial)), writes(state)), _copy_params(4, (hidden, batch), (1, hidden), (batch, 1), 0, 0)))
        else:
            ops.append(Op(FILL, (writes(state),), (4, nb, 0)))
    yt = Scratch("yt", seq * nb * 4)
    ops.append(Op(LSTM, (reads(xw), reads(Constant(np.ascontiguousarray(recurrence[0]))), writes(h), writes(c), writes(yt),
                         writes(Scratch("gates", g * batch * 4))), (0, g * batch, 0, nb, seq, hidden, batch)))
    if outputs[0]:   # Y (seq, 1, batch, H) from yt (seq, H, batch), reversed back in time
        ops.append(Op(COPY, (reads(yt), writes(Value(outputs[0]))),
                      _copy_params(4, (seq, batch, hidden), ((-1 if reverse else 1) * nb, 1, batch), (nb, hidden, 1),
                                   (seq - 1) * nb if reverse else 0, 0)))
    for state, name in ((h, outputs[1]), (c, outputs[2])):
        if name:   # (H, batch) -> (1, batch, H)
            ops.append(Op(COPY, (reads(state), writes(Value(name))), _copy_params(4, (batch, hidden), (1, batch), (hidden, 1), 0, 0)))
    return Emitted(ops, {})


ALIASES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
EMITTERS = {
    **{("", op): _alias for op in ALIASES},
    ("", "Slice"): _movement((0,)),
    ("", "Transpose"): _movement((0,)),
    ("", "Expand"): _movement((0,)),
    ("", "Tile"): _movement((0,)),
    ("", "Split"): _movement((0,)),
    ("", "DepthToSpace"): _movement((0,)),
    ("", "SpaceToDepth"): _movement((0,)),
    ("", "Pad"): _movement((0,), fill_input=2),
    ("", "Concat"): _movement(None),
    ("", "Gather"): _gather,
    ("", "Resize"): _resize,
    ("", "Cast"): _cast,
    ("", "Conv"): _conv,
    ("", "MatMul"): _matmul,
    ("", "Softmax"): _softmax,
    ("", "MaxPool"): _pool,
    ("", "GlobalAveragePool"): _reduce,
    ("", "GlobalMaxPool"): _reduce,
    **{("", op): _reduce for op in REDUCE_KINDS},
    ("", "LSTM"): _lstm,
    (RTD_DOMAIN, "ConvActivation"): _conv_activation,
    (RTD_DOMAIN, "ElementwiseChain"): _elementwise_chain,
    (RTD_DOMAIN, "MatMulBias"): _matmul_bias,
    (RTD_DOMAIN, "Softmax"): _softmax,
    (RTD_DOMAIN, "Gelu"): _gelu,
    ("", "Gelu"): _gelu,
}

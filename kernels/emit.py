"""The native form of a planned step: the program ops (native/program.py) that compute a node for one
shape signature, or None where the step stays a Python call.

`emit(node, kernel, step)` looks the node up in EMITTERS (by op type, "rtd" fused kernels included); an
emitter reads the node's attributes from its kernel, the shapes and dtypes the signature fixed and the
constants, and returns an `Emitted`: ops, plus outputs that are views of inputs (`aliases`, name ->
(input, byte offset)). It declines (None) anything it does not reproduce exactly as the kernel's own
run computes it: same compiled code for the arithmetic (convolution, GEMM, chains, activations,
softmax, layer normalization, recurrences), exact copies for data movement, and for 8-bit steps the kernel's own float32
steps and tables (where its integer sums are exact in float32, any summation order gives its bits).

Data movement (Slice, Transpose, Concat, Pad, Split, Gather with constant indices, ...) is worked out by
running the op's own kernel once on arrays of element indices (`_probe`): where each output element
comes from, so the copies follow the kernel's semantics by construction; an affine map becomes one
strided copy (or a view), anything else an element gather from the probe's index table.
"""
import math
from typing import NamedTuple

import numpy as np

from rtd.errors import RtdError

from .ir import RTD_DOMAIN, Node
from .native import compiled
from .native import conv as native_conv
from .native import quant
from .native.chain import FLOAT32, OPCODES, Program, _layout
from .native.gemm import COLUMNS, PACKED, ROWS, weight_layout
from .native.gemm import _pack as pack_gemm
from .native.packed import packed
from .native.pool import average_numbers
from .native.program import Constant, Op, Scratch, Value, reads, writes
from .native.recurrent import pack_lstm
from .native.resample import tables as resample_tables
from .ops._contrib import MS_DOMAIN, scalar_side
from .ops._pool import counted_pads
from .ops._quant import FLOAT32_EXACT, frozen, lookup_table, span
from .ops._resize import passes
from .ops._window import geometry

# program.h's opcodes
(CONV, DEPTHWISE, GEMM, MATMUL, CHAIN, ACTIVATION, SOFTMAX, COPY, FILL, CAST, REDUCE, POOL, LSTM, GATHER, QUANTIZE, DEQUANTIZE,
 POOL8, LOOKUP, PAIRS, GLOBAL_AVERAGE8, REQUANTIZE, AVERAGE_POOL8, LAYERNORM, RESAMPLE, AVERAGE_POOL, DYNAMIC_QUANTIZE, MATMUL8) = range(1, 28)
# move.h's element types, pool.h's reduction kinds
TYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int64): 2, np.dtype(np.int32): 3,
         np.dtype(np.int8): 4, np.dtype(np.uint8): 5, np.dtype(np.bool_): 6}
REDUCE_KINDS = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3}
MAX_DIMS = 8                 # move.h's RTD_MOVE_MAX_DIMS
FEW_ROWS = 4                 # gemm.c's: up to this many rows a transposed b is read as dot products
PROBE_ELEMENTS = 1 << 20     # data movement larger than this stays a NumPy call (the probe's index arrays)
GATHER_TABLE_ELEMENTS = 1 << 16   # an irregular movement's index table, at most
CHAIN_LINK_ADD, CHAIN_LINK_RELU = OPCODES["Add"][0], OPCODES["Relu"][0]
EIGHT_BIT = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2}   # conv.h's (and quant.h's) 8-bit types


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
    strides = []
    for axis, n in enumerate(index.shape):
        unit = [0] * index.ndim
        unit[axis] = 1 if n > 1 else 0
        strides.append(int(index[tuple(unit)]) - origin if n > 1 else 0)
    if int(index.reshape(-1)[-1]) != origin + sum((n - 1) * s for n, s in zip(index.shape, strides)):
        return None   # the last element already disagrees: no full comparison (a probe can be millions)
    grid = np.full((1,) * index.ndim, origin, np.int64)
    for axis, (n, stride) in enumerate(zip(index.shape, strides)):
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
    if whole:   # one input and no fill: every output element is inside
        lo, hi = [0] * index.ndim, list(index.shape)
    else:   # the box around `inside`, one axis at a time (np.nonzero would list every element's coordinates)
        axes = [np.flatnonzero(inside.any(axis=tuple(a for a in range(index.ndim) if a != axis)))
                for axis in range(index.ndim)]
        lo, hi = [int(a[0]) for a in axes], [int(a[-1]) + 1 for a in axes]
    box = tuple(slice(a, b) for a, b in zip(lo, hi))
    sub = index[box]
    out_strides = _contiguous_strides(index.shape)
    dst_origin = sum(a * s for a, s in zip(lo, out_strides))
    if (whole or inside[box].all()) and (affine := _affine(sub)) is not None:
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
    """Gather: constant indices are data movement; run-time int64 or int32 indices along axis 0 pick whole
    rows (int32 ones widened into scratch first: the gather reads int64, as a TensorFlow export's loop
    counter indexes its sequence)."""
    if step.constant(step.input(1)) is not None:
        return _movement((0,))(step)
    x, indices, y = step.input(0), step.input(1), step.output()
    axis = step.kernel.axis % max(len(step.shape(x)), 1)
    if axis != 0 or step.dtype(indices) not in (np.int64, np.int32) or not step.shape(x):
        return None
    rows, row_bytes = step.shape(x)[0], step.nbytes(x) // max(step.shape(x)[0], 1)
    count = math.prod(step.shape(indices))
    if rows < 1 or row_bytes < 1:
        return None
    ops, index = [], Value(indices)
    if step.dtype(indices) == np.int32:
        index = Scratch("indices", count * 8)
        ops.append(Op(CAST, (reads(Value(indices)), writes(index)), (TYPES[np.dtype(np.int32)], TYPES[np.dtype(np.int64)], count)))
    return Emitted(ops + [Op(GATHER, (reads(Value(x)), reads(index), writes(Value(y))), (rows, row_bytes, count))], {})


def _resize(step: Step) -> Emitted | None:
    """Nearest-neighbour Resize only moves elements (a strided copy for whole factors); linear and cubic ones
    of float32 are a RESAMPLE op per resized axis, the passes and tables the kernel's own run uses."""
    if step.kernel.mode == "nearest":
        return _movement((0,))(step)
    x, y = step.input(0), step.output()
    parameters = step.node.inputs[1:]
    if step.dtype(x) != FLOAT32 or step.dtype(y) != FLOAT32 or any(n and step.constant(n) is None for n in parameters):
        return None
    try:
        settings = step.kernel.geometry(len(step.shape(x)), *[step.constant(n) if n else None for n in parameters])
        settings.pop("extrapolation_value", None)
        plans = passes(step.shape(x), **settings)
    except RtdError:
        return None
    shape, source, ops = list(step.shape(x)), Value(x), []
    for k, (axis, index, weights, outside, _) in enumerate(plans):
        if (outside is not None and outside.any()) or index.shape[1] < 2:
            return None
        index, weights = resample_tables(index, weights, shape[axis])
        after = shape[:axis] + [index.shape[1]] + shape[axis + 1:]
        target = Value(y) if k == len(plans) - 1 else Scratch(f"pass{k}", math.prod(after) * 4)
        ops.append(Op(RESAMPLE, (reads(source), reads(Constant(index)), reads(Constant(weights)), writes(target)),
                      (math.prod(shape[:axis]), shape[axis], index.shape[1], math.prod(shape[axis + 1:]), index.shape[0])))
        source, shape = target, after
    if tuple(shape) != step.shape(y):
        return None
    return Emitted(ops, {} if ops else {y: (x, 0)})


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
    layouts, operands = [], []
    for name in inputs:
        if not name or step.dtype(name) != FLOAT32:
            return None
        layout = _layout(step.shape(name), out_shape)
        if layout is None or layout[0] * layout[2] != math.prod(step.shape(name)):
            return None
        layouts += layout
        operands.append(reads(Value(name)))
    return [Op(CHAIN, (reads(Constant(program.links)), reads(Constant(program.params)), writes(Value(out)), *operands),
               (len(program.params) // 2, len(inputs), *layouts))]


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
        ops = _depthwise_ops(Value(x), Constant(weights), Value(bias) if bias else None, Value(y), x_shape, weights.shape, relu,
                             strides, dilations, begin, end, out_shape)
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


def _depthwise_ops(x, w, bias, y, x_shape, w_shape, relu, strides, dilations, begin, end, out_shape) -> list | None:
    """The compiled depthwise convolution of operand x (x_shape) by w (w_shape) into y (its scratch plane zeroed
    first, as its NumPy wrapper hands it over)."""
    (n, c, h, wd), (kh, kw), (oh, ow) = x_shape, w_shape[2:], out_shape
    numbers = (n, c, h, wd, kh, kw, oh, ow, *strides, *dilations, *begin, *end)
    if tuple(w_shape[:2]) != (c, 1) or min(n, c, h, wd, oh, ow) < 1 or any(v >= native_conv.LIMIT for v in numbers) \
            or min(*strides, *dilations) < 1 or min(*begin, *end) < 0:
        return None
    for size, kk, s, d, b, e, o in zip((h, wd), (kh, kw), strides, dilations, begin, end, out_shape):
        if size + b + e < (kk - 1) * d + 1 or o != (size + b + e - (kk - 1) * d - 1) // s + 1:
            return None
    floats = compiled.lib.rtd_threads() * (h + begin[0] + end[0] + oh) * (wd + begin[1] + end[1])
    scratch = Scratch("depthwise", floats * 4)
    return [Op(FILL, (writes(scratch),), (4, floats, 0)),
            Op(DEPTHWISE, (reads(x), reads(w), reads(bias), writes(y), writes(scratch)),
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


def _gemm_ops(step: Step, a: str, w: str, bias: str | None, y: str, relu: bool, packed_shape=None) -> list | None:
    """y (rows, n) = a (rows, k) @ constant w (k, n) + bias (n) then ReLU: the GEMM with w packed once (w is
    already the panels of a (k, n) weight where `packed_shape` says so)."""
    weights = step.constant(w)
    a_shape = step.shape(a)
    if weights is None or (packed_shape is None and weights.ndim != 2):
        return None
    k, n = packed_shape or weights.shape
    if weights.dtype != FLOAT32 or step.dtype(a) != FLOAT32 or len(a_shape) < 2 or a_shape[-1] != k \
            or step.dtype(y) != FLOAT32 or min(*a_shape, n) < 1:
        return None
    rows = math.prod(a_shape[:-1])
    if math.prod(step.shape(y)) != rows * n or (bias and (step.dtype(bias) != FLOAT32 or math.prod(step.shape(bias)) != n
                                                         or step.shape(bias)[-1:] != (n,))):
        return None
    if packed_shape is not None:
        panels = weights
    else:
        taken = weight_layout(weights)
        if taken is None:
            return None
        source, layout = taken
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
    ops = _gemm_ops(step, a, w, bias, y, kernel.activation == "Relu", kernel.packed_shape)
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


def _attention(step: Step) -> Emitted | None:
    """The fused attention over float32 as its CPU run computes it (fused.Attention): q @ kt into scratch scores
    (batched GEMMs), the scale and the mask by one chain in place, the row softmax in place, scores @ v."""
    q, kt, v, mask = (step.node.inputs + ["", "", "", ""])[:4]
    y = step.output()
    names = [q, kt, v, y] + ([mask] if mask else [])
    if any(step.dtype(n) != FLOAT32 for n in names):
        return None
    q_shape, kt_shape, v_shape = step.shape(q), step.shape(kt), step.shape(v)
    if len(q_shape) < 2 or not q_shape[:-2] == kt_shape[:-2] == v_shape[:-2] or len(kt_shape) != len(q_shape) \
            or len(v_shape) != len(q_shape):
        return None
    (m, k), (k2, t), (t2, e) = q_shape[-2:], kt_shape[-2:], v_shape[-2:]
    scores_shape = q_shape[:-2] + (m, t)
    if k != k2 or t != t2 or min(m, k, t, e) < 1 or step.shape(y) != q_shape[:-2] + (m, e):
        return None
    batch = math.prod(q_shape[:-2])
    scores = Scratch("scores", batch * m * t * 4)
    operands = [reads(scores), reads(Constant(np.array([step.kernel.scale], FLOAT32)))]
    layouts = [_layout(scores_shape, scores_shape), _layout((), scores_shape)]
    links = [(OPCODES["Div" if step.kernel.scale_op == "Div" else "Mul"][0], (0, 1))]
    if mask:
        if np.broadcast_shapes(step.shape(mask), scores_shape) != scores_shape:
            return None
        operands.append(reads(Value(mask)))
        layouts.append(_layout(step.shape(mask), scores_shape))
        links.append((CHAIN_LINK_ADD, (-1, 2)))
    sizes = [math.prod(scores_shape), 1] + ([math.prod(step.shape(mask))] if mask else [])
    if any(layout is None or layout[0] * layout[2] != size for layout, size in zip(layouts, sizes)):
        return None
    program = _links(*links)
    return Emitted([Op(MATMUL, (reads(Value(q)), reads(Value(kt)), writes(scores)), (batch, m, k, t, m * k, k * t, ROWS)),
                    Op(CHAIN, (reads(Constant(program.links)), reads(Constant(program.params)), writes(scores), *operands),
                       (len(links), len(operands), *[v for layout in layouts for v in layout])),
                    Op(SOFTMAX, (reads(scores), writes(scores)), (batch * m, t)),
                    Op(MATMUL, (reads(scores), reads(Value(v)), writes(Value(y))), (batch, m, t, e, m * t, t * e, ROWS))], {})


def _layernorm(step: Step) -> Emitted | None:
    """The fused LayerNorm as the compiled row kernel, where its run takes that too: float32, gamma and beta one
    per column (absent ones as ones and zeros, as the kernel passes them)."""
    x, y = step.input(0), step.output()
    shape = step.shape(x)
    if step.dtype(x) != FLOAT32 or step.dtype(y) != FLOAT32 or not shape or shape[-1] < 1 or not step.kernel.epsilon >= 0:
        return None
    cols = shape[-1]
    params = []
    for name, fill in ((step.input(1), 1.0), (step.input(2), 0.0)):
        if not name:
            params.append(Constant(np.full(cols, fill, FLOAT32)))
        elif step.dtype(name) != FLOAT32 or not step.shape(name) or math.prod(step.shape(name)) != cols or step.shape(name)[-1] != cols:
            return None
        else:
            params.append(Value(name))
    return Emitted([Op(LAYERNORM, (reads(Value(x)), reads(params[0]), reads(params[1]), writes(Value(y))),
                       (math.prod(shape[:-1]), cols, _float_bits(step.kernel.epsilon)))], {})


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
    """MaxPool of float32 or 8-bit tensors, AveragePool of float32 (the C its kernel's traced run calls)."""
    x, y = step.input(0), step.output()
    kernel, shape = step.kernel, step.shape(x)
    a = kernel.__dict__
    if step.dtype(x) not in (FLOAT32, *EIGHT_BIT) or len(shape) != 4 or len([o for o in step.node.outputs if o]) != 1 or a.get("storage_order", 0):
        return None
    k, strides, dilations = list(kernel.kernel_shape), list(kernel.strides or [1, 1]), list(a.get("dilations") or [1, 1])
    out_shape, begin, end = geometry(shape[2:], k, strides, dilations, kernel.pads, kernel.auto_pad, a.get("ceil_mode", 0))
    if tuple(shape[:2]) + tuple(out_shape) != step.shape(y) or len(k) != 2:
        return None
    numbers = (*shape, *k, *out_shape, *strides, *dilations, begin[0], begin[1])
    if step.node.op_type == "AveragePool":
        counted = counted_pads(begin, end, kernel.pads, kernel.auto_pad, a.get("count_include_pad", 0))
        numbers = average_numbers(shape, k, strides, dilations, begin, out_shape, *counted)
        if step.dtype(x) != FLOAT32 or min(shape) < 1 or min(numbers[4:]) < 0:
            return None
        return Emitted([Op(AVERAGE_POOL, (reads(Value(x)), writes(Value(y))), numbers)], {})
    if step.dtype(x) != FLOAT32:
        return Emitted([Op(POOL8, (reads(Value(x)), writes(Value(y))), (EIGHT_BIT[step.dtype(x)], *numbers))], {})
    return Emitted([Op(POOL, (reads(Value(x)), writes(Value(y))), numbers)], {})


def _lstm(step: Step) -> Emitted | None:
    """The default LSTM (any direction, no sequence lengths, peepholes, clip or layout change): the input
    projection as one GEMM with w packed once, then the compiled recurrence over R packed once, both
    directions of a bidirectional one in the one call."""
    kernel = step.kernel
    inputs = step.node.inputs + [""] * 8
    x, w, r, b, lens, h0, c0, peephole = inputs[:8]
    if not kernel.default_acts or kernel.clip is not None or kernel.input_forget or kernel.__dict__.get("layout", 0) \
            or lens or peephole or step.dtype(x) != FLOAT32:
        return None
    weights, recurrence = step.constant(w), step.constant(r)
    bias = step.constant(b) if b else None
    if weights is None or recurrence is None or (b and bias is None) or weights.dtype != FLOAT32 or recurrence.dtype != FLOAT32:
        return None
    seq, batch, size = step.shape(x)
    dirs, hidden = (2 if kernel.direction == "bidirectional" else 1), recurrence.shape[2]
    if weights.shape != (dirs, 4 * hidden, size) or recurrence.shape != (dirs, 4 * hidden, hidden) or min(seq, batch, hidden) < 1:
        return None
    if bias is not None and (bias.shape != (dirs, 8 * hidden) or bias.dtype != FLOAT32):
        return None
    g, nb = 4 * hidden, hidden * batch
    outputs = (step.node.outputs + ["", "", ""])[:3]
    # the projection X @ W^T as the kernel's NumPy path makes it (W^T a transposed view, read column by column):
    # dot products for a few rows, else W packed (once here, per call there: the same panels, the same sums)
    rows_w = np.ascontiguousarray(weights.reshape(dirs * g, size))
    if seq * batch <= FEW_ROWS:
        weights_t, layout = Constant(rows_w), COLUMNS
    else:
        weights_t = Constant(packed(weights, ("gemm", COLUMNS, size, dirs * g), lambda: pack_gemm(rows_w, COLUMNS, size, dirs * g)))
        layout = PACKED
    combined = None if bias is None else Constant(np.ascontiguousarray(bias[:, :g] + bias[:, g:]).reshape(-1))
    ops = []
    projected = Scratch("projected", seq * batch * dirs * g * 4)
    ops.append(Op(GEMM, (reads(Value(x)), reads(weights_t), reads(combined), writes(projected)),
                  (layout, seq * batch, size, dirs * g, 0)))
    xw = Scratch("xw", seq * dirs * g * batch * 4)
    for d in range(dirs):   # (seq, batch, dirs, 4H) -> (seq, dirs, 4H, batch), a reverse direction reversed in time
        back = kernel.reverse(d)
        params = _copy_params(4, (seq, g, batch), ((-1 if back else 1) * batch * dirs * g, 1, dirs * g), (dirs * g * batch, batch, 1),
                              d * g + ((seq - 1) * batch * dirs * g if back else 0), d * g * batch)
        ops.append(Op(COPY, (reads(projected), writes(xw)), params))
    h, c = Scratch("h", dirs * nb * 4), Scratch("c", dirs * nb * 4)
    for state, initial in ((h, h0), (c, c0)):
        if initial:   # (dirs, batch, H) -> (dirs, H, batch)
            ops.append(Op(COPY, (reads(Value(initial)), writes(state)),
                          _copy_params(4, (dirs, hidden, batch), (nb, 1, hidden), (nb, batch, 1), 0, 0)))
        else:
            ops.append(Op(FILL, (writes(state),), (4, dirs * nb, 0)))
    yt = Scratch("yt", seq * dirs * nb * 4)
    panels = pack_lstm(recurrence, True)
    ops.append(Op(LSTM, (reads(xw), reads(Constant(panels)), writes(h), writes(c), writes(yt),
                         writes(Scratch("gates", dirs * g * batch * 4))), (seq, dirs, hidden, batch)))
    if outputs[0]:   # Y (seq, dirs, batch, H) from yt (seq, dirs, H, batch), reversed back in time
        for d in range(dirs):
            back = kernel.reverse(d)
            ops.append(Op(COPY, (reads(yt), writes(Value(outputs[0]))),
                          _copy_params(4, (seq, batch, hidden), ((-1 if back else 1) * dirs * nb, 1, batch), (dirs * nb, hidden, 1),
                                       d * nb + ((seq - 1) * dirs * nb if back else 0), d * nb)))
    for state, name in ((h, outputs[1]), (c, outputs[2])):
        if name:   # (dirs, H, batch) -> (dirs, batch, H)
            ops.append(Op(COPY, (reads(state), writes(Value(name))),
                          _copy_params(4, (dirs, batch, hidden), (nb, 1, batch), (nb, hidden, 1), 0, 0)))
    return Emitted(ops, {})


# ---- 8-bit steps ----

def _float_bits(value) -> int:
    return int(np.asarray(value, np.float32).reshape(()).view(np.uint32))


def _per_tensor(step: Step, scale: str, zero_point: str, dtype=None):
    """(scale, zero point) of a constant float32 scale and 8-bit zero point (absent: 0) of one value each, or None."""
    s, z = step.constant(scale), step.constant(zero_point) if zero_point else None
    if s is None or s.dtype != FLOAT32 or s.size != 1 or (zero_point and (z is None or z.size != 1 or z.dtype not in EIGHT_BIT
                                                                          or (dtype is not None and z.dtype != dtype))):
        return None
    return s.reshape(()), 0 if z is None else int(z.reshape(()))


def _quantize(step: Step) -> Emitted | None:
    """QuantizeLinear of float32 to 8 bits with one scale and zero point (no blocks, no other precision)."""
    x, y = step.input(0), step.output()
    a = step.kernel.__dict__
    if step.dtype(x) != FLOAT32 or step.dtype(y) not in EIGHT_BIT or a.get("block_size", 0) or a.get("precision", 0):
        return None
    params = _per_tensor(step, step.input(1), step.input(2), step.dtype(y))
    if params is None:
        return None
    return Emitted([Op(QUANTIZE, (reads(Value(x)), writes(Value(y))), (_float_bits(params[0]), params[1], EIGHT_BIT[step.dtype(y)]))], {})


def _dequantize(step: Step) -> Emitted | None:
    """DequantizeLinear of an 8-bit tensor to float32 with one scale and zero point."""
    x, y = step.input(0), step.output()
    if step.dtype(x) not in EIGHT_BIT or step.dtype(y) != FLOAT32 or step.kernel.__dict__.get("block_size", 0):
        return None
    params = _per_tensor(step, step.input(1), step.input(2), step.dtype(x))
    if params is None:
        return None
    return Emitted([Op(DEQUANTIZE, (reads(Value(x)), writes(Value(y))), (EIGHT_BIT[step.dtype(x)], _float_bits(params[0]), params[1]))], {})


def _qlinear_conv(step: Step) -> Emitted | None:
    """QLinearConv as its kernel runs it on the CPU: the compiled convolution of x - x_zp by the centred weights
    (the kernel's own kept copy, packed once), its int32 sums plus the int32 bias requantized in the same pass;
    a depthwise one as the compiled depthwise convolution of x - x_zp, then requantized. Only where the sums
    are exact in float32, as the kernel's are then (so the order of the additions does not matter)."""
    kernel = step.kernel
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias = (step.node.inputs + [""] * 9)[:9]
    y = step.output()
    weights, ws, wz, xs, ys = (step.constant(n) if n else None for n in (w, w_scale, w_zp, x_scale, y_scale))
    x_params = _per_tensor(step, x_scale, x_zp, step.dtype(x))
    if x_params is None or step.dtype(x) not in EIGHT_BIT or weights is None or not frozen(weights) or weights.dtype not in EIGHT_BIT \
            or ws is None or ys is None or ys.size != 1 or (w_zp and wz is None) or not y_zp or step.dtype(y) not in EIGHT_BIT:
        return None
    y_params = _per_tensor(step, y_scale, y_zp, step.dtype(y))
    bias_value = step.constant(bias) if bias else None
    m = weights.shape[0]
    if y_params is None or (bias and (bias_value is None or bias_value.dtype != np.int32 or bias_value.size != m)) \
            or ws.size not in (1, m) or (wz is not None and wz.size not in (1, m)):
        return None
    x_shape, nd = step.shape(x), len(step.shape(x)) - 2
    k = list(kernel.kernel_shape or weights.shape[2:])
    if nd not in (1, 2) or len(k) != nd or tuple(weights.shape[2:]) != tuple(k):
        return None
    x_max, w_max = span(step.dtype(x), np.asarray(x_params[1])), span(weights.dtype, wz)
    if math.prod(weights.shape[1:]) * x_max * w_max >= FLOAT32_EXACT:
        return None   # the kernel sums in float64 then: not this compiled pass
    out_shape, begin, end = geometry(x_shape[2:], k, kernel.strides, kernel.dilations, kernel.pads, kernel.auto_pad)
    if tuple(x_shape[:1]) + (m,) + tuple(out_shape) != step.shape(y):
        return None
    multiplier = np.ascontiguousarray((xs.astype(np.float32) * ws.astype(np.float32) / ys.astype(np.float32)).reshape(-1))
    bias_constant = Constant(np.ascontiguousarray(bias_value.reshape(-1))) if bias else None
    x_type, y_type = EIGHT_BIT[step.dtype(x)], EIGHT_BIT[step.dtype(y)]
    pointwise = all(v == 1 for v in k) and all(v == 1 for v in kernel.strides or [1]) and not any(begin) and not any(end)
    if kernel.group == x_shape[1] == m and kernel.group > 1 and not pointwise:   # the kernel's plans: depthwise in float, then requantized
        channel_shape = (-1,) + (1,) * (weights.ndim - 1) if wz is not None and wz.size > 1 else None
        centred = kernel.weight.get(np, weights, wz, channel_shape, np.float32)   # the kernel's own kept copy
        if nd != 2 or not frozen(centred):
            return None
        x_float, sums = Scratch("x", math.prod(x_shape) * 4), Scratch("sums", math.prod(step.shape(y)) * 4)
        ops = _depthwise_ops(x_float, Constant(centred), None, sums, x_shape, centred.shape, False,
                             list(kernel.strides or [1, 1]), list(kernel.dilations or [1, 1]), begin, end, out_shape)
        if ops is None:
            return None
        return Emitted([Op(DEQUANTIZE, (reads(Value(x)), writes(x_float)), (x_type, _float_bits(1.0), x_params[1])), *ops,
                        Op(REQUANTIZE, (reads(sums), reads(Constant(multiplier)), reads(bias_constant), writes(Value(y))),
                           (m, math.prod(out_shape), y_params[1], y_type))], {})
    conv = _centred_conv(step, x, weights, wz, (out_shape, begin, end), x_params[1], [], y_type, y_params[1], Value(y),
                         bias_constant, Constant(multiplier))
    return None if conv is None else Emitted([conv], {})


def _centred_conv(step: Step, x: str, weights, wz, window: tuple, x_zero: int, zero_operand: list, y_type: int, y_zero: int,
                  y, bias, multiplier) -> Op | None:
    """One CONV op of the 8-bit x less its zero point (the parameter `x_zero`, or `zero_operand`: the one the run
    computes) by the kernel's own centred weights, packed once, over `window` (out_shape, begin, end): float sums into
    y (y_type 0), or requantized by `multiplier` with the int32 `bias` (QLinearConv's). None where the compiled
    convolution does not take the geometry."""
    kernel, x_shape = step.kernel, step.shape(x)
    nd, m, (out_shape, begin, end) = len(x_shape) - 2, weights.shape[0], window
    k = list(kernel.kernel_shape or weights.shape[2:])
    row = (lambda dims, one: list(dims)) if nd == 2 else (lambda dims, one: [one] + list(dims))
    layout = native_conv.Conv2d(tuple(x_shape[:2]) + tuple(row(x_shape[2:], 1)), tuple(weights.shape[:2]) + tuple(row(k, 1)),
                                kernel.group, row(k, 1), row(kernel.strides or [1] * nd, 1), row(kernel.dilations or [1] * nd, 1),
                                row(begin, 0), row(end, 0), row(out_shape, 1))
    channel_shape = (-1,) + (1,) * (weights.ndim - 1) if wz is not None and wz.size > 1 else None
    centred = kernel.weight.get(np, weights, wz, channel_shape, np.float32)   # the kernel's own kept copy
    if not layout.usable or not frozen(centred):
        return None
    w4 = centred.reshape(layout.w_shape)
    panels = packed(centred, ("conv", m, kernel.group, centred.size), lambda: native_conv._pack(w4, m, kernel.group))
    x_type = EIGHT_BIT[step.dtype(x)]
    scratch = compiled.lib.rtd_conv2d_scratch(*layout.geometry, x_type, y_type)
    return Op(CONV, (reads(Value(x)), reads(Constant(np.ascontiguousarray(w4))), reads(bias), writes(y),
                     writes(Scratch("conv", scratch * 4)), reads(Constant(panels)), reads(multiplier), reads(None), reads(None),
                     *[reads(None)] * native_conv.CHAIN_INPUTS, *zero_operand),
              (x_type, x_zero, y_type, y_zero, 0, *[0] * native_conv.CHAIN_INPUTS, 0, *layout.geometry, 0))


def _zero_point(step: Step, name: str, dtype):
    """An integer op's input zero point as its program op takes it: (parameter, []) when absent or constant, (0, [the
    operand]) when the run computes it (DynamicQuantizeLinear's), read from the op's optional last operand; None where
    it is not one value of `dtype`."""
    if not name:
        return 0, []
    if step.dtype(name) != dtype or math.prod(step.shape(name)) != 1:
        return None
    value = step.constant(name)
    return (0, [reads(Value(name))]) if value is None else (int(np.asarray(value).reshape(())), [])


def _dynamic_quantize(step: Step) -> Emitted | None:
    """DynamicQuantizeLinear of float32: range, scale, zero point and values in one op, the C its kernel calls."""
    x, outputs = step.input(0), step.node.outputs
    if step.dtype(x) != FLOAT32 or len(outputs) != 3 or not all(outputs):
        return None
    return Emitted([Op(DYNAMIC_QUANTIZE, (reads(Value(x)), *(writes(Value(o)) for o in outputs)), ())], {})


def _conv_integer(step: Step) -> Emitted | None:
    """ConvInteger of an 8-bit x by constant 8-bit weights where the kernel's sums are exact in float32 whatever x's
    zero point (then any order of them gives its bits): the compiled convolution of x - x_zp (a constant, or the
    zero point the run computed, which the op reads: DynamicQuantizeLinear's) by the kernel's own centred weights,
    packed once, then the sums cast to int32. Depthwise ones stay the kernel's."""
    kernel = step.kernel
    x, w, x_zp, w_zp = (step.node.inputs + [""] * 4)[:4]
    y, dtype = step.output(), step.dtype(x)
    weights, wz = step.constant(w), (step.constant(w_zp) if w_zp else None)
    zero = _zero_point(step, x_zp, dtype)
    if dtype not in EIGHT_BIT or weights is None or not frozen(weights) or weights.dtype not in EIGHT_BIT or step.dtype(y) != np.int32 \
            or (w_zp and (wz is None or wz.size not in (1, weights.shape[0]))) or zero is None:
        return None
    x_shape, m, nd = step.shape(x), weights.shape[0], len(step.shape(x)) - 2
    k = list(kernel.kernel_shape or weights.shape[2:])
    if nd not in (1, 2) or len(k) != nd or tuple(weights.shape[2:]) != tuple(k):
        return None
    info = np.iinfo(dtype)
    x_max = int(info.max) - int(info.min) if zero[1] else span(dtype, np.asarray(zero[0]))   # a run's: any zero point
    if math.prod(weights.shape[1:]) * x_max * span(weights.dtype, wz) >= FLOAT32_EXACT:
        return None   # the kernel may sum in float64 then: not this compiled pass
    out_shape, begin, end = geometry(x_shape[2:], k, kernel.strides, kernel.dilations, kernel.pads, kernel.auto_pad)
    pointwise = all(v == 1 for v in k) and all(v == 1 for v in kernel.strides or [1]) and not any(begin) and not any(end)
    if tuple(x_shape[:1]) + (m,) + tuple(out_shape) != step.shape(y) or (kernel.group == x_shape[1] == m > 1 and not pointwise):
        return None
    count = math.prod(step.shape(y))
    sums = Scratch("sums", count * 4)
    conv = _centred_conv(step, x, weights, wz, (out_shape, begin, end), zero[0], zero[1], 0, 0, sums, None, None)
    if conv is None:
        return None
    return Emitted([conv, Op(CAST, (reads(sums), writes(Value(y))), (TYPES[FLOAT32], TYPES[np.dtype(np.int32)], count))], {})


def _matmul_integer(step: Step) -> Emitted | None:
    """MatMulInteger by a constant 2-D B, as its kernel's compiled product takes it (matmul_8bit.c: exact int32 sums from
    the bytes): A's zero point a constant or the one the run computed (DynamicQuantizeLinear's), which the op reads."""
    a, b, a_zp, b_zp = (step.node.inputs + [""] * 4)[:4]
    y, dtype = step.output(), step.dtype(a)
    weights, bz = step.constant(b), (step.constant(b_zp) if b_zp else None)
    shape, zero = step.shape(a), _zero_point(step, a_zp, dtype)
    if dtype not in EIGHT_BIT or weights is None or weights.dtype not in EIGHT_BIT or weights.ndim != 2 or len(shape) < 2 \
            or not 0 < shape[-1] == weights.shape[0] <= quant.MAX_K or weights.shape[1] < 1 or step.dtype(y) != np.int32 \
            or (b_zp and (bz is None or bz.dtype != weights.dtype or bz.size not in (1, weights.shape[1]))) or zero is None:
        return None
    k, n = weights.shape
    w_zero = np.ascontiguousarray((np.zeros(1, weights.dtype) if bz is None else bz).reshape(-1), np.int32)
    return Emitted([Op(MATMUL8, (reads(Value(a)), reads(Constant(np.ascontiguousarray(weights))), reads(Constant(w_zero)),
                                 writes(Value(y)), *zero[1]),
                       (EIGHT_BIT[dtype], EIGHT_BIT[weights.dtype], zero[0], math.prod(shape[:-1]), k, n))], {})


def _qlinear_params(step: Step, dtype, names: tuple, schema=("X", "Y")):
    """The kernel's own (x_scale, x_zp, y_scale, y_zp) from constant inputs `names`, or None."""
    if any(n and step.constant(n) is None for n in names) or not names[0] or not names[2]:
        return None
    try:
        return step.kernel.params(dtype, *(step.constant(n) if n else None for n in names), schema)
    except Exception:   # parameters the kernel refuses: its own run says so
        return None


def _qlinear_matmul(step: Step) -> Emitted | None:
    """QLinearMatMul by a constant b with per-tensor parameters, where the kernel's sums are exact in float32
    (then any order of them gives its bits): a - a_zp as floats, our GEMM by the kernel's own centred b packed
    once, and the kernel's requantization (float32(sum) * multiplier, half to even, + y_zp, saturated)."""
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (step.node.inputs + [""] * 8)[:8]
    y = step.output()
    weights, bz = step.constant(b), step.constant(b_zp) if b_zp else None
    a_params = _per_tensor(step, a_scale, a_zp, step.dtype(a))
    y_params = _per_tensor(step, y_scale, y_zp, step.dtype(y)) if y_zp else None
    bs = step.constant(b_scale)
    if a_params is None or y_params is None or weights is None or not frozen(weights) or weights.ndim != 2 \
            or weights.dtype not in EIGHT_BIT or bs is None or bs.size != 1 or (b_zp and (bz is None or bz.size != 1)) \
            or step.dtype(a) not in EIGHT_BIT or step.dtype(y) not in EIGHT_BIT:
        return None
    a_shape, (k, n) = step.shape(a), weights.shape
    if len(a_shape) < 2 or a_shape[-1] != k or step.shape(y) != tuple(a_shape[:-1]) + (n,) or min(*a_shape, n) < 1:
        return None
    if span(step.dtype(a), np.asarray(a_params[1])) * span(weights.dtype, bz) * k >= FLOAT32_EXACT:
        return None   # the kernel sums slices in float64 then
    centred = step.kernel.weight.get(np, weights, bz)   # the kernel's own kept copy
    if not frozen(centred) or centred.dtype != FLOAT32:
        return None
    rows = math.prod(a_shape[:-1])
    panels = packed(centred, ("gemm", ROWS, k, n), lambda: pack_gemm(centred, ROWS, k, n))
    multiplier = np.ascontiguousarray((step.constant(a_scale).astype(np.float32) * bs.astype(np.float32)
                                       / step.constant(y_scale).astype(np.float32)).reshape(-1))
    a_float, sums = Scratch("a", rows * k * 4), Scratch("sums", rows * n * 4)
    return Emitted([Op(DEQUANTIZE, (reads(Value(a)), writes(a_float)), (EIGHT_BIT[step.dtype(a)], _float_bits(1.0), a_params[1])),
                    Op(GEMM, (reads(a_float), reads(Constant(panels)), reads(None), writes(sums)), (PACKED, rows, k, n, 0)),
                    Op(REQUANTIZE, (reads(sums), reads(Constant(multiplier)), reads(None), writes(Value(y))),
                       (1, 1, y_params[1], EIGHT_BIT[step.dtype(y)]))], {})


def _qlinear_lookup(step: Step) -> Emitted | None:
    """com.microsoft QLinearSigmoid, QLinearLeakyRelu: one gather from the table the kernel builds."""
    x, y = step.input(0), step.output()
    dtype = step.dtype(x)
    if dtype not in EIGHT_BIT or step.dtype(y) != dtype:
        return None
    params = _qlinear_params(step, dtype, tuple(step.node.inputs[1:5] + [""] * (4 - len(step.node.inputs[1:5]))))
    if params is None:
        return None
    table = np.ascontiguousarray(lookup_table(dtype, *params, step.kernel.transform))
    return Emitted([Op(LOOKUP, (reads(Value(x)), reads(Constant(table.view(np.uint8))), writes(Value(y))), ())], {})


def _qlinear_binary(step: Step) -> Emitted | None:
    """com.microsoft QLinearAdd, QLinearMul: one gather per output from the kernel's table of all pairs."""
    a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp = (step.node.inputs + [""] * 8)[:8]
    c = step.output()
    dtype = step.dtype(a)
    if dtype not in EIGHT_BIT or step.dtype(b) != dtype or step.dtype(c) != dtype:
        return None
    a_params = _qlinear_params(step, dtype, (a_scale, a_zp, c_scale, c_zp), ("A", "C"))
    b_params = _qlinear_params(step, dtype, (b_scale, b_zp, c_scale, c_zp), ("B", "C"))
    a_shape, b_shape, out = step.shape(a), step.shape(b), step.shape(c)
    if a_params is None or b_params is None or not out or len(out) > MAX_DIMS or np.broadcast_shapes(a_shape, b_shape) != out:
        return None
    values = np.arange(256, dtype=np.uint8).view(dtype)
    table = step.kernel.combine(values[:, None], values[None, :], *a_params[:2], *b_params[:2], *a_params[2:], dtype,
                                scalar_side(a_shape, b_shape))
    strides = []
    for shape in (a_shape, b_shape):
        padded = (1,) * (len(out) - len(shape)) + tuple(shape)
        strides.append([0 if n == 1 else s for n, s in zip(padded, _contiguous_strides(padded))])
    return Emitted([Op(PAIRS, (reads(Value(a)), reads(Value(b)), reads(Constant(np.ascontiguousarray(table.reshape(-1)).view(np.uint8))),
                               writes(Value(c))), (len(out), *out, *strides[0], *strides[1]))], {})


def _qlinear_concat(step: Step) -> Emitted | None:
    """com.microsoft QLinearConcat: each input copied into its slab of the output, through the kernel's
    requantizing 256-entry table first where its scale or zero point is not the output's."""
    y_scale, y_zp, *triples = step.node.inputs
    y = step.output()
    xs = triples[::3]
    if not xs or len(triples) % 3 or any(not x for x in xs):
        return None
    dtype, out = step.dtype(xs[0]), step.shape(y)
    if dtype not in EIGHT_BIT or step.dtype(y) != dtype or any(step.dtype(x) != dtype for x in xs) or not out:
        return None
    axis = step.kernel.axis % len(out)
    out_strides, ops, offset = _contiguous_strides(out), [], 0
    for i, x in enumerate(xs):
        params = _qlinear_params(step, dtype, (triples[3 * i + 1], triples[3 * i + 2], y_scale, y_zp))
        shape = step.shape(x)
        if params is None or len(shape) != len(out):
            return None
        if math.prod(shape):
            source = Value(x)
            if not (params[0] == params[2] and params[1] == params[3]):
                table = np.ascontiguousarray(lookup_table(dtype, *params, lambda v: v)).view(np.uint8)
                source = Scratch(f"requantized{i}", math.prod(shape))
                ops.append(Op(LOOKUP, (reads(Value(x)), reads(Constant(table)), writes(source)), ()))
            copy = _copy_params(1, shape, _contiguous_strides(shape), out_strides, 0, offset * out_strides[axis])
            if copy is None:
                return None
            ops.append(Op(COPY, (reads(source), writes(Value(y))), copy))
        offset += shape[axis]
    return Emitted(ops, {}) if offset == out[axis] else None


def _qlinear_average_pool(step: Step) -> Emitted | None:
    """com.microsoft QLinearAveragePool over NCHW 2-D windows, in the kernel's float32 steps (its global path, a
    window over the whole unpadded image, as QLinearGlobalAveragePool's op)."""
    kernel, x, y = step.kernel, step.input(0), step.output()
    dtype, shape = step.dtype(x), step.shape(x)
    if dtype not in EIGHT_BIT or step.dtype(y) != dtype or kernel.channels_last or len(shape) != 4 or len(kernel.kernel_shape) != 2:
        return None
    params = _qlinear_params(step, dtype, tuple((step.node.inputs + [""] * 5)[1:5]))
    if params is None or not (params[0] > 0 and params[2] > 0):
        return None
    x_scale, x_zp, y_scale, y_zp = params
    out_shape, begin, end = geometry(shape[2:], kernel.kernel_shape, kernel.strides, None, kernel.pads, kernel.auto_pad,
                                     kernel.ceil_mode)
    if tuple(shape[:2]) + tuple(out_shape) != step.shape(y) or min(shape) < 1:
        return None
    if list(shape[2:]) == list(kernel.kernel_shape) and not any(begin) and not any(end):
        size = math.prod(shape[2:])
        return Emitted([Op(GLOBAL_AVERAGE8, (reads(Value(x)), writes(Value(y))),
                           (EIGHT_BIT[dtype], shape[0] * shape[1], size, int(x_zp), _float_bits(x_scale / (y_scale * np.float32(size))),
                            int(y_zp)))], {})
    return Emitted([Op(AVERAGE_POOL8, (reads(Value(x)), writes(Scratch("dequantized", math.prod(shape) * 4)), writes(Value(y))),
                       (EIGHT_BIT[dtype], *shape, *kernel.kernel_shape, *out_shape, *kernel.strides, begin[0], begin[1],
                        int(kernel.count_include_pad), _float_bits(x_scale), int(x_zp), _float_bits(y_scale), int(y_zp)))], {})


def _qlinear_global_average(step: Step) -> Emitted | None:
    """com.microsoft QLinearGlobalAveragePool over NCHW: exact sums per image and channel, then the kernel's float32 steps."""
    x, y = step.input(0), step.output()
    dtype, shape = step.dtype(x), step.shape(x)
    if dtype not in EIGHT_BIT or step.dtype(y) != dtype or step.kernel.channels_last or len(shape) < 3 or math.prod(shape[2:]) < 1:
        return None
    params = _qlinear_params(step, dtype, tuple((step.node.inputs + [""] * 5)[1:5]))
    if params is None:
        return None
    x_scale, x_zp, y_scale, y_zp = params
    size = math.prod(shape[2:])
    scale = x_scale / (y_scale * np.float32(size))
    return Emitted([Op(GLOBAL_AVERAGE8, (reads(Value(x)), writes(Value(y))),
                       (EIGHT_BIT[dtype], shape[0] * shape[1], size, int(x_zp), _float_bits(scale), int(y_zp)))], {})


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
    ("", "AveragePool"): _pool,
    ("", "GlobalAveragePool"): _reduce,
    ("", "GlobalMaxPool"): _reduce,
    **{("", op): _reduce for op in REDUCE_KINDS},
    ("", "LSTM"): _lstm,
    ("", "QuantizeLinear"): _quantize,
    ("", "DynamicQuantizeLinear"): _dynamic_quantize,
    ("", "ConvInteger"): _conv_integer,
    ("", "MatMulInteger"): _matmul_integer,
    ("", "DequantizeLinear"): _dequantize,
    ("", "QLinearConv"): _qlinear_conv,
    ("", "QLinearMatMul"): _qlinear_matmul,
    (MS_DOMAIN, "QLinearSigmoid"): _qlinear_lookup,
    (MS_DOMAIN, "QLinearLeakyRelu"): _qlinear_lookup,
    (MS_DOMAIN, "QLinearAdd"): _qlinear_binary,
    (MS_DOMAIN, "QLinearMul"): _qlinear_binary,
    (MS_DOMAIN, "QLinearGlobalAveragePool"): _qlinear_global_average,
    (MS_DOMAIN, "QLinearConcat"): _qlinear_concat,
    (MS_DOMAIN, "QLinearAveragePool"): _qlinear_average_pool,
    (RTD_DOMAIN, "ConvActivation"): _conv_activation,
    (RTD_DOMAIN, "ElementwiseChain"): _elementwise_chain,
    (RTD_DOMAIN, "MatMulBias"): _matmul_bias,
    (RTD_DOMAIN, "Attention"): _attention,
    (RTD_DOMAIN, "Softmax"): _softmax,
    (RTD_DOMAIN, "LayerNorm"): _layernorm,
    (RTD_DOMAIN, "Gelu"): _gelu,
    ("", "Gelu"): _gelu,
}

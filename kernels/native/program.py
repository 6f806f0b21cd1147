"""Compiled plans' native segments: runs of steps as one program for the C interpreter (program.c).

An op is made (kernels/emit.py) with symbolic operands: `Value` (bytes of a plan value, by name),
`Constant` (an array the program keeps: weights, packed panels, a chain's opcodes) and `Scratch` (bytes
private to one step). `Segment` resolves them once per shape signature against where each value lives
(`Home`: the plan's arena, a constant, an array from the frame, or one made per run for values that
leave the plan) and assembles the int64 program. A run fills the pointers of what changes per run (the
frame's arrays, the fresh outputs) and calls the interpreter once; with a profile it runs the program
op by op, each timed under the label of the node it came from.
"""
import math
import threading
import time
from typing import NamedTuple

import numpy as np

from rtd.errors import Code, RtdError

from . import compiled
from .quant import VALUE

ABSENT_SLOT = -1
# statuses an op returns for its data's values (program.h's RTD_PROGRAM_E_INDEX, depthwise.h's RTD_NATIVE_E_VALUE)
DATA_STATUSES = {3: "an index out of range", VALUE: "a value the op has no result for (a NaN or an infinite range)"}


class Value(NamedTuple):
    """`nbytes` bytes of a plan value from `offset` on (None: to its end)."""
    name: str
    offset: int = 0
    nbytes: int | None = None


class Constant(NamedTuple):
    array: np.ndarray


class Scratch(NamedTuple):
    key: str
    nbytes: int


class Operand(NamedTuple):
    ref: Value | Constant | Scratch | None   # None: absent (a NULL pointer)
    writes: bool = False


class Op(NamedTuple):
    opcode: int
    operands: tuple
    params: tuple


def reads(ref) -> Operand:
    return Operand(ref, False)


def writes(ref) -> Operand:
    return Operand(ref, True)


class Home(NamedTuple):
    """Where a value's bytes are: `base` "arena" (the plan's, `key` None), "constant" (`key` the array),
    "frame" (`key` the name of the value whose array the frame holds) or "fresh" (`key` the name of the
    value a run allocates); `offset` bytes in."""
    base: str
    key: object
    offset: int


class Segment:
    """Consecutive native steps as one program. `homes` maps every value the ops name to its Home;
    `specs` maps names to (shape, dtype); `externals` are the frame values the program reads (passed to
    `run` after the arena, in this order); `fresh` the values a run allocates; `exports` the values `run`
    returns (fresh ones or views of fresh and frame arrays), in order; `labels` each op's (label, step): the
    node it came from, timed as one under that label by a profiled run."""

    def __init__(self, ops: list, labels: list, homes: dict, specs: dict, scratch: dict, externals: list,
                 fresh: list, exports: list):
        self.labels, self.specs = [label for label, _ in labels], specs
        self.nodes = []   # (label, first op, end op) per node that has ops
        for k, (label, step) in enumerate(labels):
            if k and labels[k - 1][1] == step:
                self.nodes[-1] = (label, self.nodes[-1][1], k + 1)
            else:
                self.nodes.append((label, k, k + 1))
        self.externals, self.fresh, self.exports = externals, fresh, exports
        slot_of: dict = {}
        self.slot_arrays: list = []   # constants, by slot
        writable = [1]                # slot 0: the arena
        self.slot_bytes = [0]

        def slot(home: Home) -> int:
            key = (home.base, id(home.key) if home.base == "constant" else home.key)
            if key not in slot_of:
                slot_of[key] = len(writable)
                if home.base == "constant":   # read in C order: a strided constant (a folded transpose) as a copy
                    self.slot_arrays.append((len(writable), np.ascontiguousarray(home.key)))
                    writable.append(0)
                    self.slot_bytes.append(home.key.nbytes)
                else:
                    spec = specs[home.key]
                    writable.append(1 if home.base == "fresh" else 0)
                    self.slot_bytes.append(int(np.prod(spec[0])) * np.dtype(spec[1]).itemsize)
            return slot_of[key]

        for name in externals:
            slot(Home("frame", name, 0))
        for name in fresh:
            slot(Home("fresh", name, 0))
        words, self.op_starts = [], []
        for op in ops:
            self.op_starts.append(len(words))
            words += [op.opcode, len(op.operands), len(op.params)]
            for operand in op.operands:
                words += self._operand(operand, homes, specs, scratch, slot)
            words += [int(p) for p in op.params]
        self.op_starts.append(len(words))
        self.code = np.array(words, np.int64)
        self.code_pointer = compiled.ffi.from_buffer("int64_t[]", self.code)
        self.writable = compiled.ffi.new("uint8_t[]", writable)
        self.n_slots = len(writable)
        # per frame value and per fresh one: (slot, name, shape, dtype), looked up once rather than per run
        self.external_info = [(slot_of[("frame", name)], name, tuple(specs[name][0]), np.dtype(specs[name][1])) for name in externals]
        self.fresh_info = [(slot_of[("fresh", name)], name, tuple(specs[name][0]), np.dtype(specs[name][1])) for name in fresh]
        # per export: its source array's key, byte offset, shape, dtype and size, worked out once (a run of a
        # streaming model's small program is a few microseconds: NumPy's prod per export cost as much)
        # (its source's index among a run's arrays: the frame's values, then the fresh ones)
        position = {name: k for k, name in enumerate([*externals, *fresh])}
        self.export_info = []
        for name in exports:
            home, (shape, dtype) = homes[name], specs[name]
            self.export_info.append((position[home.key], home.offset, tuple(shape), np.dtype(dtype), math.prod(shape)))
        self._local = threading.local()

    @staticmethod
    def _operand(operand: Operand, homes: dict, specs: dict, scratch: dict, slot) -> list:
        ref, written = operand
        if ref is None:
            return [ABSENT_SLOT, 0, 0, 0]
        if isinstance(ref, Constant):
            return [slot(Home("constant", ref.array, 0)), 0, ref.array.nbytes, 0]
        if isinstance(ref, Scratch):
            return [0, scratch[ref.key], ref.nbytes, 1]
        home = homes[ref.name]
        shape, dtype = specs[ref.name]
        total = int(np.prod(shape)) * np.dtype(dtype).itemsize
        nbytes = total - ref.offset if ref.nbytes is None else ref.nbytes
        number = 0 if home.base == "arena" else slot(home)
        return [number, home.offset + ref.offset, nbytes, int(written)]

    def _thread_state(self, arena):
        """This thread's slot table: the arena's and the constants' pointers set once."""
        ffi = compiled.ffi
        state = self._local.__dict__
        state["arena"] = arena
        keep = [ffi.from_buffer("char[]", arena, require_writable=True)]
        pointers = ffi.new("void *[]", self.n_slots)
        sizes = ffi.new("int64_t[]", self.slot_bytes)
        sizes[0] = arena.nbytes
        pointers[0] = keep[0]
        for number, array in self.slot_arrays:
            keep.append(ffi.from_buffer("char[]", array))
            pointers[number] = keep[-1]
        state["keep"], state["pointers"], state["sizes"] = keep, pointers, sizes
        state["failed"] = ffi.new("int64_t *")
        state["tables"] = (pointers, sizes, self.writable, self.n_slots, state["failed"])   # rtd_program_run's last arguments
        return state

    def _bind(self, arena, values):
        """The slot table for this run (the frame's arrays and fresh ones in place), what keeps them alive, and
        the arrays (the frame's, then the fresh ones)."""
        state = self._local.__dict__
        if state.get("arena") is not arena:
            state = self._thread_state(arena)
        from_buffer, pointers = compiled.ffi.from_buffer, state["pointers"]
        held, arrays = [], []
        for (number, name, shape, dtype), value in zip(self.external_info, values):
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape:
                raise ValueError(f"a compiled step expected {name!r} as {dtype}{list(shape)}, got "
                                 f"{getattr(value, 'dtype', type(value).__name__)}{list(getattr(value, 'shape', ()))}")
            if not value.flags.c_contiguous:
                value = np.ascontiguousarray(value)
            arrays.append(value)
            pointers[number] = pointer = from_buffer("char[]", value)
            held.append(pointer)
        for number, _, shape, dtype in self.fresh_info:
            arrays.append(value := np.empty(shape, dtype))
            pointers[number] = pointer = from_buffer("char[]", value, require_writable=True)
            held.append(pointer)
        return state, held, arrays

    def run(self, arena, *values) -> tuple:
        state, held, arrays = self._bind(arena, values)
        if self.labels:   # a segment of views alone (a Cast to the dtype it has) has no program to run
            self._call(state, 0, len(self.labels))
        return self._exports(arrays)

    def cycle(self, arena, values: list, feedback: list, counter: int | None, condition: int | None,
              first: int, limit: int | None) -> tuple:
        """The program run as a Loop body's iterations `first`, `first + 1`, … until `limit` or a false condition,
        one compiled call each and no arrays made per iteration. `values` are iteration `first`'s externals;
        `feedback` pairs (external, fresh) by index: a carried value, each run's fresh array read by the next
        run as that external. Each carried value has two arrays taken in turns (no caller sees an earlier
        iteration's); `counter` is the external holding the iteration number, if the program reads it;
        `condition` the export holding the condition (None: passed through, true). Returns the last run's
        exports and the iterations run."""
        count = np.array(first, np.int64)
        if counter is not None:
            values = [*values[:counter], count, *values[counter + 1:]]
        state, held, arrays = self._bind(arena, values)
        pointers, n_external = state["pointers"], len(self.external_info)
        turns = []   # per carried value: its slots, its indices in `arrays`, and the array the next run writes
        for external, fresh in feedback:
            spare = np.empty_like(arrays[n_external + fresh])
            held.append(spare_pointer := compiled.ffi.from_buffer("char[]", spare, require_writable=True))
            turns.append([self.external_info[external][0], self.fresh_info[fresh][0], external, n_external + fresh,
                          spare, spare_pointer])
        n_ops, iteration = len(self.labels), first
        while limit is None or iteration < limit:
            if iteration > first:
                for turn in turns:   # the last result is read by this run, which writes the spare; that input is the next spare
                    external_slot, fresh_slot, external, fresh, spare, spare_pointer = turn
                    result, result_pointer = arrays[fresh], pointers[fresh_slot]
                    pointers[external_slot], pointers[fresh_slot] = result_pointer, spare_pointer
                    arrays[external], arrays[fresh] = result, spare
                    turn[4:] = result, result_pointer
            count[()] = iteration
            self._call(state, 0, n_ops)
            iteration += 1
            if condition is not None and not self._exports(arrays)[condition]:
                break
        return self._exports(arrays), iteration - first

    def run_profiled(self, profile, arena, *values) -> tuple:
        state, held, arrays = self._bind(arena, values)
        clock = time.perf_counter_ns
        for label, first, end in self.nodes:
            start = clock()
            self._call(state, first, end)
            profile.record(label, start, clock())
        return self._exports(arrays)

    def _call(self, state, first: int, last: int) -> None:
        start, end = self.op_starts[first], self.op_starts[last]
        code = self.code_pointer + start if start else self.code_pointer
        status = compiled.lib.rtd_program_run(code, end - start, *state["tables"])
        if status != 0:
            label = self.labels[first + state["failed"][0]]
            if status in DATA_STATUSES:   # the input's values, as the op's own kernel refuses them
                raise RtdError(Code.E_INPUT_INVALID, f"the model cannot run on these inputs: step {label!r}: {DATA_STATUSES[status]}")
            # the plan's checks make the others unreachable; the C checks each op all the same
            raise RtdError(Code.E_INTERNAL, f"compiled step {label!r} refused its operands (status {status})")

    def _exports(self, arrays: list) -> tuple:
        out = []
        for key, offset, shape, dtype, size in self.export_info:
            base = arrays[key]
            if offset == 0 and base.dtype == dtype and base.shape == shape:   # most exports: the array itself
                out.append(base)
            elif offset == 0 and base.dtype == dtype and base.size == size:
                out.append(base.reshape(shape))
            else:
                nbytes = size * dtype.itemsize
                out.append(base.reshape(-1).view(np.uint8)[offset:offset + nbytes].view(dtype).reshape(shape))
        return tuple(out)

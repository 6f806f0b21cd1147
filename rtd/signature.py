"""A model's signature — its inputs' and outputs' names, types and shapes — and the one check
of a request against it.

The worker states its model's signature in its LOAD reply; the supervisor parses that reply
once, bounded, at the channel (`Signature.parse`: anything else is E_WORKER_PROTOCOL), so a
compromised worker can make its own model refuse requests but never raise inside the
supervisor. The same `check` runs on both sides of the boundary: in the supervisor on a
request's headers (names, datatypes, shapes) before any of its bytes move, and in the worker
(through the executor's own check) on the decoded arrays. Shapes follow one rule everywhere:
a fixed dim is exact (0 too), a named (symbolic) dim takes one value across all inputs of a
request, an unnamed dim or one of UNNAMED_DIMS takes any size, and an unknown rank takes any
shape. Types are the wire names of the one dtype table (rtd.dtypes); None where the model
leaves them open.
"""
import dataclasses

from rtd import dtypes
from rtd.errors import Code, RtdError

MAX_TENSORS = 1024      # inputs or outputs of one model
MAX_NAME = 1 << 16      # characters of a tensor or dim name (the reply head holds them all within 1 MiB)
MAX_RANK = 16
# Names exporters write for "any size" rather than for a size shared with other dims: paddle2onnx
# marks every free dim "?" (PP-OCR's classifier has height and width both "?", fed 48x192 crops).
UNNAMED_DIMS = frozenset({"?"})


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str | None          # a wire name of rtd.dtypes; None: any (sequences, optional types)
    shape: tuple | None        # int fixed, str symbolic, None any size, per dim; None: any rank

    @property
    def datatype(self) -> str:
        """The KServe datatype ("" where the model leaves the type open)."""
        return dtypes.kserve_name(self.dtype)

    def public_shape(self) -> list:
        """The shape as KServe metadata states it: -1 for every dim that is not fixed."""
        return [d if isinstance(d, int) else -1 for d in self.shape or ()]

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape)}


def _protocol(detail: str) -> RtdError:
    return RtdError(Code.E_WORKER_PROTOCOL, f"signature: {detail}")


def _spec(entry) -> TensorSpec:
    if not isinstance(entry, dict) or set(entry) - {"name", "dtype", "shape"}:
        raise _protocol("an entry is not {name, dtype, shape}")
    name, dtype, shape = entry.get("name"), entry.get("dtype"), entry.get("shape")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise _protocol(f"a tensor name is not a string of 1..{MAX_NAME} characters")
    if dtype is not None and dtype not in dtypes.BY_WIRE:
        raise _protocol(f"{name[:64]!r}: unknown dtype")
    if shape is not None:
        if not isinstance(shape, list) or len(shape) > MAX_RANK:
            raise _protocol(f"{name[:64]!r}: shape is not a list of at most {MAX_RANK} dims")
        for d in shape:
            fixed = type(d) is int and 0 <= d < 1 << 62
            named = isinstance(d, str) and 0 < len(d) <= MAX_NAME
            if not (fixed or named or d is None):
                raise _protocol(f"{name[:64]!r}: a dim is not a size, a name or null")
        shape = tuple(shape)
    return TensorSpec(name, dtype, shape)


@dataclasses.dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @classmethod
    def parse(cls, doc) -> "Signature":
        """From a worker's LOAD reply head ({"inputs": [...], "outputs": [...]}): bounded and
        strict, E_WORKER_PROTOCOL on anything else."""
        if not isinstance(doc, dict):
            raise _protocol("not an object")
        sides = []
        for side in ("inputs", "outputs"):
            entries = doc.get(side)
            if not isinstance(entries, list) or len(entries) > MAX_TENSORS:
                raise _protocol(f"{side} is not a list of at most {MAX_TENSORS} tensors")
            specs = tuple(_spec(e) for e in entries)
            if len({s.name for s in specs}) != len(specs):
                raise _protocol(f"a name appears twice among the {side}")
            sides.append(specs)
        return cls(*sides)

    def to_json(self) -> dict:
        return {"inputs": [s.to_json() for s in self.inputs], "outputs": [s.to_json() for s in self.outputs]}

    def check(self, model: str, given: dict, outputs=None) -> None:
        """The one check of a request: `given` maps each input's name to (wire dtype, shape),
        `outputs` names the outputs asked for (None: all). E_INPUT_INVALID naming the first
        difference; nothing is allocated from the request's numbers."""
        check_tensors(model, self.inputs, given)
        if outputs:
            known = {s.name for s in self.outputs}
            for name in outputs:
                if name not in known:
                    raise RtdError(Code.E_INPUT_INVALID, f"{model} has no output {str(name)[:100]!r}")


def check_tensors(model: str, specs, given: dict) -> None:
    """Inputs `given` ({name: (wire dtype, shape)}) against `specs` (TensorSpec-like: name,
    dtype, shape): the same names, each dtype the spec's (where it names one), each shape
    by the rule in the module's docstring."""
    names = {s.name for s in specs}
    if set(given) != names:
        missing, unknown = sorted(names - set(given)), sorted(set(given) - names)
        raise RtdError(Code.E_INPUT_INVALID, f"{model}: missing inputs {missing[:16]}, unknown inputs "
                                             f"{[str(n)[:100] for n in unknown[:16]]}")
    symbols = {}
    for spec in specs:
        dtype, shape = given[spec.name]
        if spec.dtype is not None and dtype != spec.dtype:
            raise RtdError(Code.E_INPUT_INVALID, f"input {spec.name!r} is {dtypes.kserve_name(dtype) or dtype}, "
                                                 f"the model takes {dtypes.kserve_name(spec.dtype)}")
        if spec.shape is None:
            continue
        if len(shape) != len(spec.shape):
            raise RtdError(Code.E_INPUT_INVALID, f"input {spec.name!r} has shape {list(shape)[:MAX_RANK]}, "
                                                 f"the model takes {list(spec.shape)}")
        for axis, (want, got) in enumerate(zip(spec.shape, shape)):
            if isinstance(want, str) and want not in UNNAMED_DIMS:
                if symbols.setdefault(want, got) != got:
                    raise RtdError(Code.E_INPUT_INVALID, f"input {spec.name!r}: dim {axis} is {got}, but "
                                                         f"{symbols[want]} elsewhere for the same dim {want!r}")
            elif isinstance(want, int) and want != got:
                raise RtdError(Code.E_INPUT_INVALID, f"input {spec.name!r} has shape {list(shape)}, "
                                                     f"the model takes {list(spec.shape)}")

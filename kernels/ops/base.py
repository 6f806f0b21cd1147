"""The op contract: one class per (op type, first opset), named `<Op>_<since>`, checked here.

A subclass named like `Gemm_13` registers itself for ("", "Gemm") from opset 13 on; classes
without a version suffix (`Elementwise`, `_Reduce`) are shared bases and register nothing.
The base loads and checks attributes, so op files hold only the computation.
"""
import re

import numpy as np

from rtd.errors import Code, RtdError

REQUIRED = object()  # marks an attribute the node must carry
_NAME = re.compile(r"^([A-Za-z][A-Za-z0-9]*)_(\d+)$")
_REGISTRY: dict[tuple[str, str], list[tuple[int, type]]] = {}


class Kernel:
    """One ONNX op over an array module `xp` (numpy or cupy); `run(*inputs) -> tuple`."""

    domain = ""  # "" is ai.onnx
    attributes: dict = {}  # name -> default, or REQUIRED
    needs_scope = False  # control flow: run(..., scope=outer_values) to see enclosing names
    on_device = True  # False: computes on the host whatever `xp` is (strings, host loops, host draws); kernels/partition.py
    n_outputs: int | None = None  # the node's output count (Split into equal parts, MaxPool indices)
    # True: the instance keeps nothing of a run, so every plan of the model may use the one made at
    # compile (a tree ensemble's tables take seconds to build: not again for each new signature)
    shareable = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if m := _NAME.match(cls.__name__):
            cls.op_type, cls.since = m.group(1), int(m.group(2))
            versions = _REGISTRY.setdefault((cls.domain, cls.op_type), [])
            versions.append((cls.since, cls))
            versions.sort(key=lambda v: v[0])

    def __init__(self, attrs: dict, xp=np, n_outputs: int | None = None):
        unknown = set(attrs) - set(self.attributes)
        if unknown:
            raise RtdError(Code.E_OP_UNSUPPORTED, f"attribute(s) {sorted(unknown)} not understood (kernel {self.op_type}-{self.since})")
        for name, default in self.attributes.items():
            if default is REQUIRED and name not in attrs:
                raise RtdError(Code.E_MODEL_INVALID, f"{self.op_type}: required attribute {name!r} missing")
            setattr(self, name, attrs.get(name, default))
        self.xp = xp
        if n_outputs is not None:
            self.n_outputs = n_outputs
        self.setup()

    def setup(self) -> None:
        """Precompute from attributes once, at compile time."""

    def run(self, *inputs):
        raise NotImplementedError

    def refuse(self, detail: str, code: Code = Code.E_MODEL_INVALID):
        raise RtdError(code, f"{self.op_type}: {detail}")

    def host(self, x) -> np.ndarray:
        """A small tensor (a shape, axes, a scalar) as a NumPy array on the host."""
        if x is None or isinstance(x, np.ndarray):
            return x
        return np.asarray(x) if self.xp is np else self.xp.asnumpy(x)

    def first(self, x):
        """A tensor's first element on the host (a scalar tensor's one): item() where it holds one, a third of
        indexing's cost on the control-flow ops' path, taken on every call."""
        x = self.host(x)
        return x.item() if x.size == 1 else x.reshape(-1)[0]


class HostKernel(Kernel):
    """An op whose `compute` runs in NumPy on the host whatever the backend (the ML ops, string ops: small,
    and string tensors exist only there); results other than strings go back to the device."""

    on_device = False
    shareable = True   # compute() reads only what setup() made

    def compute(self, *inputs) -> tuple:
        raise NotImplementedError

    def run(self, *inputs):
        results = self.compute(*(self.host(x) for x in inputs))
        if self.xp is np:
            return results
        return tuple(v if v.dtype == object else self.xp.asarray(v) for v in results)


class Elementwise(Kernel):
    """An op computed element by element under broadcasting; the fuser chains these in place.

    `compute(*inputs, out=None)` must write into `out` when given (same shape and dtype as the
    result), so a fused chain allocates nothing. `cuda` is the same function as a CUDA C
    expression over `in0`, `in1`, ... for generated GPU kernels (None: not fusable on GPU).
    """

    cuda: str | None = None

    def compute(self, *inputs, out=None):
        raise NotImplementedError

    def run(self, *inputs):
        return (self.compute(*inputs),)


def lookup(domain: str, op_type: str, opset: int) -> type:
    """The newest kernel for `op_type` whose first opset is at or below `opset`."""
    domain = "" if domain == "ai.onnx" else domain
    for since, cls in reversed(_REGISTRY.get((domain, op_type), [])):
        if since <= opset:
            return cls
    raise RtdError(Code.E_OP_UNSUPPORTED, f"{domain or 'ai.onnx'} {op_type} (opset {opset})")


def supported() -> dict[tuple[str, str], list[int]]:
    """Every claimed (domain, op type) with the opsets where its kernels start."""
    return {key: [since for since, _ in versions] for key, versions in sorted(_REGISTRY.items())}

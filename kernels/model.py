"""compile_model: ONNX bytes (or a path) → a CompiledModel with `inputs`, `outputs` and `run`.

Compile parses, builds the IR and runs the compile-time passes, constructing every kernel
(so anything unsupported refuses here). The first run of each input-shape signature traces
the lowered graph once, specialises it to that signature and caches the resulting plan.
"""
import collections
import dataclasses
import json
import mmap
import os
import threading

import numpy as np
import onnx

from rtd import dtypes, onnx_weights
from rtd.errors import Code, RtdError
from rtd.served_shapes import served_dims

from . import backend_cupy
from .cuda_plan import CudaPlan
from .graph import GraphRunner
from .ir import from_onnx, weights_from_views
from .lower import PASSES, lower, lower_signature
from .lower.packing import pack_weights
from .ops._ml import ML_DOMAIN
from .partition import apply, partition
from .plan import Plan
from .profile import Profile


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype | None  # None for sequence/optional types
    shape: tuple | None  # ints for fixed dims, str for symbolic ones, None per unknown dim; None if rank unknown

# Names exporters write for "any size" rather than for a size shared with other dims: paddle2onnx
# marks every free dim "?" (PP-OCR's classifier has height and width both "?", fed 48x192 crops).
UNNAMED_DIMS = frozenset({"?"})


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    if not value.type.HasField("tensor_type"):
        return TensorSpec(value.name, None, None)
    t = value.type.tensor_type
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)) if t.elem_type else None
    if not t.HasField("shape"):
        return TensorSpec(value.name, dtype, None)
    return TensorSpec(value.name, dtype, tuple(dtypes.declared_dims(t.shape)))


def _served(spec: TensorSpec, producers: dict, rows: dict, input_dims: dict) -> TensorSpec:
    """A ZipMap output is served as the float32 [N, classes] probabilities it wraps: ONNX's
    sequence of maps cannot travel over KServe v2 (kernels/ops/op_ml_zip_map.py); an output of an
    ai.onnx.ml classifier or regressor with as many rows as its input, whatever its declaration
    says (rtd/served_shapes.py)."""
    node = producers.get(spec.name)
    if spec.dtype is not None or node is None or (node.domain, node.op_type) != (ML_DOMAIN, "ZipMap"):
        return dataclasses.replace(spec, shape=served_dims(spec.name, spec.shape, rows, input_dims))
    labels = node.attrs.get("classlabels_int64s") or node.attrs.get("classlabels_strings") or []
    return TensorSpec(spec.name, np.dtype(np.float32), (None, len(labels)))


def _parse(model) -> tuple[onnx.ModelProto, dict]:
    """The model's proto, and the weights `from_onnx` takes in place of its initializers: from a path, the main
    graph's raw weights read from the file each into an array of its own, never parsed (rtd/onnx_weights.py):
    the model is in memory once, not as the file's bytes, the parser's copy and the arrays."""
    if isinstance(model, onnx.ModelProto):
        return model, {}
    if not isinstance(model, (str, os.PathLike)):
        return _proto(bytes(model)), {}
    with open(model, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise RtdError(Code.E_ONNX_PARSE, "the model file is empty")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:   # only the fields' keys are read from it
            skeleton, spans = onnx_weights.stripped(mapped)
            proto = _proto(bytes(skeleton))
        del skeleton
        views = {}
        for tensor in proto.graph.initializer:
            span = spans.get(tensor.name)
            if span is None or tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
                continue   # external data: tensor_value refuses it
            raw = np.empty(span[1], np.uint8)
            if os.preadv(f.fileno(), [raw], span[0]) != span[1]:
                raise RtdError(Code.E_ONNX_PARSE, f"tensor {tensor.name!r}: the model file changed while it was read")
            raw.flags.writeable = False   # its own bytes, which nothing writes: the kernels may keep packed forms of it
            views[tensor.name] = memoryview(raw)
    try:
        weights = weights_from_views(proto, views)
    except ValueError as e:
        raise RtdError(Code.E_ONNX_INVALID, f"an initializer's raw_data is not its dims x element size: {str(e)[:160]}") from None
    return proto, weights


def _proto(data) -> onnx.ModelProto:
    try:
        return onnx.ModelProto.FromString(data)
    except Exception as e:  # protobuf raises DecodeError and friends
        raise RtdError(Code.E_ONNX_PARSE, str(e)[:200]) from None


def _xp(device: str, gpu_memory_limit: int | None):
    if device == "cpu":
        return np
    if device == "cuda":
        return backend_cupy.array_module(gpu_memory_limit)  # E_OP_UNSUPPORTED when CuPy or a GPU is absent
    raise RtdError(Code.E_OP_UNSUPPORTED, f"device {device!r} unavailable: rtd runs on 'cpu' or 'cuda'")


class CompiledModel:
    """A compiled ONNX model; `run` is safe to call from several threads at once."""

    def __init__(self, model, device: str = "cpu", optimize: bool = True,
                 disable_passes=(), profile: bool = False, max_plans: int = 32, gpu_memory_limit: int | None = None,
                 arena_limit: int | None = None, weights: dict | None = None):
        self.device, self.xp = device, _xp(device, gpu_memory_limit)
        self.arena_limit = arena_limit  # bytes one thread's planned buffers may take, per signature
        proto, read_weights = _parse(model)
        if not proto.graph.node and not proto.graph.output:
            raise RtdError(Code.E_MODEL_INVALID, "the graph is empty")
        initializers = {t.name for t in proto.graph.initializer}
        self.inputs = [_spec(v) for v in proto.graph.input if v.name not in initializers]
        # weights: initializers' arrays held by the caller (read-only views), or read from the model's file
        graph = from_onnx(proto, weights if weights is not None else read_weights)
        del read_weights   # the graph holds them now: a weight the lowering replaces goes with the graph's reference
        producers = graph.producers()
        rows = {name: (node.domain, node.op_type, node.inputs) for name, node in producers.items()}
        dims = {spec.name: spec.shape for spec in self.inputs}
        self.outputs = [_served(_spec(v), producers, rows, dims) for v in proto.graph.output]
        # Parsed here from bytes or a path, the message goes before the kernels are made: a tree ensemble's
        # proto holds its node lists a second time (142 MiB of a 30 MB model's), which would add to the peak
        del proto
        self.optimize, self.profile, self.max_plans = optimize, profile, max_plans
        self.disable = set(disable_passes)
        if not optimize:
            self.disable |= {name for name, _ in PASSES} | {"fold_signature", "batch_sibling_products", "fuse_chains", "fuse_conv_chains",
                                                               "pack_weights"}
        self.graph = lower(graph, self.disable)
        del graph
        if self.xp is np and "pack_weights" not in self.disable:
            self.graph = pack_weights(self.graph)
        self.runner = GraphRunner(self.graph, self.xp)  # builds every kernel: refusals happen now
        self._plans: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self._profiles: collections.deque = collections.deque(maxlen=256)  # the latest profiled runs

    def _check(self, feeds: dict) -> tuple:
        """The feeds as the plans take them, in input order, and their signature."""
        if type(feeds) is dict and len(feeds) == len(self.inputs):
            # plain arrays of a signature a plan was made for passed these checks before, which read only the
            # names, types, dtypes and shapes, and came through them unconverted (a converted feed's plan has
            # the converted dtype in its key)
            values = [feeds.get(spec.name) for spec in self.inputs]
            if all(type(v) is np.ndarray for v in values):
                key = self._signature(values)
                if key in self._plans:
                    return values, key
        expected = [spec.name for spec in self.inputs]
        if not isinstance(feeds, dict) or set(feeds) != set(expected):
            got = sorted(feeds) if isinstance(feeds, dict) else type(feeds).__name__
            raise RtdError(Code.E_INPUT_INVALID, f"expected inputs {sorted(expected)}, got {got}")
        values, symbols = [], {}
        for spec in self.inputs:
            value = feeds[spec.name]
            if isinstance(value, np.generic):
                value = np.asarray(value)
            if spec.dtype == object and isinstance(value, np.ndarray) and value.dtype.kind in "US":
                value = value.astype(object)   # NumPy's fixed-width strings, as onnxruntime takes them
            if spec.dtype is None:
                values.append(value)
                continue
            if not isinstance(value, (np.ndarray, self.xp.ndarray)):
                raise RtdError(Code.E_INPUT_INVALID, f"{spec.name}: expected an ndarray of {spec.dtype}, got {type(value).__name__}")
            if value.dtype != spec.dtype:
                raise RtdError(Code.E_INPUT_INVALID, f"{spec.name}: expected dtype {spec.dtype}, got {value.dtype}")
            if spec.shape is not None:  # fixed dims exact (0 too), a symbolic one alike everywhere, None any size
                if value.ndim != len(spec.shape):
                    raise RtdError(Code.E_INPUT_INVALID, f"{spec.name}: got shape {list(value.shape)}, expected shape {list(spec.shape)}")
                for axis, (want, got) in enumerate(zip(spec.shape, value.shape)):
                    if isinstance(want, str) and want not in UNNAMED_DIMS:
                        if symbols.setdefault(want, got) != got:
                            raise RtdError(Code.E_INPUT_INVALID, f"{spec.name}: dim {axis} is {got}, but {symbols[want]} "
                                                                 f"elsewhere for the same symbolic dim {want!r}")
                    elif isinstance(want, int) and want != got:
                        raise RtdError(Code.E_INPUT_INVALID, f"{spec.name}: got shape {list(value.shape)}, expected shape {list(spec.shape)}")
            values.append(value)   # a GPU plan uploads on its own stream (cuda_plan)
        return values, self._signature(values)

    @staticmethod
    def _signature(values: list) -> tuple:
        return tuple((v.shape, v.dtype) if hasattr(v, "shape") else (type(v).__name__, len(v) if isinstance(v, list) else 0)
                     for v in values)

    def _plan(self, values: list, key: tuple):
        """The cached plan of this signature, or (None, outputs) after tracing a new one."""
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan, None
        on_device = [self.xp.asarray(v) if isinstance(v, np.ndarray) else v for v in values] if self.xp is not np else values
        env = self.runner.trace(dict(zip(self.runner.input_names, on_device)))
        outputs = [env[name] for name in self.runner.output_names]
        if any(isinstance(v, list) or v is None for v in values):
            return None, outputs  # sequence/optional feeds: interpret, no shape plan
        graph, shapes, static = lower_signature(self.graph, dict(env.maps[0], **dict(zip(self.graph.inputs, on_device))), self.disable, self.xp)
        if self.xp is np:
            plan = Plan(graph, shapes, static, self.xp, made={id(node): (node, kernel) for node, kernel in self.runner.nodes})
        else:   # ops the GPU backend lacks run on the host, the graph cut where fewest bytes cross
            cut = partition(graph, shapes)
            graph, shapes, where = apply(graph, cut, shapes)
            plan = Plan(graph, shapes, static, self.xp, where, backend_cupy.Transfers() if cut.host else None)
            plan = CudaPlan(plan, static)   # its stream, staged copies, a CUDA graph where shapes are static
        if self.arena_limit is not None and plan.peak_bytes > self.arena_limit:
            raise RtdError(Code.E_RESOURCE_EXHAUSTED, f"input shapes {[list(v.shape) for v in values]} need a "
                           f"{plan.peak_bytes}-byte arena, over the {self.arena_limit}-byte limit")
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > self.max_plans:
                self._plans.popitem(last=False)
        return plan, outputs

    def run(self, feeds: dict, profile: bool = False, record: Profile | None = None) -> dict:
        """The outputs for `feeds`. With `record`, this run's steps are timed into it (a new
        shape signature is planned first, then its plan runs timed)."""
        values, key = self._check(feeds)
        try:
            plan, outputs = self._plan(values, key)
            if outputs is None or record is not None:
                record = record if record is not None else Profile() if (profile or self.profile) else None
                outputs = plan.run(values, record)
                if record is not None:
                    with self._lock:
                        self._profiles.append(record)
        except backend_cupy.OUT_OF_MEMORY as e:
            raise RtdError(Code.E_RESOURCE_EXHAUSTED, f"GPU memory: {e}") from None
        except (ValueError, IndexError, TypeError, ArithmeticError, MemoryError) as e:
            # inputs that passed the declared checks but break the graph (dims the model
            # relates but does not declare alike, out-of-range indices): a refusal, not a crash
            code = Code.E_RESOURCE_EXHAUSTED if isinstance(e, MemoryError) else Code.E_INPUT_INVALID
            raise RtdError(code, f"the model cannot run on these inputs: {type(e).__name__}: {str(e)[:160]}") from None
        if self.xp is not np:
            outputs = [backend_cupy.to_host(v) for v in outputs]
        return {spec.name: value for spec, value in zip(self.outputs, outputs)}

    def plan_stats(self, feeds: dict) -> dict:
        """Steps, fused ops and memory (arena peak vs the naive sum) of the plan for these feeds' shapes."""
        plan, _ = self._plan(*self._check(feeds))
        return {"nodes_in_model": len(self.runner.nodes), **(plan.stats() if plan else {})}

    def step_names(self, feeds: dict) -> list[tuple]:
        """Per step of the plan for these feeds' shapes, in the order a profiled run records
        them, the names of the values it reads and writes (kernels/stages.py attributes time by them)."""
        plan, _ = self._plan(*self._check(feeds))
        plan = getattr(plan, "plan", plan)   # a CUDA plan wraps the host one
        if plan is None:
            return []
        return [(tuple(plan.names[i] for i in args if i), tuple(plan.names[i] for i in outs if i > 1))
                for _, args, outs, _ in plan.steps]

    def profile_summary(self) -> dict:
        """Per op label: calls and total microseconds over every profiled run so far."""
        with self._lock:
            return Profile.merge(self._profiles)

    def write_trace(self, path) -> None:
        """The profiled runs as a Chrome trace (chrome://tracing, ui.perfetto.dev)."""
        with self._lock:
            events = [event for i, p in enumerate(self._profiles) for event in p.events(run=i)]
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def compile_model(model, device: str = "cpu", **options) -> CompiledModel:
    """A ModelProto, the bytes of one, or a path to one, compiled."""
    return CompiledModel(model, device, **options)

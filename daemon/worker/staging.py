"""A worker that serves one stage of a model cut into stages (kernels/stages.py): it parses the
whole signed model, as any worker does, and serves its own part of it.

The first stage's worker is told only how many stages there are: it measures the whole model
(compiled as served, run on zeros of the declared inputs), cuts it and answers the cut with its
signature — the stages, their ops, their estimated and measured times, the cut by node count
beside it — so the supervisor, which never parses a graph, can start the other stages with the
cut and show it. Every other stage's worker (and the first's again, on a restart) is told the cut
and takes its part.
"""
import onnx

from rtd.errors import Code, RtdError
from rtd.kernels import stages


def _protocol(detail: str) -> RtdError:
    return RtdError(Code.E_WORKER_PROTOCOL, f"LOAD stages: {detail}")


def stage_part(proto: onnx.ModelProto, weights: dict, spec, signature) -> tuple[onnx.ModelProto, dict | None]:
    """(the part this worker serves, the cut's report when this worker made the cut).
    `signature(compiled model) -> dict` states the whole model's signature in the report."""
    if not isinstance(spec, dict) or type(spec.get("count")) is not int or type(spec.get("index")) is not int:
        raise _protocol("count and index")
    count, index, given = spec["count"], spec["index"], spec.get("cut")
    if not 2 <= count <= stages.MAX_STAGES or not 0 <= index < count:
        raise _protocol(f"stage {index} of {count}")
    nodes = len(proto.graph.node)
    if count > nodes:
        raise RtdError(Code.E_CONFIG_INVALID, f"rtd_stages: {count} stages of a graph of {nodes} nodes")
    if given is not None:
        return stages.part(proto, stages.Cut.from_json(given, nodes, count), index), None
    if index != 0:
        raise _protocol("only the first stage makes the cut")
    if spec.get("by", "cost") not in ("cost", "nodes"):
        raise _protocol("by")
    measured = stages.measure_model(proto, weights)
    cut, report = stages.plan(proto, count, measured, naive=spec.get("by") == "nodes")
    _, naive = stages.plan(proto, count, measured, naive=True)
    report.update(cut=cut.to_json(), signature=signature(measured.model),
                  node_count_bottleneck_ms=naive["bottleneck_ms"], node_count_ranges=[s["nodes"] for s in naive["stages"]])
    return stages.part(proto, cut, index), report

"""Issue 21, measured against a real `rtd serve`, side by side in one run:

0. hops: what the ensemble path itself costs, three tiny models as an ensemble and as three
   chained calls (compute next to nothing).
1. ocr: the OCR chain of rapidocr's PP-OCR models (detector → classifier → recogniser, the wheel's
   own .onnx files, bench/real_models.py's catalogue) as one ensemble, against the same three
   models called one after the other by a tritonclient gRPC client that does the glue between
   them in NumPy; p50 and throughput at 1, 4 and 8 clients. The glue is what a client does
   between the calls, as two tiny ONNX steps in the ensemble: `crop` takes the page's horizontal
   bands the detector scores highest (TopK over the band means of its map) as line images at the
   classifier's and the recogniser's sizes; `upright` turns a line 180° where the classifier says
   so (PaddleOCR's rule, score > 0.9). Both sides' outputs are checked equal first.
2. stages: a conv net (resnet18, the zoo's) and a transformer encoder (minilm, the zoo's) served
   as 2 stages × 1 thread, as one worker × 2 threads and as one worker × 1 thread (tenants of
   2 and 1 cores); throughput and p50 at 1 and 4 clients.
3. cut: the same models cut into 2 stages by cost (what rtd does) and by node count
   (`rtd_stage_cut: nodes`); the slowest stage as the cut predicted it, and throughput at 4 clients;
   cutparts: both cuts' parts compiled and timed alone in this process, the slowest part of each.

    sudo .venv/bin/python bench/pipeline.py [--parts hops,ocr,stages,cut,cutparts] [--seconds 4] [--rounds 3] [--runs 15]

The variants of each comparison take turns (the host may be shared: each gets the same mix of
its load), and each row says the load average when it was measured.
"""
import argparse
import concurrent.futures
import os
import sys
import tempfile
import threading
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.real_models import CATALOGUE, model_path  # noqa: E402
from rtd.loader import pack  # noqa: E402
from tests.daemon.conftest import Daemon, _bytes  # noqa: E402

PAGE = (1, 3, 320, 320)      # the detector's page (a multiple of 32, as PP-OCR resizes to)
BANDS, LINES = 8, 4          # the page's horizontal bands; the lines taken from it
CLS_SHAPE, REC_SHAPE = (48, 192), (48, 320)
CLS_OUT, DET_OUT, REC_OUT = "save_infer_model/scale_0.tmp_1", "sigmoid_0.tmp_0", "softmax_11.tmp_0"
F = TensorProto.FLOAT


# ---- the glue, as ONNX steps and as the client's NumPy ----

def crop_model() -> bytes:
    """page [1,3,H,W], map [1,1,H,W] → the LINES bands with the highest mean map, at both sizes."""
    h, w = PAGE[2], PAGE[3]
    band = h // BANDS
    c = lambda name, value, dtype=np.int64: numpy_helper.from_array(np.array(value, dtype), name)  # noqa: E731
    nodes = [
        helper.make_node("Reshape", ["map", "map_bands"], ["banded"]),
        helper.make_node("ReduceMean", ["banded"], ["score"], axes=[1], keepdims=0),
        helper.make_node("TopK", ["score", "k"], ["top", "idx"], axis=0),
        helper.make_node("Reshape", ["page", "page_bands"], ["pb"]),
        helper.make_node("Transpose", ["pb"], ["bands"], perm=[1, 0, 2, 3]),
        helper.make_node("Gather", ["bands", "idx"], ["lines"], axis=0),
        helper.make_node("Resize", ["lines", "", "", "cls_size"], ["cls_lines"], mode="linear"),
        helper.make_node("Resize", ["lines", "", "", "rec_size"], ["rec_lines"], mode="linear"),
    ]
    inits = [c("map_bands", [BANDS, band * w]), c("k", [LINES]), c("page_bands", [3, BANDS, band, w]),
             c("cls_size", [LINES, 3, *CLS_SHAPE]), c("rec_size", [LINES, 3, *REC_SHAPE])]
    graph = helper.make_graph(nodes, "crop", [helper.make_tensor_value_info("page", F, list(PAGE)),
                                              helper.make_tensor_value_info("map", F, [1, 1, h, w])],
                              [helper.make_tensor_value_info("cls_lines", F, [LINES, 3, *CLS_SHAPE]),
                               helper.make_tensor_value_info("rec_lines", F, [LINES, 3, *REC_SHAPE])], inits)
    return _bytes(graph)


def upright_model() -> bytes:
    """lines [N,3,48,320], probs [N,2] → each line turned 180° where probs[:,1] > 0.9."""
    c = lambda name, value, dtype=np.int64: numpy_helper.from_array(np.array(value, dtype), name)  # noqa: E731
    nodes = [
        helper.make_node("Slice", ["lines", "starts", "ends", "axes", "steps"], ["turned"]),
        helper.make_node("Slice", ["probs", "one", "two", "one", "one1"], ["p180"]),
        helper.make_node("Greater", ["p180", "threshold"], ["flip"]),
        helper.make_node("Reshape", ["flip", "four_d"], ["flip4"]),
        helper.make_node("Where", ["flip4", "turned", "lines"], ["upright"]),
    ]
    big = np.iinfo(np.int64).max
    inits = [c("starts", [-1, -1]), c("ends", [-big, -big]), c("axes", [2, 3]), c("steps", [-1, -1]),
             c("one", [1]), c("two", [2]), c("one1", [1]), c("threshold", 0.9, np.float32), c("four_d", [-1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "upright", [helper.make_tensor_value_info("lines", F, ["N", 3, *REC_SHAPE]),
                                                 helper.make_tensor_value_info("probs", F, ["N", 2])],
                              [helper.make_tensor_value_info("upright", F, ["N", 3, *REC_SHAPE])], inits)
    return _bytes(graph)


def resize_linear(lines: np.ndarray, size: tuple) -> np.ndarray:
    """ONNX Resize, linear, half_pixel, as the crop step does it (one run of onnxruntime's)."""
    return GLUE["resize"][size].run(None, {"x": lines})[0]


def client_crop(page: np.ndarray, det_map: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    band = PAGE[2] // BANDS
    score = det_map.reshape(BANDS, -1).mean(axis=1)
    idx = np.argsort(-score, kind="stable")[:LINES]
    lines = page.reshape(3, BANDS, band, PAGE[3]).transpose(1, 0, 2, 3)[idx]
    return resize_linear(lines, CLS_SHAPE), resize_linear(lines, REC_SHAPE)


def client_upright(lines: np.ndarray, probs: np.ndarray) -> np.ndarray:
    return np.where((probs[:, 1] > 0.9)[:, None, None, None], lines[:, :, ::-1, ::-1], lines)


GLUE: dict = {}


def _resizer(size: tuple):
    import onnxruntime
    sizes = numpy_helper.from_array(np.array([LINES, 3, *size], np.int64), "s")
    graph = helper.make_graph([helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode="linear")], "r",
                              [helper.make_tensor_value_info("x", F, [LINES, 3, None, None])],
                              [helper.make_tensor_value_info("y", F, [LINES, 3, *size])], [sizes])
    return onnxruntime.InferenceSession(_bytes(graph), providers=["CPUExecutionProvider"])


OCR_ENSEMBLE = f'''name: "ocr" platform: "ensemble"
input [ {{ name: "page" data_type: TYPE_FP32 dims: {list(PAGE)} }} ]
output [ {{ name: "angles" data_type: TYPE_FP32 dims: [ {LINES}, 2 ] }}, {{ name: "text" data_type: TYPE_FP32 dims: [ -1, -1, -1 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "det" model_version: -1 input_map {{ key: "x" value: "page" }} output_map {{ key: "{DET_OUT}" value: "map" }} }},
  {{ model_name: "crop" model_version: -1 input_map [ {{ key: "page" value: "page" }}, {{ key: "map" value: "map" }} ]
     output_map [ {{ key: "cls_lines" value: "cls_in" }}, {{ key: "rec_lines" value: "rec_in" }} ] }},
  {{ model_name: "cls" model_version: -1 input_map {{ key: "x" value: "cls_in" }} output_map {{ key: "{CLS_OUT}" value: "angles" }} }},
  {{ model_name: "upright" model_version: -1 input_map [ {{ key: "lines" value: "rec_in" }}, {{ key: "probs" value: "angles" }} ]
     output_map {{ key: "upright" value: "lines" }} }},
  {{ model_name: "rec" model_version: -1 input_map {{ key: "x" value: "lines" }} output_map {{ key: "{REC_OUT}" value: "text" }} }} ] }}
'''.encode()


def page(rng: np.random.Generator) -> np.ndarray:
    entry = next(m for m in CATALOGUE if m.name == "ppocrv4_det")
    feeds = entry.feeds(rng)["x"]   # text-like strokes on a 736×736 page
    return np.ascontiguousarray(feeds[:, :, :PAGE[2], :PAGE[3]])


# ---- load generation ----

def closed_loop(call, clients: int, seconds: float) -> tuple[list, float]:
    """`clients` threads calling `call(client_index)` back to back for `seconds`: (latencies in s, wall s)."""
    latencies, stop, lock = [], threading.Event(), threading.Lock()

    def worker(i):
        mine = []
        while not stop.is_set():
            start = time.perf_counter()
            call(i)
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(worker, i) for i in range(clients)]
        time.sleep(seconds)
        stop.set()
        for f in futures:
            f.result()
    return latencies, time.perf_counter() - started


def interleaved(calls: dict, clients: int, seconds: float, rounds: int) -> dict:
    """Each variant's (p50 ms, requests/s) at `clients`, the variants taking turns for `rounds`
    rounds of `seconds` each (the host is shared: turns spread its load over all of them)."""
    for call in calls.values():
        call(0)   # warm: shapes planned, instances up
    latencies, walls = {name: [] for name in calls}, dict.fromkeys(calls, 0.0)
    names = list(calls)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            got, wall = closed_loop(calls[name], clients, seconds)
            latencies[name] += got
            walls[name] += wall
    return {name: (float(np.median(latencies[name])) * 1e3, len(latencies[name]) / walls[name]) for name in calls}


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def grpc_clients(d: Daemon, tenant: str, count: int):
    import tritonclient.grpc as tc
    return [tc.InferenceServerClient(d.url()) for _ in range(count)], {"authorization": f"Bearer {d.tokens[tenant]}"}


def infer(client, headers, model: str, feeds: dict, outputs=None):
    import tritonclient.grpc as tc
    inputs = []
    for name, value in feeds.items():
        given = tc.InferInput(name, list(value.shape), "FP32")
        given.set_data_from_numpy(value)
        inputs.append(given)
    wanted = [tc.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer(model, inputs, outputs=wanted, headers=headers, client_timeout=600)


def ocr(seconds: float, rounds: int, rows: list) -> None:
    import onnxruntime  # noqa: F401  (the client's resize)
    GLUE["resize"] = {CLS_SHAPE: _resizer(CLS_SHAPE), REC_SHAPE: _resizer(REC_SHAPE)}
    d = Daemon(tempfile.mkdtemp(prefix="rtd-pipeline-"), max_concurrency=16, memory_bytes=6 << 30,
               policies={"acme": {"cpu_cores": 2}}, limits={"max_message_bytes": 64 << 20, "max_queue": 64}).start()
    try:
        client = d.client("acme")
        models = {"det": "ppocrv4_det", "cls": "ppocr_mobile_v2_cls", "rec": "ppocrv4_rec"}
        for name, entry in models.items():
            with open(model_path(next(m for m in CATALOGUE if m.name == entry)), "rb") as f:
                client.load(name, d.package("acme", f.read(), name), timeout=600)
        client.load("crop", d.package("acme", crop_model(), "crop"))
        client.load("upright", d.package("acme", upright_model(), "upright"))
        client.load("ocr", pack.ensemble_files(OCR_ENSEMBLE, name="ocr", version="1.0.0", private_key=d.keys["acme"]))
        x = page(np.random.default_rng(0))
        stubs, headers = grpc_clients(d, "acme", 8)

        def chained(i):
            det = infer(stubs[i], headers, "det", {"x": x}).as_numpy(DET_OUT)
            cls_in, rec_in = client_crop(x, det)
            angles = infer(stubs[i], headers, "cls", {"x": cls_in}).as_numpy(CLS_OUT)
            text = infer(stubs[i], headers, "rec", {"x": client_upright(rec_in, angles)}).as_numpy(REC_OUT)
            return angles, text

        def ensemble(i):
            result = infer(stubs[i], headers, "ocr", {"page": x})
            return result.as_numpy("angles"), result.as_numpy("text")
        (a1, t1), (a2, t2) = chained(0), ensemble(0)
        np.testing.assert_allclose(a1, a2, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(t1, t2, rtol=1e-3, atol=1e-4)
        print(f"ocr: outputs agree (angles {a2.shape}, text {t2.shape}); max |diff| text {np.abs(t1 - t2).max():.2e}", flush=True)
        for clients in (1, 4, 8):
            got = interleaved({"ensemble": ensemble, "chained": chained}, clients, seconds, rounds)
            (e50, eps), (c50, cps) = got["ensemble"], got["chained"]
            rows.append(("OCR chain", f"{clients} clients (load {load_average()})", f"ensemble p50 {e50:.0f} ms, {eps:.2f} req/s",
                         f"3 chained calls p50 {c50:.0f} ms, {cps:.2f} req/s", f"{c50 / e50:.2f}× p50, {eps / cps:.2f}× req/s"))
            print(rows[-1], flush=True)
    finally:
        d.stop()


def tiny(n_in: int, n_out: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["H"]), helper.make_node("Tanh", ["H"], ["Y"])], "tiny",
                              [helper.make_tensor_value_info("X", F, ["N", n_in])], [helper.make_tensor_value_info("Y", F, ["N", n_out])],
                              [numpy_helper.from_array(rng.standard_normal((n_in, n_out)).astype(np.float32), "W")])
    return _bytes(graph)


TINY_ENSEMBLE = b'''name: "chain" platform: "ensemble"
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 64 ] } ] output [ { name: "y" data_type: TYPE_FP32 dims: [ -1, 64 ] } ]
ensemble_scheduling { step [
  { model_name: "a" model_version: -1 input_map { key: "X" value: "x" } output_map { key: "Y" value: "h1" } },
  { model_name: "b" model_version: -1 input_map { key: "X" value: "h1" } output_map { key: "Y" value: "h2" } },
  { model_name: "c" model_version: -1 input_map { key: "X" value: "h2" } output_map { key: "Y" value: "y" } } ] }'''


def hops(seconds: float, rounds: int, rows: list) -> None:
    """What the ensemble path itself costs: three tiny models (a [1,64]·[64,64] MatMul each), as
    an ensemble and as three chained client calls, where compute is next to nothing."""
    d = Daemon(tempfile.mkdtemp(prefix="rtd-hops-"), max_concurrency=16, policies={"acme": {"cpu_cores": 2}},
               limits={"max_queue": 64}).start()
    try:
        client = d.client("acme")
        for i, name in enumerate("abc"):
            client.load(name, d.package("acme", tiny(64, 64, i), name))
        client.load("chain", pack.ensemble_files(TINY_ENSEMBLE, name="chain", version="1.0.0", private_key=d.keys["acme"]))
        stubs, headers = grpc_clients(d, "acme", 8)
        x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)

        def chained(i):
            h = infer(stubs[i], headers, "a", {"X": x}).as_numpy("Y")
            h = infer(stubs[i], headers, "b", {"X": h}).as_numpy("Y")
            return infer(stubs[i], headers, "c", {"X": h}).as_numpy("Y")
        np.testing.assert_allclose(infer(stubs[0], headers, "chain", {"x": x}).as_numpy("y"), chained(0), rtol=1e-6)
        for clients in (1, 4):
            got = interleaved({"ensemble": lambda i: infer(stubs[i], headers, "chain", {"x": x}), "chained": chained},
                              clients, seconds, rounds)
            (e50, eps), (c50, cps) = got["ensemble"], got["chained"]
            rows.append(("3 tiny steps", f"{clients} clients (load {load_average()})", f"ensemble p50 {e50:.1f} ms, {eps:.0f} req/s",
                         f"3 chained calls p50 {c50:.1f} ms, {cps:.0f} req/s", f"{c50 / e50:.2f}× p50, {eps / cps:.2f}× req/s"))
            print(rows[-1], flush=True)
    finally:
        d.stop()


def zoo_model(name: str) -> bytes:
    """The zoo's export (tests/zoo/models.py), from its cache or exported now."""
    from tests.zoo.models import ZOO
    with open(ZOO[name].path(), "rb") as f:
        return f.read()


def zoo_feeds(name: str) -> dict:
    """The zoo's nominal feeds: one 224×224 image; one sequence of 128 tokens."""
    from tests.zoo.models import ZOO
    model = ZOO[name]
    dims = {"batch": 1, "seq": 128} if name == "minilm" else model.dims[0]
    return model.feeds(np.random.default_rng(0), dims)


def infer_any(client, headers, model: str, feeds: dict):
    import tritonclient.grpc as tc
    from tritonclient.utils import np_to_triton_dtype
    inputs = []
    for name, value in feeds.items():
        given = tc.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        given.set_data_from_numpy(value)
        inputs.append(given)
    return client.infer(model, inputs, headers=headers, client_timeout=600)


def caller(d: Daemon, tenant: str, served: str, feeds: dict):
    """A call of `served` for client i of 4, each on a channel of its own."""
    stubs, headers = grpc_clients(d, tenant, 4)
    return lambda i: infer_any(stubs[i], headers, served, feeds)


def staged(seconds: float, rounds: int, rows: list, parts: set) -> None:
    d = Daemon(tempfile.mkdtemp(prefix="rtd-stages-"), max_concurrency=8, memory_bytes=6 << 30,
               policies={"acme": {"cpu_cores": 2}, "beta": {"cpu_cores": 1}},
               limits={"max_message_bytes": 256 << 20, "max_queue": 64, "load_timeout_s": 600}).start()
    try:
        for label, name in (("resnet18 (conv net)", "resnet18"), ("minilm (transformer encoder)", "minilm")):
            model, feeds = zoo_model(name), zoo_feeds(name)
            variants = {}
            if "stages" in parts:
                variants.update({"2 stages × 1 thread": ("acme", "staged", pack.with_stages(None, 2)),
                                 "1 worker × 2 threads": ("acme", "whole", None),
                                 "1 worker × 1 thread": ("beta", "whole", None)})
            if "cut" in parts:
                variants["2 stages cut by node count"] = ("acme", "bynodes", pack.with_stages(None, 2) + b'parameters { key: "rtd_stage_cut" value { string_value: "nodes" } }\n')
                variants.setdefault("2 stages × 1 thread", ("acme", "staged", pack.with_stages(None, 2)))
            for tenant, tag, config in variants.values():
                served = f"{name}_{tag}"
                if served not in d.tenant(tenant)["models"]:
                    d.client(tenant).load(served, d.package(tenant, model, served, config=config), timeout=900)
            calls = {variant: caller(d, tenant, f"{name}_{tag}", feeds) for variant, (tenant, tag, _) in variants.items()}
            ones = interleaved(calls, 1, seconds, rounds)
            fours = interleaved(calls, 4, seconds, rounds)
            results = {}
            for variant, (tenant, tag, _) in variants.items():
                one, four = ones[variant], fours[variant]
                cut = (d.tenant(tenant)["models"][f"{name}_{tag}"]["serving"] or {}).get("stages")
                results[variant] = (one, four, cut)
                note = ""
                if cut:
                    note = (f"cut {[s['nodes'] for s in cut['stages']]} by {cut['method']}: slowest stage predicted "
                            f"{cut['bottleneck_ms']} ms; by node count {cut['node_count_ranges']} it would be "
                            f"{cut['node_count_bottleneck_ms']} ms (the same load-time measurement)")
                rows.append((f"{label} (load {load_average()})", variant, f"1 client p50 {one[0]:.1f} ms, {one[1]:.2f} req/s",
                             f"4 clients p50 {four[0]:.1f} ms, {four[1]:.2f} req/s", note))
                print(rows[-1], flush=True)
            base = results.get("1 worker × 1 thread")
            for variant, (_, four, _) in results.items():
                if base and variant != "1 worker × 1 thread":
                    rows.append((label, f"{variant} / 1 worker × 1 thread", "", f"{four[1] / base[1][1]:.2f}× req/s at 4 clients", ""))
            if "2 stages cut by node count" in results:
                cost, nodes = results["2 stages × 1 thread"][1], results["2 stages cut by node count"][1]
                rows.append((label, "cost cut / node-count cut", "", f"{cost[1] / nodes[1]:.2f}× req/s at 4 clients", ""))
    finally:
        d.stop()


def cut_parts(runs: int, rows: list) -> None:
    """Both cuts of each model, each part compiled and timed alone in this process (1 thread,
    the parts of both cuts taking turns; the least CPU time of `runs`, which preemption by the
    host's other work does not inflate): the slowest part is the pipeline's bottleneck."""
    from rtd.kernels import compile_model, native, stages
    native.set_threads(1)
    for label, name in (("resnet18 (conv net)", "resnet18"), ("minilm (transformer encoder)", "minilm")):
        import onnx
        proto, feeds = onnx.load_from_string(zoo_model(name)), zoo_feeds(name)
        measured = stages.measure_model(proto, None)
        cuts = {by: stages.plan(proto, 2, measured, naive=by == "node count")[0] for by in ("cost", "node count")}
        parts, inputs = {}, {}
        for by, cut in cuts.items():
            values = dict(feeds)
            for k in range(2):
                part = compile_model(stages.part(proto, cut, k))
                inputs[by, k] = {spec.name: values[spec.name] for spec in part.inputs}
                values.update(part.run(inputs[by, k]))
                parts[by, k] = part
        times = {key: [] for key in parts}
        for _ in range(runs):
            for key, part in parts.items():
                start = time.process_time()   # CPU time: what the other tenants of this host do not add to
                part.run(inputs[key])
                times[key].append(time.process_time() - start)
        medians = {key: float(np.min(t)) * 1e3 for key, t in times.items()}
        slowest = {by: max(medians[by, 0], medians[by, 1]) for by in cuts}
        rows.append((f"{label} (load {load_average()})", "2-stage cut, parts timed alone (1 thread)",
                     f"cost cut {[list(r) for r in cuts['cost'].ranges]}: stages {medians['cost', 0]:.1f} + "
                     f"{medians['cost', 1]:.1f} ms",
                     f"node-count cut {[list(r) for r in cuts['node count'].ranges]}: stages {medians['node count', 0]:.1f} + "
                     f"{medians['node count', 1]:.1f} ms",
                     f"slowest stage {slowest['cost']:.1f} vs {slowest['node count']:.1f} ms: the cost cut's pipeline "
                     f"{slowest['node count'] / slowest['cost']:.2f}× the throughput"))
        print(rows[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="hops,ocr,stages,cut,cutparts")
    parser.add_argument("--seconds", type=float, default=4.0, help="per variant per round")
    parser.add_argument("--rounds", type=int, default=3, help="turns each variant takes, alternating")
    parser.add_argument("--runs", type=int, default=15, help="cutparts: timed runs of each part")
    args = parser.parse_args()
    parts, rows = set(args.parts.split(",")), []
    if "hops" in parts:
        hops(args.seconds, args.rounds, rows)
    if "ocr" in parts:
        ocr(args.seconds, args.rounds, rows)
    if parts & {"stages", "cut"}:
        staged(args.seconds, args.rounds, rows, parts)
    if "cutparts" in parts:
        cut_parts(args.runs, rows)
    print("\n| model | setting | | | ratio / note |\n|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

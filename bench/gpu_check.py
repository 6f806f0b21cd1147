"""The sections of bench/gpu_check.sh that are Python: each appends its `| check | result |` rows
to the dated table in the markdown file as it goes (a section cut short by its timeout keeps
what it wrote), "not run: <why>" in each row the host cannot do; the zoo's own table comes last.

    python bench/gpu_check.py calls OUT.md      (a) CUDA's calls after start-up against the GPU filter   } gpu_check_sandbox.py
    python bench/gpu_check.py confined OUT.md   (b)-(d), (a') CUDA in the real worker root, its device,  }
                                                its graph capture, the audit filter                       }
    python bench/gpu_check.py watch OUT.md      (e) the NVML watcher in a pod-like pid namespace         }
    python bench/gpu_check.py budget OUT.md     (f) raw cudaMalloc past the budget in a confined worker (the watcher's
                                                poll→kill latency), (g) a request past it through the daemon
    python bench/gpu_check.py serve OUT.md      (h) confined start with a GPU, (i) per-request serving overhead
    python bench/gpu_check.py zoo OUT.md        (k) the zoo on rtd-cuda vs rtd-cpu vs torch eager vs ORT's CUDA provider

Every section exits 0; on a host without CuPy and a device every row says "not run: no GPU: <reason>".
"""
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests.zoo

from bench import gpu_check_sandbox  # noqa: E402  (after the path line above)
from bench.gpu_check_sandbox import row  # noqa: E402
from rtd.kernels import backend_cupy, compile_model  # noqa: E402

ZOO_RUNS = (("resnet50", {"batch": 1}), ("bert_base", {"batch": 1, "seq": 128}),
            ("bert_base", {"batch": 8, "seq": 128}), ("minilm", {"batch": 8, "seq": 128}))
GPU_BUDGET = 1 << 30   # the GPU tenant's gpu_memory_bytes in (c)-(e)


def write(out: str, *lines: str) -> None:
    with open(out, "a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def median_ms(fn, seconds: float = 3.0, at_most: int = 50) -> float:
    """Median wall time of `fn` after 3 warm-up calls, over up to `at_most` calls or `seconds`."""
    for _ in range(3):
        fn()
    times, deadline = [], time.perf_counter() + seconds
    while len(times) < at_most and (len(times) < 5 or time.perf_counter() < deadline):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _torch_net(name: str):
    """The builder's net with its seed (tests/zoo/models.py), so torch runs the exported weights."""
    from tests.zoo import nets
    if name == "resnet50":
        return nets.perturbed_init(nets.ResNet(nets.Bottleneck, [3, 4, 6, 3]), seed=50)
    hidden, layers, seed = (768, 12, 768) if name == "bert_base" else (384, 6, 384)
    return nets.perturbed_init(nets.Encoder(layers=layers, hidden=hidden, heads=12), seed=seed)


def _ort_cuda(path: str):
    try:
        import onnxruntime
    except ImportError:
        return None, "onnxruntime not installed"
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return None, "no CUDAExecutionProvider in this onnxruntime"
    return onnxruntime.InferenceSession(path, providers=["CUDAExecutionProvider"]), None


def _zoo_row(name: str, dims: dict) -> str:
    """One table row: rtd-cuda checked against rtd-cpu, then timed beside torch eager and ORT."""
    import torch
    from tests.zoo.compare import mismatches
    from tests.zoo.models import ZOO
    zoo = ZOO[name]
    path = zoo.path()   # exported here through torch when not cached (no network needed)
    feeds = zoo.feeds(np.random.default_rng(0), dims)
    gpu = compile_model(path, device="cuda")
    gpu.run(feeds)   # the trace
    gpu.run(feeds)   # the plan: kernels compiled, graph captured
    bad = mismatches(gpu.run(feeds), compile_model(path).run(feeds), zoo.tolerance)
    rtd_ms = median_ms(lambda: gpu.run(feeds))
    net = _torch_net(name).eval().cuda()

    def eager():   # inputs up, outputs down: the copies rtd's run makes
        with torch.inference_mode():
            result = net(*[torch.from_numpy(v).cuda() for v in feeds.values()])
            [t.cpu() for t in (result if isinstance(result, tuple) else (result,))]
    eager_ms = median_ms(eager)
    session, why = _ort_cuda(path)
    ort = f"{median_ms(lambda: session.run(None, feeds)):.2f}" if session else f"not run: {why}"
    graphed = gpu.plan_stats(feeds).get("cuda_graph")
    status = "ok" if not bad else "MISMATCH " + bad[0][:60]
    return f"| {name} | {dims} | {status} | {rtd_ms:.2f} | {eager_ms:.2f} | {ort} | {eager_ms / rtd_ms:.2f}× | {graphed} |"


def section_zoo(out: str) -> None:
    import torch
    write(out, "", f"### (k) the zoo on {torch.cuda.get_device_name(0)}: median ms per request, host arrays in and out",
          "", "| model | dims | rtd cuda vs rtd cpu | rtd cuda | torch eager | ORT CUDA | eager / rtd | graphed |",
          "|---|---|---|---|---|---|---|---|")
    for name, dims in ZOO_RUNS:
        try:
            write(out, _zoo_row(name, dims))
        except Exception as e:   # one model's failure is a row, not the end of the section
            write(out, f"| {name} | {dims} | error: {type(e).__name__}: {str(e)[:100]} | | | | | |")


class Daemon:
    """rtd serve with a GPU tenant (`gpu`: gpu_devices [0]) and a CPU one (`cpu`)."""

    def __init__(self, root: str):
        from rtd.daemon.config import token_hash
        from rtd.loader import keys
        self.root, self.tokens, self.keys = root, {}, {}
        tables = []
        for i, tenant in enumerate(("gpu", "cpu")):
            key_dir, trust = os.path.join(root, "keys", tenant), os.path.join(root, "trust", tenant)
            os.makedirs(trust)
            private, public = keys.write_keypair(key_dir)
            os.link(public, os.path.join(trust, "signing.pub.pem"))
            self.keys[tenant], self.tokens[tenant] = keys.load_private(private), secrets.token_urlsafe(32)
            policy = f"[tenant.policy.limits]\ngpu_devices = [0]\ngpu_memory_bytes = {GPU_BUDGET}\n" if tenant == "gpu" else ""
            tables.append(f'[[tenant]]\nid = "{tenant}"\ntoken_sha256 = ["{token_hash(self.tokens[tenant])}"]\n'
                          f'trusted_keys = "{trust}"\nuid = {61700 + i}\ngid = {61700 + i}\n{policy}')
        config = os.path.join(root, "rtd.toml")
        with open(config, "w") as f:
            f.write('state_dir = "state"\n' + "".join(tables))
        self.log = open(os.path.join(root, "rtd.log"), "w+")
        self.proc = subprocess.Popen([sys.executable, "-c", "import sys; from rtd.daemon.main import main; sys.exit(main())",
                                      "serve", "--config", config], stderr=self.log, stdout=subprocess.DEVNULL, cwd=root)
        self.url = f"unix:{os.path.join(root, 'state', 'rtd.sock')}"
        for _ in range(300):
            self.log.seek(0)
            text = self.log.read()
            if "serving on" in text:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"rtd serve exited: {text.strip().splitlines()[-1:]}")
            time.sleep(0.1)
        raise RuntimeError("rtd serve did not come up in 30 s")

    def load(self, tenant: str, name: str, model: bytes) -> float:
        """Seconds from the upload to READY: spawn, confinement (the GPU's set-up too), compile, warm-up."""
        from rtd.cli.client import Client
        from rtd.loader import pack
        files = pack.package_files(model, name=name, version="1.0.0", private_key=self.keys[tenant])
        with Client(self.url, self.tokens[tenant]) as client:
            start = time.perf_counter()
            client.load(name, files, timeout=120)
            return time.perf_counter() - start

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def _mlp() -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.05, n) for n, s in
              (("W1", (256, 1024)), ("W2", (1024, 256))))
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                               helper.make_node("MatMul", ["r", "W2"], ["Y"])], "mlp",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 256])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 256])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _confinement_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root: rtd serve confines its workers with namespaces, cgroups and other uids"
    try:
        import tritonclient.grpc  # noqa: F401  (the client the issue measures with)
    except ImportError:
        return "tritonclient not installed"
    return None


def section_serve(out: str) -> None:
    checks = SECTION_ROWS["serve"]
    reason = _confinement_reason()
    if reason:
        for check in checks:
            row(out, check, f"not run: {reason}")
        return
    import tritonclient.grpc as tc
    root = tempfile.mkdtemp(prefix="rtd-gpu-check-")
    daemon = None
    try:
        daemon = Daemon(root)
        model = _mlp()
        cpu_s, gpu_s = daemon.load("cpu", "mlp", model), daemon.load("gpu", "mlp", model)
        row(out, checks[0], f"GPU tenant {gpu_s * 1e3:.0f} ms, CPU tenant {cpu_s * 1e3:.0f} ms")
        x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
        in_process = compile_model(model, device="cuda")
        in_process.run({"X": x})
        in_ms = median_ms(lambda: in_process.run({"X": x}))
        client = tc.InferenceServerClient(daemon.url)
        headers = {"authorization": f"Bearer {daemon.tokens['gpu']}"}
        request = tc.InferInput("X", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        got = client.infer("mlp", [request], headers=headers).as_numpy("Y")
        np.testing.assert_allclose(got, in_process.run({"X": x})["Y"], rtol=1e-4, atol=1e-5)
        served_ms = median_ms(lambda: client.infer("mlp", [request], headers=headers))
        row(out, checks[1], f"MLP 8×256: tritonclient → rtd {served_ms:.3f} ms, in-process rtd-cuda {in_ms:.3f} ms, "
                            f"overhead {served_ms - in_ms:.3f} ms")
    except Exception as e:
        row(out, checks[0], f"error: {type(e).__name__}: {str(e)[:200]}")
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def _raw_malloc_result() -> str:
    """(e)'s kill: tests/daemon/gpu_hog.py in a fresh process (the zygote must fork from one
    in which CUDA never initialised), a confined worker raw-mallocing past GPU_BUDGET under
    the supervisor's NVML watcher."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        done = subprocess.run([sys.executable, "-m", "tests.daemon.gpu_hog", str(GPU_BUDGET)], cwd=repo,
                              capture_output=True, text=True, timeout=25)
    except subprocess.TimeoutExpired:
        return "error: no answer in 25 s"
    if done.returncode != 0 or not done.stdout.strip():
        return f"error (exit {done.returncode}): {done.stderr.strip()[-200:]}"
    from tests.daemon import gpu_hog
    result = json.loads(done.stdout.splitlines()[-1])
    if "not_run" in result:
        return f"not run: {result['not_run']}"
    how, held = gpu_hog.stopped(result), result["held"] >> 20
    if how == "gpu":
        kill = result["kill"]
        return (f"killed by the NVML watcher (layer gpu), poll→kill {kill['latency_ms']:.3f} ms, kill→exit reported "
                f"{kill['kill_to_exit_ms']:.1f} ms; it held {held} MiB of raw malloc (NVML counts its CUDA context too): "
                f"`{kill['event']}`")
    if how == "dmem":
        return f"refused by dmem.max at {held} MiB"
    return f"NOT stopped: held {held} MiB, exit {result['status']}"


def section_budget(out: str) -> None:
    checks = SECTION_ROWS["budget"]
    row(out, checks[0], _raw_malloc_result())
    reason = _confinement_reason()
    if reason:
        row(out, checks[1], f"not run: {reason}")
        return
    from rtd.cli.client import Client
    root = tempfile.mkdtemp(prefix="rtd-gpu-check-")
    daemon = None
    try:
        daemon = Daemon(root)
        from onnx import TensorProto, helper
        # a tiny request whose output the GPU must hold: ConstantOfShape of the shape it names
        graph = helper.make_graph([helper.make_node("ConstantOfShape", ["S"], ["Y"])], "fill",
                                  [helper.make_tensor_value_info("S", TensorProto.INT64, [1])],
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n"])])
        daemon.load("gpu", "fill", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
        elements = 2 * GPU_BUDGET // 4   # twice the budget in float32
        with Client(daemon.url, daemon.tokens["gpu"]) as client:
            start = time.perf_counter()
            try:
                client.infer("fill", {"S": np.array([elements], np.int64)}, timeout=120)
                outcome = "served (NOT stopped)"
            except Exception as e:
                outcome = f"{type(e).__name__}: {str(e)[:120]}"
            row(out, checks[1], f"{elements * 4 >> 20} MiB asked: {outcome} after {time.perf_counter() - start:.3f} s "
                                "(rtd's allocator cap: a clean refusal, not a kill)")
    except Exception as e:
        row(out, checks[1], f"error: {type(e).__name__}: {str(e)[:200]}")
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


SECTION_ROWS = {   # the rows each section writes, for the host that cannot run it
    "budget": ("(f) raw cupy.cuda.runtime.malloc past the GPU budget in a confined worker (the daemon's NVML watcher)",
               "(g) a request past the GPU budget through the daemon"),
    "serve": ("(h) load to READY: spawn, confinement (CUDA's start-up too), compile, warm-up",
              "(i) per-request serving overhead on the GPU"),
    "zoo": ("(k) the zoo on rtd-cuda vs rtd-cpu, torch eager and ORT's CUDA provider",),
}


SECTIONS = {"calls": gpu_check_sandbox.section_calls, "confined": gpu_check_sandbox.section_confined,
            "watch": gpu_check_sandbox.section_watch, "budget": section_budget, "serve": section_serve, "zoo": section_zoo}


def main(argv: list) -> int:
    if len(argv) != 2 or argv[0] not in SECTIONS:
        print(f"usage: gpu_check.py {{{'|'.join(SECTIONS)}}} OUT.md", file=sys.stderr)
        return 2
    section, out = argv
    if section in SECTION_ROWS:   # these start CUDA here; the sandbox sections must not (their workers fork from us)
        reason = backend_cupy.unavailable_reason()
        if reason is not None:
            for check in SECTION_ROWS[section]:
                row(out, check, f"not run: no GPU: {reason}")
            return 0
    SECTIONS[section](out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

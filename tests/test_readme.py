"""The README's shell and Python blocks, run as they are written, in order, on every test run.

Each ```sh/```bash block runs with `bash -e -o pipefail`, each ```python block with this
Python, in one fresh working directory, with a fresh HOME (so the embedded default's state is
$HOME/.local/state/rtd), no RTD_STATE_DIR and the venv's bin first on PATH (what
`. .venv/bin/activate` does). A first-line comment steers a block: `# readme-test: skip`
(installs, hours-long runs, the activation itself) or `# readme-test: background` (`rtd
serve`: started before the next block once it says "serving on", in its own network namespace
so its loopback ports (8000, 8001) meet no other daemon's, and stopped with SIGTERM at the
end, after which it must have stopped cleanly). The blocks after it run in its network
namespace (nsenter), as a user's shell beside it would. Any command that fails fails the test."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"^```(sh|bash|python)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"#\s*readme-test:\s*(skip|background)\b")
BLOCK_TIMEOUT_S = 300


def blocks(text: str) -> list[tuple[str | None, str, str]]:
    """(marker or None, block text, language) for each shell or Python block, in order."""
    result = []
    for language, body in BLOCK.findall(text):
        first = body.splitlines()[0] if body.strip() else ""
        mark = MARK.search(first)
        result.append((mark.group(1) if mark else None, body, language))
    return result


def test_the_readme_marks_what_it_leaves_out():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        found = blocks(f.read())
    marks = [mark for mark, _, _ in found]
    assert marks.count("background") == 1 and None in marks, marks
    run = "".join(body for mark, body, _ in found if mark is None)
    for client in ("tritonclient.http", "tritonclient.grpc", "curl -sf localhost:8000/v2", "rtctl load"):
        assert client in run, f"the README's {client} block is one the test runs"
    for mark, body, _ in found:   # installing and the test command itself never run inside the test
        if re.search(r"scripts/(setup|test|demo|soak|fuzz)\.sh|\.venv/bin/activate", body):
            assert mark == "skip", body


@pytest.mark.root
def test_the_readme_runs_verbatim(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("rtd serve confines its workers with namespaces, cgroups and other uids: needs root")
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        found = blocks(f.read())
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RTD_STATE_DIR", "XDG_STATE_HOME", "COLUMNS")}
    env.update(HOME=str(home), PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
    daemons, log = [], tmp_path / "background.log"
    try:
        for mark, body, language in found:
            if mark == "skip":
                continue
            if mark == "background":
                daemons.append(_background(body, work, env, log))
                continue
            run = ["bash", "-e", "-o", "pipefail", "-c", body] if language != "python" else [sys.executable, "-c", body]
            beside = ["nsenter", f"--net=/proc/{daemons[-1].pid}/ns/net", "--"] if daemons else []
            done = subprocess.run([*beside, *run], cwd=work, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
            assert done.returncode == 0, f"README block failed ({done.returncode}):\n{body}\n--- stdout\n" \
                                         f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
            assert "Traceback" not in done.stderr, done.stderr
    finally:
        for daemon in daemons:
            _stop(daemon)
    said = log.read_text(errors="replace") if daemons else ""
    assert "Traceback" not in said and said.count("event=stopped") == len(daemons), said[-3000:]


def _background(body: str, cwd, env: dict, log) -> subprocess.Popen:
    """The block in its own session and network namespace (loopback up), once it serves."""
    with open(log, "ab") as out:
        seen = log.stat().st_size if log.exists() else 0
        proc = subprocess.Popen(["unshare", "--net", "--", "bash", "-c", 'ip link set lo up && exec bash -c "$0"', body],
                                cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while "serving on" not in log.read_text(errors="replace")[seen:]:
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"README background block did not come up:\n{body}\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)
    return proc


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the block's process group, then wait until everything in it has exited."""
    deadline = time.monotonic() + 60
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
        while time.monotonic() < deadline:
            proc.poll()
            os.killpg(proc.pid, 0)   # ProcessLookupError once the group is empty
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

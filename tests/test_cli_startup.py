"""rtctl answers at once: each command, run as a user runs it, imports only what it needs, read
from the interpreter's own import log (`python -X importtime`), not from a clock (bench/cli.py
measures the times, side by side with `python -c pass`). --help and the local commands never
load NumPy, gRPC, onnx or SciPy; a served command that moves no tensor never loads NumPy."""
import os
import re
import subprocess
import sys

import pytest

from rtd.cli import package
from rtd.loader import intake

HEAVY = {"numpy", "grpc", "onnx", "scipy", "torch", "onnxruntime", "rich", "cryptography", "google"}


def imported(*argv, cwd, env=None) -> set[str]:
    """The top-level packages `rtctl *argv` imported (it may fail: the imports are the point)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "rtd.cli.rtctl", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    return {m.group(1).strip().split(".")[0] for m in re.finditer(r"^import time:.*\|(.*)$", done.stderr, re.M)}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("cli")
    subprocess.run([sys.executable, "-m", "rtd.demo", work], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "rtd.cli.rtctl", "keygen", "--out", "keys"], cwd=work, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "rtd.cli.rtctl", "pack", "model.onnx", "--name", "demo", "--version", "1.0.0",
                    "--key", "keys/signing.pem", "--out", "demo.tar"], cwd=work, check=True, capture_output=True)
    return work


@pytest.mark.parametrize("argv, allowed", [
    (("--help",), set()),
    (("pack", "--help"), set()),
    (("token", "new"), set()),
    (("keygen", "--out", "more"), {"cryptography"}),
    (("pack", "model.onnx", "--name", "demo", "--version", "1.0.0", "--key", "keys/signing.pem", "--out", "demo.tar",
      "--force"), {"cryptography"}),
    (("verify", "demo.tar", "--pubkey", "keys/signing.pub.pem"), {"cryptography"}),
    (("trust", "list", "--state-dir", "state"), {"cryptography", "rich"}),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_local_commands_import_only_what_they_use(work, argv, allowed):
    (work / "state" / "trust" / "dev").mkdir(parents=True, exist_ok=True)
    loaded = imported(*argv, cwd=work) & HEAVY
    assert loaded <= allowed, f"rtctl {' '.join(argv)} imported {sorted(loaded - allowed)}"


def test_a_served_command_without_tensors_loads_no_numpy(work):
    env = dict(os.environ, RTD_STATE_DIR=str(work / "no-daemon"))
    (work / "no-daemon").mkdir(exist_ok=True)
    (work / "no-daemon" / "dev.token").write_text("x\n")
    loaded = imported("list", cwd=work, env=env) & HEAVY   # E_DAEMON_UNREACHABLE: the client was made and called
    assert "grpc" in loaded and "numpy" not in loaded and "onnx" not in loaded, loaded


def test_the_cli_knows_the_archive_suffixes_the_loader_reads():
    assert package.ARCHIVE_SUFFIXES == intake.ARCHIVE_SUFFIXES

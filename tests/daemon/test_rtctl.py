"""rtctl and rtd as an operator meets them (real subprocesses): every failure is one line
`E_CODE: reason` on stderr with a documented exit status and no traceback, and a tenant's
trust store is managed with `rtctl trust` against a running daemon."""
import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

from rtd.commandline import EXIT_REFUSED, EXIT_UNREACHABLE
from tests.daemon.conftest import NEEDS_ROOT, mlp

BIN = os.path.dirname(sys.executable)
LINE = re.compile(r"^E_[A-Z_]+: ")


def cli(*args, cwd, env=None, program="rtctl", timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, program), *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def refused(done: subprocess.CompletedProcess, code: str, status: int = EXIT_REFUSED) -> str:
    """The single failure line (the last line on stderr; rtd serve says what it set up before it)."""
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and lines, done.stderr
    assert [line for line in lines if LINE.match(line)] == lines[-1:], done.stderr
    assert lines[-1].startswith(f"{code}: ") and done.returncode == status, (done.returncode, done.stderr)
    return lines[-1]


@pytest.fixture
def home(tmp_path):
    """A fresh user: its own HOME (so no state directory yet), no RTD_STATE_DIR."""
    env = {k: v for k, v in os.environ.items() if k not in ("RTD_STATE_DIR", "XDG_STATE_HOME")}
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "work").mkdir()
    return tmp_path / "work", env


@pytest.mark.parametrize("command", [("list",), ("run", "m", "--input", "X=x.npy"), ("status",), ("trust", "list")])
def test_serving_commands_without_a_state_directory_say_where_they_looked(home, command):
    work, env = home
    np.save(work / "x.npy", np.ones((1, 4), np.float32))
    line = refused(cli(*command, cwd=work, env=env), "E_STATE_MISSING")
    assert os.path.join(env["HOME"], ".local/state/rtd") in line and "rtd serve" in line


def test_a_stopped_daemon_is_unreachable_and_status_needs_only_the_admin_token(home):
    work, env = home
    state = work / "state"
    state.mkdir()
    (work / "admin.token").write_text("x\n")
    line = refused(cli("status", "--state-dir", state, "--admin-token-file", work / "admin.token", cwd=work, env=env),
                   "E_DAEMON_UNREACHABLE", EXIT_UNREACHABLE)
    assert "rtd serve" in line and str(state / "rtd.sock") in line
    (state / "dev.token").write_text("y\n")
    refused(cli("list", "--state-dir", state, cwd=work, env=env), "E_DAEMON_UNREACHABLE", EXIT_UNREACHABLE)


def test_package_commands_refuse_in_one_line(home):
    work, env = home
    assert cli("keygen", "--out", "keys", cwd=work, env=env).returncode == 0
    assert "choose another --out" in refused(cli("keygen", "--out", "keys", cwd=work, env=env), "E_PATH_EXISTS")
    refused(cli("pack", "missing.onnx", "--name", "m", "--version", "1.0.0", "--key", "keys/signing.pem",
                "--out", "m.tar", cwd=work, env=env), "E_PATH_NOT_FOUND")
    (work / "model.onnx").write_bytes(mlp())
    assert "rtctl pack model.onnx" in refused(cli("load", "model.onnx", cwd=work, env=env), "E_NOT_A_PACKAGE")
    assert cli("pack", "model.onnx", "--name", "m", "--version", "1.0.0", "--key", "keys/signing.pem",
               "--out", "m.tar", cwd=work, env=env).returncode == 0
    assert cli("keygen", "--out", "other", cwd=work, env=env).returncode == 0
    line = refused(cli("verify", "m.tar", "--pubkey", "other/signing.pub.pem", cwd=work, env=env), "E_KEY_UNTRUSTED")
    assert "None" not in line
    refused(cli("run", "m", cwd=work, env=env), "E_USAGE")
    help_text = cli("--help", cwd=work, env=env).stdout
    assert "exit status" in help_text and "E_DAEMON_UNREACHABLE" in help_text
    for command, flags in (("keygen", ["--bits"]), ("pack", ["--name", "--min-rtd-version"]), ("sign", ["--key"]),
                           ("run", ["--input"])):
        options = " ".join(cli(command, "--help", cwd=work, env=env).stdout.split()).split("options:", 1)[1]
        for flag in flags:   # each option says what it is: its help follows its metavar
            assert re.search(re.escape(flag) + r"( [A-Z_.=]+)? [^-]", options), (command, flag, options)


def test_rtd_serve_refuses_in_one_line(home):
    work, env = home
    refused(cli("serve", "--config", "missing.toml", cwd=work, env=env, program="rtd"), "E_PATH_NOT_FOUND")
    (work / "bad.toml").write_text("state_dir = 3\n")
    refused(cli("serve", "--config", "bad.toml", cwd=work, env=env, program="rtd"), "E_RTD_CONFIG_INVALID")


def test_a_second_rtd_serve_on_a_taken_port_says_how_out(home):
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    work, env = home
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = refused(cli("serve", "--state-dir", work / "state", "--metrics-port", port, cwd=work, env=env,
                           program="rtd"), "E_LISTEN_FAILED")
    assert str(port) in line and "--metrics-port" in line


def test_trust_add_list_revoke_against_a_running_daemon(daemon, tmp_path):
    d, work = daemon, tmp_path
    assert cli("keygen", "--out", "keys", cwd=work).returncode == 0
    (work / "model.onnx").write_bytes(mlp(5))
    for counter in (1, 2, 3):
        assert cli("pack", "model.onnx", "--name", "trusty", "--version", f"1.0.{counter}", "--key", "keys/signing.pem",
                   "--counter", counter, "--out", f"v{counter}.tar", cwd=work).returncode == 0
    (work / "admin.token").write_text(d.admin_token)
    (work / "acme.token").write_text(d.tokens["acme"])
    where = ("--config", d.config, "--tenant", "acme", "--admin-token-file", work / "admin.token")
    serving = ("--socket", d.socket, "--token-file", work / "acme.token")

    assert "rtctl trust add" in refused(cli("load", "v1.tar", *serving, cwd=work), "E_KEY_UNTRUSTED")
    added = cli("trust", "add", "keys/signing.pub.pem", *where, cwd=work)
    assert added.returncode == 0 and "re-read its trust stores" in added.stderr, added.stderr
    listing = json.loads(cli("trust", "list", *where, "--json", cwd=work).stdout)
    fingerprint = added.stdout.split(": ", 1)[1].split()[0]
    assert {"fingerprint": fingerprint, "file": f"{fingerprint[:16]}.pub.pem", "state": "trusted"} in listing["keys"]
    assert cli("load", "v2.tar", *serving, cwd=work).returncode == 0

    x = np.ones((2000, 4), np.float32)   # 6000 output values: all of them in --json
    np.save(work / "x.npy", x)
    ran = json.loads(cli("run", "trusty", "--input", "X=x.npy", "--json", *serving, cwd=work).stdout)
    assert ran["latency_ms"] > 0 and np.asarray(ran["outputs"]["Y"]["data"]).shape == (2000, 3)
    assert "ms round trip" in cli("run", "trusty", "--input", "X=x.npy", *serving, cwd=work).stdout
    assert "rtctl pack --counter 3" in refused(cli("load", "v1.tar", "--name", "trusty", *serving, cwd=work), "E_ROLLBACK")
    narrow = dict(os.environ, COLUMNS="60")
    shown = cli("status", "--socket", d.socket, "--admin-token-file", work / "admin.token", cwd=work, env=narrow).stdout
    assert "…" not in shown and "READY" in shown and max(map(len, shown.splitlines())) <= 60, shown   # folded, not cut

    assert cli("trust", "revoke", fingerprint[:16], *where, cwd=work).returncode == 0
    assert {"fingerprint": fingerprint, "file": f"{fingerprint[:16]}.pub.pem", "state": "revoked"} in \
        json.loads(cli("trust", "list", *where, "--json", cwd=work).stdout)["keys"]
    refused(cli("load", "v3.tar", *serving, cwd=work), "E_KEY_REVOKED")
    refused(cli("trust", "add", "keys/signing.pub.pem", *where, cwd=work), "E_KEY_REVOKED")
    said = d.read_log()
    assert "event=reload by=admin" in said
    for line in ("who=admin peer=uid:0 action=reload result=ok", "who=acme peer=uid:0 action=load result=E_KEY_UNTRUSTED",
                 "who=acme peer=uid:0 action=load result=ok model=trusty"):
        assert "event=audit" in said and line in said, line
    assert cli("unload", "trusty", *serving, cwd=work).returncode == 0
    assert "who=acme peer=uid:0 action=unload result=ok model=trusty" in d.read_log()


def test_an_unknown_architecture_is_refused_at_start_and_reported_by_doctor(home):
    """setarch i686: the kernel itself reports another machine, whose syscall numbers rtd does not know."""
    work, env = home
    done = subprocess.run(["setarch", "i686", os.path.join(BIN, "rtd"), "serve", "--state-dir", work / "state"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert "i686" in refused(done, "E_ARCH_UNSUPPORTED") and not (work / "state").exists()
    done = subprocess.run(["setarch", "i686", os.path.join(BIN, "rtctl"), "doctor"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)
    refused(done, "E_ARCH_UNSUPPORTED")
    assert "unsupported: this machine is i686" in " ".join(done.stdout.split())


def test_revocations_made_at_once_are_all_kept(home):
    work, env = home
    trust = work / "state" / "trust" / "dev"
    trust.mkdir(parents=True)
    fingerprints = [os.urandom(32).hex() for _ in range(6)]
    procs = [subprocess.Popen([os.path.join(BIN, "rtctl"), "trust", "revoke", f, "--state-dir", work / "state"], cwd=work,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for f in fingerprints]
    for proc in procs:
        assert proc.wait(timeout=120) == 0 and "no daemon at" in proc.stderr.read()
    listed = json.loads(cli("trust", "list", "--state-dir", work / "state", "--json", cwd=work, env=env).stdout)
    assert sorted(k["fingerprint"] for k in listed["keys"] if k["state"] == "revoked") == sorted(fingerprints)

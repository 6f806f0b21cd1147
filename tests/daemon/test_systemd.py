"""systemd/rtd.service: `systemd-analyze verify` passes and the offline security score is
at most 3.5; the shipped rtd.toml is a valid config."""
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

from rtd.daemon import config

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
UNIT = os.path.join(ROOT, "systemd", "rtd.service")
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (scripts/setup.sh apt-installs systemd)")


@pytest.fixture
def unit(tmp_path):
    """The unit with ExecStart pointing at this checkout's rtd (verify checks it exists)."""
    rtd = os.path.join(os.path.dirname(sys.executable), "rtd")
    text = open(UNIT).read().replace("/usr/local/bin/rtd", rtd)
    path = tmp_path / "rtd.service"
    path.write_text(text)
    return str(path)


@needs_analyze
def test_unit_verifies(unit):
    result = subprocess.run([ANALYZE, "verify", unit], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "rtd.service" not in result.stderr, result.stderr


@needs_analyze
def test_security_score_at_most_3_5(unit):
    result = subprocess.run([ANALYZE, "security", "--offline=true", unit], capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for rtd\.service: ([0-9.]+)", result.stdout)
    assert match, result.stdout[-2000:] + result.stderr
    print("exposure", match.group(1))
    assert float(match.group(1)) <= 3.5


@needs_analyze
def test_gpu_drop_in_verifies_and_opens_only_nvidias_devices(unit):
    """systemd/rtd-gpu.conf as installed beside the unit (rtd.service.d/gpu.conf): the unit still
    verifies, systemd reads the drop-in (the device ACL names NVIDIA's nodes), and the exposure
    stays at most 3.5."""
    drop_ins = os.path.join(os.path.dirname(unit), "rtd.service.d")
    os.mkdir(drop_ins)
    shutil.copy(os.path.join(ROOT, "systemd", "rtd-gpu.conf"), os.path.join(drop_ins, "gpu.conf"))
    result = subprocess.run([ANALYZE, "verify", unit], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "rtd.service" not in result.stderr, result.stderr
    result = subprocess.run([ANALYZE, "security", "--offline=true", unit], capture_output=True, text=True, timeout=60)
    acl = re.search(r"DeviceAllow=.*: (.*?)\s+[0-9.]+$", result.stdout, re.M)
    assert acl and set(acl.group(1).split()) == {"char-rtc:r", "char-nvidia-frontend:rw", "char-nvidia-uvm:rw",
                                                 "/dev/nvidiactl:rw"}, result.stdout
    assert re.search(r"✗ PrivateDevices=", result.stdout), result.stdout
    exposure = float(re.search(r"Overall exposure level for rtd\.service: ([0-9.]+)", result.stdout).group(1))
    print("exposure with the GPU drop-in", exposure)
    assert exposure <= 3.5


def test_unit_is_hardened_as_documented():
    text = open(UNIT).read()
    for directive in ("Type=notify", "WatchdogSec=", "ProtectSystem=strict", "PrivateTmp=yes", "UMask=0077",
                      "LimitCORE=0", "LimitNOFILE=65536", "ExecReload=", "OOMPolicy=continue", "Delegate=", "SystemCallArchitectures=native",
                      "RestrictAddressFamilies=AF_UNIX", "StateDirectory=rtd", "ReadWritePaths=/run/rtd"):
        assert directive in text, directive
    caps = re.search(r"^CapabilityBoundingSet=(.*)$", text, re.M).group(1).split()
    assert set(caps) == {"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL"}


def test_shipped_config_is_valid_and_documents_every_limit_with_its_default():
    path = os.path.join(ROOT, "systemd", "rtd.toml")
    c = config.load(path)
    assert c.unix_socket == "/run/rtd/rtd.sock" and c.metrics_port == 0
    assert (c.unix_mode, c.unix_group) == (0o660, "rtd")
    with open(path, "rb") as f:
        written = tomllib.load(f)["limits"]
    assert written == dataclasses.asdict(config.Limits()), "each [limits] key is written out with its default"


def _expand(group: str, groups: dict) -> set:
    out = set()
    for item in groups.get(group, ()):
        out |= _expand(item, groups) if item.startswith("@") else {item}
    return out


@needs_analyze
def test_unit_syscall_filter_allows_building_a_worker():
    """Workers inherit the unit's filter: it must let the sandbox build them (found the hard
    way: @system-service lacks seccomp and sethostname)."""
    listing = subprocess.run([ANALYZE, "syscall-filter"], capture_output=True, text=True, timeout=60).stdout
    groups, current = {}, None
    for line in listing.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = set()
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].add(line.strip())
    text = open(UNIT).read()
    allowed = set()
    for item in re.search(r"^SystemCallFilter=([^~].*)$", text, re.M).group(1).split():
        allowed |= _expand(item, groups) if item.startswith("@") else {item}
    for item in re.search(r"^SystemCallFilter=~(.*)$", text, re.M).group(1).split():
        allowed -= _expand(item, groups) if item.startswith("@") else {item}
    needed = {"seccomp", "sethostname", "unshare", "setns", "pivot_root", "mount", "umount2", "capset", "capget",
              "setresuid", "setresgid", "setgroups", "prctl", "memfd_create", "clone", "wait4", "kill", "sendmsg",
              "recvmsg", "mmap", "ftruncate", "setrlimit", "prlimit64"}
    assert not needed - allowed, sorted(needed - allowed)
    assert "ProtectHostname=yes" not in text  # it filters sethostname, which workers need


@pytest.mark.skipif(os.geteuid() != 0, reason="rtd serve confines its workers: needs root")
def test_sd_notify_ready_watchdog_and_stopping(tmp_path):
    """READY=1 only once the listeners are up, WATCHDOG=1 pings, STOPPING=1 on SIGTERM."""
    import signal
    import socket
    import time
    from tests.daemon.conftest import Daemon
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(60)
    d = Daemon(tmp_path / "d")
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify.sock"), WATCHDOG_USEC="200000")
    d.proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "rtd"), "serve", "--config", d.config],
                              env=env, stderr=open(d.log, "ab"), stdout=subprocess.DEVNULL)
    try:
        assert notify.recv(64) == b"READY=1"
        assert os.path.exists(d.socket) and d.client("acme").ready()
        assert notify.recv(64) == b"WATCHDOG=1"
        time.sleep(0.3)
        d.proc.send_signal(signal.SIGTERM)
        messages = set()
        while b"STOPPING=1" not in messages:
            messages.add(notify.recv(64))
        assert d.proc.wait(timeout=30) == 0
        assert not os.path.exists(d.socket)
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
        notify.close()

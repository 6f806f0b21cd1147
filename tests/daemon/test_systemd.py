"""systemd/rtd.service: `systemd-analyze verify` passes and the offline security score is
at most 3.5; the shipped rtd.toml is a valid config."""
import os
import re
import shutil
import subprocess
import sys

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


def test_unit_is_hardened_as_documented():
    text = open(UNIT).read()
    for directive in ("Type=notify", "WatchdogSec=", "ProtectSystem=strict", "PrivateTmp=yes", "UMask=0077",
                      "LimitCORE=0", "OOMPolicy=continue", "Delegate=", "SystemCallArchitectures=native",
                      "RestrictAddressFamilies=AF_UNIX", "StateDirectory=rtd", "RuntimeDirectory=rtd"):
        assert directive in text, directive
    caps = re.search(r"^CapabilityBoundingSet=(.*)$", text, re.M).group(1).split()
    assert set(caps) == {"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL"}


def test_shipped_config_is_valid():
    c = config.load(os.path.join(ROOT, "systemd", "rtd.toml"))
    assert c.unix_socket == "/run/rtd/rtd.sock" and c.metrics_port == 0

"""scripts/install.sh: staged under a temporary root, it lays out what rtd.service names, its
rtd runs from the installed virtualenv (not this checkout), and the installed unit verifies.
Where systemd is PID 1 the real unit is installed, started and asked for its status."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INSTALL = os.path.join(ROOT, "scripts", "install.sh")
ANALYZE = shutil.which("systemd-analyze")
SYSTEMD_IS_PID1 = os.path.isdir("/run/systemd/system")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="install.sh runs as root")


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    root = tmp_path_factory.mktemp("stage")
    subprocess.run(["bash", INSTALL, "--root", str(root)], check=True, capture_output=True, timeout=900)
    yield root
    shutil.rmtree(root)   # a whole installed environment (350 MB): CI's disk is not ours to fill


def test_files_land_where_the_unit_expects_them(staged):
    for path in ("etc/systemd/system/rtd.service", "etc/rtd/rtd.toml", "usr/lib/sysusers.d/rtd.conf",
                 "usr/lib/tmpfiles.d/rtd.conf", "usr/share/doc/rtd/README.md", "opt/rtd/bin/rtd", "opt/rtd/bin/rtctl"):
        assert (staged / path).exists(), path
    unit = (staged / "etc/systemd/system/rtd.service").read_text()
    assert "ExecStart=/usr/local/bin/rtd serve --config /etc/rtd/rtd.toml" in unit
    assert "ConditionPathExists=/etc/rtd/rtd.toml" in unit
    for name in ("rtd", "rtctl"):
        assert os.readlink(staged / "usr/local/bin" / name) == f"/opt/rtd/bin/{name}"
    # the GPU drop-in only on a host with NVIDIA's driver
    assert (staged / "etc/systemd/system/rtd.service.d/gpu.conf").exists() == os.path.exists("/dev/nvidiactl")


def test_installed_rtd_runs_from_its_own_environment(staged):
    """Run from / so that nothing of this checkout is on the path: the installed copy answers."""
    probe = subprocess.run([str(staged / "opt/rtd/bin/python"), "-I", "-c", "import rtd.daemon; print(rtd.daemon.__file__)"],
                           cwd="/", capture_output=True, text=True, timeout=60, check=True)
    assert probe.stdout.startswith(str(staged / "opt/rtd/lib")), probe.stdout
    for name in ("rtd", "rtctl"):
        result = subprocess.run([str(staged / "opt/rtd/bin" / name), "--help"], cwd="/", capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and "usage" in result.stdout.lower(), result.stderr


def test_rerun_keeps_an_edited_config(staged):
    config = staged / "etc/rtd/rtd.toml"
    edited = config.read_text() + "\n# edited by the operator\n"
    config.write_text(edited)
    subprocess.run(["bash", INSTALL, "--root", str(staged)], check=True, capture_output=True, timeout=900)
    assert config.read_text() == edited


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (scripts/setup.sh apt-installs systemd)")
def test_installed_unit_verifies(staged, tmp_path):
    """`systemd-analyze verify` checks that ExecStart is executable; the staged root is not /,
    so the unit is checked with its /usr/local/bin/rtd resolved inside the staged root."""
    text = (staged / "etc/systemd/system/rtd.service").read_text()
    unit = tmp_path / "rtd.service"
    unit.write_text(text.replace("/usr/local/bin/rtd", str(staged / "opt/rtd/bin/rtd")))
    result = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "rtd.service" not in result.stderr, result.stderr


@pytest.mark.skipif(not SYSTEMD_IS_PID1, reason="systemd is not PID 1 on this host: the real unit cannot be started "
                    "(test_the_units_capabilities_and_no_new_privs_are_enough runs rtd with the unit's capabilities instead)")
def test_real_unit_starts_and_answers():
    subprocess.run(["bash", INSTALL], check=True, capture_output=True, timeout=900)   # Type=notify: returns once READY
    try:
        state = subprocess.run(["systemctl", "is-active", "rtd.service"], capture_output=True, text=True, timeout=60)
        assert state.stdout.strip() == "active", subprocess.run(["journalctl", "-u", "rtd", "-n", "50"], capture_output=True, text=True).stdout
        verify = subprocess.run([ANALYZE, "verify", "/etc/systemd/system/rtd.service"], capture_output=True, text=True, timeout=60)
        assert verify.returncode == 0, verify.stderr
    finally:
        subprocess.run(["systemctl", "disable", "--now", "rtd.service"], capture_output=True, timeout=120)

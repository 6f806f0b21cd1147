"""Settings for the whole test process, made before any test module imports grpc, and the
test command's `--progress` (tests/progress.py)."""
import os

# Many tests fork this process (confined children, the zygote) after gRPC clients have run
# in it; with fork support on, gRPC restarts its thread pools in every forked child, which
# then holds threads the test did not start (and fails to start them under a pids limit).
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"


def pytest_addoption(parser):
    parser.addoption("--progress", action="store_true",
                     help="the test command's progress: per file, the time since the start and its own (tests/progress.py)")


def pytest_configure(config):
    if config.getoption("--progress"):
        from tests.progress import Progress
        config.pluginmanager.register(Progress(config), "rtd-progress")

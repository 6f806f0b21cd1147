"""What the test command says while it runs (scripts/test.sh: `--progress` with pytest's
`console_output_style=times`): one line per test file, each with the time since the run began
and, once the file is done, how long it took; the few slowest files run last, and each says
when it starts about how long it takes here, so a long silence is never a stall; the last line
says how long the whole run took. An rtd already running on this host is named at the start,
and the summary lists every test that covered less because of it."""
import os
import time

import pytest

# Measured on the 2-core development host (seconds, `bash scripts/test.sh` with its
# `--durations`): the files that take a minute or more. They run last, in this order.
SLOW = {
    "tests/test_readme.py": 120,
    "tests/soak/test_chaos.py": 150,
}
RTD_RUNNING = "an rtd runs on this host"   # in the reason of every skip a running rtd causes


def _cmdline(pid: str) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _is_rtd_serve(argv: list[bytes]) -> bool:
    words = [os.path.basename(a) for a in argv[:3]]
    return b"serve" in words and b"rtd" in words


def running_rtd() -> list[int]:
    """Pids of the `rtd serve` daemons on this host (not their zygotes and workers, which
    carry the same command line): what users or other test runs started, none of this one's yet."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _is_rtd_serve(_cmdline(entry)):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = f.read().rsplit(")", 1)[1].split()[1]
            except OSError:
                continue
            if not _is_rtd_serve(_cmdline(parent)):
                found.append(int(entry))
    return sorted(found)


def _about(seconds: int) -> str:
    return f"about {round(seconds / 60)} min" if seconds >= 90 else f"about {seconds} s"


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


class Progress:
    def __init__(self, config):
        self.config, self.started, self.file = config, time.monotonic(), None
        self.others = running_rtd()

    @property
    def terminal(self):
        return self.config.pluginmanager.get_plugin("terminalreporter")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        order = {path: i for i, path in enumerate(SLOW)}
        items.sort(key=lambda item: order.get(item.location[0], -1))   # stable: every other file keeps its place

    def pytest_collection_finish(self, session):
        files = {item.location[0] for item in session.items}
        slow = [f for f in SLOW if f in files]
        said = (f"{len(session.items)} tests in {len(files)} files; the slowest ({', '.join(os.path.basename(f) for f in slow)}: "
                f"{_about(sum(SLOW[f] for f in slow))} here) run last" if slow else f"{len(session.items)} tests")
        self.terminal.write_line(f"{said}; each line: time since the start, the file, its tests, its time")
        if self.others:
            self.terminal.write_line(f"{RTD_RUNNING} (pid {', '.join(map(str, self.others))}): the tests that need a host "
                                     "without one skip, and the summary lists them", yellow=True)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logstart(self, nodeid, location):
        if location[0] == self.file:
            return
        self.file = location[0]
        note = f", {_about(SLOW[self.file])} here" if self.file in SLOW else ""
        self.terminal.write(f"[{_clock(time.monotonic() - self.started)}{note}] ", cyan=True)

    def pytest_terminal_summary(self, terminalreporter):
        less = [r for r in terminalreporter.stats.get("skipped", []) if RTD_RUNNING in str(r.longrepr)]
        if less:
            terminalreporter.section("covered less: an rtd runs on this host", yellow=True)
            for report in less:
                terminalreporter.write_line(f"{report.nodeid}: {report.longrepr[2]}")
        terminalreporter.write_line(f"the whole run took {_clock(time.monotonic() - self.started)} (min:s)")

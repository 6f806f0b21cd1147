"""Shared fixtures for the confinement tests."""
import glob
import os
import re

import pytest


@pytest.fixture
def no_cgroup_leftovers():
    """Assert a test leaves none of this process's worker cgroups behind in any hierarchy
    (leaves are named rc<pid>-<n> or z<pid>-<n>; other processes' workers are not ours)."""
    mine = re.compile(rf"(rc|z){os.getpid()}-\d+")

    def leaves():
        return {p for p in glob.glob("/sys/fs/cgroup/**/rtd/*/*", recursive=True)
                if os.path.isdir(p) and mine.fullmatch(os.path.basename(p))}
    before = leaves()
    yield
    assert leaves() <= before, f"cgroups left behind: {leaves() - before}"

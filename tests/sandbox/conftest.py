"""Shared fixtures for the confinement tests."""
import glob
import os

import pytest


@pytest.fixture
def no_cgroup_leftovers():
    """Assert a test leaves no rtd worker cgroup behind in any hierarchy."""
    def leaves():
        return {p for p in glob.glob("/sys/fs/cgroup/**/rtd/*/*", recursive=True) if os.path.isdir(p)}
    before = leaves()
    yield
    assert leaves() <= before, f"cgroups left behind: {leaves() - before}"

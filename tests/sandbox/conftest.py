"""Shared fixtures for the confinement tests."""
import glob
import os
import re

import pytest


@pytest.fixture
def no_cgroup_leftovers(request):
    """Assert a test leaves none of this process's worker cgroups behind in any hierarchy
    (leaves <base>/<instance>/<tenant>/<worker> are named rc<pid>-<n> or z<pid>-<n>; other
    processes' workers are not ours).
    The spares a test module's live zygote keeps armed are not leftovers; closing the
    zygote removes them (test_zygote checks that)."""
    mine = re.compile(rf"(rc|z){os.getpid()}-\d+")
    zygote = request.getfixturevalue("zygote") if "zygote" in request.fixturenames else None

    def leaves():
        assert zygote is None or zygote.settle(10), "a spare still arming after 10 s"
        spares = {sp.id for sp in zygote.spares()} if zygote else set()
        return {p for p in glob.glob("/sys/fs/cgroup/**/rtd/*/*/*", recursive=True)
                if os.path.isdir(p) and mine.fullmatch(os.path.basename(p)) and os.path.basename(p) not in spares}
    before = leaves()
    yield
    assert leaves() <= before, f"cgroups left behind: {leaves() - before}"

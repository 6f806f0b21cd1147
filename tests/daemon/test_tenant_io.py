"""serving/tenant_io.py: a tenant's file work on threads of its own, each call bounded. A
tenant whose calls never return makes only itself wait; what a late call makes is discarded,
what a call never started is handed back; the threads never keep the process alive."""
import asyncio
import os
import subprocess
import sys
import threading

import pytest

from rtd.daemon.serving.tenant_io import THREADS, TenantIO
from rtd.errors import Code, RtdError


def test_a_stuck_tenant_waits_alone_and_late_results_are_discarded():
    gate, discarded, abandoned = threading.Event(), [], []

    async def scenario():
        stuck, other = TenantIO("stuck"), TenantIO("other")
        calls = [stuck.run(lambda i=i: (gate.wait(), i)[1], timeout=0.3, what="reading", discard=discarded.append,
                           abandon=lambda i=i: abandoned.append(i)) for i in range(THREADS + 2)]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(o, RtdError) and o.code is Code.E_REPOSITORY_UNAVAILABLE for o in outcomes), outcomes
        assert "reading took longer than 0.3 s" in outcomes[0].detail
        assert await other.run(lambda: 42, timeout=5, what="reading") == 42   # the other tenant is not held up
        gate.set()
        while len(discarded) < THREADS:
            await asyncio.sleep(0.01)
    asyncio.run(scenario())
    # the calls that were running finish and their results are discarded; those never started are abandoned
    assert sorted(discarded) == list(range(THREADS)) and sorted(abandoned) == list(range(THREADS, THREADS + 2))


def test_an_error_reaches_the_caller():
    async def scenario():
        with pytest.raises(RtdError) as e:
            await TenantIO("t").run(_refuse, timeout=5, what="reading")
        assert e.value.code is Code.E_FILE_MISSING
    asyncio.run(scenario())


def _refuse():
    raise RtdError(Code.E_FILE_MISSING, "gone")


def test_a_thread_stuck_for_good_does_not_keep_the_process_from_exiting():
    code = ("import asyncio, threading\n"
            "from rtd.daemon.serving.tenant_io import TenantIO\n"
            "async def main():\n"
            "    try:\n"
            "        await TenantIO('t').run(threading.Event().wait, timeout=0.1, what='x')\n"
            "    except Exception as e:\n"
            "        print(e)\n"
            "asyncio.run(main())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "E_REPOSITORY_UNAVAILABLE" in done.stdout, done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a thread's nice value needs root")
def test_a_tenants_file_work_runs_at_the_tenants_priority_not_the_supervisors():
    """The supervisor's thread runs at a higher priority (here -5 for the test's thread alone);
    a TenantIO thread, started from it, sets itself back to the tenants' nice 0."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, -5)
    try:
        async def scenario():
            return await TenantIO("acme").run(lambda: os.getpriority(os.PRIO_PROCESS, 0), timeout=5, what="reading")
        assert asyncio.run(scenario()) == 0
        assert os.getpriority(os.PRIO_PROCESS, 0) == -5   # the caller's own thread kept its priority
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)

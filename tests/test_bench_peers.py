"""bench/peers.py's rtd side against a real `rtd serve`, without the peers' virtualenvs: the daemon
starts inside the benchmark's CPU group with its workers below it, its answers pass the
benchmark's check (and a wrong reference fails it), the client processes' tritonclient load gets
answers without errors, and the groups are gone afterwards."""
import os

import numpy as np
import pytest

from bench import peers
from tests.daemon.conftest import NEEDS_ROOT, free_port


def test_rtd_serves_the_client_load_inside_its_cpu_group(tmp_path):
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    groups = peers.CpuGroups(["rtd", "clients"])
    daemon = pool = None
    try:
        (model,) = peers.load_models(["mlp"], str(tmp_path))
        daemon, url = peers.start_rtd([model], str(tmp_path), free_port, groups)
        headers = {"authorization": f"Bearer {daemon.tokens[peers.TENANT]}"}
        peers.wait_ready(url, headers, [model], lambda: "")
        peers.check_answers(url, headers, "rtd", model)
        wrong = peers.Model.__new__(peers.Model)
        wrong.__dict__.update(model.__dict__, reference={"Y": model.reference["Y"] + 1})
        with pytest.raises(SystemExit, match="rtd answers mlp wrongly: Y: scaled error"):
            peers.check_answers(url, headers, "rtd", wrong)

        pool = peers.ClientPool(2, groups.prefix("clients"))
        block = pool.block(2, url, headers, model.name, model.feeds_path, 1.0)
        assert block["errors"] == 0, block["error"]
        assert len(block["latencies"]) > 2 and block["window"] >= 1.0 and np.all(np.array(block["latencies"]) > 0)

        workers = set(daemon.pids(peers.TENANT).values())
        assert workers and workers <= set(peers.process_tree_usage(daemon.proc.pid)), "the workers count as rtd's CPU"
        if groups.base is not None:
            group = "/" + os.path.relpath(os.path.join(groups.base, "rtd"), os.path.dirname(groups.base))
            for pid in workers | {daemon.proc.pid}:
                with open(f"/proc/{pid}/cgroup") as f:
                    cpu = next(line.split(":", 2)[2].strip() for line in f if "cpu" in line.split(":")[1].split(","))
                assert cpu.startswith(group), (pid, cpu)
    finally:
        if pool is not None:
            pool.close()
        if daemon is not None:
            daemon.stop()
        groups.remove()
    assert groups.base is None or not os.path.exists(groups.base)

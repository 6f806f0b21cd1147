"""The chaos soak in CI: tests/soak/chaos.py for 120 s against a real `rtd serve` (SOAK_SECONDS
overrides the duration, SOAK_SEED replays a seed, SOAK_CALM_RATE paces the calm tenant in
requests/s). The long version is scripts/soak.sh. Needs root, like every daemon test."""
import os
import random

import pytest

from tests.daemon.conftest import NEEDS_ROOT
from tests.soak import chaos

SECONDS = float(os.environ.get("SOAK_SECONDS", "120"))


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(int(SECONDS) + 600)   # start, final checks and two clean stops come on top
def test_chaos_soak_keeps_every_invariant():
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    seed = int(os.environ.get("SOAK_SEED") or random.randrange(1 << 31))
    result = chaos.run(chaos.Options(seconds=SECONDS, seed=seed, calm_rate=float(os.environ.get("SOAK_CALM_RATE", "0")),
                                     progress=0))
    print(result.text)
    assert result.ok, f"seed {seed}:\n{result.text}"

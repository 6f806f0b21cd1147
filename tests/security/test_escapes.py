"""The escape battery: every attempt runs inside a real confined worker (root) and must
be blocked by the layer expected first; with seccomp disabled, every attempt that more
than one layer stops must still be blocked by the next layer (defence in depth)."""
import os

import pytest

from rtd.sandbox import load_policy
from rtd.sandbox.escapes import ATTEMPTS, run_attempt, targets

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="escape attempts need real confined workers (root)")
PRODUCTION = load_policy()
NO_SECCOMP = load_policy({"unsafe_disable_seccomp": True})
LAYERED = [a for a in ATTEMPTS if len(a.stops) > 1]


def test_battery_is_broad():
    assert len(ATTEMPTS) >= 25 and len(LAYERED) >= 15


@pytest.fixture(scope="module")
def context():
    with targets(PRODUCTION) as ctx:
        yield ctx


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=lambda a: a.name)
def test_blocked_by_first_layer(attempt, context):
    result = run_attempt(attempt, context, PRODUCTION)
    assert result.blocked, f"{attempt.name} escaped: {result.how}"
    assert result.layer == attempt.stops[0], result


@pytest.mark.parametrize("attempt", LAYERED, ids=lambda a: a.name)
def test_next_layer_holds_without_seccomp(attempt, context):
    result = run_attempt(attempt, context, NO_SECCOMP)
    assert result.blocked, f"{attempt.name} escaped once seccomp was off: {result.how}"
    assert result.layer == attempt.stops[1], result

"""The escape battery: every attempt runs inside a real confined worker (root) and must be
blocked, and the layer observed to stop it (from the kill's signal, or the errno and the call
that got it) must be the one expected first; with seccomp disabled, every attempt that more
than one layer stops must still be blocked, observed at the next layer (defence in depth)."""
import os

import pytest

from rtd.sandbox import load_policy
from rtd.sandbox.escapes import ATTEMPTS, BY_NAME, run_attempt, targets

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


def test_the_credit_is_what_was_observed_not_what_was_expected(context):
    """The same open is credited to seccomp (its EPERM) with the filter on and to the mount
    layer (ENOENT: no /etc/shadow in the worker's root) with it off; a refusal no layer
    explains (ENOSYS from init_module) is credited to none."""
    on, off = (run_attempt(BY_NAME["read_etc_shadow"], context, policy) for policy in (PRODUCTION, NO_SECCOMP))
    assert (on.layer, on.how) == ("seccomp", "EPERM from open")
    assert (off.layer, off.how) == ("mounts", "ENOENT from open")
    unexplained = run_attempt(BY_NAME["init_module"], context, NO_SECCOMP)
    assert unexplained.layer is None and unexplained.how.endswith("from init_module"), unexplained

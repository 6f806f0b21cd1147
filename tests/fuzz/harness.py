"""What every fuzz target shares: how many inputs a run draws, the hypothesis settings, the
open-fd count, and the one check that a refusal carries an E_ code.

A finding (a bug the fuzzers found) has a reproducer test that fails until it is fixed; the
fuzz properties tolerate a listed finding's exact signature (counted as a hypothesis event),
so they keep looking for new ones. FUZZ_STRICT=1 tolerates none. Once a finding is fixed, its
entry goes.

FUZZ_EXAMPLES sets the inputs per target (each target has a small CI default). A run is cut
into rounds of at most ROUND examples, each a fresh hypothesis engine: the engine's record
of what it has tried grows with every example, so a million-input run in one engine would
grow without bound. No example database is kept (database=None), and hypothesis's own
caches go to $HYPOTHESIS_STORAGE_DIRECTORY or a directory under /tmp while a target runs,
not to .hypothesis/ in the repository.
"""
import collections
import dataclasses
import gc
import os
import tempfile
import time
from collections.abc import Callable

from hypothesis import HealthCheck, event, given, settings
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

from rtd.errors import Code, RtdError

EXAMPLES_VAR = "FUZZ_EXAMPLES"
STRICT_VAR = "FUZZ_STRICT"
ROUND = 10_000
QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large, HealthCheck.large_base_example]


def examples(default: int) -> int:
    value = os.environ.get(EXAMPLES_VAR, "").strip()
    return int(value) if value else default


TOLERATED: collections.Counter = collections.Counter()   # known findings met in this run
OUTCOMES: collections.Counter = collections.Counter()    # how inputs ended (note())


def note(outcome: str) -> None:
    """Count how an input ended (printed with the rate: shows the fuzzer gets past the front door)."""
    OUTCOMES[outcome] += 1


def run(strategy, check, default: int) -> None:
    """Draw `examples(default)` inputs from `strategy` and call `check(input)` on each; prints
    the rate, the known findings met and how inputs ended (pytest -s shows it)."""
    home = storage_directory(intent_to_write=False).home_directory
    set_hypothesis_home_dir(os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or os.path.join(tempfile.gettempdir(), "rtd-fuzz-hypothesis"))
    try:
        _run(strategy, check, examples(default))
    finally:
        set_hypothesis_home_dir(home)


def _run(strategy, check, left: int) -> None:
    calls, started = 0, time.monotonic()
    TOLERATED.clear(), OUTCOMES.clear()
    while left > 0:
        chunk = min(left, ROUND)
        left -= chunk

        @settings(max_examples=chunk, deadline=None, database=None, derandomize=False, print_blob=True,
                  suppress_health_check=QUIET)
        @given(strategy)
        def one_round(case):
            nonlocal calls
            calls += 1
            check(case)

        one_round()
        if left:   # long mode: progress after each round
            print(f"fuzz {_test()}: {calls} inputs so far, {calls / (time.monotonic() - started):.0f}/s", flush=True)
    elapsed = time.monotonic() - started
    print(f"\nfuzz {_test()}: {calls} inputs in {elapsed:.1f} s ({calls / max(elapsed, 1e-9):.0f}/s); "
          f"known findings met: {dict(TOLERATED) or 'none'}; outcomes: {dict(OUTCOMES.most_common(12)) or '-'}")


def _test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def assert_no_fd_leak(before: int) -> None:
    """The process holds no more fds than `before` (after a collection, when it looks otherwise:
    a mapping holds a dup of its fd until its last view is gone)."""
    after = open_fds()
    if after != before:
        gc.collect()
        after = open_fds()
    assert after == before, f"{after - before} fds leaked: {sorted(os.listdir('/proc/self/fd'))}"


def assert_refusal(error: BaseException, *codes: Code) -> None:
    """`error` is an RtdError with one of `codes` (any code when none are named)."""
    assert isinstance(error, RtdError), f"{type(error).__name__} escaped: {error!r}"
    assert not codes or error.code in codes, f"{error.code.name} where {[c.name for c in codes]} was expected: {error}"
    assert error.code.name.startswith("E_")


@dataclasses.dataclass(frozen=True)
class Finding:
    test: str                                   # the reproducer that fails until the bug is fixed
    matches: Callable[[BaseException], bool]    # the bug's exact signature


def known(error: BaseException, findings) -> bool:
    """Whether `error` is a listed finding (and the run tolerates findings)."""
    if os.environ.get(STRICT_VAR, "").strip() == "1":
        return False
    for finding in findings:
        if finding.matches(error):
            event(f"known finding: {finding.test}")
            TOLERATED[finding.test] += 1
            return True
    return False


def assert_refusal_or_known(error: BaseException, codes, findings) -> None:
    if not known(error, findings):
        assert_refusal(error, *codes)

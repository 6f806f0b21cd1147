"""What every fuzz target shares: how many inputs a run draws, the hypothesis settings, the
open-fd count, byte-level edits, and the one check that a refusal carries an E_ code.

A bug the fuzzers find gets a regression test named for the behaviour it guards; the
properties tolerate nothing.

FUZZ_EXAMPLES sets the inputs per target (each target has a small CI default). A run is cut
into rounds of at most ROUND examples, each a fresh hypothesis engine: the engine's record
of what it has tried grows with every example, so a million-input run in one engine would
grow without bound. No example database is kept (database=None), and hypothesis's own
caches go to $HYPOTHESIS_STORAGE_DIRECTORY or a directory under /tmp while a target runs,
not to .hypothesis/ in the repository.
"""
import collections
import gc
import os
import tempfile
import time
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

from rtd.errors import Code, RtdError

EXAMPLES_VAR = "FUZZ_EXAMPLES"
ROUND = 10_000
QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large, HealthCheck.large_base_example]


def examples(default: int) -> int:
    value = os.environ.get(EXAMPLES_VAR, "").strip()
    return int(value) if value else default


OUTCOMES: collections.Counter = collections.Counter()   # how inputs ended (note())


def note(outcome: str) -> None:
    """Count how an input ended (printed with the rate: shows the fuzzer gets past the front door)."""
    OUTCOMES[outcome] += 1


def run(strategy, check, default: int) -> None:
    """Draw `examples(default)` inputs from `strategy` and call `check(input)` on each; prints
    the rate and how inputs ended (pytest -s shows it)."""
    home = storage_directory(intent_to_write=False).home_directory
    set_hypothesis_home_dir(os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or os.path.join(tempfile.gettempdir(), "rtd-fuzz-hypothesis"))
    try:
        _run(strategy, check, examples(default))
    finally:
        set_hypothesis_home_dir(home)


def _run(strategy, check, left: int) -> None:
    calls, started = 0, time.monotonic()
    OUTCOMES.clear()
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
          f"outcomes: {dict(OUTCOMES.most_common(12)) or '-'}")


def _test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def assert_no_fd_leak(before: int) -> None:
    """The process holds no more fds than `before` (after a collection, when it looks otherwise:
    a mapping holds a dup of its fd until its last view is gone). Fewer is no leak: that collection
    may also free an earlier input's garbage, whose fds `before` counted (a CI run saw -4)."""
    after = open_fds()
    if after > before:
        gc.collect()
        after = open_fds()
    assert after <= before, f"{after - before} fds leaked: {sorted(os.listdir('/proc/self/fd'))}"


def assert_refusal(error: BaseException, *codes: Code) -> None:
    """`error` is an RtdError with one of `codes` (any code when none are named)."""
    assert isinstance(error, RtdError), f"{type(error).__name__} escaped: {error!r}"
    assert not codes or error.code in codes, f"{error.code.name} where {[c.name for c in codes]} was expected: {error}"
    assert error.code.name.startswith("E_")


def assert_refused(what: str, call: Callable[[], object], *codes: Code) -> None:
    """`call()` raises an RtdError with one of `codes`; `what` names the input when it is accepted."""
    try:
        call()
    except Exception as e:
        assert_refusal(e, *codes)
    else:
        raise AssertionError(f"{what} was accepted")


def edit_bytes(draw, data: bytearray, how: str) -> None:
    """One edit of `data` in place: "flip" a bit, "cut" the tail, "insert" 1 to 8 random bytes
    (`draw` is a hypothesis composite's)."""
    if how == "flip" and data:
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    elif how == "cut" and data:
        del data[draw(st.integers(0, len(data) - 1)):]
    elif how == "insert":
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.binary(min_size=1, max_size=8))

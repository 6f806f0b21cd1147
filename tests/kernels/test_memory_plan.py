"""The arena placer: buffers alive at the same step never share bytes; the arena is no bigger
than the naive sum; a chain of short-lived buffers reuses one region."""
from hypothesis import given, settings
from hypothesis import strategies as st

from rtd.kernels.memory import ALIGN, Aliases, Request, place

request = st.tuples(st.integers(1, 10_000), st.integers(0, 50), st.integers(0, 10))


@settings(max_examples=200, deadline=None)
@given(st.lists(request, min_size=1, max_size=40))
def test_live_buffers_never_overlap_and_peak_is_at_most_the_naive_sum(specs):
    requests = [Request(n, first, first + length) for n, first, length in specs]
    peak = place(requests)
    assert all(r.offset % ALIGN == 0 and r.offset + r.nbytes <= peak for r in requests)
    for i, a in enumerate(requests):
        for b in requests[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset
    assert peak <= sum(-(-r.nbytes // ALIGN) * ALIGN for r in requests)


def test_sequential_buffers_share_one_region():
    requests = [Request(4096, step, step + 1) for step in range(0, 20, 2)]
    assert place(requests) == 4096


def test_aliases_join_classes():
    aliases = Aliases(5)
    aliases.union(0, 1)
    aliases.union(3, 1)
    assert aliases.find(0) == aliases.find(3) != aliases.find(2)

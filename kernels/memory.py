"""Static memory planning for one shape signature: buffers placed in one arena by liveness.

Each request is (size, first step, last step); two requests may share bytes only when their
step intervals are disjoint. Placement is greedy by size, lowest fitting offset first (the
usual approach of TFLite's and ORT's planners), aligned for SIMD loads.
"""
import dataclasses

ALIGN = 64


@dataclasses.dataclass
class Request:
    nbytes: int
    first: int
    last: int
    offset: int = -1


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def place(requests: list) -> int:
    """Give every request an offset; return the arena size (the plan's peak bytes)."""
    placed: list = []
    peak = 0
    for req in sorted(requests, key=lambda r: (-r.nbytes, r.first)):
        size = _aligned(req.nbytes)
        clashes = sorted((p.offset, p.offset + _aligned(p.nbytes)) for p in placed if p.first <= req.last and req.first <= p.last)
        offset = 0
        for start, end in clashes:
            if offset + size <= start:
                break
            offset = max(offset, end)
        req.offset = offset
        placed.append(req)
        peak = max(peak, offset + size)
    return peak


class Aliases:
    """Union-find over value slots: a result that may be a view of an input shares its buffer's life."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)

"""Pinned host staging: one page-locked block taken from the driver while the worker may still
do anything (before its seccomp filter), handed out in pieces for the host side of copies, so
no pinned allocation (cudaHostAlloc: new mappings and driver calls) happens once the worker is
confined, and a copy from or to it is queued without the host waiting.

`StagingPool` manages any byte buffer: the GPU backend gives it a pinned one (backend_cupy),
the tests a NumPy one. A piece returns to the pool when the array handed out is collected (a
view taken from that array does not hold the piece: keep the array itself while it is in use);
when the pool has no piece large enough, `take` answers None and the caller stages through
ordinary memory (a copy the host waits for: slower, the same result)."""
import threading
import weakref

import numpy as np

ALIGN = 256   # bytes from the buffer's start (pinned memory is page-aligned); a copy engine's favourite, every dtype's


class StagingPool:
    def __init__(self, buffer: np.ndarray):
        self.buffer = buffer.view(np.uint8).reshape(-1)
        self._free = [(0, self.buffer.nbytes)]   # (offset, size), sorted, coalesced
        self._lock = threading.Lock()
        self.misses = 0                           # takes that found no room

    @property
    def free_bytes(self) -> int:
        with self._lock:
            return sum(size for _, size in self._free)

    def take(self, shape, dtype) -> np.ndarray | None:
        """An array of `shape` and `dtype` over a piece of the buffer, or None when none fits."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
        with self._lock:
            for i, (offset, room) in enumerate(self._free):
                if room >= size:
                    self._free[i:i + 1] = [(offset + size, room - size)] if room > size else []
                    break
            else:
                self.misses += 1
                return None
        array = self.buffer[offset:offset + nbytes].view(dtype).reshape(shape)
        weakref.finalize(array, self._give, offset, size)
        return array

    def _give(self, offset: int, size: int) -> None:
        with self._lock:
            pieces = sorted(self._free + [(offset, size)])
            merged = [pieces[0]]
            for start, room in pieces[1:]:
                last_start, last_room = merged[-1]
                if last_start + last_room == start:
                    merged[-1] = (last_start, last_room + room)
                else:
                    merged.append((start, room))
            self._free = merged

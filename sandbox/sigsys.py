"""The calls a GPU worker's seccomp filter trapped (SECCOMP_RET_TRAP, see seccomp): the SIGSYS
handler compiled at install time (sigsys.c, built by build_sigsys.py) records each one and
makes it fail with EPERM. `arm` installs the handler (in the worker, before the filter);
`Refusals` reads, outside the signal handler, what was trapped since it last looked."""
import dataclasses

from rtd.errors import Code, RtdError

try:
    from rtd.sandbox import _sigsys
except ImportError:   # rtd installed without a compiler: GPU workers are refused (arm)
    _sigsys = None


@dataclasses.dataclass(frozen=True)
class Trapped:
    nr: int                     # the system call's number on this architecture
    args: tuple[int, int, int]  # its first three arguments
    error: int                  # the errno it returned


def available() -> bool:
    return _sigsys is not None


def arm() -> None:
    """Install the handler; E_LAYER_UNAVAILABLE without the compiled module, OSError if sigaction fails."""
    if _sigsys is None:
        raise RtdError(Code.E_LAYER_UNAVAILABLE, "seccomp: the compiled SIGSYS handler (sandbox/sigsys.c) is not "
                                                 "installed, so a GPU worker's refused calls could not be named")
    if _sigsys.lib.rtd_sigsys_arm() != 0:
        raise OSError(_sigsys.ffi.errno, "sigaction(SIGSYS)")


class Refusals:
    """A reader of the trapped calls: each `new()` returns those trapped since the last one
    (at most the ring's last 64; `missed` counts what was overwritten before it was read)."""

    def __init__(self):
        self.seen = self.missed = 0

    def new(self) -> list[Trapped]:
        if _sigsys is None:
            return []
        count, found = _sigsys.lib.rtd_sigsys_count(), []
        if count == self.seen:   # the usual answer, asked before every frame
            return found
        entry = _sigsys.ffi.new("rtd_trapped *")
        for index in range(self.seen, count):
            if _sigsys.lib.rtd_sigsys_read(index, entry):
                found.append(Trapped(entry.nr, tuple(entry.args), entry.error))
            else:
                self.missed += 1
        self.seen = count
        return found

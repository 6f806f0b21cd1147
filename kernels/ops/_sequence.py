"""Position arithmetic for the sequence ops: positions in [-n, n) (or [-n, n] to insert)."""
from rtd.errors import Code, RtdError


def position(kernel, pos, length: int, op: str, inserting: bool = False) -> int:
    p = int(kernel.host(kernel.xp.asarray(pos)).reshape(-1)[0])
    upper = length + 1 if inserting else length
    if not -length <= p < upper:
        raise RtdError(Code.E_INPUT_INVALID, f"{op}: position {p} outside a sequence of {length}")
    return p + length if p < 0 else p

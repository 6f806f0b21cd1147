"""Blocked evaluation: a multi-pass element-wise step run over cache-sized blocks.

A step of k NumPy passes over a large array streams it through memory k times; over blocks of
BLOCK elements the intermediate arrays stay in L2 and only x and out touch memory.
"""
import numpy as np

BLOCK = 16384


def blockable(xp, x, out=None) -> bool:
    """True when x (and out) are C-contiguous NumPy arrays big enough for blocking to pay."""
    return (xp is np and x.size > BLOCK and x.flags.c_contiguous
            and (out is None or out.flags.c_contiguous))


def in_blocks(step, x, out=None):
    """`step(x_block, out_block)` over flat blocks of x into `out` (new if None; may alias x)."""
    if out is None:
        out = np.empty_like(x)
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    for start in range(0, flat_x.size, BLOCK):
        step(flat_x[start:start + BLOCK], flat_out[start:start + BLOCK])
    return out

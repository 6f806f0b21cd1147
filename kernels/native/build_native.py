"""The cffi build script for rtd's compiled CPU kernels (out-of-line API mode).

setuptools runs it at install time through `cffi_modules` (setup.py); the service never
compiles anything: it runs under MemoryDenyWriteExecute, and the workers' root has no compiler.
The baseline is x86-64-v2 (SSE4.2, any x86-64 host of the last decade), not the build host,
which may differ from the run host; hot functions also carry v3/v4 clones (target_clones in
the C) that the dynamic loader picks when the library loads. No -ffast-math, so NaN and
infinities behave as in NumPy; -ffp-contract=fast lets a multiply-add be one FMA (rounded once,
so results differ from NumPy's two roundings in the last bits).
"""
import pathlib
import platform

import cffi

HERE = pathlib.Path(__file__).parent
SOURCES = ["depthwise.c", "conv.c", "gemm.c", "chain.c", "activation.c", "recurrent.c", "forest.c", "pool.c", "move.c",
           "program.c", "parallel.c", "quant.c", "matmul_8bit.c", "lstm_inputs.c", "resample.c", "scatter.c", "tiles.c", "varint.c"]  # scripts/setup.sh hashes kernels/native/*.[ch] to know when to rebuild
MODULE = "rtd.kernels.native._compiled"


def _flags() -> list[str]:
    flags = ["-O3", "-std=c11", "-ffp-contract=fast", "-fno-strict-aliasing"]
    if platform.machine() in ("x86_64", "AMD64"):
        flags.append("-march=x86-64-v2")
    return flags


ffibuilder = cffi.FFI()
HEADERS = ["depthwise.h", "conv.h", "gemm.h", "chain.h", "activation.h", "recurrent.h", "forest.h", "pool.h", "program.h",
           "quant.h", "matmul_8bit.h", "lstm_inputs.h", "resample.h", "scatter.h", "threads.h", "tiles.h", "varint.h"]  # the cffi interface
ffibuilder.cdef("\n".join((HERE / name).read_text() for name in HEADERS))   # cffi drops the comments
# Paths are relative to the project root, where setuptools runs the build. `depends` rebuilds on
# a changed header; `optional` lets an install without a compiler finish (the executor then
# runs NumPy and says so), while scripts/setup.sh installs gcc and insists on the library.
ffibuilder.set_source(MODULE, "".join(f'#include "{name}"\n' for name in HEADERS),
                      sources=[f"kernels/native/{name}" for name in SOURCES],
                      depends=[f"kernels/native/{name}" for name in HEADERS + ["parallel.h", "gemm_core.h", "simd.h", "activation_block.h", "chain_links.h", "move.h", "window.h"]], include_dirs=["kernels/native"],
                      extra_compile_args=_flags(), optional=True)

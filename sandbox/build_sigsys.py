"""The cffi build script (out-of-line API mode) of the GPU worker's SIGSYS handler, sigsys.c:
compiled at install time through setup.py's `cffi_modules`, never at run time. `optional`: an
install without a compiler finishes, and a GPU worker is then refused in one line (sandbox.sigsys)."""
import pathlib

import cffi

HERE = pathlib.Path(__file__).parent
ffibuilder = cffi.FFI()
ffibuilder.cdef((HERE / "sigsys.h").read_text())
ffibuilder.set_source("rtd.sandbox._sigsys", '#include "sigsys.h"\n', sources=["sandbox/sigsys.c"],
                      depends=["sandbox/sigsys.h"], include_dirs=["sandbox"], extra_compile_args=["-O2", "-std=c11"],
                      optional=True)

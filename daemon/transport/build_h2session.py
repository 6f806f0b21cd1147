"""The cffi build script (out-of-line API mode) of the HTTP/2 session, h2session.c over
libnghttp2 (Debian: libnghttp2-dev, which scripts/setup.sh installs): compiled at install time
through setup.py's `cffi_modules`, never at run time. Not optional: the daemon's gRPC transport
is this module."""
import pathlib

import cffi

HERE = pathlib.Path(__file__).parent
ffibuilder = cffi.FFI()
ffibuilder.cdef((HERE / "h2session.h").read_text())
ffibuilder.set_source("rtd.daemon.transport._h2session", '#include "h2session.h"\n', sources=["daemon/transport/h2session.c"],
                      depends=["daemon/transport/h2session.h"], include_dirs=["daemon/transport"], libraries=["nghttp2"],
                      extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"])

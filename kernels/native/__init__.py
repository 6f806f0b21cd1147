"""rtd's compiled CPU kernels: C built at install time (cffi, build_native.py), loaded here.

Importing this package loads the shared library, so the zygote's pre-import of the executor
maps it before any worker forks and before seccomp (a confined worker cannot open files).
Nothing is compiled at run time: the service runs under MemoryDenyWriteExecute. When the
library is missing (rtd installed without a compiler) `compiled` is None, the executor keeps
its NumPy kernels, and the import says so once on stderr.
"""
import sys

try:
    from . import _compiled as compiled
except ImportError as e:
    compiled = None
    print(f"rtd: compiled CPU kernels unavailable ({e}); the executor uses its NumPy kernels", file=sys.stderr)


def set_threads(threads: int) -> None:
    """The threads the compiled kernels may use from now on (the tenant's CPU quota; 1 by default)."""
    if compiled is not None:
        compiled.lib.rtd_set_threads(int(threads))


def threads() -> int:
    return 1 if compiled is None else int(compiled.lib.rtd_threads())


def path_in_force() -> str:
    """"compiled" or "numpy": which kernels the executor runs (rtctl doctor shows it)."""
    return "numpy" if compiled is None else "compiled"

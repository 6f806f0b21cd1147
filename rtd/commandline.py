"""The one catch at the entry of `rtctl` and `rtd`: every failure leaves as one line
`CODE: reason (detail)` on stderr with a documented exit status, never a traceback.

RtdError keeps its code; the OS errors a command line meets (a missing or existing file, a
refused permission) become their own codes; anything else is E_INTERNAL, named by its
type and message, so even a bug is one line a user can report."""
import argparse
import errno
import json
import sys

from rtd.errors import Code, RtdError

EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 2, 3, 130
EXIT_CODES = f"""exit status:
  0    done
  1    rtctl doctor: an escape attempt was not blocked
  {EXIT_REFUSED}    refused: one line `E_CODE: reason (detail)` on stderr (rtd/errors.py lists the codes)
  {EXIT_UNREACHABLE}    E_DAEMON_UNREACHABLE: no daemon answers at the socket or address used
  {EXIT_INTERRUPTED}  E_INTERRUPTED: stopped by Ctrl-C"""

_OS_CODES = {errno.ENOENT: Code.E_PATH_NOT_FOUND, errno.EEXIST: Code.E_PATH_EXISTS,
             errno.EACCES: Code.E_PERMISSION_DENIED, errno.EPERM: Code.E_PERMISSION_DENIED,
             errno.ENOSPC: Code.E_STORAGE_FULL}


def from_os_error(e: OSError) -> RtdError:
    where = e.filename if e.filename is not None else ""
    return RtdError(_OS_CODES.get(e.errno, Code.E_IO), f"{where}: {e.strerror or e}" if where else str(e.strerror or e))


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one E_USAGE line too (exit 2, as argparse's own)."""

    def error(self, message: str):
        print(f"{RtdError(Code.E_USAGE, f'{message}; see {self.prog} --help')}", file=sys.stderr)
        sys.exit(EXIT_REFUSED)


def run(func, args, json_output: bool = False) -> int:
    """Call func(args); a failure is printed (and, with --json, also as JSON on stdout)."""
    try:
        return func(args) or 0
    except KeyboardInterrupt:
        error = RtdError(Code.E_INTERRUPTED)
    except RtdError as e:
        error = e
    except OSError as e:
        error = from_os_error(e)
    except Exception as e:   # a bug: still one line, naming what went wrong
        error = RtdError(Code.E_INTERNAL, f"{type(e).__name__}: {e}")
    if json_output:
        print(json.dumps({"ok": False, **error.to_json()}))
    print(str(error), file=sys.stderr)
    return {Code.E_DAEMON_UNREACHABLE: EXIT_UNREACHABLE, Code.E_INTERRUPTED: EXIT_INTERRUPTED}.get(error.code, EXIT_REFUSED)

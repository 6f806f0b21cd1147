"""Which process of this process's pid namespace another component's pid names.

NVML reports the pids the driver gives it. A driver that translates (the open modules' RM
looks a process up with pid_vnr, in the caller's namespace) reports the daemon's own
numbering; one that does not reports the host's, which a daemon inside a container (the
KServe pod, deploy/Containerfile) cannot see. What /proc shows decides what can be matched:
`/proc/<pid>/status` NSpid lists a process's pid in every namespace from the one /proc was
mounted for down to its own, so

- /proc mounted for our own namespace (a pod's /proc, or the host's on the host): its
  numbers are ours, and a pid it does not list is no process we can see (host pids in a pod);
- /proc mounted for an ancestor namespace (a container sharing the host's /proc): a pid it
  lists is ours at NSpid's entry for our depth, if that process's namespace descends from
  ours (checked with NS_GET_PARENT: a sibling namespace numbers its processes alike).

`in_our_namespace` answers None whenever the answer is not certain: the caller treats such a
pid as one it cannot attribute, never as nobody's."""
import fcntl
import os

PROC = "/proc"
NS_GET_PARENT = 0xB702   # _IO(NSIO 0xb7, 2), linux/nsfs.h: an fd of the parent pid namespace


def ns_pids(pid, proc: str = PROC) -> tuple[int, ...] | None:
    """NSpid of the process /proc calls `pid` ("self" for this one); None when /proc has no such process."""
    try:
        with open(os.path.join(proc, str(pid), "status")) as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return tuple(int(p) for p in line.split()[1:])
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    return None


def _namespace_at(pid: int, up: int, proc: str) -> os.stat_result | None:
    """The pid namespace `up` levels above the one process `pid` lives in (None: gone, or out of reach)."""
    try:
        fd = os.open(os.path.join(proc, str(pid), "ns", "pid"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for _ in range(up):
            parent = fcntl.ioctl(fd, NS_GET_PARENT)
            os.close(fd)
            fd = parent
        return os.fstat(fd)
    except OSError:   # EPERM: the parent is outside our reach
        return None
    finally:
        os.close(fd)


def in_our_namespace(pid: int, proc: str = PROC) -> int | None:
    """The pid, in this process's namespace, of the process /proc calls `pid`; None when /proc
    lists no such process or it lives outside our namespace and its descendants."""
    chain, ours = ns_pids(pid, proc), ns_pids("self", proc)
    if chain is None or ours is None:
        return None
    depth = len(ours) - 1
    if depth == 0:
        return chain[0]
    if len(chain) <= depth:
        return None
    level = _namespace_at(pid, len(chain) - 1 - depth, proc)
    mine = os.stat(os.path.join(proc, "self", "ns", "pid"))
    if level is None or (level.st_dev, level.st_ino) != (mine.st_dev, mine.st_ino):
        return None
    return chain[depth]

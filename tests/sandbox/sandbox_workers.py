"""What the sandbox tests share: starting the echo worker, reading a worker's frames, a
process's /proc status, stopping a worker cleanly, and putting a process in a cgroup."""
import socket

from rtd import wire


def received(sock):
    """The head of the worker's next frame (None at EOF); one frame in flight at a time."""
    try:
        return wire.Reader(sock).recv().head
    except EOFError:
        return None


def start_echo(zygote, identity, policy=None, args=()):
    """A confined rtd.sandbox.echo worker that has said hello: (handle, our socket)."""
    ours, theirs = socket.socketpair()
    handle = zygote.spawn("rtd.sandbox.echo:serve", policy=policy, identity=identity, sock=theirs, args=args)
    theirs.close()
    assert received(ours) == {"hello": list(args)}
    return handle, ours


def stop(handle, sock):
    sock.close()
    assert handle.wait(10).code == 0


def join(cgroup, pid: int):
    """Move `pid` into the WorkerCgroup's leaf in every hierarchy, as a helper joins it."""
    for path in cgroup.procs_files:
        with open(path, "w") as f:
            f.write(str(pid))


def proc_status(pid):
    with open(f"/proc/{pid}/status") as f:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in f)}

"""The NVML watcher as a daemon in a container runs it: started by test_gpu_watch.py inside a
new pid namespace (`unshare --pid --fork`, with --mount-proc for a pod's own /proc, without it
for a container that shares the host's /proc), on the stand-in NVML. It starts two sleeping
workers, prints their pids as this namespace numbers them, then answers one JSON line per
command on stdin: "start BUDGET" (GpuWatch.start policing both), "poll" (one poll), "quit"."""
import json
import signal
import subprocess
import sys
import time

from rtd.daemon.observe.gpu_watch import GpuWatch
from rtd.errors import RtdError


class Worker:
    """What the watcher asks of a handle: pid (in our namespace), alive, kill."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, layer=None, reason=""):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def say(**fields):
    print(json.dumps(fields), flush=True)


def main():
    workers = [Worker(), Worker()]
    say(pids=[w.pid for w in workers])
    watch, health = None, []
    try:
        for line in sys.stdin:
            command, *args = line.split()
            if command == "start":
                try:
                    watch = GpuWatch.start({"pod": int(args[0])}, lambda kill: None,
                                           lambda minor, error: health.append([minor, error]), poll_s=3600)
                except RtdError as e:
                    say(refused=e.code.name, detail=e.detail)
                    continue
                for w in workers:
                    watch.watch("pod", w)
                say(started=True)
            elif command == "poll":
                kills = watch.poll(time.monotonic())
                say(kills=[k.pid for k in kills], blind=watch.blind(), health=health, alive=[w.alive() for w in workers])
            else:
                break
    finally:
        if watch is not None:
            watch.stop()
        for w in workers:
            w.proc.kill()
            w.proc.wait()


if __name__ == "__main__":
    main()

"""The daemon's state directory on a small tmpfs of its own, so the chaos can fill the disk
to the brim and empty it again; a host where mount(8) fails runs the soak on a plain
directory and says why the full-disk element is skipped.

Filling is paced the way a disk fills in production — chunks with short sleeps, then the
last MiB a page at a time (a few seconds in all) — so that loads are writing when the space
runs out: the case the daemon's all-or-nothing writes are for."""
import errno
import os
import subprocess
import threading
import time

FILLER = "soak-filler"     # not a dot name: the registry's temporaries are the only dot names there
CHUNK = 1 << 18
PAGE = 1 << 12
TAIL = 1 << 20     # the last MiB is filled a page at a time


class StateDisk:
    def __init__(self, path: str, size: int, timeline):
        self.path, self.timeline = path, timeline
        os.makedirs(path, exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
                                 capture_output=True, text=True)
        self.mounted = mounted.returncode == 0
        self.why_not = "" if self.mounted else (mounted.stderr.strip() or f"mount exited {mounted.returncode}")
        self.filler = os.path.join(path, FILLER)
        self.lock = threading.Lock()
        self.full = False

    def fill(self, pace_s: float = 0.0, tail_pace_s: float = 0.0) -> int:
        """Write until ENOSPC: big chunks, then the last TAIL bytes page by page (to the brim,
        and slowly: the daemon's writes that straddle the end are the interesting ones);
        returns the bytes written."""
        with self.lock:
            self.timeline.disk_full()   # from the first chunk on, a write of the daemon's may not fit
            self.full = True
            written = 0
            fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                tail = False
                while True:
                    stat = os.statvfs(self.path)
                    tail = tail or stat.f_bavail * stat.f_frsize <= TAIL
                    try:
                        written += os.write(fd, b"\0" * (PAGE if tail else CHUNK))
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        if not tail:   # a chunk that did not fit: the rest goes page by page
                            tail = True
                            continue
                        break
                    if pace_s or tail_pace_s:
                        time.sleep(tail_pace_s if tail else pace_s)
            finally:
                os.close(fd)
            return written

    def empty(self) -> None:
        with self.lock:
            if os.path.exists(self.filler):
                os.unlink(self.filler)
            if self.full:
                self.full = False
                self.timeline.disk_emptied()

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", self.path], check=False, capture_output=True)
            self.mounted = False

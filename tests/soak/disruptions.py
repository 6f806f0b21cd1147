"""The chaos that is not a tenant's request: SIGKILLs of the hostile tenant's workers and,
apart, of the calm tenant's; idle-connection floods from another uid; the state disk
filled to the brim and emptied; and the Conductor: supervisor kill -9 at random points,
restart, and the restart checks."""
import os
import signal
import subprocess
import sys

from rtd.errors import RtdError
from tests.soak import invariants
from tests.soak.calm import MAIN
from tests.soak.harness import CALM, LIMITS, Actor

IDLE_FLOOD = os.path.join(os.path.dirname(__file__), "..", "daemon", "idle_flood.py")

QUIET_FIRST = 0.5     # share of kills preceded by a quiescence check (the others hit calls in flight)
FULL_RESTART = 0.3    # share of restarts made on a full state disk
FLOOD_CONNECTIONS, FLOOD_HOLD_S = 150, 3.0    # the hold outlasts connection_auth_timeout_s (1 s) twice over



def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


class HostileWorkerKiller(Actor):
    element = "hostile-worker-kill"
    low, high = 1.5, 5.0

    def __init__(self, soak, name: str, tenant: str):
        super().__init__(soak, name)
        self.tenant = tenant

    def step(self) -> None:
        with self.soak.gate.call():
            try:
                pids = self.soak.pids(self.tenant)
            except RtdError:
                return   # the supervisor was killed meanwhile
            if pids and _kill(self.rng.choice(pids)):
                self.soak.tally.event("hostile worker SIGKILL")


class CalmWorkerKiller(Actor):
    """Kills main's worker, but only once main has answered since the last kill: kills with no
    answer between count toward crash_limit, and a FAILED main would be the chaos's doing."""
    element = "calm-worker-kill"
    low, high = 6.0, 15.0

    def __init__(self, soak, name: str):
        super().__init__(soak, name)
        self.answers_at_kill = -1

    def step(self) -> None:
        answers = self.soak.tally.outcomes[("calm.infer", "ok")]
        if answers <= self.answers_at_kill:
            return
        with self.soak.gate.call():
            try:
                pids = self.soak.pids(CALM, MAIN)
            except RtdError:
                return
            if pids:
                self.soak.timeline.calm_worker_killed()   # before the kill: the excuse covers its first effects
                if _kill(self.rng.choice(pids)):
                    self.answers_at_kill = answers
                    self.soak.tally.event("calm worker SIGKILL")


class IdleFlood(Actor):
    element = "idle-flood"
    low, high = 8.0, 20.0

    def step(self) -> None:
        soak, generation = self.soak, self.soak.generation
        done = subprocess.run([sys.executable, IDLE_FLOOD, soak.daemon.socket, str(FLOOD_CONNECTIONS), str(FLOOD_HOLD_S)],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            soak.tally.violation("actor failed", f"{self.name}: {done.stderr.strip()[-300:]}")
            return
        opened, failed, first, later = map(int, done.stdout.split())
        soak.tally.event("idle flood")
        soak.tally.event("idle flood connections", opened)
        if soak.generation != generation or not soak.gate.up:
            return   # a kill in between: the counts say nothing about the caps
        cap = LIMITS["max_connections_per_peer"]
        soak.tally.check("idle flood capped per peer", first <= cap, f"{first} of {opened} idle connections open, cap {cap}")
        soak.tally.check("idle connections closed", later == 0,
                         f"{later} idle connections still open {FLOOD_HOLD_S + 0.5:g} s after connecting "
                         f"(connection_auth_timeout_s {LIMITS['connection_auth_timeout_s']})")


class DiskFiller(Actor):
    element = "disk-full"
    low, high = 8.0, 25.0

    def step(self) -> None:
        disk = self.soak.disk
        if disk.full:
            return
        disk.fill(pace_s=self.rng.uniform(0.0, 0.015), tail_pace_s=self.rng.uniform(0.0, 0.004))
        self.soak.tally.event("state disk filled")
        self.soak.stop.wait(self.rng.uniform(1.0, 6.0))
        disk.empty()


class Conductor(Actor):
    """Supervisor kill -9 at random points (half of them after a quiescence check), restart
    (some on a full disk), and the restart checks, with no actor calling meanwhile."""
    element = "supervisor-kill"

    def __init__(self, soak, name: str):
        super().__init__(soak, name)
        every = soak.options.kill_every
        self.low, self.high = every * 0.5, every * 1.5

    def step(self) -> None:
        with self.soak.restart_lock:
            self.soak.gate.close()
            if self.rng.random() < QUIET_FIRST:
                invariants.quiescent(self.soak)
            self._down_and_up(kill=True)

    def recover(self) -> None:
        """The supervisor exited on its own: restart it and check as after a kill."""
        with self.soak.restart_lock:
            if self.soak.daemon.proc.poll() is None:
                return
            self.soak.gate.close()
            self._down_and_up(kill=False)

    def _down_and_up(self, kill: bool) -> None:
        soak = self.soak
        soak.timeline.daemon_down()
        if kill:
            soak.kill9()
            soak.tally.event("supervisor kill -9")
        soak.daemon.proc.wait()
        soak.tally.check("calls end after a kill", soak.gate.drained(60), "calls still in flight 60 s after the kill")
        invariants.registry_blobs(soak, temporaries_too=False)
        invariants.gone(soak, "no orphans after kill -9", timeout=10.0, cgroups=False)
        # a rollback mark left behind its registry entry must be raised at the next start: that
        # start is made on a full disk whenever this run's log says a mark was left behind
        behind = "event=rollback_write_failed" in soak.daemon.read_log()
        filled = (soak.disk.mounted and "disk-full" not in soak.options.skip and not soak.disk.full
                  and (behind or self.rng.random() < FULL_RESTART))
        if filled:
            soak.disk.fill()
            soak.tally.event("restart on a full disk")
        if self._restart():
            invariants.after_restart(soak)
            soak.timeline.daemon_up()
            soak.gate.open()
        if filled:
            soak.disk.empty()

    def _restart(self) -> bool:
        soak = self.soak
        try:
            soak.start()
            soak.tally.event("restart")
            return soak.tally.check("daemon restarts", True)
        except RuntimeError as e:
            tail = " | ".join(line for line in str(e).splitlines()[-3:] if line.strip())
            soak.tally.check("daemon restarts", False, "rtd serve did not come back"
                             + (" on a full state disk" if soak.disk.full else "") + f": {tail[-400:]}")
            if soak.daemon.proc.poll() is None:
                soak.kill9()
        soak.disk.empty()   # the likeliest cause; the soak goes on without it
        try:
            soak.start()
            soak.tally.event("restart")
            return True
        except RuntimeError as e:
            soak.fatal = f"rtd serve does not start: {str(e)[-400:]}"
            return False

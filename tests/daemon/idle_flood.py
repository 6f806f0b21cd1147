"""Idle-connection flood from another uid, run as a script by the tests and the soak, as root:
`python tests/daemon/idle_flood.py SOCKET COUNT HOLD_S`. It drops to uid 65534 (nobody), opens
COUNT connections and never sends a byte, and prints how many it opened, how many connects
failed, how many were still open after 0.5 s and after HOLD_S more."""
import os
import socket
import sys
import time


def still_open(s: socket.socket) -> bool:
    try:
        while s.recv(1 << 16):   # the server's SETTINGS (and GOAWAY) come before its EOF
            pass
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def main(path: str, count: int, hold: float) -> None:
    os.setgid(65534)
    os.setuid(65534)
    socks, failed = [], 0
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError:
            failed += 1
            s.close()
            continue
        s.settimeout(0)
        socks.append(s)
    time.sleep(0.5)
    first = sum(map(still_open, socks))
    time.sleep(hold)
    print(len(socks), failed, first, sum(map(still_open, socks)))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))

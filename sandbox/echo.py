"""The smallest real worker: says hello, then sends each frame it receives straight back
(as Kind.OK, same request id, head and tensors) until EOF. Used to measure
start-to-first-reply and to probe a worker's confinement."""
import os

from rtd import wire


def serve(sock, *args):
    wire.send(sock, wire.Kind.OK, 0, {"hello": list(args)})
    requests = wire.Reader(sock)
    while True:
        try:
            frame = requests.recv()
        except EOFError:
            return
        for fd in frame.fds:
            os.close(fd)
        wire.send(sock, wire.Kind.OK, frame.request_id, frame.head, frame.tensors)

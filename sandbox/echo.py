"""The smallest real worker: answers each length-prefixed JSON request with itself until
EOF. Used to measure start-to-first-reply and to probe a worker's confinement."""
from rtd.sandbox.confined import recv_json, send_json


def serve(sock, *args):
    send_json(sock, {"hello": list(args)})
    while (request := recv_json(sock)) is not None:
        send_json(sock, request)

"""A raw HTTP/2 gRPC client for attacks a well-behaved client never makes: never opening its
flow-control window, never reading its socket, opening streams and resetting them. Built
on h2 over a plain blocking Unix socket; it speaks just enough gRPC to send unary calls."""
import socket
import struct

import h2.config
import h2.connection
import h2.events
import h2.settings

from rtd.proto import SERVICE


class RawClient:
    def __init__(self, path: str, token: str, window: int = 65535):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.token = token
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window, h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self.h2.initiate_connection()
        self.flush()

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def call(self, rpc: str, message: bytes, end: bool = True, declared: int | None = None) -> int:
        """Start a unary call on a new stream; returns its id. Nothing is read. `declared`: the
        message length its prefix claims, where that is not len(message) (the rest never sent)."""
        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", f"/{SERVICE}/{rpc}"),
                                   (":authority", "rtd"), ("content-type", "application/grpc"), ("te", "trailers"),
                                   ("authorization", f"Bearer {self.token}")])
        length = len(message) if declared is None else declared
        self.h2.send_data(sid, struct.pack(">BI", 0, length) + message, end_stream=end)
        self.flush()
        return sid

    def send(self, sid: int, data: bytes) -> int:
        """More of a call's body, as much as its window allows (read_events first lets it grow); how much went."""
        size = min(len(data), self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
        if size > 0:
            self.h2.send_data(sid, data[:size])
            self.flush()
        return max(size, 0)

    def reset(self, sid: int) -> None:
        self.h2.reset_stream(sid)
        self.flush()

    def read_events(self, timeout: float = 5.0) -> list:
        """Read what arrived (acknowledging settings, never opening stream windows)."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            return []
        if not data:
            raise EOFError("the server closed the connection")
        events = self.h2.receive_data(data)
        self.flush()
        return events

    def statuses(self, timeout: float = 10.0) -> dict:
        """{stream id: grpc-status} of the calls answered within `timeout` (reads everything)."""
        out = {}
        for event in self.read_events(timeout):
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                fields = dict(event.headers)
                if "grpc-status" in fields:
                    out[event.stream_id] = (int(fields["grpc-status"]), fields.get("grpc-message", ""))
        return out

    def close(self) -> None:
        self.sock.close()

"""The storage server of the synchronized-read workload; runs inside a sender host.

A client connects and sends requests, each an 8-byte big-endian block size;
for each request the server sends that many bytes back at once. A
connection can carry one request (the default workload: a new connection
per request) or many (persistent connections); the server serves until the
client closes it. One thread per connection.

Every socket uses the congestion control given with --cc (set per socket,
so it holds even where the namespace default cannot be changed).

    python -m otcp.experiments.hostprogs.incast_server --port 5001 [--cc cubic]

It prints "listening <port>" once the socket is ready, then runs until
killed.
"""

from __future__ import annotations

import socket
import struct
import sys

from otcp.experiments.hostprogs.common import listen_and_serve, read_exactly, set_congestion_control

REQUEST = struct.Struct("!Q")
MAX_BLOCK_BYTES = 1 << 30
SEND_CHUNK = 1 << 20


def serve_connection(conn: socket.socket, cc: str, payload: memoryview) -> None:
    """Answer requests on conn until the client closes it."""
    with conn:
        set_congestion_control(conn, cc)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            header = read_exactly(conn, REQUEST.size)
            if not header:
                return
            (size,) = REQUEST.unpack(header)
            if size > MAX_BLOCK_BYTES:
                return
            remaining = size
            while remaining:
                step = min(remaining, SEND_CHUNK)
                conn.sendall(payload[:step])
                remaining -= step


def main(argv: list[str] | None = None) -> int:
    """Listen and serve every connection in a thread of its own."""
    payload = memoryview(b"\x5a" * SEND_CHUNK)
    return listen_and_serve("incast_server", __doc__, 1024,
                            lambda conn, cc: serve_connection_safely(conn, cc, payload), argv)


def serve_connection_safely(conn: socket.socket, cc: str, payload: memoryview) -> None:
    """serve_connection, where a reset by the client ends only that connection."""
    try:
        serve_connection(conn, cc, payload)
    except (ConnectionError, OSError):
        pass


if __name__ == "__main__":
    sys.exit(main())

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

import argparse
import socket
import struct
import sys
import threading

from otcp.experiments.hostprogs.common import set_congestion_control

REQUEST = struct.Struct("!Q")
MAX_BLOCK_BYTES = 1 << 30
SEND_CHUNK = 1 << 20


def read_exactly(sock: socket.socket, size: int) -> bytes:
    """size bytes from sock, or b'' if the peer closed first."""
    parts, remaining = [], size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            return b""
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


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
    parser = argparse.ArgumentParser(prog="incast_server", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--cc", default="cubic", help="congestion control for every socket")
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error(f"--port: {args.port} is not a TCP port")
    payload = memoryview(b"\x5a" * SEND_CHUNK)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        set_congestion_control(listener, args.cc)
    except OSError as exc:
        print(f"incast_server: cannot use congestion control {args.cc!r}: {exc}", file=sys.stderr)
        return 2
    listener.bind((args.bind, args.port))
    listener.listen(1024)
    print(f"listening {args.port}", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve_connection_safely, args=(conn, args.cc, payload), daemon=True).start()


def serve_connection_safely(conn: socket.socket, cc: str, payload: memoryview) -> None:
    """serve_connection, where a reset by the client ends only that connection."""
    try:
        serve_connection(conn, cc, payload)
    except (ConnectionError, OSError):
        pass


if __name__ == "__main__":
    sys.exit(main())

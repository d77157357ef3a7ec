"""The server of the flow workload; runs inside every host. It sends what a client asks for.

A client connects and sends one request, 16 bytes big-endian: the
connection's id and a size; the server sends that many bytes back (or, for
size STREAM, sends until the client closes: a long-lived flow), waits for
the client to close, and then reports the connection as one JSON line on
stdout::

    {"id": ..., "rto": N, "retrans": N}

rto: the retransmission timeouts the connection had on this side (the
kernel's tcpi_total_rto, Linux 6.7 and later; null where the kernel does
not have it); retrans: its retransmitted segments (tcpi_total_retrans).
One thread per connection; every socket uses the congestion control given
with --cc.

    python -m otcp.experiments.hostprogs.flow_server --port 5003 [--cc cubic]

It prints "listening <port>" once ready, then runs until killed.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading

from otcp.experiments.hostprogs.common import listen_and_serve, read_exactly, set_congestion_control

REQUEST = struct.Struct("!QQ")
#: The size that asks for a stream until the client closes.
STREAM = (1 << 64) - 1
SEND_CHUNK = 1 << 18
# struct tcp_info (UAPI, append-only): tcpi_total_retrans (u32) and tcpi_total_rto (u16, from Linux 6.7).
TCPI_TOTAL_RETRANS = struct.Struct("=I")
TCPI_TOTAL_RETRANS_OFFSET = 100
TCPI_TOTAL_RTO = struct.Struct("=H")
TCPI_TOTAL_RTO_OFFSET = 240
TCP_INFO_BYTES = 248


def connection_timeouts(sock: socket.socket) -> tuple[int | None, int]:
    """(retransmission timeouts, retransmitted segments) of sock so far; the first is None
    where the kernel's tcp_info has no tcpi_total_rto."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
    (retrans,) = TCPI_TOTAL_RETRANS.unpack_from(info, TCPI_TOTAL_RETRANS_OFFSET)
    if len(info) < TCPI_TOTAL_RTO_OFFSET + TCPI_TOTAL_RTO.size:
        return None, retrans
    (rto,) = TCPI_TOTAL_RTO.unpack_from(info, TCPI_TOTAL_RTO_OFFSET)
    return rto, retrans


class Reporter:
    """One JSON line per connection served, whole lines only, from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def report(self, record: dict[str, object]) -> None:
        """Print record as one line."""
        line = json.dumps(record)
        with self.lock:
            print(line, flush=True)


def serve(conn: socket.socket, cc: str, payload: memoryview, reporter: Reporter) -> None:
    """Answer one request on conn, wait for the client to close, report the connection."""
    with conn:
        set_congestion_control(conn, cc)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request = read_exactly(conn, REQUEST.size)
        if not request:
            return
        flow_id, size = REQUEST.unpack(request)
        try:
            remaining = size
            while remaining:
                step = min(remaining, SEND_CHUNK)
                conn.sendall(payload[:step])
                if size != STREAM:
                    remaining -= step
            while conn.recv(4096):
                pass
        except OSError:
            pass  # the client closed first: a stream's end, or a flow given up at the deadline
        rto, retrans = connection_timeouts(conn)
        reporter.report({"id": flow_id, "rto": rto, "retrans": retrans})


def main(argv: list[str] | None = None) -> int:
    """Listen and serve every connection in a thread of its own."""
    payload = memoryview(b"\x5a" * SEND_CHUNK)
    reporter = Reporter()
    return listen_and_serve("flow_server", __doc__, 4096, lambda conn, cc: serve(conn, cc, payload, reporter), argv)


if __name__ == "__main__":
    sys.exit(main())

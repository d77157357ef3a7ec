"""The client of the flow workload; runs inside every host and pulls what the host receives.

Its plan (JSON, --plan FILE) lists, with times in seconds from --start-at
(CLOCK_MONOTONIC seconds, shared by every host of the machine):

    {"flows": [{"key": "f7", "start_s": 0.41, "server": "10.0.0.3", "bytes": 52000}, ...],
     "queries": [{"key": "q2", "start_s": 0.9, "servers": ["10.0.0.4", ...], "bytes": 2000}, ...],
     "background": [{"key": "b0", "server": "10.0.0.5"}, ...],
     "duration_s": 10.0}

At its time each flow opens a new connection to its server (flow_server)
and asks for its bytes; a query opens one connection to each of its
servers at once. A long-lived background flow connects a second before
the start and streams until the duration is over. The client stops at the
duration plus --drain-s; a connection not finished by then is reported
unfinished. With --window-clamp BYTES every connection's receive window
is held to BYTES (the static receive-window clamp: common.hold_receive_window,
the clamp set again after every read).

Output, one JSON object per connection on stdout when the client ends:

    {"key": "f7" | "q2/0" | "b0", "id": N, "scheduled": T, "start": T, "end": T | null, "bytes": N,
     "error": null | "...", "rto": N | null}

times on the monotonic clock; id: the connection's id in its request (the
server reports it with its own side's timeouts); rto: this side's
retransmission timeouts (its SYN's, for a pulled flow). A background
flow's record also has "measured_bytes": what it received within
[start-at, start-at + duration].
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import selectors
import socket
import sys
import time
from typing import Any

from otcp.experiments.hostprogs.common import clamp_receive_window, hold_receive_window, set_congestion_control
from otcp.experiments.hostprogs.flow_server import REQUEST, STREAM, connection_timeouts

RECEIVE_BUFFER = 1 << 20
#: A background flow connects this long before the measured start.
BACKGROUND_LEAD_S = 1.0


@dataclasses.dataclass
class Connection:
    """One connection the client pulls bytes over."""

    key: str
    conn_id: int
    server: str
    size: int
    scheduled: float
    start: float = 0.0
    end: float | None = None
    received: int = 0
    error: str | None = None
    rto: int | None = None
    sock: socket.socket | None = None
    measured_from: int | None = None  # a stream's bytes at the measured start
    measured_to: int | None = None

    def record(self) -> dict[str, Any]:
        """The connection's output line."""
        line: dict[str, Any] = {"key": self.key, "id": self.conn_id, "scheduled": self.scheduled,
                                "start": self.start, "end": self.end, "bytes": self.received,
                                "error": self.error, "rto": self.rto}
        if self.size == STREAM:
            line["measured_bytes"] = (self.measured_to or self.received) - (self.measured_from or 0)
        return line


class Client:
    """The event loop: connections started at their times, read to their end or the deadline."""

    def __init__(self, port: int, cc: str, window_clamp: int | None, id_base: int) -> None:
        self.port = port
        self.cc = cc
        self.window_clamp = window_clamp
        self.next_id = id_base
        self.selector = selectors.DefaultSelector()
        self.buffer = memoryview(bytearray(RECEIVE_BUFFER))
        self.connections: list[Connection] = []
        self.open = 0

    def connect(self, key: str, server: str, size: int, scheduled: float) -> None:
        """Open a connection to server asking for size bytes (the request goes once connected)."""
        self.next_id += 1
        conn = Connection(key, self.next_id, server, size, scheduled)
        self.connections.append(conn)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        conn.sock = sock
        try:
            set_congestion_control(sock, self.cc)
            if self.window_clamp is not None:
                hold_receive_window(sock, self.window_clamp)
            sock.setblocking(False)
            conn.start = time.monotonic()
            sock.connect_ex((server, self.port))
        except OSError as exc:
            self.finish(conn, error=f"{server}: {exc}")
            return
        self.selector.register(sock, selectors.EVENT_WRITE, conn)
        self.open += 1

    def finish(self, conn: Connection, error: str | None = None) -> None:
        """Close conn: its end time if complete, its error otherwise, and its own timeouts."""
        sock = conn.sock
        if sock is None:
            return
        if error is None and conn.size != STREAM:
            conn.end = time.monotonic()
        conn.error = error
        try:
            conn.rto, _ = connection_timeouts(sock)
        except OSError:
            conn.rto = None
        try:
            self.selector.unregister(sock)
            self.open -= 1
        except KeyError:
            pass  # never registered: connect() failed at once
        sock.close()
        conn.sock = None

    def on_ready(self, conn: Connection, mask: int) -> None:
        """Send the request once connected; read what arrived; finish a complete flow."""
        assert conn.sock is not None
        sock = conn.sock
        if mask & selectors.EVENT_WRITE:
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self.finish(conn, error=f"{conn.server}: connect failed: errno {error}")
                return
            sock.send(REQUEST.pack(conn.conn_id, conn.size))
            self.selector.modify(sock, selectors.EVENT_READ, conn)
            return
        try:
            got = sock.recv_into(self.buffer, RECEIVE_BUFFER)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.finish(conn, error=f"{conn.server}: {exc}")
            return
        if got == 0:
            self.finish(conn, error=f"{conn.server}: closed after {conn.received} of {conn.size} bytes")
            return
        conn.received += got
        if self.window_clamp is not None:
            clamp_receive_window(sock, self.window_clamp)
        if conn.size != STREAM and conn.received >= conn.size:
            self.finish(conn)

    def run(self, starts: list[tuple[float, int, str, str, int]], measured: tuple[float, float],
            deadline: float) -> None:
        """Start every (time, order, key, server, size) at its time; serve sockets until deadline.
        measured: the window whose bytes a stream reports."""
        heapq.heapify(starts)
        marks = [measured[0], measured[1]]
        while time.monotonic() < deadline:
            now = time.monotonic()
            while starts and starts[0][0] <= now:
                when, _, key, server, size = heapq.heappop(starts)
                self.connect(key, server, size, when)
            while marks and marks[0] <= now:
                self.mark_streams(first=len(marks) == 2)
                marks.pop(0)
            if not starts and not self.open and not marks:
                break
            wake = min([deadline] + ([starts[0][0]] if starts else []) + marks[:1])
            for ready, mask in self.selector.select(max(0.0, wake - time.monotonic())):
                self.on_ready(ready.data, mask)
        for conn in self.connections:
            if conn.sock is not None:
                self.finish(conn, error=None if conn.size == STREAM else "unfinished at the deadline")

    def mark_streams(self, first: bool) -> None:
        """Note every stream's bytes at the measured window's start (first), or at its end,
        and close them then."""
        for conn in self.connections:
            if conn.size == STREAM and conn.sock is not None:
                if first:
                    conn.measured_from = conn.received
                else:
                    conn.measured_to = conn.received
                    self.finish(conn)


def starts_of(plan: dict[str, Any], start_at: float) -> list[tuple[float, int, str, str, int]]:
    """Every connection of plan as (absolute time, order, key, server, size)."""
    starts: list[tuple[float, int, str, str, int]] = []
    for flow in plan.get("flows", []):
        starts.append((start_at + flow["start_s"], len(starts), flow["key"], flow["server"], flow["bytes"]))
    for query in plan.get("queries", []):
        for index, server in enumerate(query["servers"]):
            starts.append((start_at + query["start_s"], len(starts), f"{query['key']}/{index}", server,
                           query["bytes"]))
    for flow in plan.get("background", []):
        starts.append((start_at - BACKGROUND_LEAD_S, len(starts), flow["key"], flow["server"], STREAM))
    return starts


def main(argv: list[str] | None = None) -> int:
    """Run the plan; print every connection's record."""
    parser = argparse.ArgumentParser(prog="flow_client", description=__doc__.split("\n")[0])
    parser.add_argument("--plan", required=True, help="the plan, a JSON file")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--start-at", type=float, required=True, help="CLOCK_MONOTONIC seconds")
    parser.add_argument("--drain-s", type=float, default=10.0)
    parser.add_argument("--cc", default="cubic")
    parser.add_argument("--window-clamp", type=int, help="hold every receive window to this many bytes")
    parser.add_argument("--id-base", type=int, default=0, help="connection ids count up from here")
    args = parser.parse_args(argv)
    if args.window_clamp is not None and args.window_clamp < 1:
        parser.error(f"--window-clamp: {args.window_clamp} is not a window")
    with open(args.plan, encoding="utf-8") as handle:
        plan = json.load(handle)
    client = Client(args.port, args.cc, args.window_clamp, args.id_base)
    end = args.start_at + plan["duration_s"]
    try:
        client.run(starts_of(plan, args.start_at), (args.start_at, end), end + args.drain_s)
    except OSError as exc:
        print(f"flow_client: {exc}", file=sys.stderr)
        return 1
    for conn in client.connections:
        print(json.dumps(conn.record()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

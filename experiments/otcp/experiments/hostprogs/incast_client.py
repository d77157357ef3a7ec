"""The client of the synchronized-read workload; runs inside the receiver host.

Each round the client asks every server for its block at the same moment
(an 8-byte request, see incast_server), reads every block to the end, and
only then starts the next round: the barrier of a striped read, where the
slowest server sets the pace. By default every request opens a new
connection (route initcwnd/cwnd only apply when a connection is set up);
--persistent keeps one connection per server for the whole run. --admit K
asks at most K servers at once, in --servers order, the next as soon as one
of them has sent its whole block: a receiver admitting its senders in turns
(otcp-lossless's fan-in admission, formulas.admitted_flows).

    python -m otcp.experiments.hostprogs.incast_client --servers 10.0.0.2,10.0.0.3 --port 5001 \\
        --block-bytes 262144 (--rounds 50 | --seconds 3) [--persistent] [--cc cubic] [--round-timeout 60] \\
        [--window-clamp BYTES] [--admit K]

--window-clamp holds every connection's receive window to BYTES (the static
receive-window clamp: common.hold_receive_window, set again after every read).

--seconds runs rounds until that much time has passed (at least one round):
the warm-up before a measured run.

Output, one JSON object per line on stdout:
    {"round": 0, "start_s": ..., "duration_s": ..., "bytes": ..., "flows_s": [...]}
with times in seconds on the monotonic clock and flows_s the completion time
of each server's block in --servers order. A failed round (connection
refused or reset, round timeout) ends the program with status 1 and a
message on stderr naming the server.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import json
import os
import selectors
import socket
import sys
import time

from otcp.experiments.hostprogs.common import clamp_receive_window, hold_receive_window, set_congestion_control
from otcp.experiments.hostprogs.incast_server import REQUEST

RECEIVE_BUFFER = 1 << 20


class RoundError(RuntimeError):
    """A round could not complete; the message names the server."""


class Flow:
    """One server's block in the current round."""

    def __init__(self, index: int, address: str, sock: socket.socket) -> None:
        self.index = index
        self.address = address
        self.sock = sock
        self.received = 0
        self.duration: float | None = None


def client_socket(cc: str, window: int | None) -> socket.socket:
    """An unconnected TCP socket with congestion control cc (its receive window held to window
    bytes, if given)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    set_congestion_control(sock, cc)
    if window is not None:
        hold_receive_window(sock, window)
    return sock


def open_connection(address: str, port: int, cc: str, window: int | None = None) -> socket.socket:
    """A non-blocking socket with connect() under way to address:port (its receive window held to
    window bytes, if given)."""
    sock = client_socket(cc, window)
    sock.setblocking(False)
    sock.connect_ex((address, port))
    return sock


class SynchronizedRead:
    """One round: every server asked for its block at once, each read to the end.

    persistent: connected sockets (one per server) to reuse, or None to open a new
    connection per request (the request goes out once it is connected); window: the receive
    window every connection is held to (None: the kernel's); admit: how many servers are
    asked at once (None: all), the rest each as one before it completes."""

    def __init__(self, port: int, block_bytes: int, persistent: list[socket.socket] | None,
                 window: int | None = None, admit: int | None = None) -> None:
        self.port = port
        self.window = window
        self.admit = admit
        self.waiting: list[tuple[int, str]] = []
        self.cc = "cubic"
        self.block_bytes = block_bytes
        self.persistent = persistent
        self.selector = selectors.DefaultSelector()
        self.buffer = memoryview(bytearray(RECEIVE_BUFFER))
        self.request = REQUEST.pack(block_bytes)
        self.start = time.monotonic()
        self.flows: list[Flow] = []

    def open(self, servers: list[str], cc: str) -> None:
        """Ask every server, or the first admit of them (a new connection each, or the
        persistent ones): one Flow each; the others wait their turn."""
        self.cc = cc
        asked = len(servers) if self.admit is None else self.admit
        self.waiting = list(enumerate(servers))[asked:]
        for index, address in enumerate(servers[:asked]):
            self.ask(index, address)

    def ask(self, index: int, address: str) -> None:
        """Ask server index at address for its block: its Flow."""
        if self.persistent is None:
            flow = Flow(index, address, open_connection(address, self.port, self.cc, self.window))
            self.selector.register(flow.sock, selectors.EVENT_WRITE, flow)
        else:
            flow = Flow(index, address, self.persistent[index])
            flow.sock.send(self.request)
            self.selector.register(flow.sock, selectors.EVENT_READ, flow)
        self.flows.append(flow)

    def on_ready(self, flow: Flow, mask: int) -> bool:
        """Act on one ready socket: send the request once connected, or read; True when
        the flow's block is complete."""
        if mask & selectors.EVENT_WRITE:
            error = flow.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                raise RoundError(f"{flow.address}:{self.port}: connect failed: {errno_name(error)}")
            flow.sock.send(self.request)
            self.selector.modify(flow.sock, selectors.EVENT_READ, flow)
            return False
        want = min(RECEIVE_BUFFER, self.block_bytes - flow.received)
        try:
            got = flow.sock.recv_into(self.buffer, want)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            raise RoundError(f"{flow.address}:{self.port}: {exc}") from None
        if got == 0:
            raise RoundError(f"{flow.address}:{self.port}: closed after {flow.received} of {self.block_bytes} bytes")
        flow.received += got
        if self.window is not None:
            clamp_receive_window(flow.sock, self.window)
        if flow.received < self.block_bytes:
            return False
        flow.duration = time.monotonic() - self.start
        self.selector.unregister(flow.sock)
        if self.persistent is None:
            flow.sock.close()
        if self.waiting:
            self.ask(*self.waiting.pop(0))
        return True


def run_round(servers: list[str], port: int, block_bytes: int, cc: str, timeout: float,
              persistent: list[socket.socket] | None = None,
              window: int | None = None, admit: int | None = None) -> tuple[float, float, list[float]]:
    """One synchronized read; return (start, duration, flow durations in servers order).

    persistent: list of connected sockets (one per server) to reuse, or None
    to open a new connection per request; window: every connection's held receive window;
    admit: how many servers are asked at once (None: all).
    """
    read = SynchronizedRead(port, block_bytes, persistent, window, admit)
    flows = read.flows
    try:
        read.open(servers, cc)
        pending = len(servers)
        deadline = read.start + timeout
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                late = [f.address for f in flows if f.duration is None] + [a for _, a in read.waiting]
                raise RoundError(f"round timed out after {timeout} s waiting for {', '.join(late)}")
            for key, mask in read.selector.select(remaining):
                pending -= read.on_ready(key.data, mask)
    finally:
        if persistent is None:
            for flow in flows:
                if flow.duration is None:
                    flow.sock.close()
        read.selector.close()
    durations = [f.duration for f in flows if f.duration is not None]
    return read.start, max(durations), durations


def errno_name(number: int) -> str:
    """The symbolic name of an errno value (the number itself if unknown)."""
    return f"{errno.errorcode.get(number, number)} ({os.strerror(number)})"


def connect_persistent(servers: list[str], port: int, cc: str, timeout: float,
                       window: int | None = None) -> list[socket.socket]:
    """One connected, non-blocking socket per server (each receive window held to window bytes, if given)."""
    sockets = []
    for address in servers:
        sock = client_socket(cc, window)
        sock.settimeout(timeout)
        sock.connect((address, port))
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The client's arguments, checked (parser.error exits 2 naming the option)."""
    parser = argparse.ArgumentParser(prog="incast_client", description=__doc__.split("\n")[0])
    parser.add_argument("--servers", required=True, help="comma-separated server addresses")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--block-bytes", type=int, required=True, help="bytes each server sends per round")
    count = parser.add_mutually_exclusive_group(required=True)
    count.add_argument("--rounds", type=int, help="run this many rounds")
    count.add_argument("--seconds", type=float, help="run rounds until this many seconds have passed")
    parser.add_argument("--persistent", action="store_true", help="one connection per server for the whole run")
    parser.add_argument("--cc", default="cubic")
    parser.add_argument("--round-timeout", type=float, default=60.0)
    parser.add_argument("--window-clamp", type=int, help="hold every connection's receive window to this many bytes")
    parser.add_argument("--admit", type=int, metavar="K", help="ask at most K servers at once, the next as one ends")
    args = parser.parse_args(argv)
    try:
        args.servers = [str(ipaddress.IPv4Address(s)) for s in args.servers.split(",")]
    except ValueError as exc:
        parser.error(f"--servers: {exc}")
    for name, value, low in (("--port", args.port, 1), ("--block-bytes", args.block_bytes, 1),
                             ("--rounds", args.rounds, 1), ("--seconds", args.seconds, 0.0),
                             ("--round-timeout", args.round_timeout, 0.001), ("--window-clamp", args.window_clamp, 1),
                             ("--admit", args.admit, 1)):
        if value is not None and value < low:
            parser.error(f"{name}: must be at least {low}, got {value}")
    if args.port > 65535:
        parser.error(f"--port: {args.port} is not a TCP port")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print one JSON record per round."""
    args = parse_args(argv)
    try:
        persistent = connect_persistent(args.servers, args.port, args.cc, args.round_timeout, args.window_clamp) \
            if args.persistent else None
        began = time.monotonic()
        number = 0
        while (number < args.rounds) if args.rounds is not None else (
                number == 0 or time.monotonic() - began < args.seconds):
            start, duration, flows = run_round(args.servers, args.port, args.block_bytes, args.cc,
                                               args.round_timeout, persistent, args.window_clamp, args.admit)
            number += 1
            print(json.dumps({"round": number - 1, "start_s": start, "duration_s": duration,
                              "bytes": args.block_bytes * len(args.servers), "flows_s": flows}), flush=True)
    except (RoundError, OSError) as exc:
        print(f"incast_client: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

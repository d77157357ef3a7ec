"""UDP bursts with sequence numbers, for calibrating the emulated switch.

    python -m otcp.experiments.hostprogs.burst receive --port 5400 --burst-id 7 [--idle 1.0] [--timeout 60]
    python -m otcp.experiments.hostprogs.burst send --to 10.0.0.1 --port 5400 --burst-id 7 --packet-bytes 1500 \\
        --seconds 0.5

The sender sends datagrams for --seconds, IP packets --packet-bytes long,
each carrying the burst id and its sequence number, as fast as its socket
lets it: a blocking socket with the default send buffer, so it waits for its
own link's queue (and that queue, 1000 packets, never overflows: the send
buffer holds fewer). It prints {"sent": N, "errors": E}.

The receiver prints "ready" once bound, counts the distinct sequence numbers
of its burst (other datagrams, duplicates and other bursts' are counted
apart), and ends after --idle seconds without a packet once the burst has
begun (or --timeout seconds in all), printing {"received": N, "duplicates":
D, "foreign": F}. Only the burst's own datagrams are counted: ARP, LLDP and
anything else never reach a UDP socket.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from collections.abc import Callable

HEADER = struct.Struct("!IQ")
# IPv4 and UDP headers.
OVERHEAD = 28
RECEIVE_BUFFER = 32 << 20


def payload_size(packet_bytes: int) -> int:
    """UDP payload that makes an IP packet of packet_bytes."""
    size = packet_bytes - OVERHEAD
    if size < HEADER.size:
        raise ValueError(f"packet_bytes must be at least {OVERHEAD + HEADER.size}, got {packet_bytes}")
    return size


def send(to: str, port: int, burst_id: int, packet_bytes: int, seconds: float) -> dict[str, int]:
    """Send datagrams for seconds (at least one); return {"sent", "errors"}."""
    padding = b"\0" * (payload_size(packet_bytes) - HEADER.size)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = errors = seq = 0
    end = time.monotonic() + seconds
    with sock:
        sock.connect((to, port))
        while seq == 0 or time.monotonic() < end:
            for _ in range(16):
                try:
                    sock.send(HEADER.pack(burst_id, seq) + padding)
                    sent += 1
                except OSError:
                    errors += 1
                seq += 1
    return {"sent": sent, "errors": errors}


def receive(port: int, burst_id: int, idle: float, timeout: float,
            announce: Callable[[], None]) -> dict[str, int]:
    """Count the distinct datagrams of burst_id on port; announce() once bound."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # SO_RCVBUFFORCE (root) so the socket is never where a packet is lost.
    sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), RECEIVE_BUFFER)
    sock.bind(("0.0.0.0", port))
    seen: set[int] = set()
    duplicates = foreign = 0
    deadline = time.monotonic() + timeout
    announce()
    with sock:
        while True:
            now = time.monotonic()
            wait = min(deadline - now, idle) if seen else deadline - now
            if wait <= 0:
                break
            sock.settimeout(wait)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                if seen:
                    break
                continue
            if len(data) < HEADER.size:
                foreign += 1
                continue
            got_id, seq = HEADER.unpack_from(data)
            if got_id != burst_id:
                foreign += 1
            elif seq in seen:
                duplicates += 1
            else:
                seen.add(seq)
    return {"received": len(seen), "duplicates": duplicates, "foreign": foreign}


def main(argv: list[str] | None = None) -> int:
    """Send or receive one burst; print the result as JSON."""
    parser = argparse.ArgumentParser(prog="burst", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    tx = commands.add_parser("send")
    tx.add_argument("--to", required=True)
    tx.add_argument("--port", type=int, required=True)
    tx.add_argument("--burst-id", type=int, required=True)
    tx.add_argument("--packet-bytes", type=int, required=True)
    tx.add_argument("--seconds", type=float, required=True)
    rx = commands.add_parser("receive")
    rx.add_argument("--port", type=int, required=True)
    rx.add_argument("--burst-id", type=int, required=True)
    rx.add_argument("--idle", type=float, default=1.0)
    rx.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error(f"--port: {args.port} is not a UDP port")
    if args.command == "send":
        try:
            payload_size(args.packet_bytes)
        except ValueError as exc:
            parser.error(f"--packet-bytes: {exc}")
        if args.packet_bytes > 65535:
            parser.error(f"--packet-bytes: {args.packet_bytes} is over 65535")
        if not 0 < args.seconds <= 600:
            parser.error(f"--seconds: {args.seconds} is out of range (0..600]")
        result = send(args.to, args.port, args.burst_id, args.packet_bytes, args.seconds)
    else:
        result = receive(args.port, args.burst_id, args.idle, args.timeout, lambda: print("ready", flush=True))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The fairness experiment's traffic: long flows into one sink that counts every flow's bytes.

    python -m otcp.experiments.hostprogs.fairness_flows sink --port 5002 [--cc cubic] [--interval 0.1]
    python -m otcp.experiments.hostprogs.fairness_flows source --to 10.0.0.1 --port 5002 --start-at T --stop-at T \\
        [--cc cubic]

The sink prints "ready", then every interval one JSON line {"t": CLOCK_MONOTONIC
seconds, "bytes": {peer address: bytes received so far}} until its standard
input closes. A source sleeps until --start-at (CLOCK_MONOTONIC, which every
namespace of the machine shares), connects, sends until --stop-at and closes;
it prints {"connected": t, "sent": bytes}. Every socket uses --cc, set per
socket, as the incast workload does.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

from otcp.experiments.hostprogs.common import set_congestion_control, stop_when_stdin_closes

CHUNK_BYTES = 65536


def sink(port: int, cc: str, interval: float) -> int:
    """Accept flows and report their byte counts until standard input closes."""
    listener = socket.create_server(("0.0.0.0", port), backlog=256)
    set_congestion_control(listener, cc)
    received: dict[str, int] = {}
    lock = threading.Lock()

    def drain(conn: socket.socket, peer: str) -> None:
        buffer = bytearray(CHUNK_BYTES)
        with conn:
            while True:
                count = conn.recv_into(buffer)
                if not count:
                    return
                with lock:
                    received[peer] += count

    def accept() -> None:
        while True:
            conn, (peer, _) = listener.accept()
            with lock:
                received.setdefault(peer, 0)
            threading.Thread(target=drain, args=(conn, peer), daemon=True).start()

    stop = stop_when_stdin_closes()
    threading.Thread(target=accept, daemon=True).start()
    print("ready", flush=True)
    next_report = time.monotonic()
    while not stop.is_set():
        next_report += interval
        stop.wait(max(0.0, next_report - time.monotonic()))
        with lock:
            snapshot = dict(received)
        print(json.dumps({"t": round(time.monotonic(), 4), "bytes": snapshot}), flush=True)
    return 0


def source(address: str, port: int, cc: str, start_at: float, stop_at: float) -> int:
    """One long flow from start_at to stop_at."""
    time.sleep(max(0.0, start_at - time.monotonic()))
    sock = socket.socket()
    set_congestion_control(sock, cc)
    sock.connect((address, port))
    connected = time.monotonic()
    payload = bytes(CHUNK_BYTES)
    sent = 0
    with sock:
        while time.monotonic() < stop_at:
            sent += sock.send(payload)
    print(json.dumps({"connected": round(connected, 4), "sent": sent}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """sink or source (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="fairness_flows", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    sink_parser = commands.add_parser("sink")
    sink_parser.add_argument("--port", type=int, required=True)
    sink_parser.add_argument("--cc", default="cubic")
    sink_parser.add_argument("--interval", type=float, default=0.1)
    source_parser = commands.add_parser("source")
    source_parser.add_argument("--to", required=True)
    source_parser.add_argument("--port", type=int, required=True)
    source_parser.add_argument("--cc", default="cubic")
    source_parser.add_argument("--start-at", type=float, required=True)
    source_parser.add_argument("--stop-at", type=float, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "sink":
            return sink(args.port, args.cc, args.interval)
        return source(args.to, args.port, args.cc, args.start_at, args.stop_at)
    except OSError as exc:
        print(f"fairness_flows {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""What the host programs share: the congestion control set on each socket, the static receive
window a receiving socket is held to, a server's listening loop, and how the runner tells a program
that reports at its end to stop (it closes the program's standard input)."""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from collections.abc import Callable

#: The smallest receive buffer a held window gets: room for the reads of a few segments.
RECEIVE_BUFFER_FLOOR = 1 << 16


def set_congestion_control(sock: socket.socket, name: str) -> None:
    """Set name as sock's congestion control; raise if the kernel refused it."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    actual = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
    if actual != name:
        raise OSError(f"congestion control is {actual}, not {name}")


def hold_receive_window(sock: socket.socket, window_bytes: int) -> None:
    """Before connect(): hold sock's receive window to window_bytes. SO_RCVBUF fixed (a few
    windows' worth) stops the kernel's receive-buffer autotuning, which would otherwise raise
    the clamp; the clamp itself must then be set again after reads (clamp_receive_window): the
    kernel resets it once when it learns the segments' buffer overhead (its scaling ratio), at the
    first full-sized segment, so the queue may exceed the window by a few segments until the
    next read."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, max(RECEIVE_BUFFER_FLOOR, 4 * window_bytes))
    clamp_receive_window(sock, window_bytes)


def clamp_receive_window(sock: socket.socket, window_bytes: int) -> None:
    """Set sock's window clamp to window_bytes (TCP_WINDOW_CLAMP)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, window_bytes)


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


def listen_and_serve(prog: str, doc: str, backlog: int, serve: Callable[[socket.socket, str], None],
                     argv: list[str] | None = None) -> int:
    """A server program's main: take --port, --bind and --cc from argv, listen (print "listening
    <port>" once ready) and run serve(connection, cc) for every accepted connection in a thread of
    its own, until killed. doc is the program's module docstring (its first line describes it);
    returns 2 when the kernel refuses the congestion control."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--cc", default="cubic", help="congestion control for every socket")
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error(f"--port: {args.port} is not a TCP port")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        set_congestion_control(listener, args.cc)
    except OSError as exc:
        print(f"{prog}: cannot use congestion control {args.cc!r}: {exc}", file=sys.stderr)
        return 2
    listener.bind((args.bind, args.port))
    listener.listen(backlog)
    print(f"listening {args.port}", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, args.cc), daemon=True).start()


def stop_when_stdin_closes() -> threading.Event:
    """An Event set once standard input reaches its end (read by a daemon thread)."""
    stop = threading.Event()

    def wait() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait, daemon=True).start()
    return stop

"""What the host programs share: the congestion control set on each socket, the static receive
window a receiving socket is held to, and how the runner tells a program that reports at its end to
stop (it closes the program's standard input)."""

from __future__ import annotations

import socket
import sys
import threading

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


def stop_when_stdin_closes() -> threading.Event:
    """An Event set once standard input reaches its end (read by a daemon thread)."""
    stop = threading.Event()

    def wait() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait, daemon=True).start()
    return stop

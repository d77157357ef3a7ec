"""What the host programs share: the congestion control set on each socket, and how the
runner tells a program that reports at its end to stop (it closes the program's standard input)."""

from __future__ import annotations

import socket
import sys
import threading


def set_congestion_control(sock: socket.socket, name: str) -> None:
    """Set name as sock's congestion control; raise if the kernel refused it."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    actual = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
    if actual != name:
        raise OSError(f"congestion control is {actual}, not {name}")


def stop_when_stdin_closes() -> threading.Event:
    """An Event set once standard input reaches its end (read by a daemon thread)."""
    stop = threading.Event()

    def wait() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait, daemon=True).start()
    return stop

"""Register and unregister the project's BPF congestion controls (struct_ops), by name.

Registration is machine-wide: once registered, any socket in any namespace
can choose the algorithm with ``setsockopt(IPPROTO_TCP, TCP_CONGESTION,
NAME)`` (root may choose one that ``net.ipv4.tcp_allowed_congestion_control``
does not list). It is never made a default and never substituted: a caller
that cannot register it gets :class:`BpfUnavailable` with the kernel's words.
OTCP processes take turns on a name through a lock under /run
(:func:`take_lock`); ``otcp.bpf.dctcp`` and ``otcp.bpf.scalable`` build on
this module.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path
from types import TracebackType
from typing import Self, TextIO

from otcp.bpf.build import build, object_path
from otcp.bpf.errors import BpfUnavailable, run
from otcp.bpf.objects import close_at_exit, closed

AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
LOCK_DIR = Path("/run/otcp-bpf")


def available_congestion_controls() -> list[str]:
    """The congestion controls the kernel has registered now."""
    return AVAILABLE.read_text().split()


def lock_path(name: str) -> Path:
    """The lock file of an algorithm's name."""
    return LOCK_DIR / f"{name}.lock"


def take_lock(name: str, wait_s: float) -> TextIO:
    """The machine-wide lock on ``name``: one OTCP process registers it at a
    time. Another holder is waited for up to ``wait_s`` seconds, then
    :class:`BpfUnavailable` names it. Closing the file releases the lock."""
    path = lock_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(path, "a+")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                lock.seek(0)
                holder = lock.read().strip() or "unknown"
                lock.close()
                raise BpfUnavailable(f"{name} is in use by another OTCP process (pid {holder}, lock {path})") from None
            time.sleep(0.5)
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


class RegisteredStructOps:
    """A congestion control's struct_ops map this process registered (by its id).

    ``close()`` unregisters exactly that map and releases the lock that keeps
    other OTCP processes from registering the name meanwhile; it also runs at
    exit. Sockets still using the algorithm keep it alive until they close.
    """

    def __init__(self, name: str, map_id: int, lock: TextIO) -> None:
        self.name = name
        self.map_id = map_id
        self.lock: TextIO | None = lock
        close_at_exit(self)

    def registered(self) -> bool:
        """Whether our struct_ops map is still registered."""
        shown = run(["bpftool", "-j", "struct_ops", "show"], "listing struct_ops").stdout
        return any(entry.get("id") == self.map_id for entry in json.loads(shown or "[]"))

    def map_ids(self) -> dict[str, int]:
        """The maps the algorithm's programs use, by name -> map id."""
        dumped = run(["bpftool", "-j", "struct_ops", "dump", "id", str(self.map_id)], f"reading {self.name}").stdout
        programs = sorted(set(re.findall(r"/prog_id:(\d+)", dumped)))
        if not programs:
            raise BpfUnavailable(f"{self.name} (struct_ops id {self.map_id}) has no programs", dumped)
        found: dict[str, int] = {}
        for prog_id in programs:
            prog = json.loads(run(["bpftool", "-j", "prog", "show", "id", prog_id], "reading a program").stdout)
            for map_id in prog.get("map_ids", []):
                if map_id not in found.values():
                    shown = json.loads(run(["bpftool", "-j", "map", "show", "id", str(map_id)], "reading a map").stdout)
                    found[shown["name"]] = int(map_id)
        return found

    def close(self) -> None:
        """Unregister (idempotent)."""
        try:
            if self.registered():
                run(["bpftool", "struct_ops", "unregister", "id", str(self.map_id)], f"unregistering {self.name}")
        finally:
            if self.lock is not None:
                self.lock.close()  # releases the flock
                self.lock = None
            closed(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def register(name: str, wait_s: float) -> tuple[int, TextIO]:
    """Build if needed and register the algorithm of ``otcp/bpf/src/NAME.bpf.c``
    (its struct_ops map is named NAME); return its struct_ops id and the held
    lock on the name. The caller wraps both in a :class:`RegisteredStructOps`.

    Raises :class:`BpfUnavailable` when the toolchain, the kernel's BTF, the
    verifier or the kernel refuses, when another OTCP process holds the name
    longer than ``wait_s`` seconds, or when something outside OTCP registered
    the name (``bpftool struct_ops show``).
    """
    lock = take_lock(name, wait_s)
    try:
        if name in available_congestion_controls():
            raise BpfUnavailable(f"{name} is already registered by someone else (see bpftool struct_ops show; "
                                 "python -m otcp.bpf cleanup unregisters what a killed OTCP process left)")
        build()
        result = run(["bpftool", "struct_ops", "register", str(object_path(name))], f"registering {name}")
        found = re.search(rf"{name} id (\d+)", result.stdout + result.stderr)
        if not found:
            raise BpfUnavailable(f"bpftool registered {name} but did not say its id", result.stdout + result.stderr)
    except BaseException:
        lock.close()
        raise
    return int(found.group(1)), lock


def unregister_all(name: str) -> list[int]:
    """Unregister every struct_ops map registered as ``name``; return their
    ids. Call with the name's lock held (:func:`take_lock`)."""
    shown = json.loads(run(["bpftool", "-j", "struct_ops", "show"], "listing struct_ops").stdout or "[]")
    ids = [int(entry["id"]) for entry in shown if entry.get("name") == name]
    for map_id in ids:
        run(["bpftool", "struct_ops", "unregister", "id", str(map_id)], f"unregistering {name}")
    return ids


def unregister_leftover(name: str) -> list[int]:
    """Unregister a ``name`` that no OTCP process holds (one killed before
    its clean-up left it registered); return the struct_ops ids. Does
    nothing while another OTCP process holds the name."""
    try:
        lock = take_lock(name, 0.0)
    except BpfUnavailable:
        return []
    try:
        return unregister_all(name)
    finally:
        lock.close()

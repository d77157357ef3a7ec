"""Register the ``otcp_dctcp`` congestion control, and the sysctls ECN needs.

Registration is machine-wide: once registered, any socket in any namespace
can choose it with ``setsockopt(IPPROTO_TCP, TCP_CONGESTION, b"otcp_dctcp")``
(root may choose a congestion control that
``net.ipv4.tcp_allowed_congestion_control`` does not list). It is never made
a default and never substituted: a caller that cannot register it gets
:class:`BpfUnavailable` with the kernel's words.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path
from types import TracebackType
from typing import TextIO

from otcp.bpf.build import build, object_path
from otcp.bpf.errors import BpfUnavailable, run
from otcp.bpf.objects import close_at_exit, closed, netns_prefix

CC_NAME = "otcp_dctcp"
STATS_MAP = "otcp_dctcp_st"
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
LOCK_PATH = Path("/run/otcp-bpf/otcp_dctcp.lock")


def available_congestion_controls() -> list[str]:
    """The congestion controls the kernel has registered now."""
    return AVAILABLE.read_text().split()


class RegisteredCC:
    """The ``otcp_dctcp`` struct_ops map this process registered (by its id).

    ``close()`` unregisters exactly that map and releases the lock that keeps
    other OTCP processes from registering meanwhile; it also runs at exit.
    Sockets still using the algorithm keep it alive until they close.
    """

    def __init__(self, map_id: int, lock: TextIO) -> None:
        self.map_id = map_id
        self.name = CC_NAME
        self.lock: TextIO | None = lock
        close_at_exit(self)

    def registered(self) -> bool:
        """Whether our struct_ops map is still registered."""
        shown = run(["bpftool", "-j", "struct_ops", "show"], "listing struct_ops").stdout
        return any(entry.get("id") == self.map_id for entry in json.loads(shown or "[]"))

    def stats(self) -> dict[str, int]:
        """The algorithm's counters (``struct otcp_dctcp_stats``), summed over
        its connections since registration: window cuts for ECN and for loss,
        and the repairs it made for hooks the kernel skipped (docs/dctcp.md)."""
        dumped = run(["bpftool", "-j", "struct_ops", "dump", "id", str(self.map_id)], "reading otcp_dctcp").stdout
        found = re.search(r"otcp_dctcp_cong_control/prog_id:(\d+)", dumped)
        if not found:
            raise BpfUnavailable(f"{CC_NAME} (struct_ops id {self.map_id}) has no cong_control program", dumped)
        prog = json.loads(run(["bpftool", "-j", "prog", "show", "id", found.group(1)], "reading a program").stdout)
        for map_id in prog.get("map_ids", []):
            shown = json.loads(run(["bpftool", "-j", "map", "show", "id", str(map_id)], "reading a map").stdout)
            if shown.get("name") == STATS_MAP:
                entries = json.loads(run(["bpftool", "-j", "map", "dump", "id", str(map_id)], "reading a map").stdout)
                return {key: int(value) for key, value in entries[0]["formatted"]["value"].items()}
        raise BpfUnavailable(f"{CC_NAME}: no {STATS_MAP} map among its program's maps", json.dumps(prog))

    def close(self) -> None:
        """Unregister (idempotent)."""
        try:
            if self.registered():
                run(["bpftool", "struct_ops", "unregister", "id", str(self.map_id)], f"unregistering {CC_NAME}")
        finally:
            if self.lock is not None:
                self.lock.close()  # releases the flock
                self.lock = None
            closed(self)

    def __enter__(self) -> RegisteredCC:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def _take_lock(wait_s: float) -> TextIO:
    """The machine-wide lock on the name: one OTCP process registers at a time."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    lock = open(LOCK_PATH, "a+")
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
                raise BpfUnavailable(
                    f"{CC_NAME} is in use by another OTCP process (pid {holder}, lock {LOCK_PATH})") from None
            time.sleep(0.5)
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def register_dctcp(wait_s: float = 0.0) -> RegisteredCC:
    """Build if needed and register ``otcp_dctcp``; return the handle to unregister it.

    The name is machine-wide, so OTCP processes take turns (a lock under
    /run): another one holding it is waited for up to ``wait_s`` seconds.
    Raises :class:`BpfUnavailable` when the toolchain, the kernel's BTF, the
    verifier or the kernel refuses, when the wait runs out, or when something
    outside OTCP registered the name (``bpftool struct_ops show``).
    """
    lock = _take_lock(wait_s)
    try:
        if CC_NAME in available_congestion_controls():
            raise BpfUnavailable(f"{CC_NAME} is already registered by someone else (see bpftool struct_ops show)")
        build()
        result = run(["bpftool", "struct_ops", "register", str(object_path(CC_NAME))], f"registering {CC_NAME}")
        found = re.search(rf"{CC_NAME} id (\d+)", result.stdout + result.stderr)
        if not found:
            raise BpfUnavailable(f"bpftool registered {CC_NAME} but did not say its id",
                                 result.stdout + result.stderr)
    except BaseException:
        lock.close()
        raise
    return RegisteredCC(int(found.group(1)), lock)


def unregister_leftover() -> list[int]:
    """Unregister an ``otcp_dctcp`` that no OTCP process holds (one killed
    before its clean-up left it registered); return the struct_ops ids.
    Does nothing while another OTCP process holds the name."""
    try:
        lock = _take_lock(0.0)
    except BpfUnavailable:
        return []
    try:
        shown = json.loads(run(["bpftool", "-j", "struct_ops", "show"], "listing struct_ops").stdout or "[]")
        ids = [int(entry["id"]) for entry in shown if entry.get("name") == CC_NAME]
        for map_id in ids:
            run(["bpftool", "struct_ops", "unregister", "id", str(map_id)], f"unregistering {CC_NAME}")
        return ids
    finally:
        lock.close()


def ecn_sysctls() -> dict[str, str]:
    """What a namespace needs for DCTCP: ECN requested and accepted by TCP."""
    return {"net.ipv4.tcp_ecn": "1"}


def ecn_sysctl_commands(netns: str | None = None) -> list[list[str]]:
    """The commands that set :func:`ecn_sysctls` in ``netns`` (see
    :func:`otcp.bpf.objects.netns_prefix`), as argument lists to run as they are."""
    return [[*netns_prefix(netns), "sysctl", "-q", "-w", f"{key}={value}"] for key, value in ecn_sysctls().items()]

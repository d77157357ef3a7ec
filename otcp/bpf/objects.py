"""Load BPF objects with bpftool, pinned under ``/sys/fs/bpf/otcp/``, and
reach their maps through libbpf.

Why these tools: bpftool (Debian's, with libbpf 1.1) loads, verifies, pins,
test-runs and registers struct_ops, and prints libbpf's and the verifier's
own messages when the kernel refuses; iproute2's ``tc`` attaches a pinned
program to a clsact hook; and libbpf's low-level map calls (``bpf_obj_get``,
``bpf_map_lookup_elem_flags``, ``bpf_map_update_elem``), reached with ctypes,
read and write a pinned map in microseconds, fast enough to sample a queue.
No loader of our own needs compiling or maintaining.

Namespaces: commands for another network namespace run under ``nsenter
--net=...``, which keeps this mount namespace and so ``/sys/fs/bpf``
(``ip netns exec`` and ``tc -n`` remount ``/sys`` and would hide the pins).
Pins live in the machine's BPF filesystem, mounted there if it is not and
reached from any mount namespace (`otcp.bpf.machine`).
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import errno
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from otcp.bpf.errors import BpfUnavailable, run
from otcp.bpf.machine import BPFFS, bpffs, outer

#: Where OTCP pins, in the machine's mount tree (:func:`pin_root`: as this process reaches it).
PIN_ROOT = BPFFS / "otcp"
BPF_F_LOCK = 4


def netns_prefix(netns: str | None) -> list[str]:
    """The command prefix that runs a tool in ``netns``.

    ``netns`` is None (this namespace), a name under ``/run/netns`` (``ip
    netns``), or the path of a namespace file such as ``/proc/PID/ns/net``
    (a Mininet host).
    """
    if netns is None:
        return []
    path = netns if netns.startswith("/") else f"/run/netns/{netns}"
    return ["nsenter", f"--net={path}"]


def pin_root() -> Path:
    """PIN_ROOT as this process reaches it (from a Mininet host: through the runner's root)."""
    return outer(PIN_ROOT)


def pin_dir(name: str) -> Path:
    """The directory an object named ``name`` is pinned in by this process:
    ``PIN_ROOT/NAME-pidPID``, so that runs never collide and what a killed
    run left behind can be found (:func:`unpin_stale`). bpffs refuses dots
    in names."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,180}", name):
        raise ValueError(f"bad pin name {name!r}")
    return pin_root() / f"{name}-pid{os.getpid()}"


def process_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one this process may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unpin_stale() -> list[Path]:
    """Unpin what processes that are gone (killed before their clean-up)
    pinned under PIN_ROOT; return those directories. A program a stale pin
    held stays attached where it was until its device goes."""
    root = pin_root()
    if not root.is_dir():
        return []
    removed = []
    for path in sorted(root.iterdir()):
        found = re.fullmatch(r".+-pid(\d+)", path.name)
        if path.is_dir() and found and not process_alive(int(found.group(1))):
            unpin(path)
            removed.append(path)
    return removed


def unpin(path: Path) -> None:
    """Remove a pin directory of ours and everything in it (the objects go
    when nothing else holds them). Paths outside :func:`pin_root` are refused."""
    root = pin_root()
    if root not in path.parents:
        raise ValueError(f"{path} is not under {root}")
    if not path.exists():
        return
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_dir():
            child.rmdir()
        else:
            child.unlink()
    path.rmdir()
    try:
        root.rmdir()  # only when empty: other pins of ours may live there
    except OSError:
        pass


@dataclass
class LoadedObject:
    """An object file loaded with every program and map pinned under ``path``."""

    path: Path
    programs: dict[str, Path] = field(default_factory=dict)
    maps: dict[str, Path] = field(default_factory=dict)

    def program_id(self, name: str) -> int:
        """The kernel's id of a loaded program (as ``tc`` and ``bpftool`` show it)."""
        shown = run(["bpftool", "-j", "prog", "show", "pinned", str(self.programs[name])], "reading a program id")
        return int(json.loads(shown.stdout)["id"])

    def unpin(self) -> None:
        """Unpin everything this object pinned."""
        unpin(self.path)


def load_pinned(obj: Path, name: str, prog_type: str) -> LoadedObject:
    """Load every program of ``obj`` as ``prog_type`` (bpftool's word:
    ``classifier``, ``sockops``, ...) and pin programs and maps under
    ``PIN_ROOT/name-pidPID``. Raises :class:`BpfUnavailable` with the verifier's
    words when the kernel refuses, and when this process pinned ``name``
    already. Pins of processes that are gone are removed first."""
    bpffs()
    unpin_stale()
    return load_pinned_at(obj, pin_dir(name), prog_type)


def load_pinned_at(obj: Path, path: Path, prog_type: str) -> LoadedObject:
    """Load every program of ``obj`` as ``prog_type`` and pin programs and
    maps under ``path`` (a directory under :func:`pin_root` that must not
    exist yet): what :func:`load_pinned` does, for a pin shared between
    processes (the sock_ops program every agent of a machine uses,
    `otcp.bpf.sockops`). Nothing stays pinned when the kernel refuses."""
    bpffs()
    root = pin_root()
    if root not in path.parents:
        raise ValueError(f"{path} is not under {root}")
    if path.exists():
        raise BpfUnavailable(f"{path} is already pinned (another run, or one that did not clean up)")
    try:
        path.mkdir(parents=True)
        run(["bpftool", "prog", "loadall", str(obj), str(path / "progs"), "type", prog_type,
             "pinmaps", str(path / "maps")], f"loading {obj.name}")
    except BaseException:
        unpin(path)
        raise
    loaded = LoadedObject(path)
    loaded.programs = {p.name: p for p in sorted((path / "progs").iterdir())}
    if (path / "maps").exists():
        loaded.maps = {p.name: p for p in sorted((path / "maps").iterdir())}
    return loaded


def _libbpf() -> ctypes.CDLL:
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    lib = ctypes.CDLL(name, use_errno=True)
    lib.bpf_obj_get.argtypes = [ctypes.c_char_p]
    lib.bpf_map_lookup_elem_flags.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    lib.bpf_map_update_elem.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    lib.bpf_map_delete_elem.argtypes = [ctypes.c_int, ctypes.c_void_p]
    lib.bpf_map_get_next_key.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.bpf_prog_query.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p]
    return lib


_LIB: ctypes.CDLL | None = None


def libbpf() -> ctypes.CDLL:
    """libbpf, loaded once per process."""
    global _LIB
    if _LIB is None:
        _LIB = _libbpf()
    return _LIB


def cgroup_program_ids(cgroup: Path, attach_type: int) -> list[int]:
    """Ids of the programs attached to ``cgroup`` at ``attach_type`` (enum
    bpf_attach_type), asked of the kernel with BPF_PROG_QUERY (CAP_NET_ADMIN).
    Unlike ``bpftool cgroup show``, it opens no program by id, which takes
    CAP_SYS_ADMIN: an agent that holds CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN
    alone can ask."""
    lib = libbpf()
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        size = 64
        while True:
            ids = (ctypes.c_uint32 * size)()
            count = ctypes.c_uint32(size)
            flags = ctypes.c_uint32(0)
            if lib.bpf_prog_query(fd, attach_type, 0, ctypes.byref(flags), ids, ctypes.byref(count)) == 0:
                return list(ids[:count.value])
            error = ctypes.get_errno()
            if error != errno.ENOSPC:
                raise BpfUnavailable(f"asking the kernel what is attached to {cgroup}", os.strerror(error))
            size *= 4
    finally:
        os.close(fd)


class PinnedMap:
    """A pinned map, read and written through libbpf. Keys are a u32 index
    (arrays) or the raw key bytes (hash maps, LPM tries: prefix length then
    address, as the map's key struct lays them out)."""

    def __init__(self, path: Path, value_size: int, key_size: int = 4) -> None:
        self.lib = libbpf()
        self.path = path
        self.value_size = value_size
        self.key_size = key_size
        fd = self.lib.bpf_obj_get(str(path).encode())
        if fd < 0:
            raise BpfUnavailable(f"opening the pinned map {path}", os.strerror(ctypes.get_errno()))
        self.fd = fd

    def _key(self, key: int | bytes) -> ctypes.Array[ctypes.c_char]:
        raw = key.to_bytes(4, "little") if isinstance(key, int) else key
        if len(raw) != self.key_size:
            raise ValueError(f"{self.path}: key of {len(raw)} bytes, the map's are {self.key_size}")
        return ctypes.create_string_buffer(raw, self.key_size)

    def lookup(self, key: int | bytes = 0, flags: int = 0) -> bytes:
        """The value at ``key`` (``BPF_F_LOCK`` copies it under its spin lock)."""
        value = ctypes.create_string_buffer(self.value_size)
        if self.lib.bpf_map_lookup_elem_flags(self.fd, self._key(key), value, flags) != 0:
            raise BpfUnavailable(f"reading {self.path}", os.strerror(ctypes.get_errno()))
        return value.raw

    def update(self, value: bytes, key: int | bytes = 0, flags: int = 0) -> None:
        """Replace (or add) the value at ``key``."""
        if len(value) != self.value_size:
            raise ValueError(f"{self.path}: value of {len(value)} bytes, the map holds {self.value_size}")
        buffer = ctypes.create_string_buffer(value, self.value_size)
        if self.lib.bpf_map_update_elem(self.fd, self._key(key), buffer, flags) != 0:
            raise BpfUnavailable(f"writing {self.path}", os.strerror(ctypes.get_errno()))

    def delete(self, key: int | bytes) -> None:
        """Remove ``key`` (hash maps and tries; arrays cannot delete)."""
        if self.lib.bpf_map_delete_elem(self.fd, self._key(key)) != 0:
            raise BpfUnavailable(f"deleting from {self.path}", os.strerror(ctypes.get_errno()))

    def keys(self) -> list[bytes]:
        """Every key in the map now (hash maps and tries; raw key bytes).
        Keys added or deleted meanwhile may or may not be seen."""
        found: list[bytes] = []
        current = None
        following = ctypes.create_string_buffer(self.key_size)
        while True:
            if self.lib.bpf_map_get_next_key(self.fd, current, following) != 0:
                error = ctypes.get_errno()
                if error == errno.ENOENT:
                    return found
                raise BpfUnavailable(f"listing the keys of {self.path}", os.strerror(error))
            found.append(following.raw)
            current = ctypes.create_string_buffer(following.raw, self.key_size)

    def close(self) -> None:
        """Close the map's file descriptor."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Closable(Protocol):
    def close(self) -> None: ...


_LIVE: dict[int, _Closable] = {}


def close_at_exit(thing: _Closable) -> None:
    """Have ``thing.close()`` run at interpreter exit unless it was closed before."""
    _LIVE[id(thing)] = thing


def closed(thing: _Closable) -> None:
    """``thing`` is closed: nothing to do for it at exit."""
    _LIVE.pop(id(thing), None)


@atexit.register
def _close_all() -> None:
    for thing in list(_LIVE.values()):
        try:
            thing.close()
        except Exception as error:  # exit must go on; say what stayed behind
            print(f"otcp.bpf: cleanup at exit failed: {error}", file=sys.stderr)

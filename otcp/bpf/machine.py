"""The machine's BPF filesystem and cgroup-v2 root, found (or mounted) in the
machine's mount namespace and reached from whichever one a process runs in.

Why: one sock_ops program serves every agent of a machine, so its pins and the
cgroup it is attached to must be the ones every agent sees. A Mininet host
(``mnexec -n``, likewise ``ip netns exec``) runs in a mount namespace of its
own that covers ``/sys`` with a fresh sysfs, hiding ``/sys/fs/bpf`` and
``/sys/fs/cgroup/*``. A BPF filesystem mounted there is a private instance
no other host sees, and the cgroup-v2 root stays out of reach.

The machine's mount namespace is the outermost one among this process's
ancestors that it may inspect: PID 1's where PID 1 may be read, the runner's
for an agent in a Mininet host, this process's own when no ancestor runs in
another. From another namespace it is reached through the nearest ancestor
running in it, whose root and namespace are held open (``/proc/PID/fd/N``
names them for this process and its children), and what is missing is
mounted there (``nsenter --mount=...``), never in this process's namespace.

What is mounted stays mounted: the BPF filesystem at ``/sys/fs/bpf``, where
systemd, ``tc`` and ``bpftool`` put it too, and, on a machine with no
cgroup-v2 hierarchy mounted at all, the hierarchy at ``CGROUP2_MOUNT`` (under
``/run``, OTCP's; emptied at boot). Mounting the hierarchy moves no process
and binds no controller: it only names the root cgroup, which always exists.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from otcp.bpf.errors import BpfUnavailable, run

BPFFS = Path("/sys/fs/bpf")
CGROUP2_MOUNT = Path("/run/otcp-bpf/cgroup2")
MOUNT_LOCK = Path("/run/otcp-bpf/mount.lock")
BPF_FS_MAGIC = 0xCAFE4A11
CGROUP2_SUPER_MAGIC = 0x63677270


def fs_type(path: str | Path) -> int | None:
    """statfs's f_type of ``path``, or None when it cannot be read."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    buffer = ctypes.create_string_buffer(256)
    if libc.statfs(str(path).encode(), buffer) != 0:
        return None
    return int(struct.unpack_from("l", buffer.raw)[0]) & 0xFFFFFFFF


@dataclass(frozen=True)
class Machine:
    """Where this process finds the machine's mount tree: its own (``ns_fd``
    None), or another namespace held open by ``ns_fd`` and ``root_fd``,
    entered through ancestor ``pid`` when it was found."""

    pid: int | None = None
    ns_fd: int | None = None
    root_fd: int | None = None

    @property
    def own(self) -> bool:
        """Whether the machine's mount namespace is this process's."""
        return self.ns_fd is None

    def path(self, path: Path) -> Path:
        """An absolute path of the machine's mount tree, as this process and its children reach it."""
        if self.root_fd is None:
            return path
        return Path(f"/proc/{os.getpid()}/fd/{self.root_fd}") / path.relative_to("/")

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run in the machine's mount namespace."""
        if self.ns_fd is None:
            return argv
        return ["nsenter", f"--mount=/proc/{os.getpid()}/fd/{self.ns_fd}", "--", *argv]


def _namespace(path: str) -> tuple[int, int] | None:
    """The identity of the namespace a /proc ns file (or a descriptor of one) names; None if not ours to see."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _find() -> Machine:
    """The machine's mount namespace (see the module), held open."""
    current = _namespace("/proc/self/ns/mnt")
    nearest_outer = None
    pid = _parent(os.getpid())
    while pid > 0:
        namespace = _namespace(f"/proc/{pid}/ns/mnt")
        if namespace is None:
            break  # not ours to inspect: the outermost we may see is below it
        if namespace != current:
            nearest_outer, current = pid, namespace
        pid = _parent(pid)
    if nearest_outer is None:
        return Machine()
    ns_fd = os.open(f"/proc/{nearest_outer}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    root_fd = os.open(f"/proc/{nearest_outer}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    if _namespace(f"/proc/self/fd/{ns_fd}") != current:  # the ancestor left between stat and open
        os.close(ns_fd)
        os.close(root_fd)
        return _find()
    return Machine(nearest_outer, ns_fd, root_fd)


_FOUND: list[Machine] = []


def machine() -> Machine:
    """The machine's mount tree as this process reaches it (found once per process)."""
    if not _FOUND:
        _FOUND.append(_find())
    return _FOUND[0]


def outer(path: Path) -> Path:
    """An absolute path of the machine's mount tree, as this process reaches it."""
    return machine().path(path)


class _MountLock:
    """The machine-wide flock held while looking for a mount and making it, so
    that two processes never stack two instances on one mount point."""

    def __enter__(self) -> _MountLock:
        lock = outer(MOUNT_LOCK)
        lock.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(lock, "a+")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()


def bpffs() -> Path:
    """The machine's BPF filesystem as this process reaches it, mounted at
    ``/sys/fs/bpf`` in the machine's mount namespace first if it is not."""
    where = outer(BPFFS)
    if fs_type(where) == BPF_FS_MAGIC:
        return where
    with _MountLock():
        if fs_type(where) != BPF_FS_MAGIC:
            run(machine().command(["mount", "-t", "bpf", "bpf", str(BPFFS)]),
                f"mounting the BPF filesystem at {BPFFS} in the machine's mount namespace")
    if fs_type(where) != BPF_FS_MAGIC:
        raise BpfUnavailable(f"{BPFFS} is not the BPF filesystem after mounting it there ({where})")
    return where


def _mount_table() -> list[str]:
    """The lines of the machine's mount namespace's /proc/self/mountinfo."""
    if machine().own:
        return Path("/proc/self/mountinfo").read_text().splitlines()
    shown = run(machine().command(["cat", "/proc/self/mountinfo"]), "reading the machine's mount table")
    return shown.stdout.splitlines()


def _unescape(field: str) -> str:
    """A mountinfo path field, its octal escapes (space, tab, newline, backslash) undone."""
    return re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal.group(1), 8)), field)


def cgroup2_mounted() -> Path | None:
    """Where the root of the cgroup-v2 hierarchy is mounted in the machine's
    mount namespace, as this process reaches it; None if it is not."""
    for line in _mount_table():
        before, _, after = line.partition(" - ")
        fields, kind = before.split(), after.split()
        # fields[3]: the directory of the hierarchy mounted there ("/": its root cgroup).
        if len(fields) > 4 and kind and kind[0] == "cgroup2" and fields[3] == "/":
            here = outer(Path(_unescape(fields[4])))
            if fs_type(here) == CGROUP2_SUPER_MAGIC:
                return here
    return None


def cgroup2_root() -> Path:
    """The root cgroup of the cgroup-v2 hierarchy as this process reaches it.
    Where the machine has the hierarchy mounted, that mount; where it has
    none, the hierarchy is mounted at ``CGROUP2_MOUNT`` in the machine's mount
    namespace. Raises :class:`BpfUnavailable` with mount's words when the
    kernel refuses."""
    found = cgroup2_mounted()
    if found is not None:
        return found
    with _MountLock():
        found = cgroup2_mounted()
        if found is None:
            outer(CGROUP2_MOUNT).mkdir(parents=True, exist_ok=True)
            run(machine().command(["mount", "-t", "cgroup2", "cgroup2", str(CGROUP2_MOUNT)]),
                f"no cgroup-v2 hierarchy is mounted (a sock_ops program attaches to a cgroup-v2 cgroup); "
                f"mounting one at {CGROUP2_MOUNT} in the machine's mount namespace")
            found = cgroup2_mounted()
    if found is None:
        raise BpfUnavailable(f"no cgroup-v2 hierarchy is reachable after mounting one at {CGROUP2_MOUNT}")
    return found

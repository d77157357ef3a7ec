"""Open vSwitch's packet sockets, made never the limit while an experiment runs.

The userspace datapath sends every packet, to every port of every bridge,
through one AF_PACKET socket of ``ovs-vswitchd`` (unbound, protocol 0), and
receives each port's packets on an AF_PACKET socket bound to the port. A
packet sent stays charged to the send socket until it is freed, also while
it waits in a queue further on (here: the IFB that holds the switch's egress
buffer, in the receiving host): with the default send buffer
(``net.core.wmem_default``, 212 992 B, ~2.3 KB of truesize per packet) the
switch as a whole can have about 93 packets queued, and past that its sends
fail and it drops the rest of the batch without counting it. A receive
socket whose buffer is full drops what arrives (counted per socket, the
``d`` of ``ss -0 -m``).

``raised_buffers(ports)`` raises the send buffer and the receive buffers of
the given ports to sizes that cannot be reached (SO_SNDBUFFORCE and
SO_RCVBUFFORCE on a duplicate of the daemon's descriptor, ``pidfd_getfd``),
and puts the previous sizes back on exit. Only the experiment's own ports'
sockets and the shared send socket are touched; Mininet runs one at a time
on a machine (the ``/tmp/otcp-mininet.lock`` convention), so the shared send
socket is only ever raised while this experiment is the one using the switch.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import re
import socket
import subprocess
from collections.abc import Iterable, Iterator

SYS_PIDFD_GETFD = 438
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
# The kernel doubles what is asked and caps it at INT_MAX: 1 GiB of truesize,
# ~460 000 queued packets, more than every buffer of the largest sweep holds.
SEND_BUFFER = 512 << 20
RECEIVE_BUFFER = 64 << 20

_ENTRY = re.compile(r'^p_raw\s+\S+\s+\S+\s+(?P<local>\S+)\s+\S+\s+users:\(\("ovs-vswitchd",pid=(?P<pid>\d+),'
                    r'fd=(?P<fd>\d+)\)\).*?ino:(?P<inode>\d+)')
_SKMEM = re.compile(r"skmem:\(r\d+,rb(?P<rb>\d+),t\d+,tb(?P<tb>\d+),.*?d(?P<d>\d+)\)")


@dataclasses.dataclass(frozen=True)
class PacketSocket:
    """One of ovs-vswitchd's AF_PACKET sockets: port is None for the send socket."""

    port: str | None
    pid: int
    fd: int
    inode: int
    rcvbuf: int
    sndbuf: int
    drops: int


def parse_packet_sockets(text: str) -> list[PacketSocket]:
    """ovs-vswitchd's packet sockets from ``ss -0 -H -m -p -e`` output."""
    found = []
    entries = re.split(r"\n(?=\S)", text.strip())
    for entry in entries:
        flat = " ".join(entry.split())
        match = _ENTRY.match(flat)
        memory = _SKMEM.search(flat)
        if not match or not memory:
            continue
        port: str | None
        local = match.group("local")
        if local.startswith("*:"):
            port = local[2:]
        elif local.startswith("[0]"):
            port = None
        else:
            continue
        found.append(PacketSocket(port=port, pid=int(match.group("pid")), fd=int(match.group("fd")),
                                  inode=int(match.group("inode")), rcvbuf=int(memory.group("rb")),
                                  sndbuf=int(memory.group("tb")), drops=int(memory.group("d"))))
    return found


def packet_sockets() -> list[PacketSocket]:
    """ovs-vswitchd's packet sockets now."""
    result = subprocess.run(["ss", "-0", "-H", "-m", "-p", "-e"], capture_output=True, text=True, check=True)
    return parse_packet_sockets(result.stdout)


def receive_drops(ports: Iterable[str]) -> dict[str | None, int]:
    """{port: packets its OVS receive socket has dropped so far} (kernel's count)."""
    wanted = set(ports)
    return {s.port: s.drops for s in packet_sockets() if s.port in wanted}


def _set_buffer(target: PacketSocket, option: int, value: int) -> bool:
    """setsockopt on a duplicate of target's descriptor in ovs-vswitchd; False if it is gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(target.pid)
    except ProcessLookupError:
        return False
    try:
        fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, target.fd, 0)
        if fd < 0:
            return False
        try:
            if os.fstat(fd).st_ino != target.inode:
                return False
            sock = socket.socket(fileno=fd)
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, value)
            finally:
                sock.detach()
        finally:
            os.close(fd)
    finally:
        os.close(pidfd)
    return True


@contextlib.contextmanager
def raised_buffers(ports: Iterable[str]) -> Iterator[list[PacketSocket]]:
    """Raise OVS's send buffer and the receive buffers of ports; restore them on exit.

    Yields the sockets as found before (their buffer sizes are the ones put back)."""
    wanted = set(ports)
    sockets = [s for s in packet_sockets() if s.port is None or s.port in wanted]
    if not any(s.port is None for s in sockets):
        raise RuntimeError("ovs-vswitchd has no send socket yet (it opens it on its first send)")
    changed: list[PacketSocket] = []
    try:
        for target in sockets:
            option, value = (SO_SNDBUFFORCE, SEND_BUFFER) if target.port is None else (SO_RCVBUFFORCE, RECEIVE_BUFFER)
            if not _set_buffer(target, option, value):
                raise RuntimeError(f"could not raise the buffer of ovs-vswitchd's socket fd {target.fd}")
            changed.append(target)
        yield sockets
    finally:
        for target in changed:
            # The kernel doubled what was set: half the size read back restores it exactly.
            if target.port is None:
                _set_buffer(target, SO_SNDBUFFORCE, target.sndbuf // 2)
            else:
                _set_buffer(target, SO_RCVBUFFORCE, target.rcvbuf // 2)

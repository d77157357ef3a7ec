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
import functools
import os
import re
import socket
import subprocess
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

SYS_PIDFD_GETFD = 438
#: Where Open vSwitch keeps its pid files (its own OVS_RUNDIR convention).
OVS_RUNDIR = os.environ.get("OVS_RUNDIR", "/var/run/openvswitch")
T = TypeVar("T")
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


# --- AF_XDP sockets (the afxdp datapath, otcp.experiments.runner.datapath) ---------------------
#
# An AF_XDP port in copy mode (all a veth offers) transmits through the kernel's xmit with an skb
# charged to the port's XSK socket, exactly like the AF_PACKET send socket above: with the default
# send buffer about 93 frames can be queued beyond the switch, past that the kernel refuses and the
# frames wait in OVS's transmit ring, where no counter sees them. Its receive side is a ring of
# 2048 descriptors that nothing in OVS can raise: what arrives while it is full is dropped and
# counted in the socket's XDP_STATISTICS (rx_dropped: no free buffer; rx_ring_full: no free slot).
# The kernel's sock_diag for AF_XDP does not say which port a socket serves here, so these read
# and raise every AF_XDP socket of ovs-vswitchd: on a machine that runs one Mininet at a time
# (the /tmp/otcp-mininet.lock convention) those are the running experiment's.

AF_XDP = 44
SOL_XDP = 283
XDP_STATISTICS = 7
SO_DOMAIN = getattr(socket, "SO_DOMAIN", 39)
_XDP_STATISTICS_FIELDS = ("rx_dropped", "rx_invalid_descs", "tx_invalid_descs", "rx_ring_full",
                          "rx_fill_ring_empty_descs", "tx_ring_empty_descs")


@dataclasses.dataclass(frozen=True)
class XdpSocket:
    """One of ovs-vswitchd's AF_XDP sockets: its descriptor, send buffer (as the kernel reports
    it, doubled) and frames its receive side dropped (rx_dropped + rx_ring_full)."""

    pid: int
    fd: int
    inode: int
    sndbuf: int
    input_drops: int


def vswitchd_pid() -> int | None:
    """ovs-vswitchd's pid (from its pid file), or None when it does not run."""
    try:
        with open(os.path.join(OVS_RUNDIR, "ovs-vswitchd.pid"), encoding="ascii") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return None


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _get_int(libc: ctypes.CDLL, fd: int, level: int, option: int) -> int | None:
    value = ctypes.c_int(0)
    size = ctypes.c_uint32(ctypes.sizeof(value))
    if libc.getsockopt(fd, level, option, ctypes.byref(value), ctypes.byref(size)) != 0:
        return None
    return value.value


def _xdp_input_drops(libc: ctypes.CDLL, fd: int) -> int:
    """rx_dropped + rx_ring_full of an AF_XDP socket's XDP_STATISTICS (0 if unreadable)."""
    counters = (ctypes.c_uint64 * len(_XDP_STATISTICS_FIELDS))()
    size = ctypes.c_uint32(ctypes.sizeof(counters))
    if libc.getsockopt(fd, SOL_XDP, XDP_STATISTICS, counters, ctypes.byref(size)) != 0:
        return 0
    named = dict(zip(_XDP_STATISTICS_FIELDS, counters, strict=True))
    return int(named["rx_dropped"] + named["rx_ring_full"])


def _with_duplicate(pid: int, fd: int, use: Callable[[ctypes.CDLL, int], T]) -> T | None:
    """use(libc, a duplicate of pid's descriptor fd), or None if the process or descriptor is gone."""
    libc = _libc()
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    try:
        duplicate = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if duplicate < 0:
            return None
        try:
            return use(libc, duplicate)
        finally:
            os.close(duplicate)
    finally:
        os.close(pidfd)


def xdp_sockets() -> list[XdpSocket]:
    """ovs-vswitchd's AF_XDP sockets now (none without AF_XDP ports, or without ovs-vswitchd)."""
    pid = vswitchd_pid()
    if pid is None:
        return []
    found = []
    try:
        entries = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    for entry in entries:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{entry}")
        except OSError:
            continue
        if not target.startswith("socket:["):
            continue
        inode = int(target[len("socket:["):-1])
        found_socket = _with_duplicate(pid, int(entry), functools.partial(_read_xdp_socket, pid, int(entry), inode))
        if found_socket is not None:
            found.append(found_socket)
    return found


def _read_xdp_socket(pid: int, number: int, inode: int, libc: ctypes.CDLL, fd: int) -> XdpSocket | None:
    """The XdpSocket behind fd (a duplicate of pid's descriptor number), None if it is not AF_XDP."""
    if os.fstat(fd).st_ino != inode or _get_int(libc, fd, socket.SOL_SOCKET, SO_DOMAIN) != AF_XDP:
        return None
    return XdpSocket(pid, number, inode, _get_int(libc, fd, socket.SOL_SOCKET, socket.SO_SNDBUF) or 0,
                     _xdp_input_drops(libc, fd))


def xdp_input_drops() -> int:
    """Frames the receive rings of ovs-vswitchd's AF_XDP sockets have dropped so far (kernel's count)."""
    return sum(s.input_drops for s in xdp_sockets())


def _force_send_buffer(target: XdpSocket, value: int) -> bool:
    """SO_SNDBUFFORCE value on target (a duplicate of its descriptor); False if it is gone."""

    def force(libc: ctypes.CDLL, fd: int) -> bool:
        if os.fstat(fd).st_ino != target.inode:
            return False
        size = ctypes.c_int(value)
        return libc.setsockopt(fd, socket.SOL_SOCKET, SO_SNDBUFFORCE, ctypes.byref(size),
                               ctypes.sizeof(size)) == 0

    return bool(_with_duplicate(target.pid, target.fd, force))


@contextlib.contextmanager
def raised_xdp_send_buffers() -> Iterator[list[XdpSocket]]:
    """Raise the send buffer of every AF_XDP socket of ovs-vswitchd to SEND_BUFFER; put the
    previous sizes back on exit (on the sockets still there). Yields the sockets as found
    before; RuntimeError when there is none, or one cannot be raised."""
    sockets = xdp_sockets()
    if not sockets:
        raise RuntimeError("ovs-vswitchd has no AF_XDP socket: no AF_XDP port is up")
    changed: list[XdpSocket] = []
    try:
        for target in sockets:
            if not _force_send_buffer(target, SEND_BUFFER):
                raise RuntimeError(f"could not raise the send buffer of ovs-vswitchd's AF_XDP socket fd {target.fd}")
            changed.append(target)
        yield sockets
    finally:
        for target in changed:
            _force_send_buffer(target, target.sndbuf // 2)

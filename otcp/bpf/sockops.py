"""The sock_ops enforcer (``otcp/bpf/src/otcp_sockops.bpf.c``): OTCP's window clamp,
initial window, minimum RTO and pacing rate per (host, destination prefix),
applied by the kernel to every connection from its first segment.

**One program per machine, shared.** The program is attached to the cgroup-v2
root, where it sees every socket of every namespace, so one instance serves
every agent of the machine (every Mininet host). It is pinned at
``/sys/fs/bpf/otcp/sockops/`` (not ``NAME-pidPID``: it outlives the agent that
loaded it). That path and the cgroup-v2 root are the machine's, found or
mounted in the machine's mount namespace from whichever one the agent runs in
(`otcp.bpf.machine`): a Mininet host's own sysfs hides both. The first agent
builds, loads, pins and attaches it (with ``multi``, so other programs on the
root cgroup stay); later agents reuse the pin. Agents register as users
(``/run/otcp-bpf/sockops/users/PID-N``, listing the netns cookies they wrote)
under a machine-wide flock; on ``close()`` an agent removes its hosts' entries
and unregisters, and the last live user detaches the program (by its id:
nothing else on the cgroup is touched) and unpins it. Users whose process is
gone (killed) are pruned, with their entries, by the next agent that starts or
closes, by ``otcp-agent revert`` and by ``python -m otcp.bpf cleanup``;
entries of a namespace a live user also wrote stay.

**Atomic sets.** A host (netns cookie) has two slots; :meth:`update` writes the
new set into the slot that is not live, then flips the host's slot with one
map write, then deletes the old slot's entries. A connection therefore sees
the whole old set or the whole new one, and the returned :class:`Undo` puts
the previous set back the same way (the agent calls it when the routes or
its state cannot follow).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import hashlib
import ipaddress
import itertools
import json
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO, TypeVar, cast

from otcp.bpf.build import build, object_path
from otcp.bpf.errors import BpfUnavailable, run
from otcp.bpf.machine import bpffs, cgroup2_root, outer
from otcp.bpf.objects import (
    PIN_ROOT,
    PinnedMap,
    cgroup_program_ids,
    close_at_exit,
    closed,
    load_pinned_at,
    process_alive,
    unpin,
)
from otcp.wire.paramset import RouteParams

OBJECT = "otcp_sockops"
PROGRAM = "otcp_sockops"
PIN = PIN_ROOT / "sockops"
STATE_DIR = Path("/run/otcp-bpf/sockops")
LOCK_PATH = Path("/run/otcp-bpf/sockops.lock")
SO_NETNS_COOKIE = 71  # include/uapi/asm-generic/socket.h
CLONE_NEWNET = 0x40000000
BPF_CGROUP_SOCK_OPS = 3  # enum bpf_attach_type

#: struct otcp_so_key (packed): prefix length, netns cookie, slot, address (IPv6 or ::ffff:IPv4).
KEY = struct.Struct("<IQI16s")
#: struct otcp_so_params: cwnd_clamp, initcwnd, rto_min_us, pad, pacing_rate, applied.
VALUE = struct.Struct("<IIIIQQ")
SLOT_VALUE = struct.Struct("<I")
HOST_BITS = 64 + 32  # the cookie and the slot, before the address
#: The counters of struct otcp_so_counters, in order (enum otcp_so_counter).
COUNTERS = ("established", "not_otcp", "no_entry", "own_address", "matched", "clamp_set", "clamp_refused", "iw_set",
            "iw_refused", "rto_set", "rto_refused", "pacing_set", "pacing_refused", "pacing_updated",
            "pacing_update_refused", "clamp_updated", "clamp_update_refused")
#: SO_MAX_PACING_RATE takes an int from BPF (net/core/filter.c): at most 2^32 - 2 bytes/s (~34 Gb/s).
MAX_PACING_RATE = 2**32 - 2
_V4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
#: What in_netns returns: its work's value.
T = TypeVar("T")
_instances = itertools.count()


@dataclass(frozen=True)
class Enforced:
    """What the program sets on a connection to one destination prefix (0: leave alone)."""

    cwnd_clamp: int = 0
    initcwnd: int = 0
    rto_min_us: int = 0
    pacing_rate: int = 0  # bytes per second

    def pack(self, applied: int = 0) -> bytes:
        """``struct otcp_so_params``, checked."""
        for name, value, high in (("cwnd_clamp", self.cwnd_clamp, 2**31 - 1), ("initcwnd", self.initcwnd, 2**31 - 1),
                                  ("rto_min_us", self.rto_min_us, 2**31 - 1),
                                  ("pacing_rate", self.pacing_rate, MAX_PACING_RATE)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
                raise ValueError(f"{name} {value!r} is outside 0..{high}")
        return VALUE.pack(self.cwnd_clamp, self.initcwnd, self.rto_min_us, 0, self.pacing_rate, applied)

    @classmethod
    def unpack(cls, raw: bytes) -> tuple[Enforced, int]:
        """From the map value: (what is enforced, connections it was applied to)."""
        clamp, iw, rto, _, pacing, applied = VALUE.unpack(raw)
        return cls(clamp, iw, rto, pacing), applied


def enforced_for(route: RouteParams) -> Enforced:
    """A parameter-set route -> what the program enforces (rto_min in the map's
    microseconds). The initial window is capped at the clamp, as the kernel
    caps a route's initcwnd (tcp_init_cwnd)."""
    clamp = route.cwnd_clamp or 0
    initcwnd = route.initcwnd
    if clamp and initcwnd > clamp:
        initcwnd = clamp
    return Enforced(cwnd_clamp=clamp, initcwnd=initcwnd, rto_min_us=route.rto_min_ms * 1000,
                    pacing_rate=route.pacing_rate or 0)


def lpm_address(prefix: str) -> tuple[bytes, int]:
    """The address part of an OTCP map's LPM-trie key for ``prefix``, after the host's part: 16 bytes
    (IPv4 as ::ffff:a.b.c.d) and the prefix length over them (96 + len for IPv4)."""
    network = ipaddress.ip_network(prefix)
    if isinstance(network, ipaddress.IPv4Network):
        return _V4_MAPPED.network_address.packed[:12] + network.network_address.packed, 96 + network.prefixlen
    return network.network_address.packed, network.prefixlen


def lpm_prefix(address: bytes, bits: int) -> str:
    """The prefix of a key's 16 address bytes and its length over them; the inverse of :func:`lpm_address`."""
    v6 = ipaddress.IPv6Address(address)
    if bits >= 96 and v6 in _V4_MAPPED:
        return str(ipaddress.ip_network((ipaddress.IPv4Address(address[12:]), bits - 96)))
    return str(ipaddress.ip_network((v6, bits)))


def encode_key(netns_cookie: int, slot: int, prefix: str) -> bytes:
    """The LPM-trie key of a host's entry for ``prefix`` (IPv4 as ::ffff:a.b.c.d/96+len)."""
    address, bits = lpm_address(prefix)
    if slot not in (0, 1) or not 0 <= netns_cookie < 2**64:
        raise ValueError(f"bad slot {slot} or netns cookie {netns_cookie}")
    return KEY.pack(HOST_BITS + bits, netns_cookie, slot, address)


def decode_key(raw: bytes) -> tuple[int, int, str]:
    """(netns cookie, slot, prefix) of a key; the inverse of :func:`encode_key`."""
    bits, cookie, slot, address = KEY.unpack(raw)
    return cookie, slot, lpm_prefix(address, bits - HOST_BITS)


def in_netns(netns: str, work: Callable[[], T]) -> T:
    """work()'s value, run in a thread of its own moved into the network namespace ``netns`` (a name
    under /run/netns or a path): setns moves only that thread, which then ends. What work (or the
    move, OSError naming the namespace) raises is raised here."""
    result: dict[str, Any] = {}

    def inside() -> None:
        try:
            _enter_netns(netns)
            result["value"] = work()
        except BaseException as error:  # raised again in the calling thread
            result["error"] = error

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return cast(T, result["value"])


def _enter_netns(netns: str) -> None:
    """Move the calling thread into the network namespace ``netns``; OSError names it."""
    path = netns if netns.startswith("/") else f"/run/netns/{netns}"
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def netns_cookie(netns: str | None = None) -> int:
    """The network namespace cookie (what ``bpf_get_netns_cookie`` returns
    there) of this process's namespace, or of ``netns`` (a name under
    /run/netns or a path such as /proc/PID/ns/net), read with SO_NETNS_COOKIE
    from a socket made there."""
    if netns is None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), "little")
    return in_netns(netns, netns_cookie)


def possible_cpus() -> int:
    """How many CPUs a per-CPU map holds values for."""
    count = 0
    for part in Path("/sys/devices/system/cpu/possible").read_text().strip().split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


@dataclass
class Undo:
    """How to put a host's previous set back (returned by :meth:`SockOpsEnforcer.update`)."""

    enforcer: SockOpsEnforcer
    netns_cookie: int
    previous: dict[str, Enforced] | None  # None: the host had no set

    def __call__(self) -> None:
        """Put the previous set back, atomically (or remove the host if it had none)."""
        if self.previous is None:
            self.enforcer.remove(self.netns_cookie)
        else:
            self.enforcer.update(self.netns_cookie, self.previous)


class SockOpsEnforcer:
    """This process's hold on the machine's otcp_sockops program.

    :meth:`attach` makes this process a user (loading and attaching the
    program if no live user has); :meth:`open_pinned` only opens the maps of
    a program that is already there (``otcp-agent revert`` and ``show``).
    ``close()`` removes the entries this process wrote, and detaches and
    unpins the program when no live user is left; it also runs at exit.
    """

    def __init__(self, user: str | None, pin: Path | None = None) -> None:
        self.user = user  # this holder's name in the registry (PID-N), or None for a visitor
        pin = outer(PIN) if pin is None else pin
        self.params_map = PinnedMap(pin / "maps" / "otcp_so_params", VALUE.size, KEY.size)
        self.slot_map = PinnedMap(pin / "maps" / "otcp_so_slot", SLOT_VALUE.size, 8)
        self.counter_map = PinnedMap(pin / "maps" / "otcp_so_cnt", 8 * len(COUNTERS) * possible_cpus())
        # What this process knows each host holds: cookie -> slot -> {prefix: Enforced}.
        self._known: dict[int, dict[int, dict[str, Enforced]]] = {}
        self._written: set[int] = set()
        self._closed = False
        close_at_exit(self)

    # -- holding the program ---------------------------------------------------

    @classmethod
    def attach(cls, wait_s: float = 60.0) -> SockOpsEnforcer:
        """Become a user of the machine's program, building, loading and
        attaching it to the cgroup-v2 root if no live user did. Raises
        :class:`BpfUnavailable` with the tool's and the kernel's words."""
        build()
        bpffs()
        cgroup2_root()  # found or mounted now: a refusal is said before anything is loaded
        with _Lock(wait_s):
            _prune_dead_users()
            digest = hashlib.sha256(object_path(OBJECT).read_bytes()).hexdigest()
            stamp = STATE_DIR / "object.sha256"
            if outer(PIN).exists() and (not stamp.exists() or stamp.read_text().strip() != digest):
                if _live_users():
                    raise BpfUnavailable(
                        f"another build of {OBJECT} is attached and used by OTCP process(es) "
                        f"{', '.join(_live_users())} (PID-N); it is reused only by the same build")
                _detach_and_unpin()
            if not outer(PIN).exists():
                _load_and_attach()
                STATE_DIR.mkdir(parents=True, exist_ok=True)
                stamp.write_text(digest + "\n")
            elif not _attached_ids():
                _attach()
            user = f"{os.getpid()}-{next(_instances)}"
            _register(user, [])
            try:
                return cls(user=user)
            except BaseException:
                _unregister(user)
                if not _live_users():
                    _detach_and_unpin()
                raise

    @classmethod
    def open_pinned(cls) -> SockOpsEnforcer | None:
        """The program's maps if the program is pinned, without becoming a user; else None."""
        if not (outer(PIN) / "maps" / "otcp_so_params").exists():
            return None
        return cls(user=None)

    def close(self) -> None:
        """Remove what this process wrote (a user's hosts), unregister, and
        detach and unpin the program when no live user is left (idempotent)."""
        if self._closed:
            return
        problems = []
        try:
            with _Lock(60.0):
                if self.user is not None:
                    mine = set(self._written) | set(_user_cookies(self.user))
                    _unregister(self.user)
                    shared = {c for user in _live_users() for c in _user_cookies(user)}
                    for cookie in sorted(mine - shared):
                        try:
                            self.remove(cookie)
                        except BpfUnavailable as error:
                            problems.append(str(error))
                _prune_dead_users(self)
                if not _live_users() and outer(PIN).exists():
                    self._close_maps()
                    _detach_and_unpin()
        finally:
            self._closed = True
            self._close_maps()
            closed(self)
        if problems:
            raise BpfUnavailable("removing this process's sock_ops entries: " + "; ".join(problems))

    def close_maps(self) -> None:
        """Close the maps and release nothing (a reader such as ``otcp-agent show``)."""
        self._closed = True
        self._close_maps()
        closed(self)

    def _close_maps(self) -> None:
        for pinned in (self.params_map, self.slot_map, self.counter_map):
            pinned.close()

    def __enter__(self) -> SockOpsEnforcer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # -- a host's entries --------------------------------------------------------

    def _host(self, cookie: int) -> dict[int, dict[str, Enforced]]:
        """What the maps hold for a host, by slot (read from the trie the first time)."""
        if cookie not in self._known:
            slots: dict[int, dict[str, Enforced]] = {0: {}, 1: {}}
            for raw in self.params_map.keys():
                found, slot, prefix = decode_key(raw)
                if found == cookie and slot in slots:
                    try:
                        slots[slot][prefix] = Enforced.unpack(self.params_map.lookup(raw))[0]
                    except BpfUnavailable:
                        continue  # deleted meanwhile
            self._known[cookie] = slots
        return self._known[cookie]

    def live_slot(self, netns_cookie: int) -> int | None:
        """The host's live slot, or None when the program leaves the host alone."""
        try:
            return int(SLOT_VALUE.unpack(self.slot_map.lookup(struct.pack("<Q", netns_cookie)))[0])
        except BpfUnavailable:
            return None

    def entries(self, netns_cookie: int) -> dict[str, tuple[Enforced, int]]:
        """The host's live set read back from the kernel: prefix -> (what is
        enforced, connections it was applied to since it was written)."""
        return self.entries_of([netns_cookie])[netns_cookie]

    def entries_of(self, netns_cookies: Iterable[int]) -> dict[int, dict[str, tuple[Enforced, int]]]:
        """`entries` of several hosts with one pass over the map (a watcher of many hosts):
        cookie -> prefix -> (what is enforced, connections it was applied to)."""
        slots = {cookie: self.live_slot(cookie) for cookie in netns_cookies}
        shown: dict[int, dict[str, tuple[Enforced, int]]] = {cookie: {} for cookie in slots}
        for raw in self.params_map.keys():
            cookie, found, prefix = decode_key(raw)
            if cookie in slots and found == slots[cookie]:
                try:
                    shown[cookie][prefix] = Enforced.unpack(self.params_map.lookup(raw))
                except BpfUnavailable:
                    continue
        return {cookie: dict(sorted(entries.items())) for cookie, entries in shown.items()}

    def update(self, netns_cookie: int, routes: Iterable[RouteParams] | Mapping[str, Enforced]) -> Undo:
        """Make the host's set exactly ``routes`` (parameter-set routes, or
        prefix -> :class:`Enforced`), atomically: written into the slot that is
        not live, then made live with one write. Returns how to put the
        previous set back. Raises :class:`BpfUnavailable` (the host's live set
        unchanged) when the kernel refuses a write."""
        if self._closed:
            raise BpfUnavailable("the sock_ops enforcer is closed")
        if isinstance(routes, Mapping):
            wanted = {str(ipaddress.ip_network(p)): e for p, e in routes.items()}
        else:
            wanted = {str(ipaddress.ip_network(r.dst)): enforced_for(r) for r in routes}
        for enforced in wanted.values():
            enforced.pack()  # refuse what the map cannot hold before anything is written
        if self.user is not None and netns_cookie not in self._written:
            with _Lock(60.0):
                _register(self.user, [netns_cookie])
            self._written.add(netns_cookie)
        host = self._host(netns_cookie)
        live = self.live_slot(netns_cookie)
        previous = None if live is None else dict(host[live])
        if previous == wanted:
            return Undo(self, netns_cookie, previous)
        spare = 1 if live == 0 else 0
        self._clear(netns_cookie, spare)
        try:
            for prefix, enforced in wanted.items():
                self.params_map.update(enforced.pack(), encode_key(netns_cookie, spare, prefix))
                host[spare][prefix] = enforced
            self.slot_map.update(SLOT_VALUE.pack(spare), struct.pack("<Q", netns_cookie))
        except BaseException:
            self._clear(netns_cookie, spare)
            raise
        if live is not None:
            self._clear(netns_cookie, live, quiet=True)
        return Undo(self, netns_cookie, previous)

    def remove(self, netns_cookie: int) -> None:
        """Leave the host alone from now on and delete all its entries."""
        try:
            self.slot_map.delete(struct.pack("<Q", netns_cookie))
        except BpfUnavailable as error:
            if "No such file" not in str(error):
                raise
        self._known.pop(netns_cookie, None)  # re-read: another process may have written this host
        for slot in (0, 1):
            self._clear(netns_cookie, slot)
        self._known.pop(netns_cookie, None)

    def _clear(self, cookie: int, slot: int, quiet: bool = False) -> None:
        """Delete a slot's entries (not live). With quiet, a refusal leaves
        them for the next update to clear instead of raising."""
        host = self._host(cookie)
        for prefix in list(host[slot]):
            try:
                self.params_map.delete(encode_key(cookie, slot, prefix))
            except BpfUnavailable as error:
                if "No such file" not in str(error):
                    if quiet:
                        continue
                    raise
            del host[slot][prefix]

    # -- what the program did ---------------------------------------------------

    def counters(self) -> dict[str, int]:
        """The program's counters summed over CPUs, since it was loaded
        (every established socket of the machine passes it)."""
        raw = self.counter_map.lookup(0)
        values = struct.unpack(f"<{len(COUNTERS) * possible_cpus()}Q", raw)
        return {name: sum(values[cpu * len(COUNTERS) + i] for cpu in range(possible_cpus()))
                for i, name in enumerate(COUNTERS)}


# -- the machine-wide registry -----------------------------------------------------


class _Lock:
    """The machine-wide flock that serialises attaching, registering and detaching."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.handle: TextIO | None = None

    def __enter__(self) -> _Lock:
        LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(LOCK_PATH, "a+")
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    self.handle.close()
                    raise BpfUnavailable(f"{LOCK_PATH} stayed locked for {self.wait_s:.0f} s") from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        assert self.handle is not None
        self.handle.close()


def _users_dir() -> Path:
    return STATE_DIR / "users"


def _alive(user: str) -> bool:
    """Whether the process of a registry name (PID-N) lives."""
    return process_alive(int(user.split("-")[0]))


def _user_cookies(user: str) -> list[int]:
    try:
        return [int(c) for c in json.loads((_users_dir() / user).read_text())]
    except (OSError, ValueError, TypeError):
        return []


def _register(user: str, cookies: list[int]) -> None:
    _users_dir().mkdir(parents=True, exist_ok=True)
    path = _users_dir() / user
    known = sorted(set(_user_cookies(user)) | set(cookies))
    tmp = path.with_name(f".{user}.tmp")
    tmp.write_text(json.dumps(known))
    os.replace(tmp, path)


def _unregister(user: str) -> None:
    (_users_dir() / user).unlink(missing_ok=True)


def _users() -> list[str]:
    if not _users_dir().is_dir():
        return []
    return sorted(p.name for p in _users_dir().iterdir() if re.fullmatch(r"\d+-\d+", p.name))


def _live_users() -> list[str]:
    return [user for user in _users() if _alive(user)]


def _prune_dead_users(enforcer: SockOpsEnforcer | None = None) -> list[str]:
    """Unregister users whose process is gone, deleting the entries of hosts
    no live user wrote; returns their names (PID-N). Call with the lock held."""
    dead = [user for user in _users() if not _alive(user)]
    if not dead:
        return []
    shared = {c for user in _live_users() for c in _user_cookies(user)}
    orphaned = {c for user in dead for c in _user_cookies(user)} - shared
    if orphaned and (outer(PIN) / "maps" / "otcp_so_params").exists():
        opened = enforcer if enforcer is not None and not enforcer._closed else None
        visitor = opened or SockOpsEnforcer(user=None)
        try:
            for cookie in sorted(orphaned):
                visitor.remove(cookie)
        finally:
            if opened is None:
                visitor._close_maps()
                visitor._closed = True
                closed(visitor)
    for user in dead:
        _unregister(user)
    return dead


def _program_id() -> int:
    shown = run(["bpftool", "-j", "prog", "show", "pinned", str(outer(PIN) / "progs" / PROGRAM)],
                "reading a program id")
    return int(json.loads(shown.stdout)["id"])


def _attached_ids() -> list[int]:
    """Ids of our pinned program where it is attached on the root cgroup (empty if not)."""
    ours = _program_id()
    return [found for found in cgroup_program_ids(cgroup2_root(), BPF_CGROUP_SOCK_OPS) if found == ours]


def _pinned_program() -> str:
    return str(outer(PIN) / "progs" / PROGRAM)


def _attach() -> None:
    """Attach the pinned program to the root cgroup (named by its pin: opening a program by id takes
    CAP_SYS_ADMIN, which the agent's unit does not grant)."""
    root = cgroup2_root()
    run(["bpftool", "cgroup", "attach", str(root), "sock_ops", "pinned", _pinned_program(), "multi"],
        f"attaching {PROGRAM} to the cgroup-v2 root {root}")


def _load_and_attach() -> None:
    loaded = load_pinned_at(object_path(OBJECT), outer(PIN), "sockops")
    try:
        _attach()
    except BaseException:
        loaded.unpin()
        raise


def _detach_and_unpin() -> None:
    """Detach our program (by its pin) from the root cgroup, where it is attached, and unpin it."""
    if (outer(PIN) / "progs" / PROGRAM).exists():
        root = cgroup2_root()
        if _attached_ids():
            run(["bpftool", "cgroup", "detach", str(root), "sock_ops", "pinned", _pinned_program()],
                f"detaching {PROGRAM} from {root}")
    unpin(outer(PIN))
    (STATE_DIR / "object.sha256").unlink(missing_ok=True)


def attached() -> bool:
    """Whether the machine's otcp_sockops program is pinned and attached."""
    return (outer(PIN) / "progs" / PROGRAM).exists() and bool(_attached_ids())


def cleanup_leftover() -> list[str]:
    """Prune users whose process is gone (and their hosts' entries); detach
    and unpin the program when no live user is left. Returns the pruned
    users, PID-N (``python -m otcp.bpf cleanup``)."""
    with _Lock(60.0):
        dead = _prune_dead_users()
        if not _live_users() and outer(PIN).exists():
            _detach_and_unpin()
        return dead

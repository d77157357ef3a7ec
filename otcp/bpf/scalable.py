"""The ``otcp_scalable`` congestion control (``otcp/bpf/src/otcp_scalable.bpf.c``):
Scalable TCP above 16 segments, AIMD with GridDT's per-destination additive
increase A below, and an initial ssthresh per destination; registered,
filled and unregistered here (docs/longpaths.md).

**Registration** is machine-wide and exclusive, as ``otcp_dctcp``'s
(:mod:`otcp.bpf.congestion`): one OTCP process registers the name at a time
(a lock under /run; others wait or get :class:`BpfUnavailable` naming the
holder), and its ``close()`` unregisters it. On registration the
algorithm's two maps are pinned at ``/sys/fs/bpf/otcp/scalable/`` in the
machine's BPF filesystem (reached from a Mininet host too: `otcp.bpf.machine`):

- ``otcp_sc_dst``: an LPM trie keyed by (network namespace cookie, remote
  address or prefix; IPv4 as ::ffff:a.b.c.d), as the sock_ops program's
  ``otcp_so_params`` is, so each Mininet host (one kernel, one namespace
  each) has entries of its own; the value is a :class:`ScalableEntry` and
  the count of connections that took it;
- ``otcp_sc_cnt``: the algorithm's counters (per CPU, summed by
  :meth:`ScalableTable.counters`).

Another process (a host agent) fills a host's entries through
:meth:`ScalableTable.open_pinned` while the name stays registered; the
entries go with the maps when the holder closes. A connection reads its
entry once, when the algorithm is initialised on it.
``python -m otcp.bpf cleanup`` unregisters and unpins what a killed holder left.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from otcp.bpf import congestion
from otcp.bpf.congestion import RegisteredStructOps
from otcp.bpf.errors import BpfUnavailable, run
from otcp.bpf.machine import bpffs, outer
from otcp.bpf.objects import PIN_ROOT, PinnedMap, close_at_exit, closed, unpin
from otcp.bpf.sockops import lpm_address, lpm_prefix, possible_cpus

CC_NAME = "otcp_scalable"
PIN = PIN_ROOT / "scalable"
DST_MAP = "otcp_sc_dst"
COUNTER_MAP = "otcp_sc_cnt"

#: Scalable TCP's constants (otcp_scalable.h): the legacy window (segments),
#: a (segments per segment acknowledged) and b (share of cwnd cut per loss).
LWND = 16
A = 0.01
B = 0.125
#: A, GridDT's additive increase, is carried x256 (256: one segment per round trip).
INCREASE_ONE = 256
GRIDDT = 1  # entry flag: AIMD with A at every window

#: struct otcp_sc_key (packed): prefix length, netns cookie, address (IPv6 or ::ffff:IPv4).
KEY = struct.Struct("<IQ16s")
#: struct otcp_sc_params: increase_x256, initial_ssthresh, flags, pad, applied.
VALUE = struct.Struct("<IIIIQ")
HOST_BITS = 64  # the cookie, before the address
#: The counters of struct otcp_sc_counters, in order.
COUNTERS = ("connections", "matched", "ssthresh_from_map", "acks", "not_cwnd_limited", "slow_start_acked",
            "additive_acked", "additive_increase", "additive_rounds_x1024", "scalable_acked", "scalable_increase",
            "scalable_cuts", "halvings", "cuts_without_hook", "ssthresh_repaired", "cwnd_repaired")
#: The largest initial ssthresh an entry may carry (segments): the program's sane-window bound, less one.
MAX_SSTHRESH = 2**20 - 1


@dataclass(frozen=True)
class ScalableEntry:
    """What ``otcp_scalable`` applies to connections toward one destination prefix.

    increase: GridDT's A, segments per round trip in congestion avoidance
    where the AIMD rule holds (at or below 16 segments; at every window with
    ``griddt``), from 1/256 to 255 in steps of 1/256; initial_ssthresh:
    segments, 0 to leave the kernel's (set only where the kernel holds no
    threshold yet), else 2 to MAX_SSTHRESH; griddt: AIMD with A and halving
    at every window instead of Scalable TCP above 16 segments.
    """

    increase: float = 1.0
    initial_ssthresh: int = 0
    griddt: bool = False

    def __post_init__(self) -> None:
        increase = self.increase
        if isinstance(increase, bool) or not isinstance(increase, int | float) or not math.isfinite(increase) \
                or not 1 <= round(increase * INCREASE_ONE) <= 0xFFFF:
            raise ValueError(f"increase {increase!r} is not a number of segments per round trip in 1/256..255")
        # Held as the map holds it (steps of 1/256), so an entry read back equals the one written.
        object.__setattr__(self, "increase", round(increase * INCREASE_ONE) / INCREASE_ONE)
        ssthresh = self.initial_ssthresh
        if isinstance(ssthresh, bool) or not isinstance(ssthresh, int) \
                or not (ssthresh == 0 or 2 <= ssthresh <= MAX_SSTHRESH):
            raise ValueError(f"initial_ssthresh {ssthresh!r} is neither 0 nor a whole number of segments "
                             f"in 2..{MAX_SSTHRESH}")
        if not isinstance(self.griddt, bool):
            raise ValueError(f"griddt {self.griddt!r} is not True or False")

    def pack(self, applied: int = 0) -> bytes:
        """``struct otcp_sc_params``."""
        return VALUE.pack(round(self.increase * INCREASE_ONE), self.initial_ssthresh, GRIDDT if self.griddt else 0, 0,
                          applied)

    @classmethod
    def unpack(cls, raw: bytes) -> tuple[ScalableEntry, int]:
        """From the map value: (the entry, connections that took it)."""
        increase_x256, ssthresh, flags, _, applied = VALUE.unpack(raw)
        return cls(increase_x256 / INCREASE_ONE, ssthresh, bool(flags & GRIDDT)), applied


def encode_key(netns_cookie: int, prefix: str) -> bytes:
    """The LPM-trie key of a host's entry for ``prefix`` (IPv4 as ::ffff:a.b.c.d/96+len)."""
    address, bits = lpm_address(prefix)
    if isinstance(netns_cookie, bool) or not isinstance(netns_cookie, int) or not 0 <= netns_cookie < 2**64:
        raise ValueError(f"bad netns cookie {netns_cookie!r}")
    return KEY.pack(HOST_BITS + bits, netns_cookie, address)


def decode_key(raw: bytes) -> tuple[int, str]:
    """(netns cookie, prefix) of a key; the inverse of :func:`encode_key`."""
    bits, cookie, address = KEY.unpack(raw)
    return cookie, lpm_prefix(address, bits - HOST_BITS)


class ScalableTable:
    """The pinned maps of the registered ``otcp_scalable``: hosts' entries and the counters."""

    def __init__(self) -> None:
        pin = outer(PIN)
        self.entries_map = PinnedMap(pin / "maps" / DST_MAP, VALUE.size, KEY.size)
        self.counter_map = PinnedMap(pin / "maps" / COUNTER_MAP, 8 * len(COUNTERS) * possible_cpus())
        self._closed = False
        close_at_exit(self)

    @classmethod
    def open_pinned(cls) -> ScalableTable:
        """The maps of the algorithm another process registered; raises
        :class:`BpfUnavailable` when it is not registered by OTCP."""
        if not (outer(PIN) / "maps" / DST_MAP).exists():
            raise BpfUnavailable(f"{CC_NAME} is not registered by OTCP ({PIN / 'maps' / DST_MAP} is not pinned)")
        return cls()

    def entries(self, netns_cookie: int) -> dict[str, tuple[ScalableEntry, int]]:
        """The host's entries read back from the kernel: prefix -> (entry,
        connections that took it since it was written)."""
        shown = {}
        for raw in self.entries_map.keys():
            cookie, prefix = decode_key(raw)
            if cookie == netns_cookie:
                try:
                    shown[prefix] = ScalableEntry.unpack(self.entries_map.lookup(raw))
                except BpfUnavailable:
                    continue  # deleted meanwhile
        return dict(sorted(shown.items()))

    def update(self, netns_cookie: int, entries: Mapping[str, ScalableEntry]) -> None:
        """Make the host's entries exactly ``entries`` (prefix -> entry):
        new and changed ones written, the others deleted; an unchanged entry
        keeps its count. Each connection reads one entry, whole. Bad input is
        refused before anything is written; when the kernel refuses a write,
        the host's previous entries are put back and the refusal raised."""
        if self._closed:
            raise BpfUnavailable(f"the {CC_NAME} table is closed")
        wanted: dict[bytes, ScalableEntry] = {}
        for prefix, entry in entries.items():
            if not isinstance(entry, ScalableEntry):
                raise ValueError(f"{prefix}: {entry!r} is not a ScalableEntry")
            wanted[encode_key(netns_cookie, prefix)] = entry
        held = self.entries(netns_cookie)
        previous = {encode_key(netns_cookie, prefix): entry for prefix, (entry, _) in held.items()}
        try:
            self._write(wanted, previous)
        except BpfUnavailable:
            self._write(previous, wanted)
            raise

    def remove(self, netns_cookie: int) -> None:
        """Delete all the host's entries: its connections get the defaults
        (A = 1, the kernel's ssthresh, Scalable above 16 segments)."""
        self.update(netns_cookie, {})

    def _write(self, wanted: Mapping[bytes, ScalableEntry], present: Mapping[bytes, ScalableEntry]) -> None:
        for key, entry in wanted.items():
            if present.get(key) != entry:
                self.entries_map.update(entry.pack(), key)
        for key in present.keys() - wanted.keys():
            try:
                self.entries_map.delete(key)
            except BpfUnavailable as error:
                if "No such file" not in str(error):
                    raise

    def counters(self) -> dict[str, int]:
        """The algorithm's counters summed over CPUs, since it was registered
        (every connection of the machine that uses it)."""
        cpus = possible_cpus()
        values = struct.unpack(f"<{len(COUNTERS) * cpus}Q", self.counter_map.lookup(0))
        return {name: sum(values[cpu * len(COUNTERS) + i] for cpu in range(cpus)) for i, name in enumerate(COUNTERS)}

    def close(self) -> None:
        """Close the maps' file descriptors (idempotent)."""
        self._closed = True
        self.entries_map.close()
        self.counter_map.close()
        closed(self)


class RegisteredScalable(RegisteredStructOps):
    """``otcp_scalable`` as this process registered it, with its maps pinned.

    ``table`` fills hosts' entries and reads the counters; ``close()`` closes
    the maps, unpins them and unregisters (also at exit).
    """

    def __init__(self, map_id: int, lock: TextIO) -> None:
        super().__init__(CC_NAME, map_id, lock)
        self.table: ScalableTable | None = None

    def pin_maps(self) -> None:
        """Pin the algorithm's maps at PIN/maps and open them (``table``)."""
        bpffs()
        pin = outer(PIN)
        unpin(pin)  # a killed holder's: the name's lock is ours, so no live process uses them
        ids = self.map_ids()
        try:
            (pin / "maps").mkdir(parents=True)
            for name in (DST_MAP, COUNTER_MAP):
                if name not in ids:
                    raise BpfUnavailable(f"{CC_NAME}: no {name} map among its programs' maps ({sorted(ids)})")
                run(["bpftool", "map", "pin", "id", str(ids[name]), str(pin / "maps" / name)], f"pinning {name}")
            self.table = ScalableTable()
        except BaseException:
            unpin(pin)
            raise

    def counters(self) -> dict[str, int]:
        """The algorithm's counters (:meth:`ScalableTable.counters`)."""
        if self.table is None:
            raise BpfUnavailable(f"{CC_NAME}: the maps are not pinned")
        return self.table.counters()

    def close(self) -> None:
        """Close and unpin the maps, then unregister (idempotent)."""
        try:
            if self.table is not None:
                self.table.close()
                self.table = None
            unpin(outer(PIN))
        finally:
            super().close()


def register_scalable(wait_s: float = 0.0) -> RegisteredScalable:
    """Build if needed, register ``otcp_scalable`` and pin its maps; return
    the handle that fills entries and unregisters.

    Another OTCP process holding the name is waited for up to ``wait_s``
    seconds. Raises :class:`BpfUnavailable` with the tool's and the kernel's
    words when the toolchain, the verifier or the kernel refuses, when the
    wait runs out, or when something outside OTCP registered the name.
    """
    map_id, lock = congestion.register(CC_NAME, wait_s)
    registered = RegisteredScalable(map_id, lock)
    try:
        registered.pin_maps()
    except BaseException:
        registered.close()
        raise
    return registered


def cleanup_leftover() -> list[int]:
    """Unregister an ``otcp_scalable`` that no OTCP process holds and unpin
    its maps (what a holder killed before its clean-up left); return the
    struct_ops ids unregistered. Does nothing while an OTCP process holds
    the name."""
    try:
        lock = congestion.take_lock(CC_NAME, 0.0)
    except BpfUnavailable:
        return []
    try:
        unpin(outer(PIN))
        return congestion.unregister_all(CC_NAME)
    finally:
        lock.close()

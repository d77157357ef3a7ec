"""Round trips to this host's destinations, measured where they are accurate:
at the host (docs/design.md, "Measurement").

Two sources, in the style of Pingmesh (Guo et al., SIGCOMM 2015):

- **tcp**: the kernel's own minimum RTT of every established connection
  (``tcpi_min_rtt`` through sock_diag), free and exact for the paths that
  carry traffic;
- **probe**: for a destination no connection has measured lately, one light
  active probe a round: a TCP SYN to a closed port, answered by the
  destination's kernel with a RST, so no listener is needed on the far side
  and neither end's user space is in the loop.

`RttMeter.report` gives, per destination, the minimum over a sliding window
(scheduling noise only ever adds), the spread of the samples above it, how
many there were and which source gave the minimum: a `RoundTrip`, in
seconds like everything the agent holds (the kernel's microseconds are
converted as they are read, the wire's in `otcp.wire.messages`).
"""

from __future__ import annotations

import errno
import ipaddress
import select
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from pyroute2.netlink.diag import DiagSocket

from otcp.wire.limits import RTT_PROBE_PORT
from otcp.wire.messages import RoundTrip

TCP_ESTABLISHED = 1
INET_DIAG_INFO = 2


@dataclass(frozen=True)
class Sample:
    """One round trip to a destination, in seconds, and where it came from."""

    at: float
    rtt_s: float
    source: Literal["tcp", "probe"]


#: How often an agent measures and reports by default, and how many peers it probes each time.
INTERVAL_S = 5.0
PROBES_PER_ROUND = 8


class RttMeter:
    """Minimum round trips to a set of destinations, over a sliding window."""

    def __init__(self, window_s: float = 60.0, probes_per_round: int = PROBES_PER_ROUND,
                 probe_timeout_s: float = 0.2, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.probes_per_round = probes_per_round
        self.probe_timeout_s = probe_timeout_s
        self.clock = clock
        self._samples: dict[str, deque[Sample]] = {}
        self._next_probe = 0

    def measure(self, prefixes: Iterable[str], peers: Iterable[str] = (),
                connections: Iterable[Connection] | None = None) -> None:
        """One round: read the kernel's TCP round trips to addresses under the
        set's prefixes (from connections, the host's established ones: read now
        if not given), then probe those that have none: the host routes'
        addresses and the peers (hosts the controller knows) under a prefix."""
        networks = [ipaddress.ip_network(prefix) for prefix in prefixes]
        covered = covered_by(networks)
        now = self.clock()
        for dst, rtt in tcp_min_rtts(connections).items():
            if covered(dst):
                self.add(dst, Sample(now, rtt, "tcp"))
        hosts = {str(n.network_address) for n in networks if n.prefixlen == n.max_prefixlen}
        hosts |= {peer for peer in peers if covered(peer)}
        unmeasured = sorted(dst for dst in hosts if not self._recent(dst, now, "tcp"))
        for dst in self._rotation(unmeasured):
            probed = syn_probe(dst, self.probe_timeout_s)
            if probed is not None:
                self.add(dst, Sample(self.clock(), probed, "probe"))

    def add(self, dst: str, sample: Sample) -> None:
        """Keep one sample (also for tests and other sources)."""
        self._samples.setdefault(dst, deque(maxlen=1000)).append(sample)

    def report(self) -> list[RoundTrip]:
        """The round trip to each address with samples in the window."""
        now = self.clock()
        rows = []
        for dst in sorted(self._samples):
            samples = [s for s in self._samples[dst] if now - s.at <= self.window_s]
            if not samples:
                del self._samples[dst]
                continue
            self._samples[dst] = deque(samples, maxlen=1000)
            ordered = sorted(samples, key=lambda s: s.rtt_s)
            p90 = ordered[int(0.9 * (len(ordered) - 1))].rtt_s
            rows.append(RoundTrip(dst, ordered[0].rtt_s, p90 - ordered[0].rtt_s, len(samples), ordered[0].source))
        return rows

    def _recent(self, dst: str, now: float, source: str) -> bool:
        return any(s.source == source and now - s.at <= self.window_s for s in self._samples.get(dst, ()))

    def _rotation(self, candidates: list[str]) -> list[str]:
        """The next few candidates, round-robin, so every destination gets its turn."""
        if not candidates:
            return []
        start = self._next_probe % len(candidates)
        chosen = (candidates[start:] + candidates[:start])[: self.probes_per_round]
        self._next_probe = start + len(chosen)
        return chosen


@dataclass(frozen=True)
class Connection:
    """One established TCP connection of this host as sock_diag shows it: the far end's address,
    both ports, the kernel's minimum round trip (None before its first sample) and the bytes the
    far end has acknowledged (tcpi_bytes_acked, the SYN's one included)."""

    dst: str
    dst_port: int
    src: str
    src_port: int
    min_rtt_s: float | None
    bytes_acked: int


def established_connections() -> list[Connection]:
    """Every established TCP connection of this host's network namespace, IPv4 and IPv6."""
    found = []
    with DiagSocket() as diag:
        diag.bind()
        for family in (socket.AF_INET, socket.AF_INET6):
            for message in diag.get_sock_stats(family=family, states=1 << TCP_ESTABLISHED,
                                               extensions=1 << (INET_DIAG_INFO - 1)):
                info = message.get_attr("INET_DIAG_INFO")
                rtt_us = info.get("tcpi_min_rtt") if info is not None else None
                found.append(Connection(
                    message["idiag_dst"], message["idiag_dport"], message["idiag_src"], message["idiag_sport"],
                    rtt_us * 1e-6 if rtt_us and rtt_us != 0xFFFFFFFF else None,  # 0 / ~0: no sample yet
                    (info.get("tcpi_bytes_acked") or 0) if info is not None else 0))
    return found


def covered_by(networks: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> Callable[[str], bool]:
    """Whether an address lies in one of networks (the applied set's prefixes)."""
    kept = list(networks)
    return lambda address: any(ipaddress.ip_address(address) in network for network in kept)


def tcp_min_rtts(connections: Iterable[Connection] | None = None) -> dict[str, float]:
    """{destination address: smallest tcpi_min_rtt in seconds} over the established TCP connections
    (connections: read now if not given)."""
    found: dict[str, float] = {}
    for connection in established_connections() if connections is None else connections:
        if connection.min_rtt_s is not None:
            found[connection.dst] = min(found.get(connection.dst, float("inf")), connection.min_rtt_s)
    return found


def syn_probe(dst: str, timeout_s: float) -> float | None:
    """Seconds from a SYN to the answer (RST or SYN-ACK) of dst's kernel, or None if none came."""
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        started = time.perf_counter()
        code = probe.connect_ex((dst, RTT_PROBE_PORT))
        if code not in (errno.EINPROGRESS, errno.ECONNREFUSED, 0):
            return None
        if code == errno.EINPROGRESS:
            _, writable, _ = select.select([], [probe], [], timeout_s)
            if not writable:
                return None
        elapsed = time.perf_counter() - started
        answer = probe.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        return elapsed if answer in (0, errno.ECONNREFUSED) else None

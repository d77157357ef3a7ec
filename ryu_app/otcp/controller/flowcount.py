"""Active host-pair flows from OpenFlow flow statistics (docs/design.md, "Measurement").

Each host pair that sends has a pair entry at its ingress edge switch
(otcp.controller.forwarding). A pair is active when the packet counter of its entry
grew between the last two polls of that switch, and its packets carried data:
more bytes than header-only frames would (HEADER_ONLY_FRAME_BYTES each), so the
ACKs a receiver returns do not make it a sender too. An active pair counts as one
flow on every link of its path (the planner does that part).

`HeldFlows`: a pair that stops sending still counts as a flow for a hold
time. A new flow counts at once (more flows means smaller windows: the
safe side); one that stopped counts until it has been idle for the hold
time, so the pause between two rounds of a workload does not open every
window to the single-flow value and shut it again a second later.

`ReportedConnections`: a pair entry sees a host pair, not its connections.
Where several senders share a host, its agent reports how many of its
connections to each destination sent data lately (otcp.agent.sending), and
an active pair counts as that many flows while the report is fresh. The
switch still decides whether the pair is active: a report alone makes no flow.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from otcp.planning.fabric import Pair
from otcp.wire.messages import SendingConnections

#: The largest frame that carries no TCP payload, as a switch counts it (Ethernet 14, IPv4 20,
#: TCP 20 and at most 40 of options: a pure ACK with timestamps and SACK blocks).
HEADER_ONLY_FRAME_BYTES = 94

#: One pair entry's counters in a poll: (src_ip, dst_ip, packets, bytes), both counted since the entry was made.
PairCounters = tuple[str, str, int, int]


class FlowCounter:
    """Remembers per-switch counters and tells which pairs are active."""

    def __init__(self, min_packets: int) -> None:
        """min_packets: how many packets a pair must have sent since the previous poll to count as a flow."""
        self.min_packets = min_packets
        self._counters: dict[int, dict[Pair, tuple[int, int]]] = {}  # dpid -> {(src_ip, dst_ip): (packets, bytes)}
        self._active: dict[int, set[Pair]] = {}  # dpid -> set of (src_ip, dst_ip)

    def update(self, dpid: int, entries: Iterable[PairCounters]) -> None:
        """Take one poll of a switch: entries are (src_ip, dst_ip, packets, bytes)."""
        current = {(src, dst): (packets, size) for src, dst, packets, size in entries}
        previous = self._counters.get(dpid)
        self._counters[dpid] = current
        if previous is None:
            self._active[dpid] = set()
            return
        active = set()
        for pair, (packets, size) in current.items():
            packets_before, size_before = previous.get(pair, (0, 0))
            sent = packets - packets_before
            if sent >= self.min_packets and size - size_before > sent * HEADER_ONLY_FRAME_BYTES:
                active.add(pair)
        self._active[dpid] = active

    def forget_switch(self, dpid: int) -> None:
        """Drop the counters of a switch that went away."""
        self._counters.pop(dpid, None)
        self._active.pop(dpid, None)

    def active_pairs(self) -> dict[Pair, int]:
        """{(src_ip, dst_ip): 1} for every pair active on any switch."""
        return {pair: 1 for pairs in self._active.values() for pair in pairs}


@dataclass
class HeldFlows:
    """Active pairs, each counted until hold_s after it was last seen active."""

    hold_s: float
    _last_active: dict[Pair, tuple[float, int]] = field(default_factory=dict)  # pair -> (time, count)

    def update(self, now: float, active: dict[Pair, int]) -> dict[Pair, int]:
        """Take the pairs active in this poll; return {pair: count} of pairs active or held."""
        for pair, count in active.items():
            self._last_active[pair] = (now, count)
        self._last_active = {pair: seen for pair, seen in self._last_active.items() if now - seen[0] <= self.hold_s}
        return {pair: count for pair, (_, count) in self._last_active.items()}


class ReportedConnections:
    """The agents' reports of their sending connections per destination over the last max_age_s.

    A pair counts as the most connections any of its source's reports in that time gave: a
    rise counts at once and a fall only once the higher reports have aged out, as HeldFlows
    holds a pair (a report taken between two of a host's jobs sees none of their connections)."""

    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._reports: dict[str, list[tuple[float, dict[str, int]]]] = {}  # host_ip -> [(time, {dst_ip: count})]

    def report(self, now: float, host_ip: str, sending: Iterable[SendingConnections]) -> None:
        """Take a host's report, and forget its reports older than max_age_s."""
        kept = [(at, counts) for at, counts in self._reports.get(host_ip, []) if now - at <= self.max_age_s]
        self._reports[host_ip] = [*kept, (now, {s.dst: s.connections for s in sending})]

    def weigh(self, now: float, active: dict[Pair, int]) -> dict[Pair, int]:
        """active, each pair counted as the most connections its source's reports of the last
        max_age_s gave toward its destination, where that is more."""
        weighed = dict(active)
        for (src, dst), count in active.items():
            reported = [counts.get(dst, 0) for at, counts in self._reports.get(src, []) if now - at <= self.max_age_s]
            weighed[(src, dst)] = max([count, *reported])
        return weighed

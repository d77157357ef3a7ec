"""Round trips the agents measured, per host pair (docs/design.md, "Measurement").

Each agent reports, per destination, its minimum round trip over a window
and the spread above it. A direction's minimum is the smallest its reports
gave over the last max_age_s (a windowed minimum, as the kernel keeps
tcp_min_rtt: a busy minute's reports carry queueing, a quiet moment's do
not), its top the largest (a windowed maximum: minRTO, which takes the top,
rises with the first busy report and falls only once it has aged out, so a
steady fabric's jitter does not move it up and down). A pair's estimate combines both
directions (the smaller minimum, the larger top) and expires when no report
renews it, so a host that went quiet falls back to the per-link view.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from otcp.planning.fabric import Pair, PairRtt
from otcp.wire.messages import RoundTrip


@dataclass
class HostRtts:
    """The reports of the last max_age_s, by (reporting host, destination) address.

    A report whose minimum is a probe's is taken once the agent's window holds
    min_samples samples: a single SYN probe is often the first packet between
    its hosts through a userspace switch, which pays an upcall at every hop
    (3 564 us where the ping minimum was 201 us, in
    tests/integration/test_agent_mininet.py), and the minimum of one sample
    is no minimum. One whose minimum is the kernel's (source "tcp",
    tcpi_min_rtt) is taken at once: that is already a connection's minimum
    over every ACK it had."""

    max_age_s: float
    min_samples: int
    _reports: dict[Pair, list[tuple[float, PairRtt]]] = field(default_factory=dict)  # oldest first

    def report(self, now: float, host_ip: str, round_trips: Iterable[RoundTrip]) -> None:
        """Take one agent's report: the kernel's minimums, and probes' of enough samples."""
        for trip in round_trips:
            if trip.source != "tcp" and trip.count < self.min_samples:
                continue
            self._reports.setdefault((host_ip, trip.dst), []).append(
                (now, PairRtt(trip.min_s, trip.min_s + trip.spread_s, trip.source)))

    def estimates(self, now: float) -> dict[Pair, PairRtt]:
        """{(a, b): PairRtt} for every pair either end reported lately, in both orders."""
        kept = {key: [(at, rtt) for at, rtt in history if now - at <= self.max_age_s]
                for key, history in self._reports.items()}
        self._reports = {key: history for key, history in kept.items() if history}
        combined: dict[Pair, PairRtt] = {}
        for (a, b), history in self._reports.items():
            lowest = min((rtt for _, rtt in history), key=lambda r: r.low_s)
            top = max(rtt.high_s for _, rtt in history)
            rtt = PairRtt(lowest.low_s, top, lowest.source)
            for pair in ((a, b), (b, a)):
                known = combined.get(pair)
                if known is None:
                    combined[pair] = rtt
                else:
                    low = min(known, rtt, key=lambda r: r.low_s)
                    combined[pair] = PairRtt(low.low_s, max(known.high_s, rtt.high_s), low.source)
        return combined

"""Flow completion: the ideal FCT, slowdown, size buckets and query completion, as pure functions.

**FCT** is measured where the data arrives: from the moment the receiving
program asks for the flow (it calls connect(); the flow is pulled: SYN,
SYN-ACK, then a request, then the data) to the moment it has read the
flow's last byte.

**The ideal FCT** is that time on an idle network at line rate
(``ideal_fct_s``): ``round_trips`` base round trips (a new connection
pulled: 2, the handshake and the request/response; ``PULLED_NEW``), plus
the flow's bytes on the wire at the line rate, plus one largest frame per
further store-and-forward link (the first frame is serialized again on
every link of the path; the rest follow it pipelined)::

    ideal = round_trips x base_rtt + (wire_bytes(size) + (links - 1) x first_frame) / rate
    wire_bytes(size) = size + packets(size) x overhead,  packets = ceil(size / mss)
    first_frame = min(size, mss) + overhead

with the segment (``mss``, 1448 B: a 1500 B MTU with timestamps) and the
per-packet header overhead (66 B: TCP 20 + timestamps 12, IPv4 20,
Ethernet 14, what the emulated links count) of ``Framing``. ``base_rtt``
is the fabric's round trip for a small packet on the idle path (measured:
its own small serialization and the switches' forwarding are in it).
The ideal is the same for every scheme: a scheme that sends smaller
segments pays their headers in its FCT.

**Slowdown** is FCT / ideal (1 at best). **Buckets** group flows by size
(``BUCKET_UPPERS``: < 10 kB, 10-100 kB, 100 kB-1 MB, >= 1 MB, decimal);
each reports its flows, how many finished, and FCT and slowdown at p50,
p99 and p99.9. A flow that did not finish counts as longer than every
flow that did: a percentile that falls on such flows is None (beyond the
run), never a number made up for it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from otcp.planning.formulas import DEFAULT_MSS_BYTES, FRAME_OVERHEAD_BYTES

#: Round trips before the last byte of a flow pulled over a new connection (handshake, request/response).
PULLED_NEW = 2.0
#: ... pulled over an open connection (request/response).
PULLED_OPEN = 1.0
#: ... pushed over a new connection (handshake, then the data one way).
PUSHED_NEW = 1.5
#: ... pushed over an open connection (the data one way).
PUSHED_OPEN = 0.5

#: The buckets' upper bounds in bytes (exclusive); None: no bound.
BUCKET_UPPERS: tuple[int | None, ...] = (10_000, 100_000, 1_000_000, None)
#: Flows under this size are short (pFabric's and Homa's small flows): their tail is the latency others see.
SHORT_FLOW_BYTES = 100_000
#: The percentiles every bucket and query summary reports.
PERCENTILES = (50.0, 99.0, 99.9)


@dataclasses.dataclass(frozen=True)
class Framing:
    """How a flow's bytes go on the wire: the payload per full segment, and the headers each
    packet adds (TCP with timestamps, IPv4, Ethernet)."""

    mss_bytes: int = DEFAULT_MSS_BYTES
    overhead_bytes: int = FRAME_OVERHEAD_BYTES

    def __post_init__(self) -> None:
        if self.mss_bytes < 1 or self.overhead_bytes < 0:
            raise ValueError(f"a segment of {self.mss_bytes} B with {self.overhead_bytes} B of headers")

    def packets(self, size_bytes: int) -> int:
        """Packets that carry size_bytes (at least one)."""
        return max(1, math.ceil(size_bytes / self.mss_bytes))

    def wire_bytes(self, size_bytes: int) -> int:
        """size_bytes with every packet's headers."""
        return size_bytes + self.packets(size_bytes) * self.overhead_bytes

    def first_frame_bytes(self, size_bytes: int) -> int:
        """The largest frame of a flow of size_bytes: its first."""
        return min(size_bytes, self.mss_bytes) + self.overhead_bytes


@dataclasses.dataclass(frozen=True)
class IdealPath:
    """What an idle path gives a flow: the line rate (bytes/s), the base round trip (s), the
    store-and-forward links it crosses (a star's: 2), and the round trips before its last
    byte (PULLED_NEW, ...)."""

    rate_bytes_per_s: float
    base_rtt_s: float
    links: int = 2
    round_trips: float = PULLED_NEW

    def __post_init__(self) -> None:
        for value, what in ((self.rate_bytes_per_s, "rate_bytes_per_s"), (self.base_rtt_s, "base_rtt_s"),
                            (self.round_trips, "round_trips")):
            if isinstance(value, bool) or not math.isfinite(value) or value < 0 or \
                    (what == "rate_bytes_per_s" and value == 0):
                raise ValueError(f"IdealPath: {what} is {value!r}")
        if isinstance(self.links, bool) or self.links < 1:
            raise ValueError(f"IdealPath: links is {self.links!r}, expected at least 1")


def ideal_fct_s(size_bytes: int, path: IdealPath, framing: Framing = Framing()) -> float:
    """The FCT of a flow of size_bytes on an idle path at line rate (see the module docstring)."""
    if isinstance(size_bytes, bool) or size_bytes < 1:
        raise ValueError(f"a flow of {size_bytes!r} bytes")
    serialized = framing.wire_bytes(size_bytes) + (path.links - 1) * framing.first_frame_bytes(size_bytes)
    return path.round_trips * path.base_rtt_s + serialized / path.rate_bytes_per_s


def slowdown(fct_s: float, ideal_s: float) -> float:
    """FCT over the ideal FCT."""
    if not (ideal_s > 0 and fct_s >= 0):
        raise ValueError(f"slowdown of an FCT of {fct_s!r} s against an ideal of {ideal_s!r} s")
    return fct_s / ideal_s


def bucket_of(size_bytes: int, uppers: Sequence[int | None] = BUCKET_UPPERS) -> int | None:
    """The index of the first bucket whose upper bound exceeds size_bytes (None: no bucket)."""
    for index, upper in enumerate(uppers):
        if upper is None or size_bytes < upper:
            return index
    return None


def censored_percentile(finished: Sequence[float], unfinished: int, q: float) -> float | None:
    """The q-th percentile (0..100; linear between closest ranks, numpy's default) of finished
    values and unfinished ones that count as larger than all of them; None when it falls on an
    unfinished one, or there are no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    count = len(finished) + unfinished
    if not count:
        return None
    ordered = sorted(finished)
    rank = (count - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    if high >= len(ordered):
        return None
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclasses.dataclass(frozen=True)
class FlowOutcome:
    """One flow as measured: its size, its FCT (None: it did not finish) and its ideal FCT (s)."""

    size_bytes: int
    fct_s: float | None
    ideal_s: float

    @property
    def slowdown(self) -> float | None:
        """FCT / ideal, None for a flow that did not finish."""
        return None if self.fct_s is None else slowdown(self.fct_s, self.ideal_s)


@dataclasses.dataclass(frozen=True)
class BucketStats:
    """The flows of one size bucket: its upper bound (None: the last), how many flows, how many
    finished, and FCT (ms) and slowdown at p50, p99 and p99.9 (None: no flow, or beyond the
    flows that finished)."""

    upper_bytes: int | None
    flows: int
    finished: int
    fct_p50_ms: float | None
    fct_p99_ms: float | None
    fct_p999_ms: float | None
    slowdown_p50: float | None
    slowdown_p99: float | None
    slowdown_p999: float | None

    @property
    def unfinished(self) -> int:
        """Flows that did not finish."""
        return self.flows - self.finished


def _percentiles(finished: Sequence[float], unfinished: int, scale: float = 1.0) -> list[float | None]:
    values = [censored_percentile(finished, unfinished, q) for q in PERCENTILES]
    return [None if value is None else value * scale for value in values]


def bucket_stats(outcomes: Iterable[FlowOutcome], uppers: Sequence[int | None] = BUCKET_UPPERS) -> list[BucketStats]:
    """One BucketStats per bucket of uppers (every bucket, empty ones too), in their order."""
    grouped: list[list[FlowOutcome]] = [[] for _ in uppers]
    for outcome in outcomes:
        index = bucket_of(outcome.size_bytes, uppers)
        if index is None:
            raise ValueError(f"a flow of {outcome.size_bytes} B falls in no bucket of {list(uppers)}")
        grouped[index].append(outcome)
    stats = []
    for upper, flows in zip(uppers, grouped):
        done = [flow for flow in flows if flow.fct_s is not None]
        unfinished = len(flows) - len(done)
        fct = _percentiles([flow.fct_s for flow in done if flow.fct_s is not None], unfinished, 1000.0)
        slow = _percentiles([flow.slowdown for flow in done if flow.slowdown is not None], unfinished)
        stats.append(BucketStats(upper, len(flows), len(done), *fct, *slow))
    return stats


def mean_or_none(finished: Sequence[float], unfinished: int) -> float | None:
    """The mean of finished values, None when any value did not finish or there is none."""
    return sum(finished) / len(finished) if finished and not unfinished else None


@dataclasses.dataclass(frozen=True)
class QueryOutcome:
    """One query as measured: its completion time (s; the last response's, None if a response
    did not finish) and whether any of its connections saw a retransmission timeout."""

    qct_s: float | None
    timed_out: bool


@dataclasses.dataclass(frozen=True)
class QueryStats:
    """The queries of a run: how many, how many finished, QCT (ms) at the mean (None unless all
    finished), p50, p95 and p99, and how many saw a retransmission timeout."""

    count: int
    finished: int
    qct_mean_ms: float | None
    qct_p50_ms: float | None
    qct_p95_ms: float | None
    qct_p99_ms: float | None
    timeouts: int


def query_stats(outcomes: Iterable[QueryOutcome]) -> QueryStats:
    """QueryStats of outcomes."""
    outcomes = list(outcomes)
    done = [o.qct_s * 1000.0 for o in outcomes if o.qct_s is not None]
    unfinished = len(outcomes) - len(done)
    p50, p95, p99 = (censored_percentile(done, unfinished, q) for q in (50.0, 95.0, 99.0))
    return QueryStats(len(outcomes), len(done), mean_or_none(done, unfinished), p50, p95, p99,
                      sum(1 for o in outcomes if o.timed_out))

"""Statistics of runs: goodput, completion-time percentiles, probe RTTs, the queue's
emptiness, the single-flow ceiling's spread, and fairness (Jain's index, convergence).

Pure functions over what the workload programs, the probe and the samplers
report, so they can be checked without a network.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

#: A round as the incast client reports it: round, start_s, duration_s, bytes, flows_s.
Round = Mapping[str, Any]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of values, interpolating linearly between
    closest ranks (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize_rounds(rounds: Sequence[Round]) -> dict[str, float]:
    """Goodput and request completion times of a run.

    rounds: the client's records, each with start_s, duration_s and bytes.
    Goodput counts the payload of every round over the wall time from the
    first request to the last byte (gaps between rounds included); a
    request's completion time is its round's duration (the barrier waits
    for the slowest server).
    """
    if not rounds:
        raise ValueError("no rounds to summarize")
    first = min(r["start_s"] for r in rounds)
    last = max(r["start_s"] + r["duration_s"] for r in rounds)
    elapsed = last - first
    if elapsed <= 0:
        raise ValueError("rounds span no time")
    durations_ms = [r["duration_s"] * 1000.0 for r in rounds]
    total_bytes = sum(r["bytes"] for r in rounds)
    return {
        "goodput_mbps": total_bytes * 8 / elapsed / 1e6,
        "fct_mean_ms": sum(durations_ms) / len(durations_ms),
        "fct_p50_ms": percentile(durations_ms, 50),
        "fct_p95_ms": percentile(durations_ms, 95),
        "fct_p99_ms": percentile(durations_ms, 99),
    }


def unfinished_connections(rounds: Iterable[Round]) -> dict[str, float | None]:
    """How many of a round's connections were still unfinished, on average over its time, as a
    share (%) of them all: per round, the sum of each connection's completion (flows_s, from
    the round's start) over connections x round duration; the mean over the rounds (None
    without a round with connections).

    Where every window is held at a fixed share of the bottleneck's budget (otcp-lossless:
    1/N each), this share bounds the share of the budget the round can use: a finished
    connection's part is not passed on to those still sending."""
    shares = [100.0 * sum(r["flows_s"]) / (len(r["flows_s"]) * r["duration_s"])
              for r in rounds if r["flows_s"] and r["duration_s"] > 0]
    return {"connections_unfinished_pct": sum(shares) / len(shares) if shares else None}


def _round_spans(rounds: Iterable[Round]) -> list[tuple[float, float, float]]:
    """Each round's (start, end, first connection's finish) in monotonic seconds, by start."""
    return sorted((r["start_s"], r["start_s"] + r["duration_s"], r["start_s"] + min(r["flows_s"], default=0.0))
                  for r in rounds)


def _during_rounds(samples: Iterable[Sequence[float]],
                   spans: list[tuple[float, float, float]]) -> Iterator[tuple[Sequence[float], bool]]:
    """The samples (at, ...) taken during a round, each with whether it fell in the round's tail."""
    starts = [start for start, _, _ in spans]
    for sample in samples:
        i = bisect.bisect_right(starts, sample[0]) - 1
        if i >= 0 and sample[0] <= spans[i][1]:
            yield sample, sample[0] > spans[i][2]


def queue_emptiness(samples: Iterable[Sequence[float]], rounds: Iterable[Round]) -> dict[str, float | None]:
    """Where a run's bottleneck queue ran dry, from backlog samples [(monotonic s, bytes, ...)]
    and the client's rounds (start_s, duration_s, flows_s: each connection's completion,
    from the round's start). A sample with no backlog is a moment the link could only send
    what had just arrived, with no standing queue to keep it busy.

    - backlog_empty_pct: share (%) of the samples taken during rounds that found the queue empty;
    - backlog_empty_tail_pct: the same, of those taken after the round's first connection had
      finished (the round's tail, when fewer connections share the link than at its start);
    - round_tail_pct: the median share (%) of a round's time that is its tail.

    A share is None where no sample fell in (a round, a tail)."""
    spans = _round_spans(rounds)
    during, tail = [], []
    for sample, in_tail in _during_rounds(samples, spans):
        during.append(sample[1] == 0)
        if in_tail:
            tail.append(sample[1] == 0)
    tails = [100.0 * (end - first) / (end - start) for start, end, first in spans if end > start]
    return {"backlog_empty_pct": 100.0 * sum(during) / len(during) if during else None,
            "backlog_empty_tail_pct": 100.0 * sum(tail) / len(tail) if tail else None,
            "round_tail_pct": percentile(tails, 50) if tails else None}


def switch_input(samples: Iterable[Sequence[float]], rounds: Iterable[Round]) -> dict[str, float | None]:
    """What the userspace switch had not yet taken in during the rounds, from backlog samples
    [(monotonic s, bottleneck bytes, switch input bytes)] (otcp.experiments.hostprogs.backlog_probe
    --switch-inputs): frames queued in its ports' input sockets, which no qdisc counts and
    which add to every round trip when its forwarding thread falls behind.

    - switch_input_mean_bytes: their mean over the samples taken during rounds (skb truesize,
      which counts a frame's buffer, not its bytes on the wire);
    - switch_input_busy_pct: share (%) of those samples that found some.

    None where no sample with a switch input value fell in a round."""
    held = [sample[2] for sample, _ in _during_rounds(samples, _round_spans(rounds)) if len(sample) > 2]
    if not held:
        return {"switch_input_mean_bytes": None, "switch_input_busy_pct": None}
    return {"switch_input_mean_bytes": sum(held) / len(held),
            "switch_input_busy_pct": 100.0 * sum(1 for value in held if value) / len(held)}


def summarize_probe(rtts_ms: Sequence[float], sent: int) -> dict[str, float | None]:
    """RTT statistics of the latency probe: avg, max, population stddev and
    the share of probes that got no answer. With no answers at all, the RTT
    values are None."""
    if sent < len(rtts_ms):
        raise ValueError(f"{len(rtts_ms)} answers to {sent} probes")
    lost = (sent - len(rtts_ms)) / sent if sent else None
    if not rtts_ms:
        return {"probe_rtt_avg_ms": None, "probe_rtt_max_ms": None, "probe_rtt_std_ms": None, "probe_lost": lost}
    mean = sum(rtts_ms) / len(rtts_ms)
    variance = sum((x - mean) ** 2 for x in rtts_ms) / len(rtts_ms)
    return {"probe_rtt_avg_ms": mean, "probe_rtt_max_ms": max(rtts_ms), "probe_rtt_std_ms": math.sqrt(variance),
            "probe_lost": lost}


def cdf(values: Iterable[float]) -> tuple[list[float], list[float]]:
    """(sorted values, cumulative fractions) for plotting an empirical CDF."""
    ordered = sorted(values)
    count = len(ordered)
    return ordered, [(i + 1) / count for i in range(count)]


#: A single-flow ceiling sample more than this share below the best of its network and packet
#: size was disturbed: contention for the CPU only ever lowers one flow's rate.
CEILING_AGREEMENT = 0.05


def agreeing_ceilings(values: Sequence[float], agreement: float = CEILING_AGREEMENT) -> list[float]:
    """The samples of one ceiling within agreement (a share) of the best, in their order;
    the others were disturbed."""
    best = max(values)
    return [value for value in values if value >= (1 - agreement) * best]


@dataclasses.dataclass(frozen=True)
class Spread:
    """Repeated measurements of one quantity: median, min, max and the
    largest deviation from the median in per cent."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median sample."""
        return percentile(list(self.samples), 50)

    @property
    def low(self) -> float:
        """The smallest sample."""
        return min(self.samples)

    @property
    def high(self) -> float:
        """The largest sample."""
        return max(self.samples)

    @property
    def spread_pct(self) -> float:
        """The largest distance of a sample from the median, in per cent of the median."""
        median = self.median
        return 100.0 * max(abs(self.high - median), abs(median - self.low)) / median if median else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Median, min, max, spread and the samples, as the summary holds them."""
        return {"median": self.median, "min": self.low, "max": self.high, "spread_pct": self.spread_pct,
                "samples": list(self.samples)}


def jain_index(rates: Iterable[float]) -> float | None:
    """Jain's fairness index, (sum x)^2 / (n sum x^2): 1 when every rate is
    equal, 1/n when one flow has everything; None for no flows or no traffic."""
    values = [float(r) for r in rates]
    squares = sum(r * r for r in values)
    if not values or squares == 0:
        return None
    return sum(values) ** 2 / (len(values) * squares)


def interval_rates(reports: Sequence[tuple[float, Mapping[str, int]]]) -> list[tuple[float, dict[str, float]]]:
    """Per-flow rates between consecutive byte-count reports.

    reports: [(t seconds, {flow: bytes received so far})] in time order.
    Returns [(t at the interval's end, {flow: Mb/s})], with a flow from the
    first report that counts it.
    """
    rates = []
    for (t0, before), (t1, after) in zip(reports, reports[1:]):
        if t1 <= t0:
            raise ValueError(f"reports out of order at t={t1}")
        rates.append((t1, {flow: (count - before.get(flow, 0)) * 8 / (t1 - t0) / 1e6
                           for flow, count in after.items()}))
    return rates


def convergence_time(rates: Sequence[tuple[float, Mapping[str, float]]], arrival: float, arrivals: Mapping[str, float],
                     capacity_mbps: float, tolerance: float = 0.1, hold_s: float = 0.5,
                     until: float | None = None) -> float | None:
    """Seconds from arrival until every active flow's rate is within
    tolerance of the fair share, capacity_mbps / (flows active), and stays
    there for hold_s (or until `until`, the next arrival or the end, if that
    comes first); None if that never happens before `until`.

    rates: interval_rates' output; arrivals: {flow: time it started}.
    """
    def fair(t: float, flow_rates: Mapping[str, float]) -> bool:
        active = [f for f, start in arrivals.items() if start <= t - 1e-9]
        if not active:
            return False
        share = capacity_mbps / len(active)
        return all(abs(flow_rates.get(f, 0.0) - share) <= tolerance * share for f in active)

    window = [(t, r) for t, r in rates if t > arrival and (until is None or t <= until)]
    for index, (start, _) in enumerate(window):
        if all(fair(t, r) for t, r in window[index:] if t <= start + hold_s):
            return start - arrival
    return None

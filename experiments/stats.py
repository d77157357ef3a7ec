"""Statistics of one incast run: goodput, completion-time percentiles, probe RTTs.

Pure functions over what the workload client and the probe report, so they
can be checked without a network.
"""

import math


def percentile(values, q):
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


def summarize_rounds(rounds):
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


def summarize_probe(rtts_ms, sent):
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


def counter_deltas(before, after, names):
    """after - before for each counter name (a missing counter counts as 0)."""
    return {name: after.get(name, 0) - before.get(name, 0) for name in names}


def cdf(values):
    """(sorted values, cumulative fractions) for plotting an empirical CDF."""
    ordered = sorted(values)
    count = len(ordered)
    return ordered, [(i + 1) / count for i in range(count)]

"""Measure DCTCP and the marker on a Testbed, for docs/dctcp.md.

``python -m otcp.experiments.kernel.measure [--rate-mbit 100] [--buffer 85000] [--seconds 10] [--k BYTES]
    [--burst BYTES]
[--json FILE]``

1. ceiling: one cubic flow alone (no marker), the single-flow goodput;
2. dctcp: one otcp_dctcp flow, and a second one joining after a quarter of
   the run, through the marker (K from :func:`default_k_bytes` unless given):
   the qdisc's backlog sampled every few ms while both run, CE marks, goodput;
3. calibration: a cubic flow without ECN, which fills the buffer and never
   gets marked, sampled the same way: the virtual queue against the qdisc's
   backlog over the whole range up to the buffer.

Every sample pairs the root qdisc's backlog (netlink) with the virtual queue
(the map, read through libbpf) within a fraction of a millisecond.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from otcp.bpf.dctcp import CC_NAME, register_dctcp
from otcp.bpf.marker import Marker, MarkerConfig, attach_marker, default_k_bytes
from otcp.experiments.kernel.testbed import HTB_BURST, Testbed, finish

PORT = 5301


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _goodput(flows: list[dict]) -> float:
    start = min(f["first"] for f in flows)
    end = max(f["last"] for f in flows)
    return sum(f["bytes"] for f in flows) * 8 / (end - start) / 1e6


def _run(bed: Testbed, cc: str, seconds: float, flows: int, marker: Marker | None,
         sample: bool) -> dict[str, Any]:
    drops = bed.qdisc_drops()
    sink = bed.sink(PORT, cc, flows)
    sampler = None
    if sample and marker is not None:
        dev, ns = bed.bottleneck
        sampler = bed.python(ns, "sample", "--map", str(marker.loaded.maps["otcp_mark_q"]),
                             "--rate-bps", str(marker.config.rate_bps), "--dev", dev,
                             "--seconds", str(seconds + 0.5))
    sources = [bed.source(PORT, cc, seconds - i * seconds / 4, delay=i * seconds / 4) for i in range(flows)]
    for source in sources:
        finish(source, timeout=seconds + 30)
    result: dict[str, Any] = {"flows": finish(sink, timeout=30)["flows"]}
    result["qdisc_drops"] = bed.qdisc_drops() - drops
    if sampler is not None:
        result["samples"] = finish(sampler, timeout=30)["samples"]
    return result


def _queue_stats(samples: list[list[int]], start: float, end: float) -> dict[str, float]:
    window = [s for s in samples if start * 1e9 <= s[0] <= end * 1e9]
    real = [float(s[1]) for s in window]
    virtual = [float(s[2]) for s in window]
    diffs = [v - r for r, v in zip(real, virtual)]
    return {
        "samples": len(window),
        "qdisc_mean": statistics.fmean(real) if real else float("nan"),
        "qdisc_median": _percentile(real, 0.5),
        "qdisc_p5": _percentile(real, 0.05),
        "qdisc_p95": _percentile(real, 0.95),
        "qdisc_max": max(real, default=float("nan")),
        "virtual_mean": statistics.fmean(virtual) if virtual else float("nan"),
        "virtual_median": _percentile(virtual, 0.5),
        "virtual_p95": _percentile(virtual, 0.95),
        "diff_mean": statistics.fmean(diffs) if diffs else float("nan"),
        "diff_abs_median": _percentile([abs(d) for d in diffs], 0.5),
        "diff_abs_p95": _percentile([abs(d) for d in diffs], 0.95),
        "correlation": statistics.correlation(real, virtual) if len(window) > 2 else float("nan"),
        "within_one_packet": sum(abs(d) <= 1514 for d in diffs) / len(diffs) if diffs else float("nan"),
        "within_two_packets": sum(abs(d) <= 3028 for d in diffs) / len(diffs) if diffs else float("nan"),
        "virtual_below_by_over_10k": sum(d < -10000 for d in diffs) / len(diffs) if diffs else float("nan"),
        "read_us_median": _percentile([s[3] / 1e3 for s in window], 0.5),
    }


def measure(rate_mbit: float, buffer_bytes: int, seconds: float, k_bytes: int | None,
            burst: int) -> dict[str, Any]:
    """Run the three measurements on a fresh Testbed; return every figure.
    ``burst`` is the marker's model of HTB's burst (bytes; 0: none)."""
    rate_bps = int(rate_mbit * 1e6)
    k = default_k_bytes(rate_bps) if k_bytes is None else k_bytes
    report: dict[str, Any] = {"rate_mbit": rate_mbit, "buffer_bytes": buffer_bytes, "seconds": seconds,
                              "k_bytes": k, "marker_burst_bytes": burst, "htb_burst": HTB_BURST}
    bed = Testbed(rate_mbit, buffer_bytes)
    try:
        ceiling = _run(bed, "cubic", seconds, 1, None, sample=False)
        report["ceiling_mbps"] = _goodput(ceiling["flows"])
        report["ceiling_qdisc_drops"] = ceiling["qdisc_drops"]
        dev, ns = bed.bottleneck
        with register_dctcp(wait_s=600) as cc, attach_marker(dev, rate_bps, k, buffer_bytes, netns=ns,
                                                   burst_bytes=burst) as marker:
            run = _run(bed, CC_NAME, seconds, 2, marker, sample=True)
            counters = marker.counters()
            flows = run["flows"]
            both_start = max(f["first"] for f in flows) + 0.5  # the second flow's slow start over
            both_end = min(f["last"] for f in flows)
            report["dctcp"] = {
                "goodput_mbps": _goodput(flows),
                "flow_mbps": [f["bytes"] * 8 / (f["last"] - f["first"]) / 1e6 for f in flows],
                "cc": [f["cc"] for f in flows],
                "counters": counters.as_dict(),
                "qdisc_drops": run["qdisc_drops"],
                "cc_stats": cc.stats(),
                "mean_backlog_seen_by_arrivals": counters.mean_backlog_seen(),
                "queue_both_flows": _queue_stats(run["samples"], both_start, both_end),
            }
            report["dctcp"]["goodput_share_of_ceiling"] = report["dctcp"]["goodput_mbps"] / report["ceiling_mbps"]
            # Calibration: K above the buffer, so cubic is never marked and fills it.
            marker.configure(MarkerConfig(rate_bps, 1 << 40, buffer_bytes, burst))
            marker.reset()
            calibration = _run(bed, "cubic", seconds, 1, marker, sample=True)
            flow = calibration["flows"][0]
            report["calibration_cubic"] = {
                "counters": marker.counters().as_dict(),
                "qdisc_drops": calibration["qdisc_drops"],
                "queue": _queue_stats(calibration["samples"], flow["first"] + 0.5, flow["last"]),
            }
    finally:
        bed.delete()
    return report


def main(argv: list[str] | None = None) -> int:
    """Run measure() and print its figures (and write them as JSON)."""
    parser = argparse.ArgumentParser(prog="python -m otcp.experiments.kernel.measure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate-mbit", type=float, default=100.0)
    parser.add_argument("--buffer", type=int, default=85000, help="bottleneck buffer (bytes)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--k", type=int, default=None, help="marking threshold (bytes); default: the guideline")
    parser.add_argument("--burst", type=int, default=1600,
                        help="the marker's model of the shaper's burst (bytes; 0: none). The testbed's HTB class has "
                        "burst 15k but cburst 1600b (tc -d class show), and with ceil = rate the smaller bucket binds")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    started = time.time()
    report = measure(args.rate_mbit, args.buffer, args.seconds, args.k, args.burst)
    report["wall_seconds"] = round(time.time() - started, 1)
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.json:
        with open(args.json, "w") as out:
            out.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

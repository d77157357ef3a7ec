"""Markdown tables from incast sweeps' summaries (OUT/summary.json), as the README shows them.

    python -m otcp.experiments.analysis.report results/lossless-64k [results/lossless-64k-128 ...]

Reads every OUT/summary.json given (several directories are merged, a
later one's run replacing an earlier one's of the same scheme, sender count
and block: a re-run of points that failed) and prints, per block size:

- goodput as a share of the ceiling at the run's packet size, per scheme
  and sender count;
- p95 round completion against the ideal (senders x block / the ceiling);
- drops at the bottleneck and RTO timeouts;
- the probe's average RTT;
- the CPU: both cores' busy share, its softirq and steal parts, and the
  switch's forwarding thread's;
- the packet size each OTCP-lossless run used;
- the controller's new generations during each OTCP run's measured rounds;

then where dctcp first timed out, and otcp+dctcp's p95 and mean completion
against dctcp's at the most congested point both ran; and last, the commit
each sweep ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from otcp.experiments.runner.schemes import catalogue

Run = dict[str, Any]


def load_runs(directories: Sequence[str]) -> list[Run]:
    """Every run of the summaries in directories, as dicts (summary.json's "runs");
    a later directory's run replaces an earlier one's of the same scheme,
    sender count and block (a re-run of points that failed)."""
    runs: dict[tuple[str, int, int], Run] = {}
    for directory in directories:
        with open(os.path.join(directory, "summary.json"), encoding="utf-8") as handle:
            for run in json.load(handle)["runs"]:
                runs[(run["scheme"], run["senders"], run["sru_bytes"])] = run
    return list(runs.values())


def code_line(directory: str) -> str:
    """Which code a sweep ran: its summary's commit, and whether files differed from it
    or it changed during the sweep (summaries from before the field say so)."""
    with open(os.path.join(directory, "summary.json"), encoding="utf-8") as handle:
        code = json.load(handle).get("code")
    if code is None:
        return f"{directory}: code not recorded"
    if code["commit"] is None:
        return f"{directory}: not run from a git checkout"
    caveats = [text for flag, text in ((code["modified"], "files modified from it"),
                                       (code["changed_during_sweep"], "changed during the sweep")) if flag]
    return f"{directory}: commit {code['commit'][:7]}" + (f" ({', '.join(caveats)})" if caveats else "")


def ideal_ms(run: Run) -> float:
    """The round's completion with the bottleneck busy all along: senders x block / ceiling."""
    return run["senders"] * run["sru_bytes"] * 8 / (run["ceiling_mbps"] * 1e6) * 1000


def emptiness(run: Run) -> str:
    """A run's stats.queue_emptiness shares as one cell ("-" for a share with no sample)."""
    empty, tail, share = (run.get(field) for field in ("backlog_empty_pct", "backlog_empty_tail_pct",
                                                       "round_tail_pct"))
    return " / ".join("-" if value is None else f"{value:.0f} %" for value in (empty, tail)) + \
        ("" if share is None else f"; {share:.0f} %")


def table(runs: Sequence[Run], cell: Callable[[Run], str], title: str) -> str:
    """One markdown table: a row per sender count, a column per scheme (in the catalogue's order); "" for no runs."""
    if not runs:
        return ""
    order = list(catalogue())
    schemes = sorted({r["scheme"] for r in runs}, key=order.index)
    senders = sorted({r["senders"] for r in runs})
    by_key = {(r["scheme"], r["senders"]): r for r in runs}
    lines = [f"**{title}**", "", "| senders | " + " | ".join(schemes) + " |",
             "|---|" + "---|" * len(schemes)]
    for count in senders:
        cells = [cell(by_key[(s, count)]) if (s, count) in by_key else "" for s in schemes]
        lines.append(f"| {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def dctcp_findings(runs: Sequence[Run]) -> str:
    """Where dctcp first timed out, and otcp+dctcp against dctcp at the most congested point."""
    lines = []
    dctcp = sorted((r for r in runs if r["scheme"] == "dctcp"), key=lambda r: r["senders"])
    timing_out = [r for r in dctcp if r["timeouts"]]
    if dctcp:
        lines.append(f"- dctcp first timed out at {timing_out[0]['senders']} senders "
                     f"({timing_out[0]['timeouts']} RTOs)" if timing_out else
                     f"- dctcp did not time out up to {dctcp[-1]['senders']} senders")
    both = {r["senders"] for r in runs if r["scheme"] == "otcp+dctcp"} & {r["senders"] for r in dctcp}
    if both:
        most = max(both)
        pick = {r["scheme"]: r for r in runs if r["senders"] == most and r["scheme"] in ("dctcp", "otcp+dctcp")}
        plain, combined = pick["dctcp"], pick["otcp+dctcp"]
        lines.append(f"- at {most} senders, dctcp against otcp+dctcp: p95 {plain['fct_p95_ms']:.0f} / "
                     f"{combined['fct_p95_ms']:.0f} ms = {plain['fct_p95_ms'] / combined['fct_p95_ms']:.2f}x, mean "
                     f"{plain['fct_mean_ms']:.0f} / {combined['fct_mean_ms']:.0f} ms = "
                     f"{plain['fct_mean_ms'] / combined['fct_mean_ms']:.2f}x")
    return "\n".join(lines)


def cpu_use(run: Run) -> str:
    """Both cores' busy share, its softirq and steal parts, and the switch thread's, as one cell
    ("-" for what a summary from before that field lacks)."""
    def share(field: str) -> str:
        return "-" if run.get(field) is None else f"{run[field]:.0f}"
    parts = f"{share('cpu_softirq_pct')}, {share('cpu_steal_pct')}"
    return f"{run['cpu_busy_pct']:.0f} ({parts}) / {share('switch_cpu_pct')}"


def _all(run: Run) -> bool:
    return True


#: The tables of each block size, in order: which runs each shows (a run from before a field
#: was recorded is left out of its table), its cells and its title after the block's.
TABLES: tuple[tuple[Callable[[Run], bool], Callable[[Run], str], str], ...] = (
    (_all, lambda r: f"{100 * r['goodput_mbps'] / r['ceiling_mbps']:.0f} %",
     "goodput, share of the ceiling at the run's packet size"),
    (_all, lambda r: f"{r['fct_p95_ms'] / ideal_ms(r):.2f}x",
     "p95 round completion / ideal (senders x block / ceiling)"),
    (_all, lambda r: f"{r['drops']} / {r['timeouts']}", "drops at the bottleneck / RTOs"),
    (_all, lambda r: "-" if r["probe_rtt_avg_ms"] is None else f"{r['probe_rtt_avg_ms']:.2f}",
     "probe RTT average, ms"),
    (lambda r: r.get("backlog_empty_pct") is not None, emptiness,
     "bottleneck queue found empty, share of backlog samples: during rounds / in their "
     "tails (after a round's first connection finished); the tail's share of a round"),
    (lambda r: r.get("connections_unfinished_pct") is not None, lambda r: f"{r['connections_unfinished_pct']:.0f} %",
     "connections still unfinished, mean share over a round's time"),
    (lambda r: r.get("switch_input_mean_bytes") is not None,
     lambda r: f"{r['switch_input_mean_bytes'] / 1000:.1f} kB, {r['switch_input_busy_pct']:.0f} %",
     "the switch's input sockets during rounds: mean memory held (skb truesize) / share "
     "of samples that found frames the switch had not yet taken in"),
    (_all, cpu_use, "CPU during the rounds, % busy: both cores (of which softirq, steal) / the switch's "
     "forwarding thread (of one core)"),
    (lambda r: r["scheme"].startswith("otcp-"), lambda r: f"{r['packet_bytes']}", "IP packet size used (B)"),
    (lambda r: r.get("generations") is not None, lambda r: f"{r['generations']}",
     "new generations during the measured rounds"),
)


def report(runs: Sequence[Run]) -> str:
    """Every table and finding, per block size."""
    parts = []
    for block in sorted({r["sru_bytes"] for r in runs}):
        these = sorted((r for r in runs if r["sru_bytes"] == block), key=lambda r: r["senders"])
        kb = f"{block // 1024} KB per server"
        parts += [table([r for r in these if shown(r)], cell, f"{kb}: {title}")
                  for shown, cell, title in TABLES]
        parts.append(dctcp_findings(these))
    return "\n\n".join(p for p in parts if p)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the tables of the sweeps given."""
    parser = argparse.ArgumentParser(prog="report", description=__doc__.split("\n")[0])
    parser.add_argument("directories", nargs="+", help="sweep output directories (each with summary.json)")
    args = parser.parse_args(argv)
    try:
        runs = load_runs(args.directories)
    except (OSError, ValueError, KeyError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    print(report(runs))
    print("\n" + "\n".join(f"- {code_line(directory)}" for directory in args.directories))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Markdown tables and results pages from experiments' summaries (OUT/summary.json).

    otcp-experiment report results/lossless-64k [results/lossless-64k-128 ...]
    otcp-experiment report results/quick --markdown --output docs/results/quick.md [--title TITLE]
    otcp-experiment report SIM_DIR... --markdown --each --validate MININET_DIR=SIM_DIR --output PAGE
    python -m otcp.experiments.analysis.report DIR...      # the same

Reads every OUT/summary.json given (several directories are merged, a
later one's run replacing an earlier one's of the same scheme, sender count
and block: a re-run of points that failed) and prints, per block size:

- goodput as a share of the full-size (1500 B) ceiling, the line a user
  compares with (from the run's record, or for a summary from before that
  field from its network's 1500 B ceiling samples), and as a share of the
  ceiling at the run's packet size, per scheme and sender count;
- p95 round completion against the ideal (senders x block / the ceiling);
- drops at the bottleneck and RTO timeouts;
- the probe's average RTT;
- the CPU: both cores' busy share, its softirq and steal parts, and the
  switch's forwarding thread's;
- the packet size each OTCP-lossless run used;
- the controller's new generations during each OTCP run's measured rounds;

then where each scheme first timed out, and otcp+dctcp's mean, p95 and p50
completion against dctcp's wherever dctcp timed out (else at the most
congested point both ran); and last, the commit each sweep ran. A simulated
sweep of a fixed block per round (--total-bytes) is one table across its
sender counts.

Simulated runs (otcp-experiment simulate: their records carry the ideal round
and the simulator's cost) also get round completion p50 / p99 against the
ideal round, the bottleneck queue's peak and mean, duplicate segments at the
receivers, and what the run cost; the machine's CPU, which only matters to an
emulator, is left out for them.

A workload summary (``otcp-experiment workload``) gets its own tables
(``analysis.workload_report``): slowdown per size bucket, queries and
counters per point, and the regime search's table; given incast and
workload summaries together, the report starts with the trade-off per
scheme (goodput on synchronized reads beside the p99 short-flow slowdown
and the drops), and --tradeoff-plot FILE draws it; a page made with
--no-tradeoff leaves it out (incast and workload runs of different fabrics).

With --markdown it writes a results page instead: a title, the same tables each
followed by the exact command that produced its runs (as the summary recorded
it), the runs that failed with their errors, links to every sweep's plots (not
with --no-plots), and whether each sweep ran committed code (a page names no
commit; the printed tables do). With --each every directory is a section of its
own (its runs not merged with the others'), headed by its name. A directory
without a summary of its own, whose folders each hold one, is read as one sweep
(its folders' runs merged in name order): a sweep made by several runs of the
program, one table for it all, and one goodput plot of all its runs, drawn
into that directory (each run's completion-time plots stay linked). Where
simulated sweeps ran more than two static rto_min values on one setting, a
table sets them against OTCP's per-path values (fine-rto's value from each
sweep's --fine-rto-ms); and where simulated runs
are among them, a cost table follows: wall time per simulated second and
memory, by topology, link rate and senders. Each --validate MININET_DIR=SIM_DIR
(either one may be a folder of summaries, read as one sweep) adds a table of
the simulated runs against the emulated ones of the same scheme, senders and
block: the ratios of goodput (as a share of each one's
ceiling), drops and p95 completion. With --output the
page (or the tables) go to that file, and the plots' links are relative to its
directory.

"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import shlex
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from otcp.experiments.analysis import plots, results, workload_report
from otcp.experiments.runner.schemes import DEFAULT_FINE_RTO_MS, ETHERNET_MTU, catalogue
from otcp.experiments.sim.schemes import catalogue as sim_catalogue
from otcp.planning.formulas import Lossless

Run = dict[str, Any]
#: The plots a sweep may have drawn, in the order a page shows them, with what each shows.
PLOTS = (("goodput.png", "goodput against senders"), ("fct_cdf.png", "completion times at the most senders"),
         ("fct_bars.png", "mean and p95 completion at the most senders"))
#: The workload's plots, by their names' first part, with what each shows.
WORKLOAD_PLOTS = {"slowdown": "slowdown against flow size", "qct": "query completion times"}


@dataclasses.dataclass(frozen=True)
class Sweep:
    """One output directory's summary."""

    directory: str
    document: dict[str, Any]

    @classmethod
    def load(cls, directory: str) -> Sweep:
        """Read directory's summary.json."""
        with open(os.path.join(directory, "summary.json"), encoding="utf-8") as handle:
            return cls(directory, json.load(handle))

    @property
    def workload(self) -> bool:
        """Whether this is a workload experiment's summary (else an incast sweep's)."""
        return workload_report.is_workload(self.document)

    @property
    def command(self) -> str | None:
        """The command line that made the summary, as published (None in a summary from before it
        was recorded)."""
        recorded = self.document.get("command")
        return published_command(recorded) if recorded else None

    @property
    def queue_target_fraction(self) -> float:
        """The otcp-lossless queue target its command gave (--queue-target-fraction), else the default."""
        words = shlex.split(self.document.get("command") or "")
        for index, word in enumerate(words):
            if word == "--queue-target-fraction" and index + 1 < len(words):
                return float(words[index + 1])
            if word.startswith("--queue-target-fraction="):
                return float(word.split("=", 1)[1])
        return Lossless.queue_target_fraction


    def full_ceiling(self, senders: int, buffer_bytes: int) -> float | None:
        """The median single-flow ceiling at 1500 B packets the sweep measured on the network of
        senders and buffer_bytes (None where it has none)."""
        for ceiling in self.document.get("ceilings", []):
            if ceiling["packet_bytes"] == ETHERNET_MTU:
                for network in ceiling["networks"]:
                    if (network["senders"], network["buffer_bytes"]) == (senders, buffer_bytes):
                        return float(network["median"])
        return None


def published_command(command: str) -> str:
    """command with every absolute path into a results/ directory shown from its last results/ on, as a user
    runs it from the checkout: where the machine that ran it kept its results is nobody else's concern."""

    def portable(word: str) -> str:
        flag, equals, value = word.rpartition("=") if word.startswith("--") else ("", "", word)
        if value.startswith("/") and "/results/" in value:
            value = value[value.rindex("/results/") + 1:]
        return flag + equals + value

    return shlex.join(portable(word) for word in shlex.split(command))


def merged(sweeps: Sequence[Sweep]) -> list[tuple[Run, Sweep]]:
    """Every run of sweeps with the sweep it came from; a later sweep's run replaces an
    earlier one's of the same scheme, sender count and block (a re-run of points that failed)."""
    runs: dict[tuple[str, int, int], tuple[Run, Sweep]] = {}
    for sweep in sweeps:
        for run in sweep.document["runs"]:
            if run.get("full_ceiling_mbps") is None:
                run["full_ceiling_mbps"] = sweep.full_ceiling(run["senders"], run["buffer_bytes"])
            runs[(run["scheme"], run["senders"], run["sru_bytes"])] = (run, sweep)
    return list(runs.values())


def sweeps_in(directory: str) -> list[Sweep]:
    """The sweep of directory (its summary.json); where it holds none but folders that do, their
    sweeps in name order: one sweep told in several runs of the program, read as one."""
    if not os.path.isfile(os.path.join(directory, "summary.json")):
        inner = sorted(path for path in glob.glob(os.path.join(directory, "*"))
                       if os.path.isfile(os.path.join(path, "summary.json")))
        if inner:
            return [Sweep.load(path) for path in inner]
    return [Sweep.load(directory)]


def load_runs(directories: Sequence[str]) -> list[Run]:
    """Every run of the summaries in directories, as dicts (summary.json's "runs"), merged."""
    return [run for run, _ in merged([sweep for directory in directories for sweep in sweeps_in(directory)])]


def code_line(directory: str, with_commit: bool = True) -> str:
    """Which code a sweep ran: its summary's commit (with_commit; a committed page, whose text
    names no commits, says "committed code" instead), and whether files differed from it or it
    changed during the sweep (summaries from before the field say so)."""
    code = Sweep.load(directory).document.get("code")
    if code is None:
        return f"{directory}: code not recorded"
    if code["commit"] is None:
        return f"{directory}: not run from a git checkout"
    caveats = [text for flag, text in ((code["modified"], "files modified from it"),
                                       (code["changed_during_sweep"], "changed during the sweep")) if flag]
    named = f"commit {code['commit'][:7]}" if with_commit else "committed code"
    return f"{directory}: {named}" + (f" ({', '.join(caveats)})" if caveats else "")


def scheme_order() -> list[str]:
    """Every scheme name in the order tables show them: the runner's catalogue, then the simulator's own."""
    names = list(catalogue())
    return names + [name for name in sim_catalogue() if name not in names]


def simulated(run: Run) -> bool:
    """Whether a run came from the simulator (its record has the ideal round and its cost)."""
    return "ideal_ms" in run and "wall_per_sim_s" in run


def ideal_ms(run: Run) -> float:
    """The round's completion with the bottleneck busy all along: senders x block / ceiling."""
    return run["senders"] * run["sru_bytes"] * 8 / (run["ceiling_mbps"] * 1e6) * 1000


def emptiness(run: Run) -> str:
    """A run's stats.queue_emptiness shares as one cell ("-" for a share with no sample)."""
    empty, tail, share = (run.get(field) for field in ("backlog_empty_pct", "backlog_empty_tail_pct",
                                                       "round_tail_pct"))
    return " / ".join("-" if value is None else f"{value:.0f} %" for value in (empty, tail)) + \
        ("" if share is None else f"; {share:.0f} %")


#: What follows a table: a line naming what made its runs (made_by), or nothing.
MadeBy = Callable[[Sequence[Run]], str]


def table(runs: Sequence[Run], cell: Callable[[Run], str], title: str, made_by: MadeBy | None = None) -> str:
    """One markdown table: a row per sender count, a column per scheme (in the catalogue's order),
    followed by made_by's line for its runs where given; "" for no runs."""
    if not runs:
        return ""
    order = scheme_order()
    schemes = sorted({r["scheme"] for r in runs}, key=order.index)
    senders = sorted({r["senders"] for r in runs})
    by_key = {(r["scheme"], r["senders"]): r for r in runs}
    lines = [f"**{title}**", "", "| senders | " + " | ".join(schemes) + " |",
             "|---|" + "---|" * len(schemes)]
    for count in senders:
        cells = [cell(by_key[(s, count)]) if (s, count) in by_key else "" for s in schemes]
        lines.append(f"| {count} | " + " | ".join(cells) + " |")
    if made_by is not None:
        lines += ["", made_by(runs)]
    return "\n".join(lines)


def dctcp_findings(runs: Sequence[Run]) -> str:
    """Where each scheme first timed out, and otcp+dctcp against dctcp at every sender count where dctcp
    timed out (at the most congested point both ran when it never did): mean, p95 and p50 completion,
    and the RTOs of each, which say where a gap comes from."""
    lines = []
    order = scheme_order()
    for scheme in sorted({r["scheme"] for r in runs}, key=order.index):
        mine = sorted((r for r in runs if r["scheme"] == scheme), key=lambda r: r["senders"])
        timing_out = [r for r in mine if r["timeouts"]]
        lines.append(f"- {scheme} first timed out at {timing_out[0]['senders']} senders "
                     f"({timing_out[0]['timeouts']} RTOs)" if timing_out else
                     f"- {scheme} did not time out up to {mine[-1]['senders']} senders")
    pairs = {r["senders"]: r for r in runs if r["scheme"] == "dctcp"}
    both = sorted(((pairs[r["senders"]], r) for r in runs if r["scheme"] == "otcp+dctcp" and r["senders"] in pairs),
                  key=lambda pair: pair[0]["senders"])
    if not both:
        return "\n".join(lines)
    chosen = [(plain, combined) for plain, combined in both if plain["timeouts"]] or [both[-1]]
    for plain, combined in chosen:
        ratios = ", ".join(f"{what} {plain[field]:.1f} / {combined[field]:.1f} ms = "
                           f"{plain[field] / combined[field]:.2f}x"
                           for what, field in (("mean", "fct_mean_ms"), ("p95", "fct_p95_ms"), ("p50", "fct_p50_ms")))
        lines.append(f"- at {plain['senders']} senders, dctcp against otcp+dctcp: {ratios}; RTOs "
                     f"{plain['timeouts']} / {combined['timeouts']}")
    return "\n".join(lines)


#: The targets otcp-lossless is held to in a simulated incast: no RTO, no drop, p99 within this of the ideal.
LOSSLESS_P99_TARGET = 1.2


def default_queue_target(run: Run) -> float:
    """The queue target of a run whose command is not at hand: the formulas' default fraction of the buffer."""
    return Lossless.queue_target_fraction


def queue_targets(origins: Mapping[int, Sweep]) -> Callable[[Run], float]:
    """Each run's otcp-lossless queue target, from the command of its sweep (origins: by run id)."""
    return lambda run: origins[id(run)].queue_target_fraction


#: The schemes held to the lossless targets: otcp-lossless and its fan-in admission.
LOSSLESS_SCHEMES = ("otcp-lossless", "otcp-admit")


def lossless_targets(runs: Sequence[Run], queue_target_fraction: Callable[[Run], float] = default_queue_target
                     ) -> str:
    """Whether each lossless scheme's (LOSSLESS_SCHEMES) simulated runs met their targets at every sender
    count: 0 timeouts, 0 drops, p99 round completion within LOSSLESS_P99_TARGET of the ideal round, one
    line per scheme with such runs ("" without any). A miss carries the measured evidence of its reason:
    the spurious retransmissions (duplicate segments at the receivers) beside the RTOs and drops, and the
    queue's peak and mean against the plan's queue target (queue_target_fraction(run) of the buffer: its
    command's)."""
    lines = []
    for scheme in LOSSLESS_SCHEMES:
        mine = sorted((r for r in runs if r["scheme"] == scheme and simulated(r)), key=lambda r: r["senders"])
        if not mine:
            continue
        missed = [lossless_miss(r, queue_target_fraction(r)) for r in mine
                  if r["timeouts"] or r["drops"] or r["fct_p99_ms"] > LOSSLESS_P99_TARGET * r["ideal_ms"]]
        worst = max(r["fct_p99_ms"] / r["ideal_ms"] for r in mine)
        if missed:
            lines.append(f"- {scheme} missed its targets (0 RTOs, 0 drops, p99 within {LOSSLESS_P99_TARGET}x the "
                         f"ideal) at {'; '.join(missed)}")
        else:
            lines.append(f"- {scheme} met its targets at every sender count "
                         f"({', '.join(str(r['senders']) for r in mine)}): 0 RTOs, 0 drops, p99 at most {worst:.2f}x "
                         "the ideal")
    return "\n".join(lines)


def lossless_miss(run: Run, queue_target_fraction: float) -> str:
    """One missed sender count with its evidence: RTOs, duplicate segments at the receivers, drops, p99,
    and the queue's peak and mean against the plan's queue target."""
    target = run["buffer_bytes"] * queue_target_fraction
    return (f"{run['senders']} senders ({run['timeouts']} RTOs, {run['duplicate_segments']} spurious retransmissions "
            f"(duplicate segments at the receivers), {run['drops']} drops, "
            f"p99 {run['fct_p99_ms'] / run['ideal_ms']:.2f}x; queue peak {run['peak_backlog_bytes']:,} B, mean "
            f"{run['queue_mean_bytes']:,.0f} B, the plan's target {target:,.0f} B: {queue_target_fraction:g} of the "
            f"buffer)")


#: otcp-lossless's targets on an emulated incast: no drop and no RTO, and goodput at least this
#: many times default's and at least fine-rto's (Mb/s; the full-size ceiling is the same line for all).
LOSSLESS_OVER_DEFAULT = 1.5


def fan_in_targets(runs: Sequence[Run]) -> str:
    """Per lossless scheme (LOSSLESS_SCHEMES) and sender count where it, default and fine-rto all finished
    an emulated run: whether it met its targets (0 drops, 0 RTOs, goodput at least LOSSLESS_OVER_DEFAULT x
    default's and at least fine-rto's); a miss names what missed (and says so where default runs so
    near the line that the goodput target lies above the full-size ceiling) and the measured load beside it
    (both cores' busy share, the switch thread's, and how often the bottleneck's queue was found
    empty: a link left idle while the machine was busy). "" where no sender count has all three."""
    by_key = {(r["scheme"], r["senders"]): r for r in runs if not simulated(r)}
    lines = []
    held = [name for name in LOSSLESS_SCHEMES if any(scheme == name for scheme, _ in by_key)]
    for name, senders in sorted({(scheme, count) for scheme, count in by_key if scheme in held},
                                key=lambda key: (held.index(key[0]), key[1])):
        mine, default, fine = (by_key.get((scheme, senders)) for scheme in (name, "default", "fine-rto"))
        if mine is None or default is None or fine is None:
            continue
        missed = [f"{mine[field]} {what}{'' if mine[field] == 1 else 's'}"
                  for field, what in (("drops", "drop"), ("timeouts", "RTO")) if mine[field]]
        over_default, over_fine = (mine["goodput_mbps"] / other["goodput_mbps"] for other in (default, fine))
        if over_default < LOSSLESS_OVER_DEFAULT:
            wanted = LOSSLESS_OVER_DEFAULT * default["goodput_mbps"]
            beyond = (f" (the target, {wanted:.1f} Mb/s, is above the full-size ceiling, "
                      f"{mine['full_ceiling_mbps']:.1f})" if wanted > mine["full_ceiling_mbps"] else "")
            missed.append(f"{over_default:.2f}x default's goodput{beyond}")
        if over_fine < 1:
            missed.append(f"{over_fine:.2f}x fine-rto's")
        figures = (f"{mine['goodput_mbps']:.1f} Mb/s against default's {default['goodput_mbps']:.1f} and fine-rto's "
                   f"{fine['goodput_mbps']:.1f}")
        if not missed:
            lines.append(f"- {name} at {senders} senders met its targets: 0 drops, 0 RTOs, {figures}")
            continue
        load = [f"both cores {mine['cpu_busy_pct']:.0f} % busy"]
        if mine.get("switch_cpu_pct") is not None:
            load.append(f"the switch's thread {mine['switch_cpu_pct']:.0f} % of a core")
        if mine.get("switch_pmd_busy_pct") is not None:
            load.append(f"its PMD threads' cycles on packets {mine['switch_pmd_busy_pct']:.0f} % of a core")
        if mine.get("backlog_empty_pct") is not None:
            load.append(f"the bottleneck's queue found empty in {mine['backlog_empty_pct']:.0f} % of samples")
        lines.append(f"- {name} at {senders} senders missed ({', '.join(missed)}): {figures}; "
                     + ", ".join(load))
    if not lines:
        return ""
    return "\n".join([f"Targets for {' and '.join(held)}: 0 drops and 0 RTOs, goodput at least "
                      f"{LOSSLESS_OVER_DEFAULT:g}x default's and at least fine-rto's:", *lines])


def cpu_use(run: Run) -> str:
    """Both cores' busy share, its softirq and steal parts, the switch threads', and where PMD threads
    poll its ports the part of their cycles spent on packets, as one cell ("-" for what a summary
    from before that field lacks)."""
    def share(field: str) -> str:
        return "-" if run.get(field) is None else f"{run[field]:.0f}"
    parts = f"{share('cpu_softirq_pct')}, {share('cpu_steal_pct')}"
    pmd = "" if run.get("switch_pmd_busy_pct") is None else f" (PMD {share('switch_pmd_busy_pct')})"
    return f"{run['cpu_busy_pct']:.0f} ({parts}) / {share('switch_cpu_pct')}{pmd}"


def _all(run: Run) -> bool:
    return True


#: The tables of each block size, in order: which runs each shows (a run from before a field
#: was recorded is left out of its table), its cells and its title after the block's.
TABLES: tuple[tuple[Callable[[Run], bool], Callable[[Run], str], str], ...] = (
    (lambda r: r.get("full_ceiling_mbps") is not None,
     lambda r: f"{r['goodput_mbps']:.1f} Mb/s, {100 * r['goodput_mbps'] / r['full_ceiling_mbps']:.0f} %",
     "goodput, and its share of the single-flow ceiling at full-size (1500 B) packets"),
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
    (lambda r: not simulated(r), cpu_use, "CPU during the rounds, % busy: both cores (of which softirq, steal) / the "
     "switch's forwarding threads (of one core; a PMD thread polls at 100 % whatever the load, and where there is one, "
     "PMD: the part of its cycles spent on packets)"),
    (simulated, lambda r: f"{r['fct_p50_ms'] / r['ideal_ms']:.2f}x / {r['fct_p99_ms'] / r['ideal_ms']:.2f}x",
     "round completion p50 / p99 against the ideal round (every byte back to back at the bottleneck after the "
     "request's round trip)"),
    (simulated, lambda r: f"{r['peak_backlog_bytes'] / 1000:.0f} / {r['queue_mean_bytes'] / 1000:.1f}",
     "bottleneck queue, peak / time-mean over the measured rounds, KB"),
    (simulated, lambda r: f"{r['timeouts']} / {r['duplicate_segments']}",
     "RTOs / duplicate segments at the receivers (data sent again that had arrived)"),
    (simulated, lambda r: f"{r['wall_per_sim_s']:.1f} s / {r['max_rss_mb']:.0f} MB",
     "cost: wall seconds per simulated second of rounds / peak memory"),
    (lambda r: r["scheme"].startswith("otcp-"), lambda r: f"{r['packet_bytes']}", "IP packet size used (B)"),
    (lambda r: r.get("generations") is not None, lambda r: f"{r['generations']}",
     "new generations during the measured rounds"),
)


def workload(run: Run) -> tuple[int, int]:
    """How a run's block was given, as a sort key: (0, bytes per server), or (1, bytes per round split
    over the servers) for a simulated sweep of --total-bytes, whose sender counts share one table."""
    total = run.get("total_bytes")
    return (0, run["sru_bytes"]) if total is None else (1, total)


def workload_title(key: tuple[int, int]) -> str:
    """A workload's heading: "64 KB per server", or "1 MB per round over the servers"."""
    kind, size = key
    return f"{size // 1024} KB per server" if kind == 0 else f"{size / 1e6:g} MB per round over the servers"


def report(runs: Sequence[Run], made_by: MadeBy | None = None, heading: str = "",
           queue_target_fraction: Callable[[Run], float] = default_queue_target) -> str:
    """Every table and finding, per workload (each one's under heading + its size when heading
    is given, as a page's sections); made_by: what follows each table (see table);
    queue_target_fraction: each run's otcp-lossless queue target (see lossless_targets)."""
    parts = []
    for key in sorted({workload(r) for r in runs}):
        these = sorted((r for r in runs if workload(r) == key), key=lambda r: r["senders"])
        kb = workload_title(key)
        if heading:
            parts.append(f"{heading}{kb}")
        parts += [table([r for r in these if shown(r)], cell, f"{kb}: {title}", made_by)
                  for shown, cell, title in TABLES]
        parts += [dctcp_findings(these), lossless_targets(these, queue_target_fraction), fan_in_targets(these)]
    return "\n\n".join(p for p in parts if p)


def commands_line(origins: Mapping[int, Sweep]) -> MadeBy:
    """made_by for a page: the commands that produced a table's runs (origins: the sweep of each
    run, by id), each with its directory; a summary from before commands were recorded says so."""
    def made_by(runs: Sequence[Run]) -> str:
        sweeps = list({id(origins[id(run)]): origins[id(run)] for run in runs}.values())
        return "Made by: " + "; ".join(f"`{sweep.command}`" if sweep.command
                                       else f"(command not recorded: {sweep.directory})" for sweep in sweeps)
    return made_by


def unresolved_failures(sweeps: Sequence[Sweep], runs: Sequence[Run]) -> list[tuple[dict[str, Any], Sweep]]:
    """Every failure entry of sweeps that no run of runs replaced, with its sweep (a workload run's
    senders: its query fan-in)."""
    finished = {(r["scheme"], r["senders"] if "senders" in r else r["query_senders"], r["buffer_bytes"])
                for r in runs}
    return [(entry, sweep) for sweep in sweeps for entry in sweep.document.get("failures", [])
            if (entry["scheme"], entry["senders"], entry["buffer_bytes"]) not in finished]


def failed_runs(sweeps: Sequence[Sweep], runs: Sequence[Run]) -> str:
    """The page's list of runs that failed and were not run again later, with their errors and commands."""
    lines = [f"- {entry['scheme']} n={entry['senders']} buf={entry['buffer_bytes']}: {entry['error']} "
             f"(`{sweep.command or sweep.directory}`)" for entry, sweep in unresolved_failures(sweeps, runs)]
    return "\n".join(["## Runs that failed", "", *lines]) if lines else ""


#: The goodput plot a folder of summaries (one sweep told in several runs) gets of all its runs.
MERGED_GOODPUT = "goodput.png"


def merged_goodput_plot(directory: str, sweeps: Sequence[Sweep], runs: Sequence[Run]) -> str | None:
    """Draw the goodput of runs, merged from the sweeps of the folder directory, into directory (its
    line: the median of every full-size ceiling sample's network median); None without runs or failures."""
    failures = [results.Failure(entry["scheme"], entry["senders"], entry["buffer_bytes"], entry["error"])
                for entry, _ in unresolved_failures(sweeps, runs)]
    lines = [float(network["median"]) for sweep in sweeps for ceiling in sweep.document.get("ceilings", [])
             if ceiling["packet_bytes"] == ETHERNET_MTU for network in ceiling["networks"]]
    if not lines or not (runs or failures):
        return None
    return plots.goodput_plot(os.path.join(directory, MERGED_GOODPUT), runs, statistics.median(lines), failures)


def plot_links(sweeps: Sequence[Sweep], relative_to: str, merged_goodput: str | None = None) -> str:
    """The page's section of every sweep's plots, linked relative to the page's directory; with
    merged_goodput (the plot of a sweep told in several runs), that one instead of each run's goodput."""
    lines = []
    if merged_goodput is not None:
        folder = os.path.dirname(merged_goodput)
        lines.append(f"![goodput against senders, every run of {folder}]"
                     f"({os.path.relpath(merged_goodput, relative_to)})")
    for sweep in sweeps:
        found = [(name, what) for name, what in PLOTS if os.path.exists(os.path.join(sweep.directory, name))
                 and not (merged_goodput is not None and name == MERGED_GOODPUT)]
        found += [(os.path.basename(path), WORKLOAD_PLOTS[os.path.basename(path).split("-")[0]])
                  for path in sorted(glob.glob(os.path.join(sweep.directory, "*-*.png")))
                  if os.path.basename(path).split("-")[0] in WORKLOAD_PLOTS]
        for name, what in found:
            path = os.path.relpath(os.path.join(sweep.directory, name), relative_to)
            lines.append(f"![{what}, {sweep.directory}]({path})")
    return "\n\n".join(["## Plots", *lines]) if lines else ""


def tradeoff(incast_runs: Sequence[Run], workload_runs: Sequence[Run], heading: str,
             plot: str | None = None, relative_to: str | None = None, made_by: MadeBy | None = None) -> str:
    """The trade-off section when both experiments' runs are given ("" otherwise), its plot drawn
    to plot and linked relative to relative_to (a page's directory) when given, and made_by's line
    for the runs it shows."""
    if not incast_runs or not workload_runs:
        return ""
    rows = workload_report.tradeoff_rows(incast_runs, workload_runs)
    parts = [f"{heading}What each scheme pays for what it gets",
             workload_report.tradeoff_table(rows),
             "Goodput: synchronized reads at the incast sweep's most senders, as a share of the ceiling; "
             f"slowdown: the workload's flows under {workload_report.SHORT_FLOW_BYTES // 1000} kB, FCT over the "
             "ideal on the idle fabric; drops at the switches' buffers and RTOs summed over the hosts."]
    if made_by is not None:
        parts.append(made_by([*workload_report.tradeoff_incast(incast_runs),
                              *workload_report.tradeoff_point(workload_runs)]))
    if plot:
        plots.tradeoff_plot(plot, rows)
        if relative_to is not None:
            parts.append(f"![the trade-off per scheme]({os.path.relpath(os.path.abspath(plot), relative_to)})")
    return "\n\n".join(parts)


def page(directories: Sequence[str], title: str, relative_to: str, each: bool = False,
         validations: Sequence[tuple[str, str]] = (), plots: bool = True, tradeoff_plot: str | None = None,
         with_tradeoff: bool = True) -> str:
    """The results page of the sweeps in directories (see the module docstring)."""
    given = [(directory, sweeps_in(directory)) for directory in directories]
    sweeps = [sweep for _, inner in given for sweep in inner]
    incast = [sweep for sweep in sweeps if not sweep.workload]
    work = [sweep for sweep in sweeps if sweep.workload]
    made = "\n".join(f"    {sweep.command or '(command not recorded)'}" for sweep in sweeps)
    parts = [f"# {title}", f"Made by:\n\n{made}"]
    sections = [(directory, [sweep for sweep in inner if not sweep.workload]) for directory, inner in given]
    groups = [(directory, group) for directory, group in sections if group] if each else [("", incast)]
    incast_runs: list[Run] = []
    incast_origins: dict[int, Sweep] = {}
    for directory, group in groups:
        pairs = merged(group)
        runs = [run for run, _ in pairs]
        incast_runs += runs
        origins = {id(run): sweep for run, sweep in pairs}
        incast_origins.update(origins)
        heading = "## "
        if each:
            parts.append(f"## {os.path.basename(os.path.normpath(directory))}")
            heading = "### "
        told_in_parts = each and plots and len(group) > 1
        merged_plot = merged_goodput_plot(directory, group, runs) if told_in_parts else None
        parts += [report(runs, commands_line(origins), heading, queue_targets(origins)), failed_runs(group, runs),
                  plot_links(group, relative_to, merged_plot) if plots else ""]
    work_pairs = workload_report.merged_runs([(sweep.document, sweep) for sweep in work])
    work_runs = [run for run, _ in work_pairs]
    work_origins = {id(run): sweep for run, sweep in work_pairs}
    every_origin = {**incast_origins, **work_origins}
    if with_tradeoff:
        parts.insert(2, tradeoff(incast_runs, work_runs, "## ", tradeoff_plot, relative_to,
                                 commands_line(every_origin)))
    parts += [workload_report.sections(work_runs, commands_line(work_origins), heading="## "),
              failed_runs(work, work_runs), plot_links(work, relative_to) if plots else ""]
    parts.append(static_values(sweeps))
    parts.append(cost_table(incast_runs))
    parts += [validation(emulated, simulation) for emulated, simulation in validations]
    parts.append(notes_section(sweeps))
    parts.append("## Code\n\n" + "\n".join(f"- {code_line(sweep.directory, with_commit=False)}" for sweep in sweeps))
    return "\n\n".join(part for part in parts if part) + "\n"


def notes_section(sweeps: Sequence[Sweep]) -> str:
    """What the runs noted in their summaries (how the network was built and where its processes ran, what a
    host could not enforce, ceiling samples set aside, failures), each note once, with the folders that hold it."""
    held: dict[str, list[str]] = {}
    for sweep in sweeps:
        for note in sweep.document.get("notes", []):
            held.setdefault(note, []).append(sweep.directory)
    return "## Notes\n\n" + "\n".join(f"- {note} ({', '.join(folders)})" for note, folders in held.items()) \
        if held else ""


def fine_rto_ms(sweep: Sweep) -> int:
    """The rto_min fine-rto ran with in a sweep: its command's --fine-rto-ms, else the default."""
    words = shlex.split(sweep.command or "")
    return next((int(value) for flag, value in zip(words, words[1:]) if flag == "--fine-rto-ms"),
                DEFAULT_FINE_RTO_MS)


#: A static scheme's column: its rto_min.
STATIC_COLUMN = "rto_min {} ms"


def static_values(sweeps: Sequence[Sweep]) -> str:
    """Every static rto_min the sweeps ran against OTCP's per-path values: a row per simulated setting
    (topology, placement, senders, block) where more than two static values ran, a column per static
    value (default's, fine-rto's of each sweep) and per other scheme; "" without such settings."""
    rows: dict[tuple[str, str, int, int], dict[str, Run]] = {}
    for sweep in sweeps:
        known = sim_catalogue(fine_rto_ms(sweep))
        for run in sweep.document["runs"]:
            if simulated(run) and run["scheme"] in known:
                column = STATIC_COLUMN.format(known[run["scheme"]].rto_min_ms) \
                    if run["scheme"] in ("default", "fine-rto") else run["scheme"]
                rows.setdefault((run["topo"], run["placement"], run["senders"], run["sru_bytes"]), {})[column] = run
    # More than default's and fine-rto's: a sweep of static values.
    rows = {key: runs for key, runs in rows.items() if sum(name.startswith("rto_min ") for name in runs) > 2}
    if not rows:
        return ""
    names = {name for runs in rows.values() for name in runs}
    order = scheme_order()
    columns = sorted((n for n in names if n.startswith("rto_min ")), key=lambda n: int(n.split()[1])) + \
        sorted((n for n in names if not n.startswith("rto_min ")), key=order.index)
    lines = ["## Static rto_min values against OTCP's per-path ones", "",
             "Each cell: round completion p50 / p99 against the ideal round; RTOs / duplicate segments at the "
             "receivers / drops at the bottleneck. In bold, the static value with the lowest p99 in its row.", "",
             "| setting | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for (topo, placement, senders, block), runs in sorted(rows.items()):
        best = min((n for n in runs if n.startswith("rto_min ")), key=lambda n: runs[n]["fct_p99_ms"])
        cells = []
        for name in columns:
            run = runs.get(name)
            cell = "" if run is None else (f"{run['fct_p50_ms'] / run['ideal_ms']:.2f}x / "
                                           f"{run['fct_p99_ms'] / run['ideal_ms']:.2f}x; {run['timeouts']} / "
                                           f"{run['duplicate_segments']} / {run['drops']}")
            cells.append(f"**{cell}**" if name == best else cell)
        lines.append(f"| {topo.removeprefix('--topo ')}, {placement}, {senders} x {block // 1024} KB | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def cost_table(runs: Sequence[Run]) -> str:
    """What simulated runs cost, by topology, link rate and senders: wall seconds per simulated second
    of rounds (median and range over the runs) and the largest peak memory; "" without simulated runs."""
    groups: dict[tuple[str, float, int], list[Run]] = {}
    for run in runs:
        if simulated(run):
            groups.setdefault((run["topo"], run["bw_gbps"], run["senders"]), []).append(run)
    if not groups:
        return ""
    lines = ["## Cost of the simulations", "",
             "| topology | host rate | senders | runs | wall s per simulated s of rounds, median (min-max) | "
             "events per wall s, median | peak memory |", "|---|---|---|---|---|---|---|"]
    for (topo, rate, senders), chosen in sorted(groups.items(), key=lambda item: (item[0][1], item[0][2],
                                                                                   item[0][0])):
        walls = sorted(r["wall_per_sim_s"] for r in chosen)
        speeds = sorted(r["events"] / r["wall_s"] for r in chosen)
        lines.append(f"| {topo.removeprefix('--topo ')} | {rate:g} Gb/s | {senders} | {len(chosen)} | "
                     f"{walls[len(walls) // 2]:.1f} ({walls[0]:.1f}-{walls[-1]:.1f}) | "
                     f"{speeds[len(speeds) // 2] / 1000:.0f}k | {max(r['max_rss_mb'] for r in chosen):.0f} MB |")
    return "\n".join(lines)


def ratio(simulation: float, emulation: float) -> str:
    """simulation / emulation as a cell: "1.00" for two zeros, "inf" over a zero."""
    if emulation == 0:
        return "1.00" if simulation == 0 else "inf"
    return f"{simulation / emulation:.2f}"


#: A simulated measure off the emulated one by more than this fraction is a gap the page explains.
GAP = 0.10
#: Drops that differ by no more than this many are no gap, whatever their ratio.
DROPS_NOISE = 10
#: The emulated switch's forwarding thread this busy (% of one core) is near what it can forward.
SWITCH_BUSY_PCT = 70.0
#: Empty-queue shares (% of samples) that differ by this much: one side's senders, not the link, set the pace.
IDLE_MARGIN_PCT = 10.0


def share_of_ceiling(run: Run) -> float:
    """A run's goodput as a share of its own ceiling."""
    return float(run["goodput_mbps"] / run["ceiling_mbps"])


def gaps(simulated: Run, emulated: Run) -> list[str]:
    """The measures (goodput share, drops, p95 completion) on which a simulated run is off its emulated
    twin by more than GAP, each as "name ratio"."""
    found = []
    for name, sim, emu in (("goodput", share_of_ceiling(simulated), share_of_ceiling(emulated)),
                           ("drops", simulated["drops"], emulated["drops"]),
                           ("p95", simulated["fct_p95_ms"], emulated["fct_p95_ms"])):
        if name == "drops" and abs(sim - emu) <= DROPS_NOISE:
            continue
        if (emu == 0 and sim != 0) or (emu != 0 and abs(sim / emu - 1) > GAP):
            found.append(f"{name} {ratio(sim, emu)}")
    return found


def off_by_gap(simulated: float | None, emulated: float | None) -> bool:
    """Whether two counters both present differ by more than GAP of the larger."""
    if simulated is None or emulated is None:
        return False
    return abs(simulated - emulated) > GAP * max(abs(simulated), abs(emulated))


def what_differs(simulated: Run, emulated: Run) -> list[str]:
    """The counters that differ between a simulated run and its emulated twin, each with both values:
    retransmission timeouts, packet size, the emulated switch's CPU, how often the bottleneck queue
    sat empty (the simulator may not sample it), the probe's round trip, CE marks and the peak queue;
    what explains a gap is among them."""
    found = []
    if simulated["timeouts"] != emulated["timeouts"]:
        found.append(f"RTOs {simulated['timeouts']} simulated, {emulated['timeouts']} emulated")
    if simulated.get("packet_bytes") != emulated.get("packet_bytes"):
        found.append(f"packets of {simulated.get('packet_bytes')} B simulated, {emulated.get('packet_bytes')} B "
                     "emulated")
    switch = emulated.get("switch_cpu_pct")
    if switch is not None and switch >= SWITCH_BUSY_PCT:
        found.append(f"the emulated switch's thread at {switch:.0f} % of a core")
    idle_sim, idle_emu = simulated.get("backlog_empty_pct"), emulated.get("backlog_empty_pct")
    if idle_emu is not None and abs(idle_emu - (idle_sim or 0.0)) >= IDLE_MARGIN_PCT:
        found.append(f"the emulated bottleneck queue empty in {idle_emu:.0f} % of samples"
                     + ("" if idle_sim is None else f" (simulated {idle_sim:.0f} %)"))
    if off_by_gap(simulated.get("probe_rtt_avg_ms"), emulated.get("probe_rtt_avg_ms")):
        found.append(f"probe round trip {simulated['probe_rtt_avg_ms']:.1f} ms simulated, "
                     f"{emulated['probe_rtt_avg_ms']:.1f} ms emulated")
    if off_by_gap(simulated.get("ce_marks"), emulated.get("ce_marks")):
        found.append(f"CE marks {simulated['ce_marks']} simulated, {emulated['ce_marks']} emulated")
    if off_by_gap(simulated.get("peak_backlog_bytes"), emulated.get("peak_backlog_bytes")):
        found.append(f"peak queue {simulated['peak_backlog_bytes'] / 1000:.0f} kB simulated, "
                     f"{emulated['peak_backlog_bytes'] / 1000:.0f} kB emulated")
    return found or ["no counter differs (RTOs, packet size, the switch's CPU, the empty queue, the probe's "
                     "round trip, CE marks, the peak queue)"]


def gap_lines(chosen: Mapping[tuple[str, int], tuple[Run, Run]], schemes: Sequence[str]) -> list[str]:
    """One line per cell with a gap over GAP: the gaps, then what differs between the two runs."""
    lines = []
    for senders in sorted({key[1] for key in chosen}):
        for scheme in schemes:
            if (scheme, senders) in chosen and (found := gaps(*chosen[(scheme, senders)])):
                lines.append(f"- {senders} senders, {scheme}: {', '.join(found)}; "
                             f"{'; '.join(what_differs(*chosen[(scheme, senders)]))}")
    if not lines:
        return []
    return [f"Gaps over {GAP:.0%} (simulated / emulated), and what differs between the two runs:", "", *lines, ""]


def validation(emulated_directory: str, simulation_directory: str) -> str:
    """The simulated runs against the emulated ones of the same scheme, senders and block (the sweeps
    of each directory: see sweeps_in): per cell the ratios (simulated / emulated) of goodput as a
    share of each one's ceiling, drops at the bottleneck and p95 completion, with the commands."""
    emulated, simulated_sweeps = sweeps_in(emulated_directory), sweeps_in(simulation_directory)
    mininet = {(r["scheme"], r["senders"], r["sru_bytes"]): r for r, _ in merged(emulated)}
    pairs = [(run, mininet[key]) for run, _ in merged(simulated_sweeps)
             if (key := (run["scheme"], run["senders"], run["sru_bytes"])) in mininet]
    if not pairs:
        return ""
    order = scheme_order()
    schemes = sorted({run["scheme"] for run, _ in pairs}, key=order.index)
    name = f"{os.path.basename(os.path.normpath(simulation_directory))} against " \
           f"{os.path.basename(os.path.normpath(emulated_directory))}"
    lines = [f"## Validation: {name}", "",
             "Each cell: simulated / emulated, for goodput (share of its own ceiling), drops at the bottleneck and "
             "p95 round completion; beneath, the emulated values (goodput %, drops, p95 ms); then what tells a gap's "
             "cause: the RTOs of each (simulated / emulated) and the emulated switch's forwarding thread's CPU "
             "(of one core) during the rounds.", ""]
    for block in sorted({run["sru_bytes"] for run, _ in pairs}):
        chosen = {(run["scheme"], run["senders"]): (run, other) for run, other in pairs if run["sru_bytes"] == block}
        lines += [f"**{block // 1024} KB per server**", "", "| senders | " + " | ".join(schemes) + " |",
                  "|---|" + "---|" * len(schemes)]
        for senders in sorted({key[1] for key in chosen}):
            cells = []
            for scheme in schemes:
                if (scheme, senders) not in chosen:
                    cells.append("")
                    continue
                run, other = chosen[(scheme, senders)]
                share = run["goodput_mbps"] / run["ceiling_mbps"]
                other_share = other["goodput_mbps"] / other["ceiling_mbps"]
                switch = other.get("switch_cpu_pct")
                cells.append(f"{ratio(share, other_share)}, {ratio(run['drops'], other['drops'])}, "
                             f"{ratio(run['fct_p95_ms'], other['fct_p95_ms'])}<br>({100 * other_share:.0f} %, "
                             f"{other['drops']}, {other['fct_p95_ms']:.0f})<br>RTOs {run['timeouts']} / "
                             f"{other['timeouts']}" + ("" if switch is None else f"; switch {switch:.0f} %"))
            lines.append(f"| {senders} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += gap_lines(chosen, schemes)
    lines.append("Made by: " + "; ".join(f"`{sweep.command}`" for sweep in simulated_sweeps) + " against "
                 + "; ".join(f"`{sweep.command}`" for sweep in emulated))
    return "\n".join(lines)


def text(directories: Sequence[str], tradeoff_plot: str | None = None, only_tradeoff: bool = False) -> str:
    """The tables of the sweeps in directories, then the code each ran (only_tradeoff: the trade-off
    alone; ValueError without an incast and a workload summary)."""
    sweeps = [sweep for directory in directories for sweep in sweeps_in(directory)]
    runs = [run for run, _ in merged([sweep for sweep in sweeps if not sweep.workload])]
    work_runs = [run for run, _ in workload_report.merged_runs([(s.document, s) for s in sweeps if s.workload])]
    table = tradeoff(runs, work_runs, "", tradeoff_plot)
    if only_tradeoff:
        if not table:
            raise ValueError("--tradeoff needs an incast summary with runs and a workload summary with runs")
        return table + "\n"
    parts = [table, report(runs), workload_report.sections(work_runs, None, ""),
             "\n".join(f"- {code_line(sweep.directory)}" for sweep in sweeps)]
    return "\n\n".join(part for part in parts if part) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The report's arguments, on parser (otcp-experiment report's, or its own)."""
    parser.add_argument("directories", nargs="+", help="output directories of experiments (each with summary.json, or "
                        "folders that each hold one: one sweep)")
    parser.add_argument("--markdown", action="store_true",
                        help="a results page: title, tables each with the command that made its runs, failed runs, "
                             "plots, code")
    parser.add_argument("--title", default="OTCP results", help="the page's title (with --markdown)")
    parser.add_argument("--each", action="store_true", help="a section per directory, its runs not merged "
                                                            "(with --markdown)")
    parser.add_argument("--no-plots", action="store_true",
                        help="leave the plots' links out (a page kept apart from the run directories)")
    parser.add_argument("--validate", action="append", default=[], metavar="MININET_DIR=SIM_DIR",
                        help="add the simulated runs of SIM_DIR against the emulated ones of MININET_DIR "
                             "(with --markdown; repeatable)")
    parser.add_argument("--output", metavar="FILE", help="write to FILE (plots linked relative to its directory) "
                                                         "instead of printing")
    parser.add_argument("--tradeoff", action="store_true", help="only the trade-off (an incast and a workload "
                                                                "directory given)")
    parser.add_argument("--no-tradeoff", action="store_true",
                        help="leave the trade-off out of a page (with --markdown: its incast and workload runs are "
                             "of different fabrics)")
    parser.add_argument("--tradeoff-plot", metavar="FILE", help="draw the trade-off (an incast and a workload "
                                                                "directory given) to FILE, a PNG")
    return parser


def run(args: argparse.Namespace) -> int:
    """Print (or write to --output) the tables or the page; 0, or 2 when a summary cannot be read."""
    relative_to = os.path.dirname(os.path.abspath(args.output)) if args.output else os.getcwd()
    try:
        validations = [tuple(pair.split("=", 1)) for pair in args.validate]
        if any(len(pair) != 2 for pair in validations):
            raise ValueError("--validate: expected MININET_DIR=SIM_DIR")
        written = (page(args.directories, args.title, relative_to, args.each,
                        [(emulated, simulation) for emulated, simulation in validations], not args.no_plots,
                        args.tradeoff_plot, not args.no_tradeoff)
                   if args.markdown else text(args.directories, args.tradeoff_plot, args.tradeoff))
    except (OSError, ValueError, KeyError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(written)
    else:
        sys.stdout.write(written)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """python -m otcp.experiments.analysis.report: as otcp-experiment report."""
    parser = add_arguments(argparse.ArgumentParser(prog="report", description=__doc__.split("\n")[0]))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

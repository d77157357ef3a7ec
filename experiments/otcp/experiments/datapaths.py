"""``otcp-experiment datapath``: the switch's datapath candidates side by side, to choose the default.

    otcp-experiment datapath --out results/datapath \\
        --datapaths afpacket,afxdp-nonpmd:native,afxdp-nonpmd:generic,afxdp:native

For every candidate (otcp.experiments.runner.datapath), on the calibration network
(calibrate.CalibrationTopo: the receiver h1 behind the bottleneck, bw Mb/s and the buffer,
the sender h2 on a link twice as fast), the OTCP controller forwarding:

- the single-flow ceiling h2 -> h1 at each packet size (runner.ceiling.ceiling_samples),
  with the switch's forwarding threads' CPU (counters.switch_thread_time, % of a core)
  and both cores' busy share over the same seconds;
- ``bursts`` calibration bursts per buffer and packet size (calibrate.one_burst), then as
  many again with ``busy_loops`` processes spinning on the CPU meanwhile (the machine as busy
  as an incast of many senders keeps it: a switch thread that waits for a core is when a
  fixed receive ring overflows). Faithful: every buffer held within one frame (the largest
  peak of its bursts: the half-millisecond sampler may miss one burst's full moment), and
  nothing lost but at the buffer (the bfifo's drops), the AF_XDP ports' input drops counted
  apart and required to be 0.

Where the machine refuses a candidate, its row says so and what ran instead (the
datapath used). Beside each ceiling: the wire's payload share at that packet size
(wire_share_mbps), the most one TCP flow can carry through the bottleneck whatever the
switch. It writes summary.json and datapath.md (the results page, with this command,
and the choice the measurement makes) into --out, after each candidate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from otcp.experiments.analysis import results, stats
from otcp.experiments.calibrate import CalibrationConfig, CalibrationRow, CalibrationTopo, one_burst
from otcp.experiments.runner.ceiling import ceiling_samples
from otcp.experiments.runner.datapath import Datapath
from otcp.experiments.runner.network import RunError, start_network
from otcp.experiments.runner.progress import Progress

#: What a TCP segment carries besides its payload (IPv4, TCP, the timestamp option) and the
#: Ethernet header the bottleneck's rate counts with every frame.
TCP_IP_HEADERS = 52
ETHERNET_HEADER = 14
#: Ceilings this close (share of the best) count as the same: the run-to-run spread of one flow.
SAME_CEILING = 0.02


def wire_share_mbps(bw_mbps: float, packet_bytes: int) -> float:
    """The most goodput one TCP flow gets through a bw_mbps bottleneck in IP packets of
    packet_bytes: the payload's share of each frame the rate counts."""
    return bw_mbps * (packet_bytes - TCP_IP_HEADERS) / (packet_bytes + ETHERNET_HEADER)


@dataclasses.dataclass(kw_only=True)
class DatapathConfig(CalibrationConfig):
    """One comparison: calibration's network and bursts (bursts per buffer and packet
    size) for each candidate datapath, and the ceiling at each packet size."""

    candidates: list[Datapath]
    bursts: int = 3
    busy_loops: int = 2


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a candidate's bursts say: how many, how many filled their buffer (dropped), the
    (buffer, packet size) pairs whose largest peak was within one frame of the buffer out of
    all pairs, the largest shortfall of a pair (bytes) and its frame, frames lost at the
    switch's input and packets unexplained, summed."""

    bursts: int
    filled: int
    held: int
    pairs: int
    shortfall_bytes: int
    shortfall_frame_bytes: int
    switch_input_drops: int
    unexplained: int

    @property
    def faithful(self) -> bool:
        """Every buffer held within one frame, nothing lost anywhere else."""
        return self.bursts > 0 and self.held == self.pairs and not self.switch_input_drops and not self.unexplained


def verdict(rows: list[CalibrationRow]) -> Verdict:
    """The Verdict of rows (calibration bursts)."""
    best: dict[tuple[int, int], CalibrationRow] = {}
    for row in rows:
        key = (row.buffer_bytes, row.packet_bytes)
        if row.drops > 0 and (key not in best or row.peak_backlog_bytes > best[key].peak_backlog_bytes):
            best[key] = row
    pairs = {(row.buffer_bytes, row.packet_bytes) for row in rows}
    short = max(best.values(), key=lambda r: r.buffer_bytes - r.peak_backlog_bytes, default=None)
    return Verdict(bursts=len(rows), filled=sum(1 for r in rows if r.drops > 0),
                   held=sum(1 for r in best.values() if r.within_one_packet), pairs=len(pairs),
                   shortfall_bytes=short.buffer_bytes - short.peak_backlog_bytes if short else 0,
                   shortfall_frame_bytes=short.frame_bytes if short else 0,
                   switch_input_drops=sum(r.switch_input_drops for r in rows),
                   unexplained=sum(r.unexplained for r in rows))


@dataclasses.dataclass(frozen=True)
class CeilingAt:
    """One candidate's single-flow ceiling at one packet size: the samples kept (Mb/s), the
    switch's forwarding threads' and both cores' busy share while they ran, and the part of the
    switch's PMD threads' cycles spent on packets (None: no PMD thread) (medians, %)."""

    packet_bytes: int
    samples: tuple[float, ...]
    switch_cpu_pct: float | None
    cpu_busy_pct: float
    switch_pmd_busy_pct: float | None = None

    @property
    def median(self) -> float:
        """The ceiling: the median sample."""
        return stats.Spread(self.samples).median


@dataclasses.dataclass
class Candidate:
    """One candidate's results: asked for, used (runner.datapath.DatapathInUse.as_dict, per
    network), its ceilings, its calibration rows on a quiet machine and under busy loops
    (loaded), and the error that stopped it (None: none)."""

    asked: str
    used: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    ceilings: list[CeilingAt] = dataclasses.field(default_factory=list)
    calibration: list[CalibrationRow] = dataclasses.field(default_factory=list)
    loaded: list[CalibrationRow] = dataclasses.field(default_factory=list)
    error: str | None = None

    @property
    def faithful(self) -> bool:
        """Calibration passed (Verdict.faithful) on the quiet machine and, where run, under load."""
        return self.error is None and verdict(self.calibration).faithful and \
            (not self.loaded or verdict(self.loaded).faithful)

    @property
    def ran_as_asked(self) -> bool:
        """Every network ran on the datapath asked for."""
        return bool(self.used) and all(u["used"] == self.asked for u in self.used)

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> Candidate:
        """A Candidate from its summary.json form (as_dict's)."""
        names = {f.name for f in dataclasses.fields(CalibrationRow)}

        def rows(key: str) -> list[CalibrationRow]:
            return [CalibrationRow(**{k: v for k, v in row.items() if k in names}) for row in document.get(key, [])]

        return cls(document["asked"], list(document["used"]),
                   [CeilingAt(c["packet_bytes"], tuple(c["samples"]), c["switch_cpu_pct"], c["cpu_busy_pct"],
                              c.get("switch_pmd_busy_pct"))
                    for c in document["ceilings"]], rows("calibration"), rows("loaded"), document["error"])

    def ceiling(self, packet_bytes: int) -> CeilingAt | None:
        """The ceiling at packet_bytes (None: not measured)."""
        return next((c for c in self.ceilings if c.packet_bytes == packet_bytes), None)

    def as_dict(self) -> dict[str, Any]:
        """As summary.json holds it."""
        return {"asked": self.asked, "used": self.used, "error": self.error, "faithful": self.faithful,
                "ceilings": [{**dataclasses.asdict(c), "samples": list(c.samples), "median": c.median}
                             for c in self.ceilings],
                "calibration": [row.as_dict() for row in self.calibration],
                "loaded": [row.as_dict() for row in self.loaded],
                "verdicts": {name: {**dataclasses.asdict(verdict(rows)), "faithful": verdict(rows).faithful}
                             for name, rows in (("quiet", self.calibration), ("loaded", self.loaded)) if rows}}


@dataclasses.dataclass
class Comparison:
    """A finished comparison: its candidates, and summary.json's document (what ``page`` reads)."""

    candidates: list[Candidate]
    summary: dict[str, Any]

    @property
    def failed(self) -> bool:
        """Whether a candidate could not be measured."""
        return any(candidate.error is not None for candidate in self.candidates)


def run_comparison(config: DatapathConfig, progress: Progress) -> Comparison:
    """Every candidate in turn (the summary and page written after each)."""
    os.makedirs(config.out, exist_ok=True)
    code = results.code_version()
    rounds = 2 if config.busy_loops else 1
    per_candidate = len(config.packet_sizes) * (1 + rounds * len(config.buffers) * config.bursts)
    progress.total = len(config.candidates) * per_candidate
    done: list[Candidate] = []
    for datapath in config.candidates:
        candidate = Candidate(datapath.label)
        done.append(candidate)
        try:
            measure_candidate(config, datapath, candidate, progress)
        except RunError as exc:
            candidate.error = str(exc)
            progress.message(f"{datapath.label}: {exc}")
        summary = summarize(config, done, results.provenance(code, config.command))
        write(config.out, summary)
    return Comparison(done, summary)


def measure_candidate(config: DatapathConfig, datapath: Datapath, candidate: Candidate, progress: Progress) -> None:
    """One candidate's networks (one per buffer): the ceilings on the first, the bursts on each."""
    asked = dataclasses.replace(config, datapath=datapath.kind, xdp_mode=datapath.xdp_mode or config.xdp_mode,
                                pin_hosts=datapath.pinned, pmd_maxsleep_us=datapath.pmd_maxsleep_us,
                                tx_flush_us=datapath.tx_flush_us)
    burst_id = 0
    for index, buffer_bytes in enumerate(config.buffers):
        topo = CalibrationTopo(bw=config.bw_mbps, buffer_bytes=buffer_bytes, sender_bw=config.overload * config.bw_mbps)
        progress.message(f"{datapath.label}: building the calibration network, {buffer_bytes} B buffer")
        workdir = os.path.join(config.out, "work", datapath.label.replace(" ", "-"), f"buffer{buffer_bytes}")
        with start_network(asked, topo, workdir) as network:
            in_use = network.emulation.datapath
            if in_use.as_dict() not in candidate.used:
                candidate.used.append(in_use.as_dict())
            if in_use.note:
                progress.message(f"note: {in_use.note}")
            network.ensure_connectivity([topo.sender], network.data_ips[topo.receiver])
            if index == 0:
                for packet_bytes in config.packet_sizes:
                    progress.start_run(f"{datapath.label}: ceiling at {packet_bytes} B")
                    taken = ceiling_samples(network, topo.sender, topo.receiver, packet_bytes, progress)
                    switch = [s.switch_cpu_pct for s in taken.kept if s.switch_cpu_pct is not None]
                    pmd = [s.switch_pmd_busy_pct for s in taken.kept if s.switch_pmd_busy_pct is not None]
                    candidate.ceilings.append(CeilingAt(
                        packet_bytes, tuple(s.mbps for s in taken.kept),
                        stats.Spread(tuple(switch)).median if switch else None,
                        stats.Spread(tuple(s.cpu_busy_pct for s in taken.kept)).median,
                        stats.Spread(tuple(pmd)).median if pmd else None))
                    progress.finish_run()
            for loops, rows in ((0, candidate.calibration), (config.busy_loops, candidate.loaded)):
                if rows is candidate.loaded and not loops:
                    continue
                with busy(loops):
                    for packet_bytes in config.packet_sizes:
                        for _ in range(config.bursts):
                            burst_id += 1
                            label = f"{datapath.label}: burst {buffer_bytes} B / {packet_bytes} B, {loops} busy loops"
                            progress.start_run(label)
                            row = one_burst(network, buffer_bytes, packet_bytes, config.burst_seconds(buffer_bytes),
                                            burst_id)
                            rows.append(row)
                            progress.message(f"{label}: peak {row.peak_backlog_bytes} B, drops {row.drops}, "
                                             f"switch input {row.switch_input_drops}, unexplained {row.unexplained}")
                            progress.finish_run()


@contextlib.contextmanager
def busy(loops: int) -> Iterator[None]:
    """loops processes spinning on the CPU while the context lasts (stopped by PID after)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(loops)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def summarize(config: DatapathConfig, candidates: list[Candidate], provenance: dict[str, Any]) -> dict[str, Any]:
    """summary.json's document."""
    return {"experiment": "datapath", "bw_mbps": config.bw_mbps, "buffers": config.buffers,
            "packet_sizes": config.packet_sizes, "bursts": config.bursts, "busy_loops": config.busy_loops,
            "wire_share_mbps": {str(p): wire_share_mbps(config.bw_mbps, p) for p in config.packet_sizes},
            "candidates": [c.as_dict() for c in candidates], "choice": choice(candidates, config.packet_sizes),
            **provenance}


def rederived(summary: dict[str, Any]) -> dict[str, Any]:
    """summary with every candidate's verdicts and the choice made again from its rows and
    ceilings by the rules of this code (what --rewrite-page writes a page from)."""
    candidates = [Candidate.from_dict(c) for c in summary["candidates"]]
    return {**summary, "busy_loops": summary.get("busy_loops", 0), "candidates": [c.as_dict() for c in candidates],
            "choice": choice(candidates, summary["packet_sizes"])}


def rewrite_page(out: str) -> str:
    """Write OUT/datapath.md again from OUT/summary.json (rederived); return the page."""
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as handle:
        text = page(rederived(json.load(handle)), rewritten=f"otcp-experiment datapath --rewrite-page --out {out}")
    with open(os.path.join(out, "datapath.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    return text


def choice(candidates: list[Candidate], packet_sizes: list[int]) -> dict[str, Any]:
    """The fastest candidate that keeps the switch faithful: of those that ran as asked and
    passed calibration, the highest ceiling at the smallest packet size; among ceilings within
    SAME_CEILING of it, the one whose switch used the least CPU over its ceilings (summed over
    the packet sizes: small packets are where the switch becomes the limit).
    {"datapath": label or None, "why": the reasons, one per candidate}."""
    smallest = min(packet_sizes)
    why = []
    eligible = []
    for candidate in candidates:
        if candidate.error is not None:
            why.append(f"{candidate.asked}: failed ({candidate.error.splitlines()[0]})")
        elif not candidate.ran_as_asked:
            why.append(f"{candidate.asked}: not available here (ran on "
                       f"{', '.join(sorted({u['used'] for u in candidate.used}))})")
        elif not candidate.faithful:
            found = [f"{name}: {v.switch_input_drops} frames lost at the switch's input, {v.unexplained} unexplained, "
                     f"{v.held} of {v.pairs} buffers within one frame"
                     for name, v in (("quiet", verdict(candidate.calibration)), ("loaded", verdict(candidate.loaded)))
                     if v.bursts and not v.faithful]
            why.append(f"{candidate.asked}: not faithful ({'; '.join(found)})")
        elif candidate.ceiling(smallest) is None:
            why.append(f"{candidate.asked}: no ceiling measured")
        else:
            eligible.append(candidate)
    if not eligible:
        return {"datapath": None, "why": why}
    best = max(c.ceiling(smallest).median for c in eligible)  # type: ignore[union-attr]
    close = [c for c in eligible if c.ceiling(smallest).median >= (1 - SAME_CEILING) * best]  # type: ignore[union-attr]

    def cpu(candidate: Candidate) -> float:
        measured = [c.switch_cpu_pct for c in candidate.ceilings if c.switch_cpu_pct is not None]
        return sum(measured) if len(measured) == len(packet_sizes) else float("inf")

    chosen = min(close, key=cpu)
    for candidate in eligible:
        at_small = candidate.ceiling(smallest)
        assert at_small is not None
        switch = " + ".join(f"{c.switch_cpu_pct:.0f}" if c.switch_cpu_pct is not None else "?"
                            for c in sorted(candidate.ceilings, key=lambda c: -c.packet_bytes))
        why.append(f"{candidate.asked}: faithful; {at_small.median:.1f} Mb/s at {smallest} B; switch CPU at the "
                   f"ceilings ({', '.join(str(p) for p in sorted(packet_sizes, reverse=True))} B) {switch} = "
                   f"{cpu(candidate):.0f} % of a core" + (" (chosen)" if candidate is chosen else ""))
    return {"datapath": chosen.asked, "why": why}


def write(out: str, summary: dict[str, Any]) -> None:
    """OUT/summary.json and OUT/datapath.md."""
    results.write_json(os.path.join(out, "summary.json"), summary)
    with open(os.path.join(out, "datapath.md"), "w", encoding="utf-8") as handle:
        handle.write(page(summary))


def page(summary: dict[str, Any], rewritten: str | None = None) -> str:
    """The results page (Markdown) of a comparison's summary; rewritten: the command that wrote it
    again from the summary, if one did."""
    sizes = summary["packet_sizes"]
    bw = summary["bw_mbps"]
    lines = ["# The switch's datapath", "", "Made by the program from its run (`summary.json`):", "",
             f"    {summary['command']}", ""] + (
                [f"and written again from its summary, by this code's rules, with `{rewritten}`.", ""]
                if rewritten else []) + [
             f"Per candidate, on the calibration network ({bw:g} Mb/s bottleneck, the sender's link twice as fast, "
             "the OTCP controller forwarding): the single-flow ceiling at each packet size (median of the samples "
             "kept), the switch's forwarding threads' CPU at it (% of one core: the main thread, and the PMD "
             "thread of `afxdp`, which polls at 100 % whatever the load), the part of the PMD thread's cycles spent on "
             "packets (`ovs-appctl dpif-netdev/pmd-stats-show`; - where there is none) and both cores' busy share, "
             "then calibration bursts (every buffer within one "
             "frame, nothing lost but at the buffer). The wire's payload share is the most one TCP flow can "
             f"carry through {bw:g} Mb/s at that packet size whatever the switch: {bw:g} x "
             f"(packet - {TCP_IP_HEADERS}) / (packet + {ETHERNET_HEADER}) (IPv4, TCP and its timestamp option; "
             "the Ethernet header the rate counts).", "",
             "| datapath asked | used | packet B | ceiling Mb/s (samples) | wire's payload share Mb/s | "
             "switch CPU at the ceiling | PMD cycles on packets | both cores busy |",
             "|---|---|---|---|---|---|---|---|"]
    for candidate in summary["candidates"]:
        used = ", ".join(sorted({u["used"] for u in candidate["used"]})) or "-"
        for ceiling in candidate["ceilings"]:
            switch, pmd = ("-" if ceiling.get(field) is None else f"{ceiling[field]:.0f} %"
                           for field in ("switch_cpu_pct", "switch_pmd_busy_pct"))
            lines.append(f"| {candidate['asked']} | {used} | {ceiling['packet_bytes']} | {ceiling['median']:.1f} "
                         f"({', '.join(f'{s:.1f}' for s in ceiling['samples'])}) | "
                         f"{summary['wire_share_mbps'][str(ceiling['packet_bytes'])]:.1f} | {switch} | {pmd} | "
                         f"{ceiling['cpu_busy_pct']:.0f} % |")
        if not candidate["ceilings"]:
            lines.append(f"| {candidate['asked']} | {used} | - | {candidate['error'] or 'not measured'} | | | | |")
    loaded = f" and again with {summary['busy_loops']} processes spinning on the CPU" if summary["busy_loops"] else ""
    lines += ["", f"Calibration: {summary['bursts']} burst(s) per buffer and packet size "
                  f"({', '.join(str(b) for b in summary['buffers'])} B; {', '.join(str(s) for s in sizes)} B), on the "
                  f"quiet machine{loaded}. A buffer holds within one frame when the largest peak of its bursts does "
                  "(the half-millisecond sampler may miss one burst's full moment).", "",
              "| datapath asked | machine | bursts | filled | buffers within one frame | largest shortfall B (frame B) "
              "| lost at the switch's input | unexplained | faithful |", "|---|---|---|---|---|---|---|---|---|"]
    for candidate in summary["candidates"]:
        verdicts = candidate.get("verdicts", {})
        if not verdicts:
            lines.append(f"| {candidate['asked']} | - | 0 | | | | | | no |")
        for name, v in verdicts.items():
            lines.append(f"| {candidate['asked']} | {name} | {v['bursts']} | {v['filled']} | {v['held']} of "
                         f"{v['pairs']} | {v['shortfall_bytes']} ({v['shortfall_frame_bytes']}) | "
                         f"{v['switch_input_drops']} | {v['unexplained']} | {'yes' if v['faithful'] else 'NO'} |")
    notes = [u["reason"] for c in summary["candidates"] for u in c["used"] if u["reason"]]
    if notes:
        lines += ["", "Where a candidate could not run as asked:", ""] + [f"- {n}" for n in dict.fromkeys(notes)]
    chosen = summary["choice"]
    lines += ["", "## The choice this run makes", "",
              f"The fastest candidate that keeps the switch faithful: **{chosen['datapath'] or 'none'}** "
              "(faithful: every buffer within one frame and nothing lost but at the buffer, on each machine; "
              f"fastest: the highest ceiling at {min(sizes)} B packets, and among "
              f"ceilings within {SAME_CEILING:.0%} of it the least switch CPU summed over the ceilings).", ""]
    lines += [f"- {reason}" for reason in chosen["why"]]
    lines.append("")
    return "\n".join(lines)

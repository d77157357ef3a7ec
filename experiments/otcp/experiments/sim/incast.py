"""The simulated incast sweep: for every buffer and sender count, one fabric, every scheme.

For each (buffer, senders) the sweep builds the fabric (--topo, or --inventory), places the receiver,
the senders and the latency probe, measures the single-flow ceiling (one Linux-default flow from the
first sender, at 1500 B packets and at every other packet size a scheme sends), and runs each scheme
in the scenario program:

1. warm-up rounds (not counted; an OTCP scheme's first poll at t = 0 has already given every host
   the plan of the idle fabric), then, for an OTCP scheme, the idle time up to the next controller
   poll, whose plan counts the warm-up's flows (the live runner warms up until the agents hold it);
2. the measured rounds of synchronized reads, the probe pinging the receiver through the bottleneck
   and the controller polling on, then a drain;
3. the packet account of the measured rounds: every IPv4 packet a host sent is delivered, dropped
   in a named queue, or unexplained.

Results go to OUT/summary.json (the incast runner's format, results.RUN_FIELDS, with the
simulator's fields after them: SIM_FIELDS), OUT/results.db and the incast runner's plots; a run that
fails is recorded with its error and the sweep goes on. Time here is simulated time; each run's cost
(wall time per simulated second, memory) is in its record.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

from otcp.experiments.analysis import results, stats
from otcp.experiments.analysis.results import CeilingSample, Failure, RunDetail, RunRecord, run_label
from otcp.experiments.incast import SweepResult, draw_plots
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.progress import Progress
from otcp.experiments.sim import fabric as fabric_module
from otcp.experiments.sim import mapping, scenario
from otcp.experiments.sim.fabric import Placement, SimFabric, SimFabricSettings
from otcp.experiments.sim.loop import ClosedLoop
from otcp.experiments.sim.schemes import SimScheme, selected
from otcp.planning import formulas

#: IPv4, TCP and the timestamp option around a segment; ns-3's point-to-point header on the wire.
SEGMENT_OVERHEAD_BYTES = 52
PPP_HEADER_BYTES = 2
FULL_PACKET_BYTES = formulas.DEFAULT_MSS_BYTES + SEGMENT_OVERHEAD_BYTES
#: A Linux host's own IPv4 queue (a veth's default txqueuelen, as the Mininet hosts have).
HOST_QUEUE_PACKETS = 1000
#: The single-flow ceiling: long enough for this many full packets at the host rate and this many
#: round trips, whichever is longer.
CEILING_PACKETS = 20000
CEILING_ROUND_TRIPS = 100

SIM_FIELDS: dict[str, Any] = {
    **results.RUN_FIELDS,
    "topo": str,
    "placement": str,
    "bw_gbps": float,
    "total_bytes": (int, type(None)),
    "ecn_k_bytes": (float, type(None)),
    "ideal_ms": float,
    "queue_mean_bytes": float,
    "retransmissions": int,
    "duplicate_segments": int,
    "sim_seconds": float,
    "rounds_seconds": float,
    "wall_s": float,
    "wall_per_sim_s": float,
    "cpu_s": float,
    "events": int,
    "max_rss_mb": float,
}


@dataclasses.dataclass
class SimRunRecord(RunRecord):
    """A simulated run: the incast record, and the fabric, the block per round split over the servers
    (total_bytes, None for a block per server), the ideal round, the queue's mean,
    the receiver's duplicate segments and what the run cost (SIM_FIELDS): simulated seconds in all
    and of rounds (warm-up and measured; the idle time up to a poll and the drain cost next to
    nothing), wall seconds, wall seconds per simulated second of rounds, events, peak memory."""

    topo: str = ""
    placement: str = "next"
    bw_gbps: float = 0.0
    total_bytes: int | None = None
    ecn_k_bytes: float | None = None
    ideal_ms: float = 0.0
    queue_mean_bytes: float = 0.0
    duplicate_segments: int = 0
    sim_seconds: float = 0.0
    rounds_seconds: float = 0.0
    wall_s: float = 0.0
    wall_per_sim_s: float = 0.0
    cpu_s: float = 0.0
    events: int = 0
    max_rss_mb: float = 0.0


@dataclasses.dataclass(kw_only=True)
class SimConfig(SimFabricSettings, ExperimentConfig):
    """One simulated sweep (validated by otcp.experiments.cli): the fabric (topo, an mn-style spec, or
    inventory, a file), per-tier rates, delays and buffers, the controller's poll interval and the
    kernel's HZ (SimFabricSettings; the base's buffers: every switch egress toward a host), the workload
    and its placement."""

    topo: str = "star"
    inventory: str | None = None
    senders: list[int]
    sru_bytes: int | None = 65536
    total_bytes: int | None = None
    rounds: int = 20
    warmup_rounds: int = 2
    persistent: bool = False
    placement: str = "next"
    probe_interval_s: float = 0.01
    round_gap_s: float = 0.0
    round_timeout_s: float = 60.0
    drain_s: float = 0.5

    def block_bytes(self, senders: int) -> int:
        """Bytes each server sends per round: the SRU, or the fixed total split over the servers."""
        if self.total_bytes is not None:
            return max(1, math.ceil(self.total_bytes / senders))
        if self.sru_bytes is None:
            raise ValueError("neither sru_bytes nor total_bytes is set")
        return self.sru_bytes


def build_fabric(config: SimConfig, senders: int, buffer_bytes: int) -> SimFabric:
    """The sweep's fabric for one sender count and buffer (a star sized to the senders for "star")."""
    if config.inventory:
        return fabric_module.from_inventory(config.inventory)
    host, uplink = config.tiers(buffer_bytes)
    spec = f"star,{senders}" if config.topo == "star" else config.topo
    return fabric_module.from_topo(spec, host, uplink)


def ideal_round_s(senders: int, block_bytes: int, segment_bytes: int, rate_bps: float,
                  round_trips_s: Sequence[float], persistent: bool) -> float:
    """A round with the bottleneck busy from its first byte to its last and nothing lost: every
    segment's packet (IPv4, TCP, timestamps, the point-to-point header) back to back at rate_bps
    from the moment the nearest sender's first byte can arrive (the request's round trip, and the
    handshake's with a new connection per round), and never before the farthest sender's own block
    can have arrived."""
    segments = math.ceil(block_bytes / segment_bytes)
    last = block_bytes - (segments - 1) * segment_bytes
    one = (segments - 1) * (segment_bytes + SEGMENT_OVERHEAD_BYTES + PPP_HEADER_BYTES) \
        + last + SEGMENT_OVERHEAD_BYTES + PPP_HEADER_BYTES
    trips = 1 if persistent else 2
    return max(min(round_trips_s) * trips + senders * one * 8 / rate_bps,
               max(round_trips_s) * trips + one * 8 / rate_bps)


def static_settings(config: SimConfig, fabric: SimFabric, placement: Placement, scheme: SimScheme,
                    buffer_bytes: int) -> dict[str, Any]:
    """Every host's settings under a static scheme (and before an OTCP scheme's first plan)."""
    settings = {host: {"default": mapping.static(scheme.rto_min_ms).as_json()} for host in fabric.hosts}
    if scheme.static_rwnd:
        rtt = max(fabric.round_trip_s(placement.receiver, s) for s in placement.senders)
        window = mapping.static_rwnd_bytes(fabric.bottleneck_rate_bps(placement.receiver), rtt, buffer_bytes,
                                           len(placement.senders))
        # IMC's harness acknowledges every segment (DelAckCount 1): a window of one segment would
        # otherwise wait for the delayed-ACK timer after each one.
        receiver = dataclasses.replace(mapping.static(scheme.rto_min_ms, window), quickack=True)
        settings[placement.receiver] = {"default": receiver.as_json()}
    return settings


def workload_pairs(placement: Placement) -> list[tuple[str, str]]:
    """The (host, peer) pairs that carry the workload's and the probe's traffic, both ways."""
    peers = [*placement.senders, *([placement.probe] if placement.probe else [])]
    return [pair for peer in peers for pair in ((peer, placement.receiver), (placement.receiver, peer))]


def scenario_document(config: SimConfig, fabric: SimFabric, placement: Placement, scheme: SimScheme,
                      buffer_bytes: int, admit: int | None = None) -> dict[str, Any]:
    """The scenario program's input for one scheme's run (the marking threshold: given, or DCTCP's for
    the receiver's link rate; admit: how many senders the receiver asks at once, None: all)."""
    k_bytes = config.marking_threshold(fabric.bottleneck_rate_bps(placement.receiver))
    return scenario.scheme_document(
        "incast", config, fabric, scheme, HOST_QUEUE_PACKETS, k_bytes,
        static_settings(config, fabric, placement, scheme, buffer_bytes),
        {"receiver": placement.receiver, "senders": placement.senders,
         "block_bytes": config.block_bytes(len(placement.senders)), "persistent": config.persistent,
         "gap_s": config.round_gap_s, "round_timeout_s": config.round_timeout_s,
         "warmup_rounds": config.warmup_rounds, "rounds": config.rounds, "probe": placement.probe,
         "probe_interval_s": config.probe_interval_s, "drain_s": config.drain_s,
         "admit": admit})


def measure_ceiling(hz: int, fabric: SimFabric, placement: Placement, segment_bytes: int) -> float:
    """One Linux-default flow's goodput (Mb/s) from the first sender to the receiver, segment_bytes each,
    with the kernel's hz."""
    rate = fabric.bottleneck_rate_bps(placement.receiver)
    rtt = fabric.round_trip_s(placement.receiver, placement.senders[0])
    seconds = max(CEILING_PACKETS * (segment_bytes + SEGMENT_OVERHEAD_BYTES) * 8 / rate, CEILING_ROUND_TRIPS * rtt)
    settings = {host: {"default": dataclasses.replace(mapping.static(200), segment_bytes=segment_bytes).as_json()}
                for host in fabric.hosts}
    document = {"mode": "ceiling", "hz": hz, **fabric.scenario(), "host_queue_packets": HOST_QUEUE_PACKETS,
                "ecn_k_bytes": None, "tcp": {"congestion_control": "ns3::TcpCubic", "ecn": False},
                "settings": settings, "ceiling": {"receiver": placement.receiver, "sender": placement.senders[0],
                                                  "seconds": seconds}}
    result = scenario.run(document).result
    return result["bytes"] * 8 / result["seconds"] / 1e6


def run_sweep(config: SimConfig, progress: Progress) -> tuple[str | None, SweepResult]:
    """Run the whole sweep; return (summary path or None, SweepResult)."""
    os.makedirs(config.out, exist_ok=True)
    code = results.code_version()
    chosen = selected(config.schemes, config.fine_rto_ms)
    sweep = SweepResult()
    store = results.ResultStore(os.path.join(config.out, "results.db"), dataclasses.asdict(config), SimRunRecord)
    progress.total = len(config.buffers) * len(config.senders) * len(chosen)
    try:
        for buffer_bytes in config.buffers:
            for senders in config.senders:
                run_fabric(config, store, progress, sweep, buffer_bytes, senders, chosen)
    finally:
        store.close()
        summary = results.write_summary_and_plots(config.out, sweep, code, config.command, draw_plots, SIM_FIELDS)
    return summary, sweep


def run_fabric(config: SimConfig, store: results.ResultStore, progress: Progress, sweep: SweepResult,
               buffer_bytes: int, senders: int, chosen: Sequence[SimScheme]) -> None:
    """Build one fabric, measure its ceiling and run every scheme on it."""
    fabric = build_fabric(config, senders, buffer_bytes)
    placement = fabric_module.place(fabric, senders, config.placement)
    progress.message(f"fabric {fabric.description}: {len(fabric.hosts)} hosts, {len(fabric.switches)} switches; "
                     f"{senders} senders ({config.placement}) into {placement.receiver}, {buffer_bytes} B buffers")
    ceilings: dict[int, float] = {}

    def ceiling(segment: int) -> float:
        packet = segment + SEGMENT_OVERHEAD_BYTES
        if packet not in ceilings:
            progress.message(f"measuring the single-flow ceiling, {packet} B packets")
            ceilings[packet] = measure_ceiling(config.hz, fabric, placement, segment)
            sample = CeilingSample(senders, buffer_bytes, packet, ceilings[packet], 0.0)
            sweep.ceilings.append(sample)
            store.add_ceiling(sample, sweep.ceiling())
        return ceilings[packet]

    ceiling(formulas.DEFAULT_MSS_BYTES)
    for scheme in (scheme for scheme in chosen if scheme.admission):
        admit = ClosedLoop.for_scheme(fabric, [], scheme, config.lossless()).admit(placement.receiver)
        sweep.note(progress, f"{scheme.name} on the {senders}-sender fabric ({buffer_bytes} B): the receiver asks at "
                             f"most {admit} senders at once, its K of the loop's plan")
    for scheme in chosen:
        label = run_label(scheme.name, senders, buffer_bytes)
        progress.start_run(label)
        try:
            record, detail = run_scheme(config, fabric, placement, scheme, buffer_bytes, progress)
            record.ceiling_mbps = ceiling(record.packet_bytes - SEGMENT_OVERHEAD_BYTES)
            record.full_ceiling_mbps = ceiling(formulas.DEFAULT_MSS_BYTES)
        except scenario.SimulationError as exc:
            sweep.failures.append(Failure(scheme.name, senders, buffer_bytes, str(exc)))
            progress.message(f"run failed: {label}: {exc}")
        else:
            store.add_run(record, detail)
            sweep.runs.append(record)
            sweep.round_durations.append([r["duration_s"] * 1000 for r in detail.rounds])
            if record.unexplained:
                progress.message(f"note: {label}: {record.unexplained} packets unaccounted for")
        progress.finish_run()


def run_scheme(config: SimConfig, fabric: SimFabric, placement: Placement, scheme: SimScheme, buffer_bytes: int,
               progress: Progress) -> tuple[SimRunRecord, RunDetail]:
    """One scheme's run on one fabric: its record (ceiling_mbps still 0) and its detail."""
    loop = ClosedLoop.for_scheme(fabric, workload_pairs(placement), scheme, config.lossless()) \
        if scheme.planned else None
    total = config.warmup_rounds + config.rounds

    def on_round(message: dict[str, Any]) -> None:
        done = message["round"] + (config.warmup_rounds if message["phase"] == "measured" else 0)
        progress.update(done, total)

    admit = loop.admit(placement.receiver) if loop is not None and scheme.admission else None
    if scheme.admission and admit is None:
        raise scenario.SimulationError(f"{scheme.name}: the loop's plan gives {placement.receiver} no admit")
    document = scenario_document(config, fabric, placement, scheme, buffer_bytes, admit)
    outcome = scenario.run(document, loop, on_round)
    return make_record(config, fabric, placement, scheme, buffer_bytes, document, outcome, loop)


def make_record(config: SimConfig, fabric: SimFabric, placement: Placement, scheme: SimScheme, buffer_bytes: int,
                document: dict[str, Any], outcome: scenario.Outcome, loop: ClosedLoop | None
                ) -> tuple[SimRunRecord, RunDetail]:
    """The run's record and detail from the program's result."""
    result = outcome.result
    rounds = result["rounds"]
    queues = result["queues"]
    bottleneck = next(q for q in queues if q["to"] == placement.receiver)
    other_switch = sum(q["drops"] for q in queues if q["switch"] and q is not bottleneck)
    host_drops = sum(q["drops"] for q in queues if not q["switch"])
    block = document["workload"]["block_bytes"]
    segment = result["segment_bytes"]
    rate = fabric.bottleneck_rate_bps(placement.receiver)
    round_trips = [fabric.round_trip_s(placement.receiver, s) for s in placement.senders]
    measured = result["measured_s"]
    start = min(r["start_s"] for r in rounds)
    measured_by: dict[str, Any] = {**stats.summarize_rounds(rounds), **stats.unfinished_connections(rounds),
                                   **stats.summarize_probe(result["probe_rtts_ms"], result["probes_sent"])}
    record = SimRunRecord(
        **measured_by, scheme=scheme.name, senders=len(placement.senders), buffer_bytes=buffer_bytes, sru_bytes=block,
        rounds=len(rounds), persistent=int(config.persistent), packet_bytes=segment + SEGMENT_OVERHEAD_BYTES,
        ceiling_mbps=0.0, drops=bottleneck["drops"], sent=result["sent"],
        delivered=result["delivered"], drops_other_buffers=other_switch + result["device_drops"],
        sender_queue_drops=host_drops, unexplained=result["unaccounted"],
        peak_backlog_bytes=bottleneck["peak_bytes"], timeouts=result["timeouts"],
        retransmissions=result["retransmissions"],
        cpu_busy_pct=outcome.cpu_busy_pct, cpu_busiest_pct=outcome.cpu_busiest_pct,
        ce_marks=bottleneck["marks"] if scheme.ecn else None,
        generations=loop.generations_between(start, start + measured) if loop is not None else None,
        topo=fabric.description, placement=config.placement, bw_gbps=rate / 1e9, total_bytes=config.total_bytes,
        ecn_k_bytes=document["ecn_k_bytes"],
        ideal_ms=1000 * ideal_round_s(len(placement.senders), block, segment, rate, round_trips, config.persistent),
        queue_mean_bytes=bottleneck["mean_bytes"], duplicate_segments=result["duplicate_segments"],
        sim_seconds=result["sim_s"], rounds_seconds=outcome.rounds_s, wall_s=outcome.wall_s,
        wall_per_sim_s=outcome.wall_s / outcome.rounds_s,
        cpu_s=outcome.cpu_s, events=result["events"], max_rss_mb=outcome.max_rss_kb / 1024)
    detail = RunDetail(rounds=rounds, servers=placement.senders, host_counters={},
                       probe_rtts=result["probe_rtts_ms"], path_counters={}, queues={})
    return record, detail


def summary_table(runs: Sequence[SimRunRecord], failures: Sequence[Failure] = ()) -> str:
    """The table printed at the end of a simulated sweep, in the order the sweep ran."""
    header = (f"{'scheme':<15}{'senders':>8}{'buffer':>9}{'goodput':>9}{'%line':>6}{'%ceil':>6}{'p50':>8}{'p99':>8}"
              f"{'ideal':>8}"
              f"{'drops':>8}{'RTOs':>6}{'dups':>6}{'peakq':>8}{'meanq':>8}{'probe':>7}{'wall/sim':>9}")
    lines = [header, "-" * len(header)]
    for run in runs:
        probe = "-" if run.probe_rtt_avg_ms is None else f"{run.probe_rtt_avg_ms:.2f}"
        line = "-" if run.share_of_full_ceiling is None else f"{100 * run.share_of_full_ceiling:.0f}%"
        lines.append(f"{run.scheme:<15}{run.senders:>8}{run.buffer_bytes:>9}{run.goodput_mbps:>9.1f}{line:>6}"
                     f"{100 * run.share_of_ceiling:>5.0f}%{run.fct_p50_ms:>8.2f}{run.fct_p99_ms:>8.2f}"
                     f"{run.ideal_ms:>8.2f}{run.drops:>8}{run.timeouts:>6}{run.duplicate_segments:>6}"
                     f"{run.peak_backlog_bytes // 1000:>7}k{run.queue_mean_bytes / 1000:>7.1f}k{probe:>7}"
                     f"{run.wall_per_sim_s:>9.1f}")
    lines += [f"{failure.scheme:<15}{failure.senders:>8}{failure.buffer_bytes:>9}  FAILED: {failure.brief()}"
              for failure in failures]
    lines.append("goodput in Mb/s; %line against the simulated single-flow ceiling at full-size (1500 B) packets, "
                 "%ceil against it at the run's packet size; round "
                 "completion p50/p99 and the ideal round (every byte back to back at the bottleneck) in simulated ms; "
                 "drops at the bottleneck; RTOs and the receiver's duplicate segments summed over the hosts; the "
                 "bottleneck queue's peak and time-mean; probe: mean ping through it, ms; wall/sim: wall seconds "
                 "per simulated second of rounds")
    return "\n".join(lines)

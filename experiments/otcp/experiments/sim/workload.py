"""The simulated workload: the workload experiment's flow-size mixes, queries and background flows in ns-3.

For every buffer the experiment builds one fabric (``--topo``, the Mininet workload's topology: a
star has no probe host), measures its single-flow ceiling, and then, for every query fan-in and
response size asked for, runs each scheme in the scenario program on the same seeded schedule, the
one the Mininet workload draws (``WorkloadConfig.schedule``, ``traffic.arrivals``):

1. the warm-up: ``--warmup-seconds`` of the point's traffic on its own stream ("warmup-1"), the
   long-lived flows running from the start; an OTCP scheme's first poll at t = 0 gives every host
   the idle fabric's plan;
2. the measured schedule from the first controller poll at or after the warm-up's end (the same
   time for every scheme: its plan counts the warm-up's flows), the warm-up's longest flows still
   running into it, as in a fabric that never goes idle; the controller polls on;
3. a drain of ``--drain-seconds`` in which the measured flows still running may finish (the
   long-lived ones end with the measured time).

Every flow is pulled over a new connection, as the Mininet hosts' flow clients do: the receiving
host connects, asks, and the sender sends the flow's bytes. Each flow's FCT (connect to the last
byte read) is set against its ideal on the idle fabric (``analysis.fct``, with the point-to-point
links' framing and the declared links' round trip, ``SimIdeals``), and the runs are summed up with the
Mininet workload's own functions into its summary format (``WORKLOAD_FIELDS``, with the simulator's
fields after them: ``SIM_WORKLOAD_FIELDS``), results.db and plots, so ``otcp-experiment report``
reads them as it reads the Mininet workload's. Time here is simulated time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from typing import Any

from otcp.experiments import workload
from otcp.experiments.analysis import fct, results
from otcp.experiments.analysis.results import CeilingSample, Failure
from otcp.experiments.runner.progress import Progress
from otcp.experiments.sim import fabric as fabric_module
from otcp.experiments.sim import mapping, scenario
from otcp.experiments.sim.fabric import Placement, SimFabric, SimFabricSettings
from otcp.experiments.sim.incast import PPP_HEADER_BYTES, SEGMENT_OVERHEAD_BYTES, measure_ceiling
from otcp.experiments.sim.loop import ClosedLoop
from otcp.experiments.sim.schemes import SimScheme, selected
from otcp.experiments.traffic import arrivals
from otcp.planning import formulas

#: What a packet carries on a simulated link besides its payload: TCP with timestamps, IPv4, PPP.
FRAMING = fct.Framing(formulas.DEFAULT_MSS_BYTES, SEGMENT_OVERHEAD_BYTES + PPP_HEADER_BYTES)
#: A ping's IP packet (84 B) on a point-to-point link: what the base round trip carries, as the
#: Mininet workload measures it with ping.
PING_FRAME_BYTES = 84 + PPP_HEADER_BYTES
#: A host's own IPv4 queue: more than its sockets' send buffers ever hold, so a host never drops its own
#: packets. Linux's TCP small queues keep a long flow's window in its socket while the NIC's queue is
#: full; ns-3 has none, and a flow in slow start (DCTCP's, which has no HyStart) would overflow a
#: 1000-packet queue at once and spend the run recovering. The window waits in the queue instead: a
#: host's short flows queue behind its own long ones (with TSQ they would queue behind up to
#: tcp_limit_output_bytes of each).
HOST_QUEUE_PACKETS = 100_000
#: Progress reports per run.
PROGRESS_STEPS = 100
#: The warm-up's stream (the Mininet workload's first warm-up stream).
WARMUP_STREAM = "warmup-1"
#: What an unfinished flow's record says.
UNFINISHED = "unfinished at the end of the drain"

SIM_WORKLOAD_FIELDS: dict[str, Any] = {
    **workload.WORKLOAD_FIELDS,
    "bw_gbps": float,
    "uplink_gbps": float,
    "ecn_k_bytes": (float, type(None)),
    "host_queue_drops": int,
    "measure_start_s": float,
    "sim_seconds": float,
    "wall_s": float,
    "wall_per_sim_s": float,
    "cpu_s": float,
    "events": int,
    "max_rss_mb": float,
}


@dataclasses.dataclass(kw_only=True)
class SimWorkloadConfig(SimFabricSettings, workload.WorkloadConfig):
    """One simulated workload experiment (validated by otcp.experiments.cli): the workload's mix,
    queries, background flows, seconds and seed (WorkloadConfig; bw_mbps is the host links' rate,
    which the load is a share of), and the simulated fabric's per-tier rates, delays and buffers (the
    base's buffers: every switch egress toward a host), the marking threshold, the controller's poll
    interval and the kernel's HZ, as simulate incast takes them (SimFabricSettings)."""

    @property
    def measure_start_s(self) -> float:
        """When the measured schedule starts: the first poll at or after the warm-up's end."""
        return math.ceil(self.warmup_seconds / self.poll_interval_s - 1e-9) * self.poll_interval_s

    def build_fabric(self, buffer_bytes: int) -> SimFabric:
        """The fabric of one buffer (FabricError names a bad --topo)."""
        host, uplink = self.tiers(buffer_bytes)
        return fabric_module.from_topo(self.topo, host, uplink, probe=False)


@dataclasses.dataclass(frozen=True)
class ScenarioFlow:
    """One flow as the scenario program runs it: its key (the Mininet flow client's: f<id>, q<id>/<n>,
    b<n>; a warm-up's start with w), kind ("mix", "query" or "background"), sender, receiver, start
    (simulated s), bytes (None: long-lived), and whether it is of the measured schedule."""

    key: str
    kind: str
    src: str
    dst: str
    start_s: float
    size_bytes: int | None
    measured: bool

    def as_json(self) -> dict[str, Any]:
        """The flow as the scenario reads it."""
        return {"src": self.src, "dst": self.dst, "start_s": self.start_s, "bytes": self.size_bytes,
                "kind": self.kind}


def schedule_flows(schedule: arrivals.Schedule, offset_s: float, measured: bool,
                   background: bool = True) -> list[ScenarioFlow]:
    """A schedule's mix flows and query responses, offset_s later, and (background) its long-lived
    flows from time 0."""
    prefix = "" if measured else "w"
    flows = [ScenarioFlow(f"{prefix}f{flow.id}", "mix", flow.src, flow.dst, offset_s + flow.start_s,
                          flow.size_bytes, measured) for flow in schedule.flows]
    flows += [ScenarioFlow(f"{prefix}q{query.id}/{index}", "query", responder, query.aggregator,
                           offset_s + query.start_s, query.response_bytes, measured)
              for query in schedule.queries for index, responder in enumerate(query.responders)]
    if background:
        flows += [ScenarioFlow(f"{prefix}b{index}", "background", long_flow.src, long_flow.dst, 0.0, None, measured)
                  for index, long_flow in enumerate(schedule.background)]
    return flows


def flow_list(measured: arrivals.Schedule, warmup: arrivals.Schedule | None, start_s: float) -> list[ScenarioFlow]:
    """Every flow of a run: the warm-up's from 0 (its long-lived flows are the measured schedule's,
    which run from 0), then the measured schedule's from start_s."""
    if warmup is not None and warmup.duration_s > start_s + 1e-9:
        raise ValueError(f"a warm-up of {warmup.duration_s} s does not end by the measured start, {start_s} s")
    early = schedule_flows(warmup, 0.0, measured=False, background=False) if warmup is not None else []
    return early + schedule_flows(measured, start_s, measured=True)


def pulled(flows: Sequence[ScenarioFlow], result: dict[str, Any], start_s: float) -> workload.Pulled:
    """The measured flows' records as the Mininet flow clients report them (workload.Pulled), from the
    program's [connect, end, bytes received, bytes received in the measured time, timeouts] per flow:
    times from the measured start, each flow's timeouts at either end in its "rto"."""
    connections = {}
    for index, (flow, record) in enumerate(zip(flows, result["flows"], strict=True)):
        if not flow.measured:
            continue
        connect, end, received, measured_bytes, timeouts = record
        unfinished = flow.size_bytes is not None and end is None
        connections[flow.key] = {
            "key": flow.key, "id": index, "scheduled": flow.start_s - start_s,
            "start": None if connect is None else connect - start_s, "end": None if end is None else end - start_s,
            "bytes": received, "measured_bytes": measured_bytes, "rto": timeouts,
            "error": UNFINISHED if unfinished else None}
    return workload.Pulled(connections, {})


class SimIdeals:
    """Every flow's ideal FCT on the idle simulated fabric (workload.Ideals): at the host links' rate
    (rate_bps), the base round trip of the declared links (their delays and a ping's serialization on
    each, both ways), over the path's links, with the point-to-point framing (FRAMING). Every
    store-and-forward hop is counted at the host rate: with faster uplinks the ideal is that much longer."""

    def __init__(self, fabric: SimFabric, rate_bps: float) -> None:
        self.fabric = fabric
        self.rate_bps = rate_bps
        self.paths: dict[tuple[str, str], fct.IdealPath] = {}

    def path(self, src: str, dst: str) -> fct.IdealPath:
        """The idle path from src to dst."""
        if (src, dst) not in self.paths:
            links = self.fabric.path_links(src, dst)
            rtt = sum(2 * (link.delay_s + PING_FRAME_BYTES * 8 / link.rate_bps) for link in links)
            self.paths[(src, dst)] = fct.IdealPath(self.rate_bps / 8, rtt, len(links))
        return self.paths[(src, dst)]

    def ideal_s(self, src: str, dst: str, size_bytes: int) -> float:
        """The ideal FCT of a flow pulled over a new connection from src to dst."""
        return fct.ideal_fct_s(size_bytes, self.path(src, dst), FRAMING)

    def base_rtts(self, hosts: Sequence[str]) -> dict[int, float]:
        """The base round trip per path length in links, between the first pair of hosts with it
        (as the Mininet workload records it)."""
        found: dict[int, float] = {}
        for dst in hosts:
            for src in hosts:
                if src != dst:
                    path = self.path(src, dst)
                    found.setdefault(path.links, path.base_rtt_s)
        return dict(sorted(found.items()))


@dataclasses.dataclass
class SimWorkloadRun(workload.WorkloadRun):
    """A simulated workload run: the workload's record (WorkloadRun) and the simulator's
    (SIM_WORKLOAD_FIELDS): the link rates, the marking threshold, drops in the hosts' own queues, when
    the measured schedule started, and what the run cost: simulated and wall seconds, wall seconds per
    simulated second, CPU seconds, events, peak memory."""

    bw_gbps: float = 0.0
    uplink_gbps: float = 0.0
    ecn_k_bytes: float | None = None
    host_queue_drops: int = 0
    measure_start_s: float = 0.0
    sim_seconds: float = 0.0
    wall_s: float = 0.0
    wall_per_sim_s: float = 0.0
    cpu_s: float = 0.0
    events: int = 0
    max_rss_mb: float = 0.0


def static_window(config: SimWorkloadConfig, fabric: SimFabric, schedule: arrivals.Schedule,
                  buffer_bytes: int) -> int:
    """The static-rwnd scheme's window: the bottleneck's budget over the senders the aggregator expects
    at once (a query's fan-in and the long-lived flows; every other host without either), as the
    Mininet workload sets it."""
    hosts = fabric.hosts
    expected = (len(schedule.queries[0].responders) if schedule.queries else 0) + len(schedule.background)
    return mapping.static_rwnd_bytes(config.bw_gbps * 1e9, fabric.round_trip_s(hosts[1], hosts[0]), buffer_bytes,
                                     expected or len(hosts) - 1)


def host_settings(fabric: SimFabric, scheme: SimScheme, window: int | None) -> dict[str, Any]:
    """Every host's settings under a static scheme (and before an OTCP scheme's first plan): every host
    receives flows, so under static-rwnd every host advertises the window (and acknowledges every
    segment, as simulate incast's receiver does)."""
    settings = mapping.static(scheme.rto_min_ms, window or 0)
    if window:
        settings = dataclasses.replace(settings, quickack=True)
    return {host: {"default": settings.as_json()} for host in fabric.hosts}


def scenario_document(config: SimWorkloadConfig, fabric: SimFabric, scheme: SimScheme, flows: Sequence[ScenarioFlow],
                      window: int | None) -> dict[str, Any]:
    """The scenario program's input for one scheme's run."""
    end = config.measure_start_s + config.seconds
    return scenario.scheme_document(
        "workload", config, fabric, scheme, HOST_QUEUE_PACKETS, config.marking_threshold(config.bw_gbps * 1e9),
        host_settings(fabric, scheme, window),
        {"flows": [flow.as_json() for flow in flows], "measure_start_s": config.measure_start_s,
         "measure_end_s": end, "drain_s": config.drain_seconds,
         "progress_s": (end + config.drain_seconds) / PROGRESS_STEPS})


def closed_loop(config: SimWorkloadConfig, fabric: SimFabric, scheme: SimScheme,
                flows: Sequence[ScenarioFlow]) -> ClosedLoop:
    """The controller and agents of an OTCP scheme's run, for every pair a flow joins, both ways."""
    pairs = {pair for flow in flows for pair in ((flow.src, flow.dst), (flow.dst, flow.src))}
    return ClosedLoop.for_scheme(fabric, pairs, scheme, config.lossless())


def run_scheme(config: SimWorkloadConfig, fabric: SimFabric, scheme: SimScheme, schedule: arrivals.Schedule,
               flows: Sequence[ScenarioFlow], ideals: SimIdeals, buffer_bytes: int, ceiling_mbps: float,
               progress: Progress) -> tuple[SimWorkloadRun, list[fct.FlowOutcome], list[fct.QueryOutcome],
                                            workload.Pulled]:
    """One scheme on one point's flows: its record, its flows' and queries' outcomes, its connections."""
    window = static_window(config, fabric, schedule, buffer_bytes) if scheme.static_rwnd else None
    loop = closed_loop(config, fabric, scheme, flows) if scheme.planned else None
    document = scenario_document(config, fabric, scheme, flows, window)
    end = document["workload"]["measure_end_s"] + config.drain_seconds

    def on_progress(message: dict[str, Any]) -> None:
        progress.update(min(PROGRESS_STEPS, round(message["t"] / end * PROGRESS_STEPS)), PROGRESS_STEPS)

    outcome = scenario.run(document, loop, on_progress=on_progress)
    result = outcome.result
    start = config.measure_start_s
    connections = pulled(flows, result, start)
    flow_outcomes = workload.flow_outcomes(schedule, connections, ideals)
    queries, responses = workload.query_outcomes(schedule, connections)
    aggregator = fabric.hosts[0]
    queues = result["queues"]
    switch_queues = [q for q in queues if q["switch"]]
    at_aggregator = next(q for q in switch_queues if q["to"] == aggregator)
    run = SimWorkloadRun(
        scheme=scheme.name, buffer_bytes=buffer_bytes,
        query_senders=len(schedule.queries[0].responders) if schedule.queries else 0,
        query_bytes=schedule.queries[0].response_bytes if schedule.queries else 0,
        query_rate=len(schedule.queries) / schedule.duration_s, hosts=len(fabric.hosts), seconds=schedule.duration_s,
        seed=schedule.seed, ceiling_mbps=ceiling_mbps, buckets=workload.bucket_records(flow_outcomes),
        short_flows=workload.bucket_records(flow_outcomes, (fct.SHORT_FLOW_BYTES, None))[0],
        flows=len(flow_outcomes), flows_finished=sum(1 for f in flow_outcomes if f.fct_s is not None),
        queries=dataclasses.asdict(fct.query_stats(queries)), responses=workload.response_summary(responses),
        drops=sum(q["drops"] for q in switch_queues) + result["device_drops"], drops_aggregator=at_aggregator["drops"],
        timeouts=result["timeouts"], retransmissions=result["retransmissions"],
        background_mbps=workload.background_mbps(schedule, connections),
        peak_backlog_bytes=at_aggregator["peak_bytes"], mean_backlog_bytes=at_aggregator["mean_bytes"],
        cpu_busy_pct=outcome.cpu_busy_pct, cpu_busiest_pct=outcome.cpu_busiest_pct,
        cpu_softirq_pct=outcome.cpu_parts["softirq"], cpu_steal_pct=outcome.cpu_parts["steal"], switch_cpu_pct=None,
        ce_marks=sum(q["marks"] for q in switch_queues) if scheme.ecn else None,
        generations=loop.generations_between(start, start + config.seconds) if loop is not None else None,
        start_late_p99_ms=workload.start_lateness_ms(connections), static_rwnd_bytes=window, sent=result["sent"],
        delivered=result["delivered"], unexplained=result["unaccounted"],
        bw_gbps=config.bw_gbps, uplink_gbps=config.uplink_gbps or config.bw_gbps, ecn_k_bytes=document["ecn_k_bytes"],
        host_queue_drops=sum(q["drops"] for q in queues if not q["switch"]), measure_start_s=start,
        sim_seconds=result["sim_s"], wall_s=outcome.wall_s, wall_per_sim_s=outcome.wall_s / result["sim_s"],
        cpu_s=outcome.cpu_s, events=result["events"], max_rss_mb=outcome.max_rss_kb / 1024)
    return run, flow_outcomes, queries, connections


def run_workload(config: SimWorkloadConfig, progress: Progress) -> tuple[str | None, workload.WorkloadOutcome]:
    """Run every buffer's fabric, point and scheme; return (summary path or None, outcome)."""
    os.makedirs(config.out, exist_ok=True)
    code = results.code_version()
    chosen = selected(config.schemes, config.fine_rto_ms)
    outcome = workload.WorkloadOutcome()
    store = workload.Store(os.path.join(config.out, "results.db"), dataclasses.asdict(config))
    progress.total = len(config.buffers) * len(config.points()) * len(chosen)
    try:
        for buffer_bytes in config.buffers:
            run_fabric(config, store, progress, outcome, buffer_bytes, chosen)
    finally:
        store.close()
        summary = None
        if outcome.ceilings:
            summary = write_summary(config, outcome, code)
            workload.draw_plots(config.out, outcome)
    return summary, outcome


def write_summary(config: SimWorkloadConfig, outcome: workload.WorkloadOutcome, code: dict[str, Any]) -> str:
    """OUT/summary.json: the workload's summary with the simulated fabric named in its topo (so that a
    report never merges its runs with an emulated fabric's of the same topology)."""
    path = workload.write_summary(config, outcome, code, SIM_WORKLOAD_FIELDS)
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle)
    uplink = config.uplink_gbps or config.bw_gbps
    document.update(topo=f"{config.topo} in ns-3, {config.bw_gbps:g} Gb/s hosts, {uplink:g} Gb/s uplinks",
                    simulator="ns-3")
    return results.write_json(path, document)


def run_fabric(config: SimWorkloadConfig, store: workload.Store, progress: Progress,
               outcome: workload.WorkloadOutcome, buffer_bytes: int, chosen: Sequence[SimScheme]) -> None:
    """Build one fabric, measure its ceiling and run every point and scheme on it."""
    fabric = config.build_fabric(buffer_bytes)
    hosts = fabric.hosts
    ideals = SimIdeals(fabric, config.bw_gbps * 1e9)
    outcome.rtts[buffer_bytes] = ideals.base_rtts(hosts)
    progress.message(f"fabric {fabric.description}: {len(hosts)} hosts, {len(fabric.switches)} switches, "
                     f"{buffer_bytes} B buffers; base round trips " + ", ".join(
                         f"{length} links {rtt * 1e6:.1f} us" for length, rtt in outcome.rtts[buffer_bytes].items()))
    ceiling = measure_ceiling(config.hz, fabric, Placement(hosts[0], [hosts[1]], None), formulas.DEFAULT_MSS_BYTES)
    outcome.ceilings.append(CeilingSample(len(hosts) - 1, buffer_bytes, FRAMING.mss_bytes + SEGMENT_OVERHEAD_BYTES,
                                          ceiling, 0.0))
    for fan_in, response_bytes in config.points():
        schedule = config.schedule(hosts, fan_in, response_bytes, "measured", config.seconds)
        warmup = config.schedule(hosts, fan_in, response_bytes, WARMUP_STREAM, config.warmup_seconds) \
            if config.warmup_seconds else None
        flows = flow_list(schedule, warmup, config.measure_start_s)
        progress.message(f"{workload.schedule_heading(schedule)}, {len(schedule.background)} long-lived; "
                         f"{len(flows)} flows with the warm-up's")
        for scheme in chosen:
            label = workload.point_label(scheme.name, buffer_bytes, fan_in, response_bytes)
            progress.start_run(label)
            try:
                run, flow_outcomes, queries, connections = run_scheme(
                    config, fabric, scheme, schedule, flows, ideals, buffer_bytes, ceiling, progress)
            except scenario.SimulationError as exc:
                outcome.failures.append(Failure(scheme.name, fan_in, buffer_bytes, str(exc)))
                progress.message(f"run failed: {label}: {exc}")
            else:
                outcome.runs.append(run)
                outcome.details.append((run, flow_outcomes, queries))
                store.add(run, workload.connection_rows(schedule, connections, ideals), {})
                if run.flows_finished < run.flows:
                    progress.message(f"note: {label}: {run.flows - run.flows_finished} of {run.flows} flows "
                                     f"unfinished after the drain")
            progress.finish_run()

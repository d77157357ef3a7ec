"""Flow-size mixes, partition-aggregate queries and background flows: completion times per scheme.

For every buffer the experiment builds one fabric (``--topo``: a star,
leaf-spine or fat-tree), measures its single-flow ceiling and its base
round trips on the idle network, starts a flow server in every host, and
then, for every query fan-in and response size asked for (the regime
search's axes), runs each scheme in turn on the same seeded schedule
(``otcp.experiments.traffic.arrivals``):

- the mix: open-loop Poisson flows between random hosts, sizes from a
  published distribution (``traffic.distributions``), at a set load on
  every host link;
- queries into the aggregator (the first host): N responders each send B
  bytes, at a query rate (or a query load);
- optionally, long-lived background flows into the aggregator.

Every flow is pulled over a new connection by a client in the receiving
host (``hostprogs.flow_client``) from the server in the sending one
(``hostprogs.flow_server``). A run applies the scheme (as incast does:
routes, the OTCP controller and agents, ECN markers on every switch
egress toward a host), runs an unmeasured warm-up schedule (for the OTCP
schemes, more until the agents have probed their peers and hold parameters
the live controller computed during it), then the measured schedule with
every counter read before and after (drops, RTOs, CE marks, CPU, the
controller's generations) and the aggregator's queue sampled. Each flow's
FCT is set against its ideal on the idle fabric (``analysis.fct``).

Results go to OUT/summary.json (``WORKLOAD_FIELDS``), OUT/results.db (every
connection of every run), and the plots: slowdown against flow size per
scheme and the QCT CDFs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

import networkx as nx

from otcp import bpf as otcp_bpf
from otcp.experiments.analysis import fct, plots, results, stats
from otcp.experiments.analysis.results import Failure, Outcome
from otcp.experiments.runner import measure, schemes
from otcp.experiments.runner.ceiling import ceiling_samples, record_ceiling
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.counters import Counters
from otcp.experiments.runner.network import Network, RunError, start_network, topology_from_spec
from otcp.experiments.runner.progress import Progress
from otcp.experiments.runner.schemes import ETHERNET_MTU, Scheme
from otcp.experiments.runner.settings import AppliedScheme, apply_scheme
from otcp.experiments.traffic import arrivals, distributions
from otcp.planning import formulas

FLOW_PORT = 5003
#: Host programs start this long before a schedule's time 0 (Python's start-up in every host).
START_DELAY_S = 3.0
#: The aggregator's queue is sampled this often.
BACKLOG_INTERVAL_S = 0.01
#: What a run that fails may raise: the experiment records it and goes on.
RUN_FAILURES = (RunError, TimeoutError, RuntimeError, otcp_bpf.BpfUnavailable)


@dataclasses.dataclass(kw_only=True)
class WorkloadConfig(ExperimentConfig):
    """One workload experiment: the base's network and schemes, the fabric (topo: an mn-style
    spec without link options, which come from the base), the mix (distribution, size_scale,
    load: 0 for none), the queries (one point per fan-in and response size; query_rate or
    query_load, a share of the aggregator's link), background flows, the measured seconds,
    the warm-up, how long unfinished flows may drain, and the seed. Validated by
    otcp.experiments.cli."""

    topo: str
    distribution: str = "websearch"
    size_scale: float = 1.0
    load: float = 0.0
    query_senders: list[int] = dataclasses.field(default_factory=list)
    query_bytes: list[int] = dataclasses.field(default_factory=list)
    query_rate: float | None = None
    query_load: float | None = None
    background_flows: int = 0
    seconds: float = 10.0
    warmup_seconds: float = 3.0
    drain_seconds: float = 10.0
    seed: int = 1

    @property
    def link_bytes_per_s(self) -> float:
        """Every host link's rate."""
        return float(formulas.capacity_bytes_per_s(self.bw_mbps))

    def points(self) -> list[tuple[int, int]]:
        """The (fan-in, response bytes) of every query point; [(0, 0)] without queries."""
        return list(itertools.product(self.query_senders, self.query_bytes)) or [(0, 0)]

    def mix(self) -> arrivals.Mix | None:
        """The flow mix, None at load 0."""
        if not self.load:
            return None
        sizes = distributions.load(self.distribution)
        if self.size_scale != 1.0:
            sizes = sizes.scaled(self.size_scale)
        return arrivals.Mix(sizes, self.load, self.link_bytes_per_s)

    def queries(self, aggregator: str, fan_in: int, response_bytes: int) -> arrivals.Queries | None:
        """The queries of one point, None for the point without queries."""
        if not fan_in:
            return None
        rate = self.query_rate if self.query_rate is not None else arrivals.query_rate_for_load(
            self.query_load or 0.0, fan_in, response_bytes, self.link_bytes_per_s)
        return arrivals.Queries(aggregator, fan_in, response_bytes, rate)

    def schedule(self, hosts: Sequence[str], fan_in: int, response_bytes: int, stream: str,
                 seconds: float) -> arrivals.Schedule:
        """The schedule of one point's runs (stream "measured") or warm-ups."""
        aggregator = hosts[0]
        background = arrivals.Background(aggregator, self.background_flows) if self.background_flows else None
        return arrivals.generate(hosts, seconds, self.seed, stream, mix=self.mix(),
                                 queries=self.queries(aggregator, fan_in, response_bytes), background=background)


#: The summary's run fields (results.check_run checks them): one run per scheme and point.
WORKLOAD_FIELDS: dict[str, Any] = {
    "scheme": str, "buffer_bytes": int, "query_senders": int, "query_bytes": int,
    "query_rate": float, "hosts": int, "seconds": float, "seed": int, "ceiling_mbps": float,
    "buckets": list, "short_flows": dict, "flows": int, "flows_finished": int,
    "queries": dict, "responses": dict,
    "drops": int, "drops_aggregator": int, "timeouts": int, "retransmissions": int,
    "background_mbps": (float, type(None)),
    "peak_backlog_bytes": int, "mean_backlog_bytes": float,
    "cpu_busy_pct": float, "cpu_busiest_pct": float, "cpu_softirq_pct": float, "cpu_steal_pct": float,
    "switch_cpu_pct": (float, type(None)), "ce_marks": (int, type(None)), "generations": (int, type(None)),
    "start_late_p99_ms": float, "static_rwnd_bytes": (int, type(None)),
    "sent": int, "delivered": int, "unexplained": int,
}


@dataclasses.dataclass
class WorkloadRun:
    """One scheme's run at one point: what the summary holds (WORKLOAD_FIELDS)."""

    scheme: str
    buffer_bytes: int
    query_senders: int
    query_bytes: int
    query_rate: float
    hosts: int
    seconds: float
    seed: int
    ceiling_mbps: float
    buckets: list[dict[str, Any]]
    short_flows: dict[str, Any]
    flows: int
    flows_finished: int
    queries: dict[str, Any]
    responses: dict[str, Any]
    drops: int
    drops_aggregator: int
    timeouts: int
    retransmissions: int
    background_mbps: float | None
    peak_backlog_bytes: int
    mean_backlog_bytes: float
    cpu_busy_pct: float
    cpu_busiest_pct: float
    cpu_softirq_pct: float
    cpu_steal_pct: float
    switch_cpu_pct: float | None
    ce_marks: int | None
    generations: int | None
    start_late_p99_ms: float
    static_rwnd_bytes: int | None
    sent: int
    delivered: int
    unexplained: int

    @property
    def senders(self) -> int:
        """The query fan-in, as the shared results helpers name a run's senders."""
        return self.query_senders

    def label(self) -> str:
        """How the progress bar and the notes name the run."""
        return point_label(self.scheme, self.buffer_bytes, self.query_senders, self.query_bytes)


def point_label(scheme: str, buffer_bytes: int, fan_in: int, response_bytes: int) -> str:
    """scheme buf=B [N x bytes], as runs and failures are named."""
    return f"{scheme} buf={buffer_bytes}" + (f" {fan_in}x{response_bytes}B" if fan_in else "")


# --- the fabric: hosts, paths and their ideal ------------------------------------------------------


def path_links(topo: Any) -> dict[tuple[str, str], int]:
    """Links on the shortest path of every ordered pair of hosts of topo."""
    graph = nx.Graph()
    graph.add_edges_from(topo.links())
    hosts = topo.hosts()
    lengths = dict(nx.all_pairs_shortest_path_length(graph))
    return {(a, b): lengths[a][b] for a in hosts for b in hosts if a != b}


def fabric_ports(network: Network[Any]) -> list[tuple[str, str]]:
    """(switch, interface) of every switch port facing another switch: their own buffers."""
    topo, switches = network.topo, set(network.topo.switches())
    ports = []
    for a, b in topo.links(sort=True):
        if a in switches and b in switches:
            port_a, port_b = topo.port(a, b)
            ports += [(a, f"{a}-eth{port_a}"), (b, f"{b}-eth{port_b}")]
    return ports


def base_rtts(network: Network[Any], links: dict[tuple[str, str], int]) -> dict[int, float]:
    """The idle fabric's round trip (s) per path length in links, between the first pair of
    hosts with that length (measure.idle_rtt_s)."""
    found: dict[int, float] = {}
    for (a, b), length in sorted(links.items(), key=lambda item: item[1]):
        if length not in found:
            found[length] = measure.idle_rtt_s(network.emulation, a, network.data_ips[b])
    return found


# --- the host programs ---------------------------------------------------------------------------


class Servers:
    """flow_server in every host, restarted for another congestion control; what they report
    is collected by a thread per server."""

    def __init__(self, network: Network[Any], hosts: Sequence[str]) -> None:
        self.network = network
        self.hosts = list(hosts)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.congestion_control: str | None = None
        self.reports: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def serve(self, cc: str) -> None:
        """Have a server with congestion control cc in every host."""
        if cc == self.congestion_control:
            return
        self.stop()
        emulation = self.network.emulation
        for host in self.hosts:
            process = emulation.start(host, [sys.executable, "-m", "otcp.experiments.hostprogs.flow_server",
                                             "--port", str(FLOW_PORT), "--cc", cc], stdout=subprocess.PIPE)
            self.processes.append(process)
            threading.Thread(target=self._collect, args=(process,), daemon=True).start()
        for host in self.hosts:
            emulation.wait_listening(host, FLOW_PORT)
        self.congestion_control = cc

    def _collect(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(b"{"):
                record = json.loads(line)
                with self.lock:
                    self.reports[record["id"]] = record

    def report(self, conn_id: int) -> dict[str, Any] | None:
        """What the server reported of connection conn_id (None: nothing yet)."""
        with self.lock:
            return self.reports.get(conn_id)

    def stop(self) -> None:
        """Stop every server."""
        for process in self.processes:
            self.network.emulation.stop(process)
        self.processes = []
        self.congestion_control = None


def host_plan(schedule: arrivals.Schedule, host: str, ips: dict[str, str]) -> dict[str, Any]:
    """What host's client pulls of schedule (hostprogs.flow_client's plan)."""
    return {"duration_s": schedule.duration_s,
            "flows": [{"key": f"f{f.id}", "start_s": f.start_s, "server": ips[f.src], "bytes": f.size_bytes}
                      for f in schedule.flows_into(host)],
            "queries": [{"key": f"q{q.id}", "start_s": q.start_s, "servers": [ips[r] for r in q.responders],
                         "bytes": q.response_bytes} for q in schedule.queries_of(host)],
            "background": [{"key": f"b{i}", "server": ips[f.src]}
                           for i, f in enumerate(schedule.background) if f.dst == host]}


@dataclasses.dataclass
class Pulled:
    """What the clients of one schedule reported: every connection's record by key, and the
    servers' reports by connection id."""

    connections: dict[str, dict[str, Any]]
    servers: dict[int, dict[str, Any]]


class Clients:
    """Runs one schedule: a flow_client in every host that receives something."""

    def __init__(self, network: Network[WorkloadConfig], hosts: Sequence[str], servers: Servers) -> None:
        self.network = network
        self.hosts = list(hosts)
        self.servers = servers
        self.runs = itertools.count(1)

    def run(self, schedule: arrivals.Schedule, cc: str, window_clamp: int | None, progress: Progress,
            show: bool) -> Pulled:
        """Run schedule; RunError when a client fails or a scheduled connection is missing."""
        config, emulation = self.network.config, self.network.emulation
        number = next(self.runs)
        plan_dir = os.path.join(self.network.workdir, "plans")
        os.makedirs(plan_dir, exist_ok=True)
        start_at = time.monotonic() + START_DELAY_S
        processes = {}
        for index, host in enumerate(self.hosts):
            plan = host_plan(schedule, host, self.network.data_ips)
            if not (plan["flows"] or plan["queries"] or plan["background"]):
                continue
            path = os.path.join(plan_dir, f"{host}.json")
            results.write_json(path, plan)
            argv = [sys.executable, "-m", "otcp.experiments.hostprogs.flow_client", "--plan", path,
                    "--port", str(FLOW_PORT), "--start-at", repr(start_at), "--drain-s", str(config.drain_seconds),
                    "--cc", cc, "--id-base", str((number << 32) | (index << 20))]
            if window_clamp is not None:
                argv += ["--window-clamp", str(window_clamp)]
            processes[host] = emulation.start(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        connections: dict[str, dict[str, Any]] = {}
        try:
            outputs = self._wait(processes, start_at, schedule.duration_s, progress if show else None)
        finally:
            for process in processes.values():
                emulation.stop(process)
        for host, (out, err, status) in outputs.items():
            if status != 0:
                raise RunError(f"the flow client in {host} exited with status {status}: {err.strip()[-500:]}")
            for line in out.splitlines():
                record = json.loads(line)
                connections[record["key"]] = record
        missing = expected_keys(schedule) - set(connections)
        if missing:
            raise RunError(f"{len(missing)} scheduled connections were never reported (e.g. {sorted(missing)[0]})")
        time.sleep(0.5)  # the servers report a connection once its client has closed it
        ids = {record["id"] for record in connections.values()}
        return Pulled(connections, {i: r for i in ids if (r := self.servers.report(i)) is not None})

    def _wait(self, processes: dict[str, subprocess.Popen[bytes]], start_at: float, duration: float,
              progress: Progress | None) -> dict[str, tuple[str, str, int | None]]:
        """Wait for every client (reading their output as it comes), showing progress."""
        config = self.network.config
        deadline = start_at + duration + config.drain_seconds + 30.0
        gathered: dict[str, tuple[str, str, int | None]] = {}
        threads = [threading.Thread(target=_gather, args=(host, process, gathered), daemon=True)
                   for host, process in processes.items()]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            if time.monotonic() > deadline:
                raise RunError(f"the flow clients had not ended {deadline - start_at:.0f} s after the start")
            if progress is not None:
                progress.update(round(min(duration, max(0.0, time.monotonic() - start_at))), round(duration))
            time.sleep(0.5)
        return gathered


def _gather(host: str, process: subprocess.Popen[bytes], into: dict[str, tuple[str, str, int | None]]) -> None:
    out, err = process.communicate()
    into[host] = (out.decode(errors="replace"), err.decode(errors="replace"), process.returncode)


def expected_keys(schedule: arrivals.Schedule) -> set[str]:
    """The keys of every connection schedule asks for (hostprogs.flow_client's)."""
    keys = {f"f{flow.id}" for flow in schedule.flows}
    keys |= {f"q{query.id}/{i}" for query in schedule.queries for i in range(len(query.responders))}
    keys |= {f"b{i}" for i in range(len(schedule.background))}
    return keys


# --- what a run measured --------------------------------------------------------------------------


class Ideals(Protocol):
    """Where a flow's ideal FCT comes from: the emulated fabric's measured round trips (Fabric) or a
    simulated fabric's declared links (otcp.experiments.sim.workload)."""

    def ideal_s(self, src: str, dst: str, size_bytes: int) -> float:
        """The ideal FCT of a flow pulled over a new connection from src to dst."""


@dataclasses.dataclass(frozen=True)
class Fabric:
    """What every flow's ideal is computed from: the link rate, the links of every host pair's
    path, and the base round trip (s) per path length."""

    rate_bytes_per_s: float
    links: dict[tuple[str, str], int]
    rtts: dict[int, float]

    def ideal_s(self, src: str, dst: str, size_bytes: int) -> float:
        """The ideal FCT of a flow pulled over a new connection from src to dst."""
        length = self.links[(src, dst)]
        return fct.ideal_fct_s(size_bytes, fct.IdealPath(self.rate_bytes_per_s, self.rtts[length], length))


def timed_out(record: dict[str, Any], servers: dict[int, dict[str, Any]]) -> bool:
    """Whether a connection saw a retransmission timeout at either end."""
    server = servers.get(record["id"], {})
    return bool(record.get("rto")) or bool(server.get("rto"))


def flow_outcomes(schedule: arrivals.Schedule, pulled: Pulled, fabric: Ideals) -> list[fct.FlowOutcome]:
    """Every mix flow's outcome (an unfinished flow's FCT is None)."""
    outcomes = []
    for flow in schedule.flows:
        record = pulled.connections[f"f{flow.id}"]
        done = record["end"] is not None and record["error"] is None
        outcomes.append(fct.FlowOutcome(flow.size_bytes, record["end"] - record["start"] if done else None,
                                        fabric.ideal_s(flow.src, flow.dst, flow.size_bytes)))
    return outcomes


def query_outcomes(schedule: arrivals.Schedule, pulled: Pulled) -> tuple[list[fct.QueryOutcome], list[float | None]]:
    """(every query's outcome, every response's FCT in s, None where unfinished)."""
    queries, responses = [], []
    for query in schedule.queries:
        records = [pulled.connections[f"q{query.id}/{i}"] for i in range(len(query.responders))]
        ends = [r["end"] if r["error"] is None else None for r in records]
        responses += [None if end is None else end - r["start"] for end, r in zip(ends, records)]
        qct = None if None in ends else max(e for e in ends if e is not None) - min(r["start"] for r in records)
        queries.append(fct.QueryOutcome(qct, any(timed_out(r, pulled.servers) for r in records)))
    return queries, responses


def response_summary(responses: Sequence[float | None]) -> dict[str, Any]:
    """The query responses' FCTs: count, finished, mean (None unless all finished), p50, p95, p99 (ms)."""
    done = [value * 1000.0 for value in responses if value is not None]
    unfinished = len(responses) - len(done)
    return {"count": len(responses), "finished": len(done), "fct_mean_ms": fct.mean_or_none(done, unfinished),
            **{f"fct_p{q:g}_ms": fct.censored_percentile(done, unfinished, q) for q in (50, 95, 99)}}


def background_mbps(schedule: arrivals.Schedule, pulled: Pulled) -> float | None:
    """The long-lived flows' goodput over the measured seconds, together (None without any)."""
    if not schedule.background:
        return None
    received = sum(pulled.connections[f"b{i}"].get("measured_bytes", 0) for i in range(len(schedule.background)))
    return received * 8 / schedule.duration_s / 1e6


def start_lateness_ms(pulled: Pulled) -> float:
    """p99 of how late the clients called connect() after a connection's scheduled time (ms):
    whether the hosts' programs kept up."""
    late = [max(0.0, r["start"] - r["scheduled"]) * 1000.0 for r in pulled.connections.values()
            if not r["key"].startswith("b")]
    return stats.percentile(late, 99) if late else 0.0


def bucket_records(outcomes: Iterable[fct.FlowOutcome],
                   uppers: Sequence[int | None] = fct.BUCKET_UPPERS) -> list[dict[str, Any]]:
    """The summary's buckets: every BucketStats of uppers as a dict, with its unfinished flows."""
    return [{**dataclasses.asdict(bucket), "unfinished": bucket.unfinished}
            for bucket in fct.bucket_stats(outcomes, uppers)]


# --- the experiment ---------------------------------------------------------------------------


@dataclasses.dataclass
class WorkloadOutcome(Outcome):
    """What the experiment produced so far (an Outcome), with the base round trips of each
    buffer's fabric and every run's flows and queries for the plots."""

    rtts: dict[int, dict[int, float]] = dataclasses.field(default_factory=dict)
    details: list[tuple[WorkloadRun, list[fct.FlowOutcome], list[fct.QueryOutcome]]] = \
        dataclasses.field(default_factory=list)


class Store:
    """OUT/results.db: every run's record and every connection it made."""

    def __init__(self, path: str, arguments: dict[str, Any]) -> None:
        self.db = sqlite3.connect(path)
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS invocation (id INTEGER PRIMARY KEY, started REAL, arguments TEXT);
            CREATE TABLE IF NOT EXISTS workload_runs (id INTEGER PRIMARY KEY, invocation INTEGER, label TEXT,
                record TEXT);
            CREATE TABLE IF NOT EXISTS workload_connections (run INTEGER, key TEXT, kind TEXT, src TEXT, dst TEXT,
                bytes INTEGER, scheduled REAL, start REAL, end REAL, ideal_s REAL, client_rto INTEGER,
                server_rto INTEGER, server_retrans INTEGER, error TEXT);
            CREATE TABLE IF NOT EXISTS host_counters (run INTEGER, host TEXT, counter TEXT, delta INTEGER);""")
        self.invocation = self.db.execute("INSERT INTO invocation (started, arguments) VALUES (?, ?)",
                                          (time.time(), json.dumps(arguments, sort_keys=True))).lastrowid
        self.db.commit()

    def add(self, run: WorkloadRun, rows: Iterable[tuple[Any, ...]], host_counters: dict[str, dict[str, int]]) -> None:
        """Store run, its connections' rows (workload_connections' columns after run) and counters."""
        run_id = self.db.execute("INSERT INTO workload_runs (invocation, label, record) VALUES (?, ?, ?)",
                                 (self.invocation, run.label(), json.dumps(dataclasses.asdict(run)))).lastrowid
        self.db.executemany(f"INSERT INTO workload_connections VALUES (?{', ?' * 13})",
                            [(run_id, *row) for row in rows])
        self.db.executemany("INSERT INTO host_counters VALUES (?, ?, ?, ?)",
                            [(run_id, host, name, delta) for host, deltas in host_counters.items()
                             for name, delta in deltas.items()])
        self.db.commit()

    def close(self) -> None:
        """Close the database."""
        self.db.close()


def connection_rows(schedule: arrivals.Schedule, pulled: Pulled, fabric: Ideals) -> Iterator[tuple[Any, ...]]:
    """Every connection of a run as a workload_connections row (after the run's id)."""
    def row(key: str, kind: str, src: str, dst: str, size: int | None, ideal: float | None) -> tuple[Any, ...]:
        record = pulled.connections[key]
        server = pulled.servers.get(record["id"], {})
        return (key, kind, src, dst, size if size is not None else record["bytes"], record["scheduled"],
                record["start"], record["end"], ideal, record["rto"], server.get("rto"), server.get("retrans"),
                record["error"])
    for flow in schedule.flows:
        yield row(f"f{flow.id}", "flow", flow.src, flow.dst, flow.size_bytes,
                  fabric.ideal_s(flow.src, flow.dst, flow.size_bytes))
    for query in schedule.queries:
        for index, responder in enumerate(query.responders):
            yield row(f"q{query.id}/{index}", "response", responder, query.aggregator, query.response_bytes,
                      fabric.ideal_s(responder, query.aggregator, query.response_bytes))
    for index, long_flow in enumerate(schedule.background):
        yield row(f"b{index}", "background", long_flow.src, long_flow.dst, None, None)


def run_workload(config: WorkloadConfig, progress: Progress) -> tuple[str | None, WorkloadOutcome]:
    """Run every buffer's fabric, point and scheme; return (summary path or None, outcome)."""
    os.makedirs(config.out, exist_ok=True)
    code = results.code_version()
    registered = contextlib.ExitStack()
    outcome = WorkloadOutcome()
    runnable = schemes.plan_experiment(config, outcome, progress, registered)
    store = Store(os.path.join(config.out, "results.db"), dataclasses.asdict(config))
    progress.total = len(config.buffers) * len(config.points()) * len(runnable)
    try:
        for buffer_bytes in config.buffers:
            run_fabric(config, store, progress, outcome, buffer_bytes, runnable)
    finally:
        registered.close()
        store.close()
        summary = None
        if outcome.ceilings:
            summary = write_summary(config, outcome, code)
            draw_plots(config.out, outcome)
    return summary, outcome


def write_summary(config: WorkloadConfig, outcome: WorkloadOutcome, code: dict[str, Any],
                  fields: dict[str, Any] = WORKLOAD_FIELDS) -> str:
    """OUT/summary.json: the common summary (results.write_summary, runs with fields) with what this
    experiment adds."""
    path = results.write_summary(config.out, outcome, code, config.command, fields)
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle)
    mix = config.mix()
    document.update(experiment="workload", topo=config.topo, bw_mbps=config.bw_mbps,
                    distribution=config.distribution if mix else None,
                    size_scale=config.size_scale if mix else None, load=config.load,
                    mean_flow_bytes=mix.sizes.mean_bytes if mix else None,
                    background_flows=config.background_flows, seconds=config.seconds, seed=config.seed,
                    base_rtts_ms={str(buffer): {str(links): rtt * 1000 for links, rtt in rtts.items()}
                                  for buffer, rtts in outcome.rtts.items()},
                    bucket_uppers=list(fct.BUCKET_UPPERS))
    return results.write_json(path, document)


def run_fabric(config: WorkloadConfig, store: Store, progress: Progress, outcome: WorkloadOutcome,
               buffer_bytes: int, runnable: Sequence[Scheme]) -> None:
    """Build one fabric and run every point and scheme on it."""
    topo = topology_from_spec(config.topo, bw=config.bw_mbps, buffer_bytes=buffer_bytes, delay_us=config.delay_us)
    hosts = topo.hosts()
    workdir = os.path.join(config.out, "work", f"buffer{buffer_bytes}")
    progress.message(f"building {config.topo}: {len(hosts)} hosts, {buffer_bytes} B buffers, "
                     f"{config.bw_mbps:g} Mb/s links")
    with start_network(config, topo, workdir, any(s.kind == "otcp" for s in runnable)) as network:
        outcome.datapath(network.emulation.datapath)
        for note in network.notes:
            outcome.note(progress, note)
        aggregator = hosts[0]
        network.ensure_connectivity(hosts[1:], network.data_ips[aggregator])
        links = path_links(topo)
        outcome.rtts[buffer_bytes] = base_rtts(network, links)
        progress.message("base round trips on the idle fabric: " + ", ".join(
            f"{length} links {rtt * 1000:.3f} ms" for length, rtt in sorted(outcome.rtts[buffer_bytes].items())))
        taken = ceiling_samples(network, hosts[1], aggregator, ETHERNET_MTU, progress)
        record_ceiling(taken, len(hosts) - 1, buffer_bytes, ETHERNET_MTU, outcome, None, progress)
        fabric = Fabric(config.link_bytes_per_s, links, outcome.rtts[buffer_bytes])
        servers = Servers(network, hosts)
        clients = Clients(network, hosts, servers)
        try:
            for fan_in, response_bytes in config.points():
                schedule = config.schedule(hosts, fan_in, response_bytes, "measured", config.seconds)
                for scheme in runnable:
                    label = point_label(scheme.name, buffer_bytes, fan_in, response_bytes)
                    progress.start_run(label)
                    try:
                        run = run_scheme(network, servers, clients, scheme, schedule, fabric, buffer_bytes,
                                         taken.median, store, outcome, progress)
                    except RUN_FAILURES as exc:
                        outcome.failures.append(Failure(scheme.name, fan_in, buffer_bytes, str(exc)))
                        progress.message(f"run failed: {label}: {exc}")
                    else:
                        outcome.runs.append(run)
                    progress.finish_run()
        finally:
            servers.stop()


def static_rwnd(network: Network[WorkloadConfig], fabric: Fabric, schedule: arrivals.Schedule,
                buffer_bytes: int) -> int:
    """The static-rwnd scheme's window: the bottleneck's budget over the senders the aggregator
    expects at once (a query's fan-in and the long-lived flows; every other host without queries)."""
    hosts = network.topo.hosts()
    expected = (len(schedule.queries[0].responders) if schedule.queries else 0) + len(schedule.background)
    rtt = fabric.rtts[fabric.links[(hosts[1], hosts[0])]]
    return int(formulas.static_rwnd_bytes(fabric.rate_bytes_per_s, rtt, buffer_bytes, expected or len(hosts) - 1))


def run_scheme(network: Network[WorkloadConfig], servers: Servers, clients: Clients, scheme: Scheme,
               schedule: arrivals.Schedule, fabric: Fabric, buffer_bytes: int, ceiling_mbps: float, store: Store,
               outcome: WorkloadOutcome, progress: Progress) -> WorkloadRun:
    """One scheme on one point's schedule; its record (kept in store and outcome.details)."""
    emulation, topo = network.emulation, network.topo
    hosts = topo.hosts()
    aggregator = hosts[0]
    servers.serve(scheme.congestion_control)
    window = static_rwnd(network, fabric, schedule, buffer_bytes) if scheme.static_rwnd else None
    marked = hosts if schedule.flows else [aggregator]
    with apply_scheme(network, scheme, hosts, aggregator, buffer_bytes, marked=marked) as applied:
        if applied.agents is not None:
            applied.agents.wait_for_routes(network.data_ips)
        network.record_routes(scheme.name, hosts, f"{schedule_heading(schedule)}: before traffic")
        warm_up(network, clients, scheme, window, applied, schedule, progress)
        network.flush_tcp_metrics(hosts)
        counters = Counters(emulation, hosts, aggregator, network.data_path(hosts) + fabric_ports(network),
                            markers=applied.markers,
                            controller=network.controller if applied.agents is not None else None,
                            quiet=applied.quiet)
        with counters.measuring() as measured, \
                measure.BacklogSampler(emulation, aggregator, emulation.host(aggregator).defaultIntf().buffer_device,
                                       interval=BACKLOG_INTERVAL_S) as backlog:
            pulled = clients.run(schedule, scheme.congestion_control, window, progress, show=True)
        network.record_routes(scheme.name, hosts, f"{schedule_heading(schedule)}: after the measured run")
    change = measured.change
    flows = flow_outcomes(schedule, pulled, fabric)
    queries, responses = query_outcomes(schedule, pulled)
    fabric_places = {f"{node}:{device}" for node, device in fabric_ports(network)}
    fabric_drops = sum(counts.get("qdisc_drops", 0) for place, counts in change.interfaces.items()
                       if place in fabric_places)
    load = change.machine
    loss = change.loss
    run = WorkloadRun(
        scheme=scheme.name, buffer_bytes=buffer_bytes,
        query_senders=len(schedule.queries[0].responders) if schedule.queries else 0,
        query_bytes=schedule.queries[0].response_bytes if schedule.queries else 0,
        query_rate=len(schedule.queries) / schedule.duration_s, hosts=len(hosts), seconds=schedule.duration_s,
        seed=schedule.seed, ceiling_mbps=ceiling_mbps, buckets=bucket_records(flows),
        short_flows=bucket_records(flows, (fct.SHORT_FLOW_BYTES, None))[0], flows=len(flows),
        flows_finished=sum(1 for f in flows if f.fct_s is not None),
        queries=dataclasses.asdict(fct.query_stats(queries)), responses=response_summary(responses),
        drops=loss.drops + loss.drops_other_buffers + fabric_drops, drops_aggregator=loss.drops,
        timeouts=change.timeouts, retransmissions=change.retransmissions,
        background_mbps=background_mbps(schedule, pulled), peak_backlog_bytes=backlog.peak,
        mean_backlog_bytes=backlog.mean, cpu_busy_pct=load.cpu_busy_pct, cpu_busiest_pct=load.cpu_busiest_pct,
        cpu_softirq_pct=load.cpu_softirq_pct, cpu_steal_pct=load.cpu_steal_pct, switch_cpu_pct=load.switch_cpu_pct,
        ce_marks=change.ce_marks, generations=change.generations, start_late_p99_ms=start_lateness_ms(pulled),
        static_rwnd_bytes=window, sent=loss.sent, delivered=loss.delivered, unexplained=loss.unexplained)
    store.add(run, connection_rows(schedule, pulled, fabric), change.tcp)
    outcome.details.append((run, flows, queries))
    if run.unexplained:
        progress.message(f"note: {run.label()} lost {run.unexplained} packets no counter names")
    return run


def schedule_heading(schedule: arrivals.Schedule) -> str:
    """How the routes files head a run's sections."""
    query = schedule.queries[0] if schedule.queries else None
    return f"{len(schedule.flows)} flows" + (f", queries {len(query.responders)} x {query.response_bytes} B"
                                             if query else "")


def warm_up(network: Network[WorkloadConfig], clients: Clients, scheme: Scheme, window: int | None,
            applied: AppliedScheme, schedule: arrivals.Schedule, progress: Progress) -> None:
    """The unmeasured warm-up: warmup_seconds of the point's traffic on its own stream, the TCP
    metrics cache flushed first; for an OTCP scheme more of it, a stream at a time, until the
    agents have probed each of their peers once and hold parameters the controller computed
    during the warm-up with the long-lived flows active (Controller.flows_applied)."""
    config, hosts = network.config, network.topo.hosts()
    network.flush_tcp_metrics(hosts)
    if not config.warmup_seconds:
        return
    query = schedule.queries[0] if schedule.queries else None

    def warming(attempt: int) -> arrivals.Schedule:
        return config.schedule(hosts, len(query.responders) if query else 0, query.response_bytes if query else 0,
                               f"warmup-{attempt}", config.warmup_seconds)

    agents = applied.agents
    since = network.require_controller().generation() if agents is not None else None
    first = warming(1)
    clients.run(first, scheme.congestion_control, window, progress, show=False)
    if agents is None or since is None:
        return
    deadline = max(time.monotonic(), agents.first_probes_done_at()) + config.agent_timeout_s
    pairs = [(flow.src, flow.dst) for flow in first.background]
    for attempt in itertools.count(2):
        if time.monotonic() >= agents.first_probes_done_at() and \
                network.require_controller().flows_applied(pairs, since):
            return
        if time.monotonic() > deadline:
            raise RunError(f"the agents did not hold parameters planned during the warm-up within "
                           f"{config.agent_timeout_s:.0f} s")
        clients.run(warming(attempt), scheme.congestion_control, window, progress, show=False)


def draw_plots(out: str, outcome: WorkloadOutcome) -> None:
    """Per point: slowdown against flow size (runs with a mix) and the QCT CDFs (runs with queries)."""
    points: dict[tuple[int, int, int], list[tuple[WorkloadRun, list[fct.FlowOutcome], list[fct.QueryOutcome]]]] = {}
    for run, flows, queries in outcome.details:
        points.setdefault((run.buffer_bytes, run.query_senders, run.query_bytes), []).append((run, flows, queries))
    for (buffer_bytes, fan_in, response_bytes), runs in points.items():
        suffix = f"buf{buffer_bytes}" + (f"-{fan_in}x{response_bytes}" if fan_in else "")
        title = f"{buffer_bytes // 1000} kB buffers" + (f", queries {fan_in} x {response_bytes} B" if fan_in else "")
        if any(flows for _, flows, _ in runs):
            plots.slowdown_plot(os.path.join(out, f"slowdown-{suffix}.png"),
                                {run.scheme: flows for run, flows, _ in runs}, title)
        if any(queries for _, _, queries in runs):
            plots.qct_cdf_plot(os.path.join(out, f"qct-{suffix}.png"),
                               {run.scheme: queries for run, _, queries in runs}, title)


# --- the table -------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def summary_table(runs: Sequence[WorkloadRun], failures: Sequence[Failure] = ()) -> str:
    """The table printed at the end: a row per run (p99 slowdown per bucket, queries, the rest) and
    one per failed run with its error."""
    uppers = [fct.BUCKET_UPPERS[i] for i in range(len(fct.BUCKET_UPPERS))]
    names = [bucket_name(upper, uppers) for upper in uppers]
    header = (f"{'scheme':<20}{'buffer':>8}{'query':>10}" + "".join(f"{name:>14}" for name in names)
              + f"{'QCT p50/p99':>15}{'q.RTO':>6}{'drops':>7}{'RTOs':>6}{'bg Mb/s':>8}{'cpu%':>5}{'sw%':>5}"
              f"{'late':>6}")
    lines = [header, "-" * len(header)]
    for run in runs:
        cells = [f"{_ratio(b['slowdown_p99'])} ({b['flows']})" if b["flows"] else "-" for b in run.buckets]
        queries = run.queries
        qct = f"{_ms(queries['qct_p50_ms'])}/{_ms(queries['qct_p99_ms'])}" if queries["count"] else "-"
        point = f"{run.query_senders}x{run.query_bytes}" if run.query_senders else "-"
        switch = "-" if run.switch_cpu_pct is None else f"{run.switch_cpu_pct:.0f}"
        background = "-" if run.background_mbps is None else f"{run.background_mbps:.1f}"
        lines.append(f"{run.scheme:<20}{run.buffer_bytes:>8}{point:>10}" + "".join(f"{c:>14}" for c in cells)
                     + f"{qct:>15}{queries['timeouts'] if queries['count'] else '-':>6}{run.drops:>7}"
                     f"{run.timeouts:>6}{background:>8}{run.cpu_busy_pct:>5.0f}{switch:>5}"
                     f"{run.start_late_p99_ms:>6.0f}")
    for failure in failures:
        lines.append(f"{failure.scheme:<20}{failure.buffer_bytes:>8}{failure.senders or '-':>10}  "
                     f"FAILED: {failure.brief()}")
    lines.append("per size bucket: p99 slowdown (FCT over the ideal on the idle fabric; - beyond the flows that "
                 "finished) and the flows in it; QCT in ms; q.RTO: queries that saw a retransmission timeout; "
                 "drops at every switch buffer; RTOs summed over the hosts; bg: the long-lived flows' goodput; "
                 "cpu%: both cores; sw%: the switch's forwarding thread; late: p99 of how late flows started (ms)")
    return "\n".join(lines)


def bucket_name(upper: int | None, uppers: Sequence[int | None]) -> str:
    """A bucket's name from its bounds: "<10k", "10k-100k", ..., ">=1M"."""
    def short(value: int) -> str:
        return f"{value // 1_000_000}M" if value >= 1_000_000 else f"{value // 1000}k"
    index = list(uppers).index(upper)
    low = uppers[index - 1] if index else None
    if upper is None:
        return f">={short(low)}" if low is not None else "all"
    return f"<{short(upper)}" if low is None else f"{short(low)}-{short(upper)}"

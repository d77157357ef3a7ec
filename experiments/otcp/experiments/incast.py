"""The incast sweep: for every buffer and sender count, one star network, every scheme.

For each (buffer, senders) the sweep builds a star (senders, one receiver,
one idle probe host), starts the OTCP controller that forwards its traffic
(or standalone bridges), starts the storage servers, and then runs each
scheme in turn on the same network:

1. apply the scheme (route attributes and MTU, or OTCP's agents) and record
   every host's routes as the kernel holds them, before traffic starts;
2. run warm-up rounds for a few seconds (not counted: the OTCP controller
   needs them to count the active flows), read the TCP counters of every host,
   the IPv4 queues of every link and the machine's CPU times;
3. run the measured rounds of synchronized reads with the latency probe
   going and the bottleneck's backlog sampled, let the buffers drain, then
   read the counters again (the loss account, runner.counters.LossAccount: every IPv4
   packet the hosts sent is delivered, dropped at a named buffer, or
   "unexplained"), and record the routes once more;
4. put the hosts back as they were.

The single-flow ceiling is measured on every network before any scheme,
ceiling_repeats times (more where the samples disagree: ceiling_samples),
at 1500 B packets and at every smaller packet size a scheme uses
(small-packets: 750 B); each run is judged against its own network's median
at its own packet size, and the summary reports every sample kept, the
spread, and in its notes the disturbed samples set aside. Results go to OUT/results.db,
OUT/summary.json, OUT/routes/ and the PNG plots; a run that fails is a row with
its error in the table, an x on the plots and an entry in the summary's failures,
and the sweep goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from otcp import bpf as otcp_bpf
from otcp.experiments.analysis import plots, results, stats
from otcp.experiments.analysis.results import Failure, Outcome, RunDetail, RunRecord, run_label
from otcp.experiments.runner import measure, schemes
from otcp.experiments.runner.agents import Agents
from otcp.experiments.runner.ceiling import ceiling_samples, record_ceiling
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.counters import Counters
from otcp.experiments.runner.network import Network, RunError, start_network
from otcp.experiments.runner.progress import Progress
from otcp.experiments.runner.schemes import ETHERNET_MTU, Scheme, packet_bytes_of
from otcp.experiments.runner.settings import AppliedScheme, apply_scheme
from otcp.planning import formulas
from otcp.topo.fabrics import StarTopo

WORKLOAD_PORT = 5001
# Backlog sampling during a run: a netlink dump every 10 ms (cheap enough on 2 cores).
RUN_BACKLOG_INTERVAL_S = 0.01
#: What a run that fails may raise: the sweep records it and goes on.
RUN_FAILURES = (RunError, TimeoutError, RuntimeError, otcp_bpf.BpfUnavailable)


@dataclasses.dataclass(kw_only=True)
class IncastConfig(ExperimentConfig):
    """One sweep: the base's network and schemes, and the workload: sender counts (one star
    each, per buffer), the block per server per round (sru_bytes) or per round in all
    (total_bytes), measured rounds, warm-up, connections (persistent or one per request, and
    how many senders share each sender host: connections_per_host, each a connection of its
    own from the host's one server), the probe's interval and how long a round may take.
    Validated by otcp.experiments.cli."""

    senders: list[int]
    sru_bytes: int | None = 262144
    total_bytes: int | None = None
    rounds: int = 50
    warmup_seconds: float = 5.0
    persistent: bool = False
    connections_per_host: int = 1
    probe_interval_s: float = 0.01
    round_timeout_s: float = 60.0

    def block_bytes(self, senders: int) -> int:
        """Bytes each server sends per round: the SRU, or the fixed total split over the servers."""
        if self.total_bytes is not None:
            return max(1, self.total_bytes // senders)
        if self.sru_bytes is None:
            raise ValueError("neither sru_bytes nor total_bytes is set")
        return self.sru_bytes

    def sender_hosts(self, senders: int) -> int:
        """How many sender hosts carry senders senders."""
        return senders // self.connections_per_host


def sender_count(network: Network[IncastConfig]) -> int:
    """The senders of a star: its sender hosts times the connections each runs."""
    return len(network.topo.senders) * network.config.connections_per_host


def server_order(network: Network[IncastConfig]) -> list[str]:
    """The sender host of every connection the client asks, in its --servers order (and its flows_s's):
    every host once, as many times over as each runs connections."""
    return [host for _ in range(network.config.connections_per_host) for host in network.topo.senders]


@dataclasses.dataclass
class SweepResult(Outcome):
    """What a sweep has produced so far (an Outcome), with every run's round completion times (ms)."""

    round_durations: list[list[float]] = dataclasses.field(default_factory=list)


def run_sweep(config: IncastConfig, progress: Progress) -> tuple[str | None, SweepResult]:
    """Run the whole sweep; return (summary path or None, SweepResult)."""
    os.makedirs(config.out, exist_ok=True)
    code = results.code_version()
    registered = contextlib.ExitStack()
    sweep = SweepResult()
    runnable = schemes.plan_experiment(config, sweep, progress, registered, admits=True)
    store = results.ResultStore(os.path.join(config.out, "results.db"), dataclasses.asdict(config))
    for entry in sweep.unavailable:
        store.add_unavailable(entry)
    progress.total = len(config.buffers) * len(config.senders) * len(runnable)
    try:
        for buffer_bytes in config.buffers:
            for senders in config.senders:
                run_network(config, store, progress, sweep, buffer_bytes, senders, runnable)
    finally:
        registered.close()
        store.close()
        summary = results.write_summary_and_plots(config.out, sweep, code, config.command, draw_plots)
    return summary, sweep


class Servers:
    """The storage servers in every sender of a star, restarted when a scheme needs another
    congestion control."""

    def __init__(self, network: Network[IncastConfig]) -> None:
        self.network = network
        self.processes: list[subprocess.Popen[bytes]] = []
        self.congestion_control: str | None = None

    def serve(self, cc: str) -> None:
        """Have the storage servers in every sender running with congestion control cc."""
        if cc == self.congestion_control:
            return
        emulation, senders = self.network.emulation, self.network.topo.senders
        for process in self.processes:
            emulation.stop(process)
        self.processes = [emulation.start(sender, [sys.executable, "-m", "otcp.experiments.hostprogs.incast_server",
                                                   "--port", str(WORKLOAD_PORT), "--cc", cc])
                          for sender in senders]
        for sender in senders:
            emulation.wait_listening(sender, WORKLOAD_PORT)
        self.congestion_control = cc


def run_network(config: IncastConfig, store: results.ResultStore, progress: Progress, sweep: SweepResult,
                buffer_bytes: int, senders: int, runnable: Sequence[Scheme]) -> None:
    """Build one star and run every runnable scheme on it."""
    workdir = os.path.join(config.out, "work", f"buffer{buffer_bytes}-senders{senders}")
    topo = StarTopo(config.sender_hosts(senders), bw=config.bw_mbps, buffer_bytes=buffer_bytes,
                    delay_us=config.delay_us, probe=True)
    assert topo.probe is not None  # built with its probe host
    with_agents = any(s.kind == "otcp" for s in runnable)
    forwarder = "the OTCP controller" if config.forwarding == "controller" else "standalone bridges"
    sharing = config.connections_per_host
    hosts = f" in {len(topo.senders)} hosts of {sharing} connections each" if sharing > 1 else ""
    progress.message(f"building a star: {senders} senders{hosts}, {buffer_bytes} B buffers, {config.bw_mbps:g} Mb/s "
                     f"links, forwarding by {forwarder}")
    with start_network(config, topo, workdir, with_agents) as network:
        sweep.datapath(network.emulation.datapath)
        for note in network.notes:
            sweep.note(progress, note)
        if sharing > 1:
            sweep.note(progress, f"the {senders}-sender network ({buffer_bytes} B): {len(topo.senders)} sender hosts, "
                                 f"each serving {sharing} persistent connections from one process; each host's "
                                 "own link is the senders' first queue")
        network.ensure_connectivity(topo.senders + [topo.probe], network.data_ips[topo.receiver])
        for packet_bytes in sorted({packet_bytes_of(s) for s in runnable} | {ETHERNET_MTU}, reverse=True):
            measure_ceiling(network, store, progress, sweep, buffer_bytes, packet_bytes)
        servers = Servers(network)
        window = static_rwnd(network, sweep, progress, buffer_bytes) if any(s.static_rwnd for s in runnable) \
            else None
        for scheme in runnable:
            label = run_label(scheme.name, senders, buffer_bytes)
            progress.start_run(label)
            try:
                run, detail = run_scheme(network, servers, scheme, buffer_bytes, progress, sweep,
                                         window if scheme.static_rwnd else None)
                if not any((c.senders, c.buffer_bytes, c.packet_bytes) == (senders, buffer_bytes, run.packet_bytes)
                           for c in sweep.ceilings):
                    measure_ceiling(network, store, progress, sweep, buffer_bytes, run.packet_bytes)
            except RUN_FAILURES as exc:
                sweep.failures.append(Failure(scheme.name, senders, buffer_bytes, str(exc)))
                progress.message(f"run failed: {label}: {exc}")
            else:
                keep_run(sweep, store, progress, run, detail)
            progress.finish_run()


def static_rwnd(network: Network[IncastConfig], sweep: SweepResult, progress: Progress, buffer_bytes: int) -> int:
    """The static-rwnd scheme's receive window on this star: the bottleneck's link and buffer over
    its senders (formulas.static_rwnd_bytes), with the round trip measured on the idle network."""
    topo, config = network.topo, network.config
    rtt = measure.idle_rtt_s(network.emulation, topo.senders[0], network.data_ips[topo.receiver])
    window = int(formulas.static_rwnd_bytes(formulas.capacity_bytes_per_s(config.bw_mbps), rtt, buffer_bytes,
                                            sender_count(network)))
    sweep.note(progress, f"static-rwnd on the {sender_count(network)}-sender network ({buffer_bytes} B): receive "
                         f"windows of {window} B, from an idle round trip of {rtt * 1000:.3f} ms")
    return window


def keep_run(sweep: SweepResult, store: results.ResultStore, progress: Progress, run: RunRecord,
             detail: RunDetail) -> None:
    """Judge run against its network's ceiling at its packet size, and keep it (sweep, store)."""
    ceiling = results.network_ceiling(sweep.ceilings, run.senders, run.buffer_bytes, run.packet_bytes)
    if ceiling is None:
        raise RuntimeError(f"{run.label()}: no ceiling measured at {run.packet_bytes} B packets")
    run.ceiling_mbps = ceiling
    run.full_ceiling_mbps = results.network_ceiling(sweep.ceilings, run.senders, run.buffer_bytes, ETHERNET_MTU)
    store.add_run(run, detail)
    sweep.runs.append(run)
    sweep.round_durations.append([r["duration_s"] * 1000 for r in detail.rounds])
    if run.unexplained:
        progress.message(f"note: {run.label()} lost {run.unexplained} packets no counter names")


def measure_ceiling(network: Network[IncastConfig], store: results.ResultStore | None, progress: Progress,
                    sweep: Outcome, buffer_bytes: int, packet_bytes: int) -> None:
    """The star's single-flow ceiling (its first sender to its receiver) at packet_bytes, kept in sweep and store."""
    topo = network.topo
    taken = ceiling_samples(network, topo.senders[0], topo.receiver, packet_bytes, progress)
    record_ceiling(taken, sender_count(network), buffer_bytes, packet_bytes, sweep, store, progress)


@dataclasses.dataclass
class Workload:
    """The synchronized reads of one run: the client in the receiver asks every server for
    block bytes per round, its sockets with congestion control cc and, if given, their
    receive windows held to window bytes, and at most admit servers at once."""

    network: Network[IncastConfig]
    block: int
    cc: str
    window: int | None = None
    admit: int | None = None

    def run(self, count: list[str], on_round: Callable[[int], None]) -> list[dict[str, Any]]:
        """Run the client for count (["--rounds", N] or ["--seconds", S]); return its round records."""
        config, topo, emulation = self.network.config, self.network.topo, self.network.emulation
        servers = [self.network.data_ips[host] for host in server_order(self.network)]
        argv = [sys.executable, "-m", "otcp.experiments.hostprogs.incast_client", "--servers", ",".join(servers),
                "--port", str(WORKLOAD_PORT), "--block-bytes", str(self.block), *count,
                "--cc", self.cc, "--round-timeout", str(config.round_timeout_s)]
        if config.persistent:
            argv.append("--persistent")
        if self.window is not None:
            argv += ["--window-clamp", str(self.window)]
        if self.admit is not None:
            argv += ["--admit", str(self.admit)]
        process = emulation.start(topo.receiver, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None and process.stderr is not None
        records = []
        try:
            for line in process.stdout:
                records.append(json.loads(line))
                on_round(len(records))
            error = process.stderr.read().decode(errors="replace").strip()
            status = process.wait()
        finally:
            emulation.stop(process)
        if status != 0 or not records or (count[0] == "--rounds" and len(records) != int(count[1])):
            raise RunError(error or f"the workload client exited with status {status} after {len(records)} rounds")
        return records


def run_scheme(network: Network[IncastConfig], servers: Servers, scheme: Scheme, buffer_bytes: int,
               progress: Progress, sweep: SweepResult, window: int | None = None) -> tuple[RunRecord, RunDetail]:
    """One scheme on a running network (window: the receive window its client holds, or None);
    returns (RunRecord, RunDetail). An admission scheme's client asks at most as many servers at
    once as the receiver's agent shows of the controller's set (its admit)."""
    config, emulation, topo = network.config, network.emulation, network.topo
    hosts = [topo.receiver] + topo.senders + [topo.probe]
    senders = sender_count(network)
    heading = f"senders={senders} buffer_bytes={buffer_bytes}"
    servers.serve(scheme.congestion_control)
    with apply_scheme(network, scheme, hosts, topo.receiver, buffer_bytes) as applied:
        admit = None
        if applied.agents is not None:
            applied.agents.wait_for_routes(network.data_ips)
            if scheme.admission:
                admit = applied.agents.admit(topo.receiver)
                if admit is None:
                    raise RunError(f"{scheme.name}: the receiver's agent holds no admit: the controller's set for "
                                   f"{topo.receiver} plans no fan-in admission")
                sweep.note(progress, f"{scheme.name} on the {senders}-sender network ({buffer_bytes} B): "
                                     f"the receiver's agent shows the controller's admit, {admit}: its client asks "
                                     "at most that many senders at once")
        network.record_routes(scheme.name, hosts, f"{heading}: before traffic")
        workload = Workload(network, config.block_bytes(senders), scheme.congestion_control, window,
                            admit)
        warm_up(network, workload, applied, hosts, progress)
        network.flush_tcp_metrics(hosts)
        counters = Counters(emulation, hosts, topo.receiver, network.data_path(hosts), markers=applied.markers,
                            controller=network.controller if applied.agents is not None else None,
                            quiet=applied.quiet)
        receiver_ip = network.data_ips[topo.receiver]
        bottleneck = emulation.host(topo.receiver).defaultIntf().buffer_device
        with counters.measuring() as measured, \
                measure.Probe(emulation, topo.probe, receiver_ip, config.probe_interval_s) as probe, \
                measure.BacklogSampler(emulation, topo.receiver, bottleneck, interval=RUN_BACKLOG_INTERVAL_S,
                                       series=True, switch_inputs=network.switch_port_indexes()) as backlog:
            rounds = workload.run(["--rounds", str(config.rounds)], lambda done: progress.update(done, config.rounds))
            rtts, sent = probe.stop()
        network.record_routes(scheme.name, hosts, f"{heading}: after the measured rounds")
        packet_bytes = packet_bytes_of(scheme, network.receiver_advmss(topo.receiver, topo.senders))
    change = measured.change
    head = {"scheme": scheme.name, "senders": senders, "buffer_bytes": buffer_bytes,
            "sru_bytes": workload.block, "rounds": len(rounds), "persistent": int(config.persistent),
            "packet_bytes": packet_bytes, "ceiling_mbps": 0.0}
    load = change.machine
    run = RunRecord.build(
        head, stats.summarize_rounds(rounds), change.loss, stats.summarize_probe(rtts, sent),
        peak_backlog_bytes=backlog.peak, timeouts=change.timeouts, retransmissions=change.retransmissions,
        cpu_busy_pct=load.cpu_busy_pct, cpu_busiest_pct=load.cpu_busiest_pct, cpu_softirq_pct=load.cpu_softirq_pct,
        cpu_steal_pct=load.cpu_steal_pct, switch_cpu_pct=load.switch_cpu_pct,
        switch_pmd_busy_pct=load.switch_pmd_busy_pct, ce_marks=change.ce_marks,
        generations=change.generations, **stats.queue_emptiness(backlog.series, rounds),
        **stats.switch_input(backlog.series, rounds), **stats.unfinished_connections(rounds))
    detail = RunDetail(rounds=rounds, servers=server_order(network), host_counters=change.tcp, probe_rtts=rtts,
                       path_counters=change.interfaces,
                       queues={host: queues.counts() for host, queues in change.queues.items()})
    return run, detail


def warm_up(network: Network[IncastConfig], workload: Workload, applied: AppliedScheme, hosts: Iterable[str],
            progress: Progress) -> None:
    """The unmeasured rounds before a run: warmup_seconds of them, then for an OTCP scheme
    more until the agents hold parameters for the run's flows (warm_until_flows_applied).
    The hosts' TCP metrics cache is flushed first, so no scheme inherits another's."""
    config, topo = network.config, network.topo
    network.flush_tcp_metrics(hosts)
    since = network.require_controller().generation() if applied.agents is not None else None
    # The probe pings through the warm-up too: the controller counts its flow before the measured
    # rounds, as the senders', instead of planning again when the measuring probe starts.
    with measure.Probe(network.emulation, topo.probe, network.data_ips[topo.receiver], config.probe_interval_s):
        if config.warmup_seconds:
            workload.run(["--seconds", str(config.warmup_seconds)], lambda done: progress.update(0, config.rounds))
        if applied.agents is not None and since is not None:
            warm_until_flows_applied(network, workload, progress, since, applied.agents)


def warm_until_flows_applied(network: Network[IncastConfig], workload: Workload, progress: Progress, since: int,
                             agents: Agents) -> None:
    """More warm-up rounds until the agents hold parameters the controller
    computed, after generation since, with every sender host's flow to the receiver
    active (as its connections, where a host runs several) and its round trip and the
    probe's measured by the hosts, and until the agents have probed each of their
    peers once (Agents.first_probes_done_at).
    The probe's pair carries no TCP: its hosts' SYN probes measure it after a few
    of their rounds, and its first measurement would otherwise re-plan during the
    run. Its flow is not waited for: at 64 senders the controller counted it in
    some polls and not in others, and the warm-up never ended."""
    config, topo, controller = network.config, network.topo, network.require_controller()
    senders = [(sender, topo.receiver) for sender in topo.senders]
    measured = [*senders, (topo.probe, topo.receiver)]
    deadline = max(time.monotonic(), agents.first_probes_done_at()) + config.agent_timeout_s
    while (time.monotonic() < agents.first_probes_done_at()
           or not controller.flows_applied(senders, since, measured=measured,
                                           connections=config.connections_per_host)):
        if time.monotonic() > deadline:
            raise RunError(f"the agents did not get parameters for the senders' flows, planned with the round "
                           f"trips the hosts measured, within {config.agent_timeout_s:.0f} s of warm-up")
        workload.run(["--seconds", "1"], lambda done: progress.update(0, config.rounds))


def draw_plots(out: str, sweep: SweepResult) -> None:
    """The sweep's PNGs: goodput with every failed run marked, and, when a run finished, its completion times."""
    rows = [dataclasses.asdict(r) for r in sweep.runs]
    ceiling = sweep.ceiling()
    if ceiling is not None and (rows or sweep.failures):
        plots.goodput_plot(os.path.join(out, "goodput.png"), rows, ceiling, sweep.failures)
    if rows:
        plots.fct_cdf_plot(os.path.join(out, "fct_cdf.png"), rows, dict(enumerate(sweep.round_durations)),
                           sweep.failures)
        plots.fct_bars_plot(os.path.join(out, "fct_bars.png"), rows, sweep.failures)


def execution_order(runs: Sequence[RunRecord], failures: Sequence[Failure]) -> list[RunRecord | Failure]:
    """Runs and failures together, in the order the sweep ran them: by buffer, then by sender
    count (each in the order it first appears), then in the catalogue's order of schemes."""
    both: list[RunRecord | Failure] = [*runs, *failures]
    buffers = list(dict.fromkeys(row.buffer_bytes for row in both))
    senders = list(dict.fromkeys(row.senders for row in both))
    order = list(schemes.catalogue())
    return sorted(both, key=lambda row: (buffers.index(row.buffer_bytes), senders.index(row.senders),
                                         order.index(row.scheme) if row.scheme in order else len(order)))


def table_row(run: RunRecord) -> str:
    """One finished run's line of the summary table."""
    probe = (f"{run.probe_rtt_avg_ms:.2f}/{run.probe_rtt_max_ms:.2f}"
             if run.probe_rtt_avg_ms is not None and run.probe_rtt_max_ms is not None else "no answers")
    flag = "!" if run.unexplained else ""
    empty, empty_tail = ("-" if share is None else f"{share:.0f}%"
                         for share in (run.backlog_empty_pct, run.backlog_empty_tail_pct))
    switch, pmd = ("-" if share is None else f"{share:.0f}" for share in (run.switch_cpu_pct, run.switch_pmd_busy_pct))
    held = "-" if run.switch_input_mean_bytes is None else f"{run.switch_input_mean_bytes / 1000:.1f}k"
    line = "-" if run.share_of_full_ceiling is None else f"{100 * run.share_of_full_ceiling:.0f}%"
    elsewhere = run.drops_other_buffers + run.sender_queue_drops + (run.switch_input_drops or 0)
    return (f"{run.scheme:<18}{run.senders:>8}{run.buffer_bytes:>9}{run.packet_bytes:>5}"
            f"{run.goodput_mbps:>8.1f}{line:>6}{100 * run.share_of_ceiling:>5.0f}%{run.fct_mean_ms:>7.0f}"
            f"{run.fct_p95_ms:>7.0f}{run.fct_p99_ms:>7.0f}{run.drops:>7}"
            f"{elsewhere:>6}{f'{run.unexplained}{flag}':>7}"
            f"{run.peak_backlog_bytes // 1000:>6}k{run.timeouts:>6}{run.retransmissions:>7}"
            f"{run.cpu_busy_pct:>5.0f}{switch:>5}{pmd:>5}{probe:>17}{empty:>7}{empty_tail:>5}{held:>6}")


def failed_row(failure: Failure) -> str:
    """A failed run's line of the summary table: its scheme, senders and buffer, then its error
    (the first line; the whole of it is in the log and the summary)."""
    return f"{failure.scheme:<18}{failure.senders:>8}{failure.buffer_bytes:>9}  FAILED: {failure.brief()}"


def summary_table(runs: Sequence[RunRecord], ceilings: Sequence[dict[str, Any]],
                  failures: Sequence[Failure] = ()) -> str:
    """The table printed at the end of a sweep (runs: RunRecords; ceilings: the summary's "ceilings";
    failures: the runs that failed, a row each with its error, in the order the sweep ran)."""
    header = (f"{'scheme':<18}{'senders':>8}{'buffer':>9}{'pkt':>5}{'goodput':>8}{'%line':>6}{'%ceil':>6}{'mean':>7}"
              f"{'p95':>7}{'p99':>7}{'drops':>7}{'other':>6}{'unexpl':>7}{'peakq':>7}{'RTOs':>6}{'rtx':>7}{'cpu%':>5}{'sw%':>5}"
              f"{'pmd%':>5}{'probe avg/max ms':>17}{'emptyq':>7}{'tail':>5}{'swin':>6}")
    lines = [header, "-" * len(header)]
    lines += [failed_row(row) if isinstance(row, Failure) else table_row(row)
              for row in execution_order(runs, failures)]
    described = "; ".join(f"{c['packet_bytes']} B packets: median {c['median']:.1f} Mb/s "
                          f"({c['min']:.1f}-{c['max']:.1f}, ±{c['spread_pct']:.1f} %, {len(c['samples'])} samples)"
                          for c in ceilings)
    lines.append(f"single-flow ceiling: {described}")
    lines.append("goodput in Mb/s; %line against the run's network's single-flow ceiling at full-size (1500 B) "
                 "packets, the headline; %ceil against its ceiling at the run's packet size (pkt, IP bytes); "
                 "completion times in ms; drops: at the bottleneck buffer; other: at the other buffers, the senders'"
                 " own queues and the AF_XDP ports' input rings; unexpl: IPv4 packets lost where no kernel counter "
                 "names them (! flags them); peakq: largest bottleneck backlog seen; RTOs and retransmitted segments"
                 " summed over the hosts; cpu%: both cores' busy share during the measured rounds (/proc/stat); sw%:"
                 " the switch's forwarding threads' CPU time (ovs-vswitchd's main thread, and its PMD threads "
                 "where afxdp ports have them: a PMD thread polls at 100 % whatever the load), % of one core; pmd%: "
                 "the part of the PMD threads' cycles spent on packets (ovs-appctl dpif-netdev/pmd-stats-show), % of "
                 "one core; emptyq: share of the "
                 "bottleneck's backlog samples during rounds that found its queue empty; tail: the same after each "
                 "round's first connection had finished; swin: mean memory held during rounds by the switch's input "
                 "sockets, frames the userspace switch had not yet taken in (skb truesize); FAILED: a run that did "
                 "not finish, with the first line of its error")
    return "\n".join(lines)

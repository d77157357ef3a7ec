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
   read the counters again (the loss account, stats.LossAccount: every IPv4
   packet the hosts sent is delivered, dropped at a named buffer, or
   "unexplained"), and record the routes once more;
4. put the hosts back as they were.

The single-flow ceiling is measured on every network before any scheme,
ceiling_repeats times (more where the samples disagree: ceiling_samples),
at 1500 B packets and at every smaller packet size a scheme uses
(small-packets: 750 B); each run is judged against its own network's median
at its own packet size, and the summary reports every sample kept, the
spread, and in its notes the disturbed samples set aside. Results go to OUT/results.db,
OUT/summary.json, OUT/routes/ and the PNG plots.
"""

import contextlib
import dataclasses
import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
import typing

from otcp import bpf as otcp_bpf
from otcp.experiments import measure, otcp, plots, results, schemes, stats
from otcp.experiments.emulation import delay_report, emulate
from otcp.experiments.schemes import DEFAULT_FINE_RTO_MS
from otcp.planning.formulas import Lossless
from otcp.topo.fabrics import StarTopo

WORKLOAD_PORT = 5001
ETHERNET_MTU = 1500
# What an IP packet carries beyond the MSS the receiver advertises (IP and TCP headers; options come out of the MSS).
TCP_IP_HEADER_BYTES = 40
# Backlog sampling during a run: a netlink dump every 10 ms (cheap enough on 2 cores).
RUN_BACKLOG_INTERVAL_S = 0.01


@dataclasses.dataclass
class IncastConfig:
    """Everything one sweep needs; validated by otcp.experiments.cli."""

    out: str
    senders: list
    buffers: list
    schemes: list
    sru_bytes: int | None = 262144
    total_bytes: int | None = None
    rounds: int = 50
    warmup_seconds: float = 5.0
    persistent: bool = False
    bw_mbps: float = 100
    delay_us: float | None = None
    fine_rto_ms: int = DEFAULT_FINE_RTO_MS
    forwarding: str = "controller"
    probe_interval_s: float = 0.01
    ceiling_seconds: int = 3
    ceiling_repeats: int = 3
    round_timeout_s: float = 60.0
    agent_timeout_s: float = 120.0
    queue_target_fraction: float = Lossless.queue_target_fraction

    def block_bytes(self, senders):
        """Bytes each server sends per round: the SRU, or the fixed total split over the servers."""
        if self.total_bytes is not None:
            return max(1, self.total_bytes // senders)
        return self.sru_bytes


class RunError(RuntimeError):
    """One scheme's run failed; the sweep records it and goes on."""


@dataclasses.dataclass
class SweepResult:
    """What a sweep has produced so far: ceiling samples, runs (with the
    completion times of their rounds), failures and notes."""

    ceilings: list = dataclasses.field(default_factory=list)
    runs: list = dataclasses.field(default_factory=list)
    round_durations: list = dataclasses.field(default_factory=list)
    failures: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)

    def note(self, progress, note):
        """Keep note once and show it."""
        if note and note not in self.notes:
            self.notes.append(note)
            progress.message(f"note: {note}")

    def ceiling(self, packet_bytes=1500):
        """The median of every ceiling sample at packet_bytes (None before any)."""
        values = tuple(c.mbps for c in self.ceilings if c.packet_bytes == packet_bytes)
        return stats.Spread(values).median if values else None


def run_sweep(config, progress):
    """Run the whole sweep; return (summary path or None, SweepResult)."""
    os.makedirs(config.out, exist_ok=True)
    code = results.code_version()
    catalogue = schemes.catalogue(config.fine_rto_ms)
    registered = contextlib.ExitStack()
    runnable, unavailable = plan_schemes(config, catalogue, registered)
    store = results.ResultStore(os.path.join(config.out, "results.db"), dataclasses.asdict(config))
    for name, reason in unavailable:
        store.add_unavailable(name, reason)
        progress.message(f"scheme {name} unavailable: {reason}")
    progress.total = len(config.buffers) * len(config.senders) * len(runnable)
    sweep = SweepResult()
    try:
        for buffer_bytes in config.buffers:
            for senders in config.senders:
                run_network(config, store, progress, sweep, buffer_bytes, senders, runnable)
    finally:
        registered.close()
        store.close()
        summary = None
        if sweep.ceilings:
            notes = sweep.notes + [f"failed: {f}" for f in sweep.failures]
            summary = results.write_summary(config.out, sweep.ceilings, sweep.runs, unavailable, notes, code)
            if sweep.runs:
                draw_plots(config.out, sweep.runs, sweep.round_durations, sweep.ceiling())
    return summary, sweep


def packet_bytes_of(scheme, advmss=None):
    """The IP packet size a scheme's senders send: their MTU, or the
    receiver's advmss (the segment the OTCP controller chose) plus the IP
    and TCP headers, when the receiver's routes carry one."""
    if advmss is not None:
        return advmss + TCP_IP_HEADER_BYTES
    return scheme.mtu or ETHERNET_MTU


def receiver_advmss(emulation, receiver, senders, data_ips):
    """The advmss on the receiver's routes to the senders (the most common
    one; the star's paths are alike), or None when they carry none."""
    routes = json.loads(emulation.run(receiver, ["ip", "-j", "route", "show"]) or "[]")
    found = []
    for sender in senders:
        address = ipaddress.ip_address(data_ips[sender])
        matching = [r for r in routes if r.get("dst") not in (None, "default")
                    and address in ipaddress.ip_network(r["dst"], strict=False)]
        if matching:
            best = max(matching, key=lambda r: ipaddress.ip_network(r["dst"], strict=False).prefixlen)
            metrics = {key: value for entry in best.get("metrics", []) for key, value in entry.items()}
            found.append(metrics.get("advmss"))
    values = [v for v in found if v is not None]
    return max(set(values), key=values.count) if values else None


def plan_schemes(config, catalogue, registered):
    """(schemes to run in the catalogue's order, [(scheme, reason it cannot run here)]).

    Registers the BPF DCTCP congestion control if a scheme needs it, on the
    ExitStack registered (which unregisters it); the kernel's refusal is the
    reason those schemes cannot run.
    """
    runnable, unavailable = [], []
    dctcp_refused = None
    if any(catalogue[name].congestion_control == schemes.DCTCP_CC for name in config.schemes):
        try:
            registered.enter_context(otcp_bpf.register_dctcp(wait_s=60.0))
        except otcp_bpf.BpfUnavailable as exc:
            dctcp_refused = f"the kernel refused the BPF congestion control {schemes.DCTCP_CC}: {exc}"
    for name in sorted(config.schemes, key=list(catalogue).index):
        scheme = catalogue[name]
        reason = None
        if scheme.congestion_control == schemes.DCTCP_CC and dctcp_refused:
            reason = dctcp_refused
        if reason is None and scheme.kind == "otcp":
            if config.forwarding != "controller":
                reason = "needs the OTCP controller (--forwarding controller)"
            else:
                reason = otcp.agent_unavailable_reason()
        if reason:
            unavailable.append((name, reason))
        else:
            runnable.append(scheme)
    return runnable, unavailable


def run_network(config, store, progress, sweep, buffer_bytes, senders, runnable):
    """Build one star and run every runnable scheme on it."""
    workdir = os.path.join(config.out, "work", f"buffer{buffer_bytes}-senders{senders}")
    os.makedirs(workdir, exist_ok=True)
    topo = StarTopo(senders, bw=config.bw_mbps, buffer_bytes=buffer_bytes, delay_us=config.delay_us, probe=True)
    inventory = topo.write_inventory(os.path.join(workdir, "inventory.yaml"))
    with_agents = any(s.kind == "otcp" for s in runnable)
    controller = None
    if config.forwarding == "controller":
        controller = otcp.Controller(workdir, inventory, with_agents,
                                     parameters={"queue_target_fraction": config.queue_target_fraction})
    network = Network(config, topo, workdir, controller)
    progress.message(f"building a star: {senders} senders, {buffer_bytes} B buffers, {config.bw_mbps:g} Mb/s links, "
                     f"forwarding by {'the OTCP controller' if controller else 'standalone bridges'}")
    with emulate(topo, controller=controller, management=with_agents) as emulation:
        sweep.note(progress, emulation.congestion_control_note)
        enforced, delay_note = delay_report(topo)
        sweep.note(progress, delay_note)
        if enforced:
            topo.write_inventory(inventory, delay_enforced=True)
        network.emulation = emulation
        network.data_ips = {h.name: h.IP() for h in emulation.hosts}
        ensure_connectivity(emulation, topo.senders + [topo.probe], network.data_ips[topo.receiver])
        sizes = sorted({packet_bytes_of(s) for s in runnable} | {ETHERNET_MTU}, reverse=True)
        for packet_bytes in sizes:
            measure_ceiling(network, store, progress, sweep, buffer_bytes, packet_bytes)
        for scheme in runnable:
            label = f"{scheme.name} n={senders} buf={buffer_bytes}"
            progress.start_run(label)
            try:
                run, detail = run_scheme(network, scheme, buffer_bytes, progress)
                if not any((c.senders, c.buffer_bytes, c.packet_bytes) == (senders, buffer_bytes, run.packet_bytes)
                           for c in sweep.ceilings):
                    measure_ceiling(network, store, progress, sweep, buffer_bytes, run.packet_bytes)
            except (RunError, TimeoutError, RuntimeError, otcp_bpf.BpfUnavailable) as exc:
                sweep.failures.append(f"{label}: {exc}")
                progress.message(f"run failed: {label}: {exc}")
            else:
                run.ceiling_mbps = results.network_ceiling(sweep.ceilings, senders, buffer_bytes, run.packet_bytes)
                store.add_run(run, detail)
                sweep.runs.append(run)
                sweep.round_durations.append([r["duration_s"] * 1000 for r in detail.rounds])
                if run.unexplained:
                    progress.message(f"note: {label} lost {run.unexplained} packets no counter names")
            progress.finish_run()


@dataclasses.dataclass
class Network:
    """One star and what runs on it: the emulation, the controller, and the
    workload servers (restarted when a scheme needs another congestion control)."""

    config: IncastConfig
    topo: StarTopo
    workdir: str
    controller: otcp.Controller | None
    emulation: object = None
    data_ips: dict = dataclasses.field(default_factory=dict)
    servers: list = dataclasses.field(default_factory=list)
    servers_cc: str | None = None

    def serve(self, cc):
        """Have the storage servers in every sender running with congestion control cc."""
        if cc == self.servers_cc:
            return
        for process in self.servers:
            self.emulation.stop(process)
        self.servers = [self.emulation.start(sender, [sys.executable, "-m", "otcp.experiments.incast_server",
                                                      "--port", str(WORKLOAD_PORT), "--cc", cc])
                        for sender in self.topo.senders]
        for sender in self.topo.senders:
            self.emulation.wait_listening(sender, WORKLOAD_PORT)
        self.servers_cc = cc


class CeilingMeasured(typing.NamedTuple):
    """One single-flow ceiling sample: Mb/s, both cores' busy share and the switch thread's
    (measure.switch_thread_time; None without ovs-vswitchd), in %."""

    mbps: float
    cpu_busy_pct: float
    switch_cpu_pct: float | None


@dataclasses.dataclass
class CeilingTaken:
    """One network's single-flow ceiling at one packet size: the samples kept, and the
    disturbed ones set aside (stats.agreeing_ceilings), each a CeilingMeasured."""

    kept: list
    set_aside: list

    @property
    def median(self):
        """The ceiling: the median of the samples kept."""
        return stats.Spread(tuple(s.mbps for s in self.kept)).median


def ceiling_samples(network, packet_bytes, progress):
    """The single-flow ceiling of network at packet_bytes: config.ceiling_repeats samples,
    and while fewer than that many agree with the best (stats.agreeing_ceilings), one more,
    up to twice as many in all. The ones that agree are kept; the rest are set aside, since
    a busy CPU elsewhere only ever lowers one flow's rate (if they never agree, the ones
    within reach of the best are kept all the same)."""
    config, topo = network.config, network.topo
    # A scheme's locked cwnd lives on in the metrics cache after its routes are gone.
    flush_tcp_metrics(network.emulation, [topo.senders[0], topo.receiver])
    samples: list = []
    while len(samples) < 2 * config.ceiling_repeats:
        if len(samples) >= config.ceiling_repeats and \
                len(stats.agreeing_ceilings([s.mbps for s in samples])) >= config.ceiling_repeats:
            break
        extra = "" if len(samples) < config.ceiling_repeats else ", again: the samples disagree"
        progress.message(f"measuring the single-flow ceiling, {packet_bytes} B packets "
                         f"({len(samples) + 1}/{config.ceiling_repeats}{extra}, {config.ceiling_seconds} s of iperf3)")
        cpu_before, switch_before = measure.read_cpu_times(), measure.switch_thread_time()
        mbps = measure.single_flow_ceiling(network.emulation, topo.senders[0], topo.receiver,
                                           network.data_ips[topo.receiver], seconds=config.ceiling_seconds,
                                           packet_bytes=packet_bytes)
        samples.append(CeilingMeasured(mbps, stats.cpu_busy(cpu_before, measure.read_cpu_times())[0],
                                       stats.thread_busy(switch_before, measure.switch_thread_time())))
    agreeing = stats.agreeing_ceilings([s.mbps for s in samples])
    taken = CeilingTaken([s for s in samples if s.mbps in agreeing], [s for s in samples if s.mbps not in agreeing])
    aside = f"; set aside as disturbed: {', '.join(f'{s.mbps:.1f}' for s in taken.set_aside)}" \
        if taken.set_aside else ""
    switch = [s.switch_cpu_pct for s in taken.kept if s.switch_cpu_pct is not None]
    busy = f"; switch thread {min(switch):.0f}-{max(switch):.0f} % of a core" if switch else ""
    progress.message(f"single-flow ceiling, {packet_bytes} B packets: median "
                     f"{taken.median:.1f} Mb/s "
                     f"({', '.join(f'{s.mbps:.1f}' for s in taken.kept)}){aside}{busy}")
    return taken


def measure_ceiling(network, store, progress, sweep, buffer_bytes, packet_bytes):
    """ceiling_samples: the kept ones in sweep and store, the set-aside ones in the sweep's notes."""
    senders = len(network.topo.senders)
    taken = ceiling_samples(network, packet_bytes, progress)
    for kept in taken.kept:
        sample = results.CeilingSample(senders, buffer_bytes, packet_bytes, *kept)
        sweep.ceilings.append(sample)
        store.add_ceiling(sample, sweep.ceiling())
    if taken.set_aside:
        sweep.note(progress, f"ceiling at {packet_bytes} B packets on the {senders}-sender network ({buffer_bytes} B): "
                             f"set aside as disturbed (more than {stats.CEILING_AGREEMENT:.0%} below the best, "
                             f"Mb/s (both cores busy, the switch thread busy)): "
                             + ", ".join(f"{s.mbps:.1f} ({s.cpu_busy_pct:.0f} %, "
                                         f"{'-' if s.switch_cpu_pct is None else f'{s.switch_cpu_pct:.0f} %'})"
                                         for s in taken.set_aside))


def scheme_settings(network, scheme, buffer_bytes, hosts):
    """The context managers that put scheme on the network's hosts, in order of entry."""
    config, emulation = network.config, network.emulation
    settings = []
    if scheme.kind == "otcp":
        if network.controller.use(scheme.formulas, scheme.pacing):
            ensure_connectivity(emulation, [h for h in [*network.topo.senders, network.topo.probe] if h],
                                network.data_ips[network.topo.receiver], timeout=60.0)
        settings.append(otcp.Agents(emulation, hosts, os.path.join(network.workdir, "controller.yaml"),
                                    os.path.join(network.workdir, "agents", scheme.name),
                                    timeout=config.agent_timeout_s, enforce=scheme.enforce))
    else:
        settings.append(schemes.RouteSettings(emulation, hosts, scheme))
    if scheme.ecn:
        settings.append(schemes.EcnSettings(emulation, hosts, network.topo.receiver, config.bw_mbps * 1e6,
                                            buffer_bytes))
    return settings


def run_scheme(network, scheme, buffer_bytes, progress):
    """One scheme on a running network; returns (RunRecord, RunDetail)."""
    config, emulation, topo, data_ips = network.config, network.emulation, network.topo, network.data_ips
    hosts = [topo.receiver] + topo.senders + [topo.probe]
    heading = f"senders={len(topo.senders)} buffer_bytes={buffer_bytes}"
    cc = scheme.congestion_control
    network.serve(cc)
    with contextlib.ExitStack() as applied:
        settings = [applied.enter_context(setting) for setting in scheme_settings(network, scheme, buffer_bytes, hosts)]
        if scheme.kind == "otcp":
            settings[0].wait_for_routes(data_ips)
        marker = settings[-1].marker if scheme.ecn else None
        # The loss account's counters are read with the agents stopped (otcp.Agents.paused).
        quiet_agents = settings[0].paused if scheme.kind == "otcp" else contextlib.nullcontext
        record_routes(config.out, emulation, scheme.name, hosts, f"{heading}: before traffic")
        block = config.block_bytes(len(topo.senders))
        servers = [data_ips[s] for s in topo.senders]
        # The kernel caches per-destination TCP metrics (ssthresh, and the
        # locked cwnd of a route) when a connection closes and reuses them
        # for an hour: flushed so no scheme inherits another's.
        flush_tcp_metrics(emulation, hosts)
        since = network.controller.generation() if scheme.kind == "otcp" else None
        # The probe pings through the warm-up too: the controller counts its flow before the measured
        # rounds, as the senders', instead of planning again when the measuring probe starts.
        with measure.Probe(emulation, topo.probe, data_ips[topo.receiver], config.probe_interval_s):
            if config.warmup_seconds:
                run_client(config, emulation, topo.receiver, servers, block, ["--seconds", str(config.warmup_seconds)],
                           lambda done: progress.update(0, config.rounds), cc)
            if scheme.kind == "otcp":
                warm_until_flows_applied(network, servers, block, progress, cc, since, settings[0])
        receiver_intf = emulation.host(topo.receiver).defaultIntf()
        interfaces = switch_ports(topo) + [(h, schemes.data_interface(emulation, h)) for h in hosts] \
            + [(h, emulation.host(h).defaultIntf().buffer_device) for h in hosts]
        flush_tcp_metrics(emulation, hosts)
        measure.wait_empty(emulation, topo.receiver, receiver_intf.buffer_device)
        with quiet_agents():
            before_counters = {h: measure.tcp_counters(emulation, h) for h in hosts}
            before_path = measure.path_counters(emulation, interfaces)
            before_queues = measure.link_queues(emulation, hosts)
        marks_before = marker.counters().marked if marker else None
        cpu_before, switch_before = measure.read_cpu_times(), measure.switch_thread_time()
        generation_before = network.controller.generation() if scheme.kind == "otcp" else None
        with measure.Probe(emulation, topo.probe, data_ips[topo.receiver], config.probe_interval_s) as probe, \
                measure.BacklogSampler(emulation, topo.receiver, receiver_intf.buffer_device,
                                       interval=RUN_BACKLOG_INTERVAL_S, series=True,
                                       switch_inputs=switch_port_indexes(topo)) as backlog:
            rounds = run_client(config, emulation, topo.receiver, servers, block, ["--rounds", str(config.rounds)],
                                lambda done: progress.update(done, config.rounds), cc)
            rtts, sent = probe.stop()
        cpu_after = measure.read_cpu_times()
        cpu_mean, cpu_busiest = stats.cpu_busy(cpu_before, cpu_after)
        cpu_parts = stats.cpu_parts(cpu_before, cpu_after)
        switch_busy = stats.thread_busy(switch_before, measure.switch_thread_time())
        generations = None if generation_before is None else network.controller.generation() - generation_before
        measure.wait_empty(emulation, topo.receiver, receiver_intf.buffer_device)
        ce_marks = marker.counters().marked - marks_before if marker else None
        with quiet_agents():
            after_queues = measure.link_queues(emulation, hosts)
            after_path = measure.path_counters(emulation, interfaces)
            after_counters = {h: measure.tcp_counters(emulation, h) for h in hosts}
        record_routes(config.out, emulation, scheme.name, hosts, f"{heading}: after the measured rounds")
        packet_bytes = packet_bytes_of(scheme, receiver_advmss(emulation, topo.receiver, topo.senders, data_ips))
    counters = {h: stats.counter_deltas(before_counters[h], after_counters[h], measure.TCP_COUNTERS) for h in hosts}
    path = {place: stats.counter_deltas(before_path[place], after_path[place], after_path[place])
            for place in after_path}
    account = stats.loss_account(before_queues, after_queues, topo.receiver)
    head = {"scheme": scheme.name, "senders": len(topo.senders), "buffer_bytes": buffer_bytes, "sru_bytes": block,
            "rounds": len(rounds), "persistent": int(config.persistent), "packet_bytes": packet_bytes,
            "ceiling_mbps": 0.0}
    run = results.RunRecord.build(
        head, stats.summarize_rounds(rounds), account, stats.summarize_probe(rtts, sent),
        peak_backlog_bytes=backlog.peak,
        timeouts=sum(c["TcpExtTCPTimeouts"] for c in counters.values()),
        retransmissions=sum(c["TcpRetransSegs"] for c in counters.values()),
        cpu_busy_pct=cpu_mean, cpu_busiest_pct=cpu_busiest, cpu_softirq_pct=cpu_parts["softirq"],
        cpu_steal_pct=cpu_parts["steal"], switch_cpu_pct=switch_busy, ce_marks=ce_marks, generations=generations,
        **stats.queue_emptiness(backlog.series, rounds), **stats.switch_input(backlog.series, rounds),
        **stats.unfinished_connections(rounds))
    queues = {h: {"egress": {"sent_packets": after_queues[h].egress.sent_packets - before_queues[h].egress.sent_packets,
                             "drops": after_queues[h].egress.drops - before_queues[h].egress.drops},
                  "buffer": {"sent_packets": after_queues[h].buffer.sent_packets - before_queues[h].buffer.sent_packets,
                             "drops": after_queues[h].buffer.drops - before_queues[h].buffer.drops}}
              for h in hosts}
    detail = results.RunDetail(rounds=rounds, servers=topo.senders, host_counters=counters, probe_rtts=rtts,
                               path_counters=path, queues=queues)
    return run, detail


def warm_until_flows_applied(network, servers, block, progress, cc, since, agents):
    """More warm-up rounds until the agents hold parameters the controller
    computed, after generation since, with every sender's flow to the receiver
    active and its round trip and the probe's measured by the hosts, and until
    the agents have probed each of their peers once (Agents.first_probes_done_at).
    The probe's pair carries no TCP: its hosts' SYN probes measure it after a few
    of their rounds, and its first measurement would otherwise re-plan during the
    run. Its flow is not waited for: at 64 senders the controller counted it in
    some polls and not in others, and the warm-up never ended."""
    config, topo = network.config, network.topo
    senders = [(sender, topo.receiver) for sender in topo.senders]
    measured = [*senders, (topo.probe, topo.receiver)]
    deadline = max(time.monotonic(), agents.first_probes_done_at()) + config.agent_timeout_s
    while (time.monotonic() < agents.first_probes_done_at()
           or not network.controller.flows_applied(senders, since, measured=measured)):
        if time.monotonic() > deadline:
            raise RunError(f"the agents did not get parameters for the senders' flows, planned with the round "
                           f"trips the hosts measured, within {config.agent_timeout_s:.0f} s of warm-up")
        run_client(config, network.emulation, topo.receiver, servers, block, ["--seconds", "1"],
                   lambda done: progress.update(0, config.rounds), cc)


def switch_ports(topo):
    """(switch, interface) of every switch port that faces a host."""
    return [topo.switch_port(host) for host in topo.hosts()]


def switch_port_indexes(topo):
    """Root-namespace ifindexes of the switch ports that face hosts, where the userspace switch takes frames in."""
    return [socket.if_nametoindex(interface) for _, interface in switch_ports(topo)]


def run_client(config, emulation, receiver, servers, block, count, on_round, cc):
    """Run the workload client in receiver for count (["--rounds", N] or
    ["--seconds", S]); return its round records."""
    argv = [sys.executable, "-m", "otcp.experiments.incast_client", "--servers", ",".join(servers),
            "--port", str(WORKLOAD_PORT), "--block-bytes", str(block), *count,
            "--cc", cc, "--round-timeout", str(config.round_timeout_s)]
    if config.persistent:
        argv.append("--persistent")
    process = emulation.start(receiver, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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


def flush_tcp_metrics(emulation, hosts):
    """Empty the TCP metrics cache of every host (``ip tcp_metrics flush``).

    Linux applies a route's ``cwnd N lock`` only through this cache: a
    connection reads it from the cache entry for its destination, which is
    created, with the route's values at that moment, when an earlier
    connection to that destination closes, and then kept for an hour
    whatever the route says later (docs/experiments.md, "Why packets are lost even under a window clamp").
    """
    for host in hosts:
        emulation.run(host, ["ip", "tcp_metrics", "flush", "all"])


def record_routes(out, emulation, scheme, hosts, heading):
    """Write what the kernel of every host holds: routes and data-interface MTU."""
    for host in hosts:
        routes = emulation.run(host, ["ip", "route", "show"])
        intf = schemes.data_interface(emulation, host)
        mtu = schemes.interface_mtu(emulation, host, intf)
        results.write_routes(out, scheme, host, heading, f"{routes.rstrip()}\n# {intf} mtu {mtu}")


def ensure_connectivity(emulation, hosts, target_ip, timeout=30.0):
    """Ping target_ip from every host until each gets an answer (the
    controller learns hosts and installs paths on first packets)."""
    deadline = time.monotonic() + timeout
    pending = list(hosts)
    while pending:
        pending = [h for h in pending
                   if "1 received" not in emulation.run(h, ["ping", "-n", "-c", "1", "-W", "1", target_ip],
                                                        check=False)]
        if pending and time.monotonic() > deadline:
            raise RunError(f"{', '.join(pending)} cannot reach {target_ip} after {timeout:.0f} s")


def draw_plots(out, runs, round_durations, ceiling):
    """The sweep's PNGs (runs: RunRecords)."""
    rows = [dataclasses.asdict(r) for r in runs]
    plots.goodput_plot(os.path.join(out, "goodput.png"), rows, ceiling)
    plots.fct_cdf_plot(os.path.join(out, "fct_cdf.png"), rows, dict(enumerate(round_durations)))
    plots.fct_bars_plot(os.path.join(out, "fct_bars.png"), rows)


def summary_table(runs, ceilings):
    """The table printed at the end of a sweep (runs: RunRecords; ceilings: the summary's "ceilings")."""
    header = (f"{'scheme':<18}{'senders':>8}{'buffer':>9}{'pkt':>5}{'goodput':>8}{'%ceil':>6}{'mean':>7}{'p95':>7}"
              f"{'p99':>7}{'drops':>7}{'other':>6}{'unexpl':>7}{'peakq':>7}{'RTOs':>6}{'rtx':>7}{'cpu%':>5}{'sw%':>5}"
              f"{'probe avg/max ms':>17}{'emptyq':>7}{'tail':>5}{'swin':>6}")
    lines = [header, "-" * len(header)]
    for run in runs:
        probe = (f"{run.probe_rtt_avg_ms:.2f}/{run.probe_rtt_max_ms:.2f}"
                 if run.probe_rtt_avg_ms is not None else "no answers")
        flag = "!" if run.unexplained else ""
        empty, empty_tail = ("-" if share is None else f"{share:.0f}%"
                             for share in (run.backlog_empty_pct, run.backlog_empty_tail_pct))
        switch = "-" if run.switch_cpu_pct is None else f"{run.switch_cpu_pct:.0f}"
        held = "-" if run.switch_input_mean_bytes is None else f"{run.switch_input_mean_bytes / 1000:.1f}k"
        lines.append(f"{run.scheme:<18}{run.senders:>8}{run.buffer_bytes:>9}{run.packet_bytes:>5}"
                     f"{run.goodput_mbps:>8.1f}{100 * run.share_of_ceiling:>5.0f}%{run.fct_mean_ms:>7.0f}"
                     f"{run.fct_p95_ms:>7.0f}{run.fct_p99_ms:>7.0f}{run.drops:>7}"
                     f"{run.drops_other_buffers + run.sender_queue_drops:>6}{f'{run.unexplained}{flag}':>7}"
                     f"{run.peak_backlog_bytes // 1000:>6}k{run.timeouts:>6}{run.retransmissions:>7}"
                     f"{run.cpu_busy_pct:>5.0f}{switch:>5}{probe:>17}{empty:>7}{empty_tail:>5}{held:>6}")
    described = "; ".join(f"{c['packet_bytes']} B packets: median {c['median']:.1f} Mb/s "
                          f"({c['min']:.1f}-{c['max']:.1f}, ±{c['spread_pct']:.1f} %, {len(c['samples'])} samples)"
                          for c in ceilings)
    lines.append(f"single-flow ceiling: {described}")
    lines.append("goodput in Mb/s, %ceil against the run's network's ceiling at the run's packet size (pkt, IP "
                 "bytes); completion times in ms; drops: at the bottleneck buffer; other: at the other buffers and "
                 "the senders' own queues; unexpl: IPv4 packets lost where no kernel counter names them (! flags "
                 "them); peakq: largest bottleneck backlog seen; RTOs and retransmitted segments summed over the "
                 "hosts; cpu%: both cores' busy share during the measured rounds (/proc/stat); sw%: the switch's "
                 "forwarding thread (ovs-vswitchd's main thread), % of one core; emptyq: share of the "
                 "bottleneck's backlog samples during rounds that found its queue empty; tail: the same after each "
                 "round's first connection had finished; swin: mean memory held during rounds by the switch's "
                 "input sockets, frames the userspace switch had not yet taken in (skb truesize)")
    return "\n".join(lines)

"""The fairness experiment: N long flows into one receiver, started together or staggered.

For every scheme, on one star (N senders and a receiver, the bottleneck
buffer at the switch's port toward the receiver), the flows run from their
start times (flow i at i x stagger seconds) until hold seconds after the last
one started. The receiver's sink reports every flow's bytes every 100 ms
(otcp.experiments.fairness_flows), and the bottleneck's backlog is sampled every
10 ms. From these, per scheme:

- each flow's rate per 100 ms interval, and Jain's index of the flows'
  mean rates over the steady part: the second half of the hold, when every
  flow has run for at least hold / 2 seconds;
- the time to converge after each arrival: until every active flow is
  within 10 % of the fair share (the single-flow ceiling / active flows)
  for half a second (otcp.experiments.stats.convergence_time);
- the peak and mean backlog, drops at the bottleneck, retransmission
  timeouts, CE marks where ECN is on;
- total goodput over the steady part against the single-flow ceiling.

OTCP schemes start from parameters computed with none of these flows
active (the runner waits for them after any earlier scheme's flows): the
controller learns of each flow from the switch's statistics as it arrives,
and the flows that start later get parameters for the flows already there
(docs/experiments.md, "Fairness").

Results go to OUT/fairness.json and one plot per scheme
(OUT/fairness-SCHEME.png: rates over time, the queue underneath).
"""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time

from otcp.experiments import incast, measure, otcp, plots, schemes, stats
from otcp.experiments.emulation import emulate
from otcp.planning.formulas import Lossless
from otcp.topo.fabrics import StarTopo

FLOW_PORT = 5002
REPORT_INTERVAL_S = 0.1
BACKLOG_INTERVAL_S = 0.01
# Within this share of the fair rate counts as converged (issue 13), held for CONVERGED_HOLD_S.
CONVERGED_TOLERANCE = 0.1
CONVERGED_HOLD_S = 0.5
# Flows start this long after the sources are launched (Python's start-up in every host).
START_DELAY_S = 2.0


@dataclasses.dataclass
class FairnessConfig:
    """One fairness experiment; validated by otcp.experiments.cli."""

    out: str
    flows: int
    stagger_s: float
    hold_s: float
    schemes: list
    buffer_bytes: int = 85000
    bw_mbps: float = 100
    ceiling_seconds: int = 3
    ceiling_repeats: int = 3
    agent_timeout_s: float = 120.0
    queue_target_fraction: float = Lossless.queue_target_fraction

    @property
    def duration_s(self):
        """From the first flow's start to the end of every flow."""
        return (self.flows - 1) * self.stagger_s + self.hold_s


def run_fairness(config, progress):
    """Run every scheme; write OUT/fairness.json and the plots; return the document."""
    os.makedirs(config.out, exist_ok=True)
    catalogue = schemes.catalogue()
    registered = contextlib.ExitStack()
    document = {"config": dataclasses.asdict(config), "runs": [], "unavailable": [], "failures": []}
    try:
        runnable, unavailable = incast.plan_schemes(config_for_planning(config), catalogue, registered)
        document["unavailable"] = [{"scheme": name, "reason": reason} for name, reason in unavailable]
        for name, reason in unavailable:
            progress.message(f"scheme {name} unavailable: {reason}")
        progress.total = len(runnable)
        run_network(config, progress, runnable, document)
    finally:
        registered.close()
        with open(os.path.join(config.out, "fairness.json"), "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)
    for run in document["runs"]:
        plots.fairness_plot(os.path.join(config.out, f"fairness-{run['scheme']}.png"), run, config)
    return document


def config_for_planning(config):
    """What incast.plan_schemes reads: the schemes and the forwarding."""
    return incast.IncastConfig(out=config.out, senders=[config.flows], buffers=[config.buffer_bytes],
                               schemes=config.schemes)


def run_network(config, progress, runnable, document):
    """One star; the ceiling at every packet size the schemes use; every scheme."""
    workdir = os.path.join(config.out, "work")
    os.makedirs(workdir, exist_ok=True)
    topo = StarTopo(config.flows, bw=config.bw_mbps, buffer_bytes=config.buffer_bytes, probe=False)
    inventory = topo.write_inventory(os.path.join(workdir, "inventory.yaml"))
    with_agents = any(s.kind == "otcp" for s in runnable)
    controller = otcp.Controller(workdir, inventory, with_agents,
                                 parameters={"queue_target_fraction": config.queue_target_fraction})
    network = incast.Network(config, topo, workdir, controller)
    progress.message(f"building a star: {config.flows} senders, {config.buffer_bytes} B buffer, "
                     f"{config.bw_mbps:g} Mb/s links")
    with emulate(topo, controller=controller, management=with_agents) as emulation:
        network.emulation = emulation
        network.data_ips = {h.name: h.IP() for h in emulation.hosts}
        incast.ensure_connectivity(emulation, topo.senders, network.data_ips[topo.receiver])
        ceilings = {}
        for packet_bytes in sorted({incast.packet_bytes_of(s) for s in runnable}, reverse=True):
            ceilings[packet_bytes] = incast.ceiling_samples(network, packet_bytes, progress).median
        for scheme in runnable:
            progress.start_run(f"{scheme.name} {config.flows} flows")
            try:
                run = run_scheme(network, scheme, progress, ceilings)
            except (incast.RunError, TimeoutError, RuntimeError) as exc:
                document["failures"].append(f"{scheme.name}: {exc}")
                progress.message(f"run failed: {scheme.name}: {exc}")
            else:
                document["runs"].append(run)
            progress.finish_run()


def run_scheme(network, scheme, progress, ceilings):
    """One scheme's long flows; returns the run's JSON-ready record."""
    config, emulation, topo, data_ips = network.config, network.emulation, network.topo, network.data_ips
    hosts = [topo.receiver] + topo.senders
    cc = scheme.congestion_control
    receiver_intf = emulation.host(topo.receiver).defaultIntf()
    with contextlib.ExitStack() as applied:
        settings = [applied.enter_context(s) for s in incast.scheme_settings(network, scheme, config.buffer_bytes,
                                                                             hosts)]
        if scheme.kind == "otcp":
            settings[0].wait_for_routes(data_ips)
            wait_for_no_flows(network)
        marker = settings[-1].marker if scheme.ecn else None
        incast.flush_tcp_metrics(emulation, hosts)
        measure.wait_empty(emulation, topo.receiver, receiver_intf.buffer_device)
        before = {h: measure.tcp_counters(emulation, h) for h in hosts}
        queues_before = measure.link_queues(emulation, [topo.receiver])
        marks_before = marker.counters().marked if marker else None
        sink = emulation.start(topo.receiver, [sys.executable, "-m", "otcp.experiments.fairness_flows", "sink",
                                               "--port", str(FLOW_PORT), "--cc", cc,
                                               "--interval", str(REPORT_INTERVAL_S)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            if sink.stdout.readline().strip() != b"ready":
                raise incast.RunError(f"the flow sink did not start: {sink.stderr.read().decode(errors='replace')}")
            with measure.BacklogSampler(emulation, topo.receiver, receiver_intf.buffer_device,
                                        interval=BACKLOG_INTERVAL_S, series=True) as backlog:
                start = time.monotonic() + START_DELAY_S
                stop = start + config.duration_s
                arrivals = {data_ips[s]: start + i * config.stagger_s for i, s in enumerate(topo.senders)}
                sources = [emulation.start(s, [sys.executable, "-m", "otcp.experiments.fairness_flows", "source",
                                               "--to", data_ips[topo.receiver], "--port", str(FLOW_PORT),
                                               "--cc", cc, "--start-at", str(arrivals[data_ips[s]]),
                                               "--stop-at", str(stop)],
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                           for s in topo.senders]
                while time.monotonic() < stop:
                    progress.update(min(config.duration_s, time.monotonic() - start), config.duration_s)
                    time.sleep(0.5)
                failed = [finish_source(emulation, source, stop) for source in sources]
                if any(failed):
                    raise incast.RunError("; ".join(f for f in failed if f))
            time.sleep(REPORT_INTERVAL_S * 2)
            out, err = sink.communicate(input=b"", timeout=10)
        finally:
            emulation.stop(sink)
        reports = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
        measure.wait_empty(emulation, topo.receiver, receiver_intf.buffer_device)
        ce_marks = marker.counters().marked - marks_before if marker else None
        queues_after = measure.link_queues(emulation, [topo.receiver])
        after = {h: measure.tcp_counters(emulation, h) for h in hosts}
        packet_bytes = incast.packet_bytes_of(scheme, incast.receiver_advmss(emulation, topo.receiver, topo.senders,
                                                                             data_ips))
    if packet_bytes not in ceilings:
        ceilings[packet_bytes] = incast.ceiling_samples(network, packet_bytes, progress).median
    timeouts = sum(stats.counter_deltas(before[h], after[h], measure.TCP_COUNTERS)["TcpExtTCPTimeouts"]
                   for h in hosts)
    drops = queues_after[topo.receiver].buffer.drops - queues_before[topo.receiver].buffer.drops
    return summarize(scheme.name, reports, arrivals, stop, backlog, ceilings[packet_bytes], config,
                     drops=drops, timeouts=timeouts, ce_marks=ce_marks, packet_bytes=packet_bytes)


def wait_for_no_flows(network):
    """Wait until the agents hold parameters computed with none of the senders' flows to the receiver active."""
    pairs = [(sender, network.topo.receiver) for sender in network.topo.senders]
    deadline = time.monotonic() + network.config.agent_timeout_s
    since = network.controller.generation()
    while not network.controller.flows_applied(pairs, since, active=False):
        if time.monotonic() > deadline:
            raise incast.RunError(f"the controller still counted earlier flows after "
                                  f"{network.config.agent_timeout_s:.0f} s")
        time.sleep(0.5)


def finish_source(emulation, process, stop):
    """Wait for one source; its error, or None."""
    try:
        _, err = process.communicate(timeout=max(5.0, stop - time.monotonic() + 10))
    finally:
        emulation.stop(process)
    return err.decode(errors="replace").strip() if process.returncode else None


def summarize(scheme, reports, arrivals, stop, backlog, ceiling_mbps, config, **counts):
    """The run's record: rates, Jain's index, convergence, queue and goodput (see the module docstring)."""
    start = min(arrivals.values())
    series = [(r["t"], r["bytes"]) for r in reports]
    rates = stats.interval_rates(series)
    last_arrival = max(arrivals.values())
    steady_from, steady_to = last_arrival + config.hold_s / 2, stop
    steady = [(t, r) for t, r in rates if steady_from < t <= steady_to]
    means = {flow: sum(r.get(flow, 0.0) for _, r in steady) / len(steady) for flow in arrivals} if steady else {}
    times = sorted(set(arrivals.values()))  # flows started together arrive once
    convergence = []
    for index, arrival in enumerate(times):
        until = times[index + 1] if index + 1 < len(times) else stop
        seconds = stats.convergence_time(rates, arrival, arrivals, ceiling_mbps, CONVERGED_TOLERANCE,
                                         CONVERGED_HOLD_S, until)
        convergence.append({"flows": sorted(f for f, t in arrivals.items() if t == arrival),
                            "arrival_s": round(arrival - start, 3),
                            "converged_after_s": None if seconds is None else round(seconds, 3)})
    during = [b for t, b in backlog.series if start <= t <= stop]
    return {
        "scheme": scheme, "flows": len(arrivals), "stagger_s": config.stagger_s, "packet_bytes": counts["packet_bytes"],
        "ceiling_mbps": ceiling_mbps,
        "jain_steady": stats.jain_index(means.values()),
        "goodput_steady_mbps": sum(means.values()),
        "share_of_ceiling": sum(means.values()) / ceiling_mbps if ceiling_mbps else None,
        "flow_means_mbps": means,
        "convergence": convergence,
        "queue_peak_bytes": max(during, default=0), "queue_mean_bytes": sum(during) / len(during) if during else 0.0,
        "drops": counts["drops"], "timeouts": counts["timeouts"], "ce_marks": counts["ce_marks"],
        "rates": [{"t": round(t - start, 3), "mbps": r} for t, r in rates],
        "queue": [[round(t - start, 3), b] for t, b in backlog.series],
    }


def summary_table(document):
    """The table printed at the end."""
    header = (f"{'scheme':<15}{'flows':>6}{'stagger':>8}{'Jain':>7}{'goodput':>8}{'%ceil':>6}"
              f"{'conv. s (max/median)':>21}{'peakq':>7}{'meanq':>7}{'drops':>6}{'RTOs':>5}{'CE':>7}")
    lines = [header, "-" * len(header)]
    for run in document["runs"]:
        times = [c["converged_after_s"] for c in run["convergence"]]
        seen = sorted(t for t in times if t is not None)
        converged = "never" if not seen else f"{seen[-1]:.1f}/{seen[len(seen) // 2]:.1f}"
        if seen and len(seen) < len(times):
            converged += f" ({len(times) - len(seen)} never)"
        jain = "-" if run["jain_steady"] is None else f"{run['jain_steady']:.3f}"
        lines.append(f"{run['scheme']:<15}{run['flows']:>6}{run['stagger_s']:>8g}{jain:>7}"
                     f"{run['goodput_steady_mbps']:>8.1f}{100 * (run['share_of_ceiling'] or 0):>5.0f}%"
                     f"{converged:>21}{run['queue_peak_bytes'] // 1000:>6}k{run['queue_mean_bytes'] / 1000:>6.1f}k"
                     f"{run['drops']:>6}{run['timeouts']:>5}{'-' if run['ce_marks'] is None else run['ce_marks']:>7}")
    lines.append("Jain: over the flows' mean rates in the steady part (the second half of the hold); goodput: their "
                 "sum, in Mb/s, against the single-flow ceiling at the run's packet size; conv.: seconds after each "
                 "arrival until every active flow is within 10 % of ceiling / flows for 0.5 s; peakq/meanq: the "
                 "bottleneck's backlog while the flows ran; drops at the bottleneck; RTOs summed over the hosts")
    return "\n".join(lines)

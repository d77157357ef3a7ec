"""The fairness experiment: N long flows into one receiver, started together or staggered.

For every scheme, on one star (N senders and a receiver, the bottleneck
buffer at the switch's port toward the receiver), the flows run from their
start times (flow i at i x stagger seconds) until hold seconds after the last
one started. The receiver's sink reports every flow's bytes every 100 ms
(otcp.experiments.hostprogs.fairness_flows), and the bottleneck's backlog is sampled every
10 ms. From these, per scheme:

- each flow's rate per 100 ms interval, and Jain's index of the flows'
  mean rates over the steady part: the second half of the hold, when every
  flow has run for at least hold / 2 seconds;
- the time to converge after each arrival: until every active flow is
  within 10 % of the fair share (the single-flow ceiling / active flows)
  for half a second (otcp.experiments.analysis.stats.convergence_time);
- the peak and mean backlog, drops at the bottleneck, retransmission
  timeouts, CE marks where ECN is on;
- total goodput over the steady part against the single-flow ceiling.

OTCP schemes start from parameters computed with none of these flows
active (the runner waits for them after any earlier scheme's flows): the
controller learns of each flow from the switch's statistics as it arrives,
and the flows that start later get parameters for the flows already there
(docs/experiments.md, "Fairness").

Results go to OUT/fairness.json (with the command line that made it and the
code it ran) and one plot per scheme (OUT/fairness-SCHEME.png: rates over
time, the queue underneath). A scheme whose run fails is a row with its
error in the table and an entry in the document's failures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from otcp.experiments.analysis import plots, results, stats
from otcp.experiments.analysis.results import Failure, Outcome
from otcp.experiments.runner import measure, schemes
from otcp.experiments.runner.ceiling import ceiling_samples, record_ceiling
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.counters import Counters
from otcp.experiments.runner.network import Network, RunError, start_network
from otcp.experiments.runner.progress import Progress
from otcp.experiments.runner.schemes import Scheme, packet_bytes_of
from otcp.experiments.runner.settings import apply_scheme
from otcp.topo.fabrics import StarTopo

FLOW_PORT = 5002
REPORT_INTERVAL_S = 0.1
BACKLOG_INTERVAL_S = 0.01
# Within this share of the fair rate counts as converged, held for CONVERGED_HOLD_S.
CONVERGED_TOLERANCE = 0.1
CONVERGED_HOLD_S = 0.5
# Flows start this long after the sources are launched (Python's start-up in every host).
START_DELAY_S = 2.0
#: What a scheme's run that fails may raise: the experiment records it and goes on.
RUN_FAILURES = (RunError, TimeoutError, RuntimeError)


@dataclasses.dataclass(kw_only=True)
class FairnessConfig(ExperimentConfig):
    """One fairness experiment: the base's network (one buffer) and schemes, and the flows:
    how many, seconds between their starts, and how long all run after the last started.
    Validated by otcp.experiments.cli."""

    flows: int
    stagger_s: float
    hold_s: float

    @property
    def duration_s(self) -> float:
        """From the first flow's start to the end of every flow."""
        return (self.flows - 1) * self.stagger_s + self.hold_s

    @property
    def buffer_bytes(self) -> int:
        """The bottleneck's buffer (the experiment's one network)."""
        (buffer_bytes,) = self.buffers
        return buffer_bytes


def run_fairness(config: FairnessConfig, progress: Progress) -> dict[str, Any]:
    """Run every scheme; write OUT/fairness.json and the plots; return the document."""
    os.makedirs(config.out, exist_ok=True)
    code = results.code_version()
    registered = contextlib.ExitStack()
    outcome = Outcome()
    try:
        runnable = schemes.plan_experiment(config, outcome, progress, registered)
        progress.total = len(runnable)
        run_network(config, progress, runnable, outcome)
    finally:
        registered.close()
        document = {"config": {**dataclasses.asdict(config), "buffer_bytes": config.buffer_bytes},
                    "runs": outcome.runs, "unavailable": [dataclasses.asdict(u) for u in outcome.unavailable],
                    "failures": [dataclasses.asdict(f) for f in outcome.failures],
                    "ceilings": results.ceiling_summary(outcome.ceilings), "notes": outcome.notes,
                    **results.provenance(code, config.command)}
        results.write_json(os.path.join(config.out, "fairness.json"), document, indent=1)
    for run in outcome.runs:
        plots.fairness_plot(os.path.join(config.out, f"fairness-{run['scheme']}.png"), run, config.duration_s,
                            config.buffer_bytes)
    return document


def run_network(config: FairnessConfig, progress: Progress, runnable: Sequence[Scheme], outcome: Outcome) -> None:
    """One star; the ceiling at every packet size the schemes use; every scheme."""
    topo = StarTopo(config.flows, bw=config.bw_mbps, buffer_bytes=config.buffer_bytes, delay_us=config.delay_us,
                    probe=False)
    with_agents = any(s.kind == "otcp" for s in runnable)
    progress.message(f"building a star: {config.flows} senders, {config.buffer_bytes} B buffer, "
                     f"{config.bw_mbps:g} Mb/s links")
    with start_network(config, topo, os.path.join(config.out, "work"), with_agents) as network:
        for note in network.notes:
            outcome.note(progress, note)
        network.ensure_connectivity(topo.senders, network.data_ips[topo.receiver])
        for packet_bytes in sorted({packet_bytes_of(s) for s in runnable}, reverse=True):
            ceiling(network, packet_bytes, outcome, progress)
        for scheme in runnable:
            progress.start_run(f"{scheme.name} {config.flows} flows")
            try:
                run = run_scheme(network, scheme, progress, outcome)
            except RUN_FAILURES as exc:
                outcome.failures.append(Failure(scheme.name, config.flows, config.buffer_bytes, str(exc)))
                progress.message(f"run failed: {scheme.name}: {exc}")
            else:
                outcome.runs.append(run)
            progress.finish_run()


def ceiling(network: Network[FairnessConfig], packet_bytes: int, outcome: Outcome, progress: Progress) -> float:
    """The star's single-flow ceiling at packet_bytes: measured once (kept in outcome), then looked up."""
    config, topo = network.config, network.topo
    found = results.network_ceiling(outcome.ceilings, config.flows, config.buffer_bytes, packet_bytes)
    if found is None:
        taken = ceiling_samples(network, topo.senders[0], topo.receiver, packet_bytes, progress)
        record_ceiling(taken, config.flows, config.buffer_bytes, packet_bytes, outcome, None, progress)
        found = taken.median
    return found


@dataclasses.dataclass(frozen=True)
class FlowsRan:
    """What the long flows of one run reported: the sink's byte counts ({"t", "bytes"} every
    interval), every flow's start (by its sender's address) and the common stop
    (CLOCK_MONOTONIC seconds), and the bottleneck's sampled backlog."""

    reports: list[dict[str, Any]]
    arrivals: dict[str, float]
    stop: float
    backlog: measure.BacklogSampler


def run_scheme(network: Network[FairnessConfig], scheme: Scheme, progress: Progress,
               outcome: Outcome) -> dict[str, Any]:
    """One scheme's long flows; returns the run's JSON-ready record."""
    config, topo = network.config, network.topo
    hosts = [topo.receiver] + topo.senders
    with apply_scheme(network, scheme, hosts, topo.receiver, config.buffer_bytes) as applied:
        if applied.agents is not None:
            applied.agents.wait_for_routes(network.data_ips)
            wait_for_no_flows(network)
        network.flush_tcp_metrics(hosts)
        with Counters(network.emulation, hosts, topo.receiver, markers=applied.markers).measuring() as window:
            flows = long_flows(network, scheme.congestion_control, progress)
        packet_bytes = packet_bytes_of(scheme, network.receiver_advmss(topo.receiver, topo.senders))
    change = window.change
    return summarize(scheme.name, flows.reports, flows.arrivals, flows.stop, flows.backlog,
                     ceiling(network, packet_bytes, outcome, progress), config, drops=change.loss.drops,
                     timeouts=change.timeouts, ce_marks=change.ce_marks, packet_bytes=packet_bytes)


def long_flows(network: Network[FairnessConfig], cc: str, progress: Progress) -> FlowsRan:
    """Run the sink in the receiver and a source in every sender, flow i from i x stagger
    after a common start until hold seconds after the last one started, with the
    bottleneck's backlog sampled; return what they reported."""
    config, emulation, topo, data_ips = network.config, network.emulation, network.topo, network.data_ips
    program = [sys.executable, "-m", "otcp.experiments.hostprogs.fairness_flows"]
    sink = emulation.start(topo.receiver, [*program, "sink", "--port", str(FLOW_PORT), "--cc", cc,
                                           "--interval", str(REPORT_INTERVAL_S)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert sink.stdout is not None and sink.stderr is not None
    try:
        if sink.stdout.readline().strip() != b"ready":
            raise RunError(f"the flow sink did not start: {sink.stderr.read().decode(errors='replace')}")
        with measure.BacklogSampler(emulation, topo.receiver, emulation.host(topo.receiver).defaultIntf().buffer_device,
                                    interval=BACKLOG_INTERVAL_S, series=True) as backlog:
            start = time.monotonic() + START_DELAY_S
            stop = start + config.duration_s
            arrivals = {data_ips[s]: start + i * config.stagger_s for i, s in enumerate(topo.senders)}
            sources = [emulation.start(s, [*program, "source", "--to", data_ips[topo.receiver],
                                           "--port", str(FLOW_PORT), "--cc", cc,
                                           "--start-at", str(arrivals[data_ips[s]]), "--stop-at", str(stop)],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                       for s in topo.senders]
            while time.monotonic() < stop:
                progress.update(min(config.duration_s, time.monotonic() - start), config.duration_s)
                time.sleep(0.5)
            failed = [finish_source(emulation, source, stop) for source in sources]
            if any(failed):
                raise RunError("; ".join(f for f in failed if f))
        time.sleep(REPORT_INTERVAL_S * 2)
        out, _ = sink.communicate(input=b"", timeout=10)
    finally:
        emulation.stop(sink)
    reports = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    return FlowsRan(reports, arrivals, stop, backlog)


def wait_for_no_flows(network: Network[FairnessConfig]) -> None:
    """Wait until the agents hold parameters computed with none of the senders' flows to the receiver active."""
    controller = network.require_controller()
    pairs = [(sender, network.topo.receiver) for sender in network.topo.senders]
    deadline = time.monotonic() + network.config.agent_timeout_s
    since = controller.generation()
    while not controller.flows_applied(pairs, since, active=False):
        if time.monotonic() > deadline:
            raise RunError(f"the controller still counted earlier flows after "
                           f"{network.config.agent_timeout_s:.0f} s")
        time.sleep(0.5)


def finish_source(emulation: Any, process: subprocess.Popen[bytes], stop: float) -> str | None:
    """Wait for one source; its error, or None."""
    try:
        _, err = process.communicate(timeout=max(5.0, stop - time.monotonic() + 10))
    finally:
        emulation.stop(process)
    return err.decode(errors="replace").strip() if process.returncode else None


def summarize(scheme: str, reports: Sequence[Mapping[str, Any]], arrivals: Mapping[str, float], stop: float,
              backlog: Any, ceiling_mbps: float, config: FairnessConfig, **counts: Any) -> dict[str, Any]:
    """The run's record: rates, Jain's index, convergence, queue and goodput (see the module docstring)."""
    start = min(arrivals.values())
    series = [(r["t"], r["bytes"]) for r in reports]
    rates = stats.interval_rates(series)
    last_arrival = max(arrivals.values())
    steady_from, steady_to = last_arrival + config.hold_s / 2, stop
    steady = [(t, r) for t, r in rates if steady_from < t <= steady_to]
    means = {flow: sum(r.get(flow, 0.0) for _, r in steady) / len(steady) for flow in arrivals} if steady else {}
    times = sorted(set(arrivals.values()))  # flows started together arrive once
    convergence: list[dict[str, Any]] = []
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


def summary_table(document: Mapping[str, Any]) -> str:
    """The table printed at the end: a row per scheme's run, and one per failed run with its error."""
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
    for failure in (Failure(**entry) for entry in document["failures"]):
        lines.append(f"{failure.scheme:<15}{failure.senders:>6}  FAILED: {failure.brief()}")
    lines.append("Jain: over the flows' mean rates in the steady part (the second half of the hold); goodput: their "
                 "sum, in Mb/s, against the single-flow ceiling at the run's packet size; conv.: seconds after each "
                 "arrival until every active flow is within 10 % of ceiling / flows for 0.5 s; peakq/meanq: the "
                 "bottleneck's backlog while the flows ran; drops at the bottleneck; RTOs summed over the hosts")
    return "\n".join(lines)

"""The incast sweep: for every buffer and sender count, one star network, every scheme.

For each (buffer, senders) the sweep builds a star (senders, one receiver,
one idle probe host), starts the OTCP controller that forwards its traffic
(or standalone bridges), starts the storage servers, and then runs each
scheme in turn on the same network:

1. apply the scheme (route attributes and MTU, or OTCP's agents) and record
   every host's routes as the kernel holds them, before traffic starts;
2. run warm-up rounds for a few seconds (not counted: the OTCP controller
   needs them to count the active flows), read the TCP counters of every host
   and the drops at every switch port;
3. run the measured rounds of synchronized reads with the latency probe
   going, then read the counters again, and record the routes once more;
4. put the hosts back as they were.

The single-flow ceiling is measured on every network before any scheme;
the summary's ceiling is the best of them (all are in the database). Results go to OUT/results.db,
OUT/summary.json, OUT/routes/ and the PNG plots.
"""

import dataclasses
import json
import os
import subprocess
import sys
import time

from experiments import measure, otcp, plots, results, schemes, stats
from experiments.emulation import delay_report, emulate
from topo.fabrics import StarTopo

WORKLOAD_PORT = 5001


@dataclasses.dataclass
class IncastConfig:
    """Everything one sweep needs; validated by experiments.cli."""

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
    fine_rto_ms: int = schemes.DEFAULT_FINE_RTO_MS
    forwarding: str = "controller"
    probe_interval_s: float = 0.01
    ceiling_seconds: int = 3
    round_timeout_s: float = 60.0
    agent_timeout_s: float = 120.0

    def block_bytes(self, senders):
        """Bytes each server sends per round: the SRU, or the fixed total split over the servers."""
        if self.total_bytes is not None:
            return max(1, self.total_bytes // senders)
        return self.sru_bytes


class RunError(RuntimeError):
    """One scheme's run failed; the sweep records it and goes on."""


def run_sweep(config, progress):
    """Run the whole sweep; return (summary path, failures)."""
    os.makedirs(config.out, exist_ok=True)
    catalogue = schemes.catalogue(config.fine_rto_ms)
    runnable, unavailable = plan_schemes(config, catalogue)
    store = results.ResultStore(os.path.join(config.out, "results.db"), dataclasses.asdict(config))
    for name, reason in unavailable:
        store.add_unavailable(name, reason)
        progress.message(f"scheme {name} unavailable: {reason}")
    progress.total = len(config.buffers) * len(config.senders) * len(runnable)
    state = {"ceiling": None, "runs": [], "rounds": [], "failures": [], "notes": []}
    try:
        for buffer_bytes in config.buffers:
            for senders in config.senders:
                run_network(config, store, progress, state, buffer_bytes, senders, runnable)
    finally:
        store.close()
        summary = None
        if state["ceiling"] is not None:
            notes = state["notes"] + [f"failed: {f}" for f in state["failures"]]
            summary = results.write_summary(config.out, state["ceiling"], state["runs"], unavailable, notes)
            if state["runs"]:
                draw_plots(config.out, state["runs"], state["rounds"], state["ceiling"])
    return summary, state


def plan_schemes(config, catalogue):
    """(schemes to run, [(scheme, reason it cannot run here)])."""
    runnable, unavailable = [], []
    for name in config.schemes:
        scheme = catalogue[name]
        reason = None
        if scheme.kind == "dctcp":
            reason = schemes.dctcp_unavailable_reason()
        elif scheme.kind == "otcp":
            if config.forwarding != "controller":
                reason = "needs the OTCP controller (--forwarding controller)"
            else:
                reason = otcp.agent_unavailable_reason()
        if reason:
            unavailable.append((name, reason))
        else:
            runnable.append(scheme)
    return runnable, unavailable


def run_network(config, store, progress, state, buffer_bytes, senders, runnable):
    """Build one star and run every runnable scheme on it."""
    workdir = os.path.join(config.out, "work", f"buffer{buffer_bytes}-senders{senders}")
    os.makedirs(workdir, exist_ok=True)
    topo = StarTopo(senders, bw=config.bw_mbps, buffer_bytes=buffer_bytes, delay_us=config.delay_us, probe=True)
    inventory = topo.write_inventory(os.path.join(workdir, "inventory.yaml"))
    with_agents = any(s.kind == "otcp" for s in runnable)
    controller = None
    if config.forwarding == "controller":
        controller = otcp.controller_starter(workdir, inventory, with_agents)
    progress.message(f"building a star: {senders} senders, {buffer_bytes} B buffers, {config.bw_mbps:g} Mb/s links, "
                     f"forwarding by {'the OTCP controller' if controller else 'standalone bridges'}")
    with emulate(topo, controller=controller, management=with_agents) as emulation:
        _note_once(state, progress, emulation.congestion_control_note)
        enforced, delay_note = delay_report(topo)
        _note_once(state, progress, delay_note)
        if enforced:
            topo.write_inventory(inventory, delay_enforced=True)
        data_ips = {h.name: h.IP() for h in emulation.hosts}
        receiver_ip = data_ips[topo.receiver]
        ensure_connectivity(emulation, topo.senders + [topo.probe], receiver_ip)
        progress.message(f"measuring the single-flow ceiling ({config.ceiling_seconds} s of iperf3)")
        ceiling = measure.single_flow_ceiling(emulation, topo.senders[0], topo.receiver, receiver_ip,
                                              seconds=config.ceiling_seconds)
        store.add_ceiling(senders, buffer_bytes, ceiling)
        # The ceiling is an upper bound on the links: the best of the networks' measurements.
        state["ceiling"] = max(ceiling, state["ceiling"] or 0.0)
        progress.message(f"single-flow ceiling: {ceiling:.1f} Mb/s (best so far {state['ceiling']:.1f})")
        for sender in topo.senders:
            emulation.start(sender, [sys.executable, "-m", "experiments.incast_server",
                                     "--port", str(WORKLOAD_PORT), "--cc", "cubic"])
        for sender in topo.senders:
            emulation.wait_listening(sender, WORKLOAD_PORT)
        for scheme in runnable:
            label = f"{scheme.name} n={senders} buf={buffer_bytes}"
            progress.start_run(label)
            try:
                run = run_scheme(config, emulation, topo, scheme, buffer_bytes, workdir, data_ips, progress)
            except (RunError, TimeoutError, RuntimeError) as exc:
                state["failures"].append(f"{label}: {exc}")
                progress.message(f"run failed: {label}: {exc}")
            else:
                rounds = run.pop("_rounds")
                store.add_run(run, rounds, run.pop("_servers"), run.pop("_counters"), run.pop("_probe_rtts"),
                              run.pop("_drops"))
                state["runs"].append(run)
                state["rounds"].append([r["duration_s"] * 1000 for r in rounds])
            progress.finish_run()


def run_scheme(config, emulation, topo, scheme, buffer_bytes, workdir, data_ips, progress):
    """One scheme on a running network; returns the run record."""
    hosts = [topo.receiver] + topo.senders + [topo.probe]
    heading = f"senders={len(topo.senders)} buffer_bytes={buffer_bytes}"
    if scheme.kind == "otcp":
        setting = otcp.Agents(emulation, hosts, os.path.join(workdir, "controller.yaml"),
                              os.path.join(workdir, "agents"), timeout=config.agent_timeout_s)
    else:
        setting = schemes.RouteSettings(emulation, hosts, scheme)
    with setting:
        if scheme.kind == "otcp":
            setting.wait_for_routes(data_ips)
        record_routes(config.out, emulation, scheme.name, hosts, f"{heading}: before traffic")
        block = config.block_bytes(len(topo.senders))
        servers = [data_ips[s] for s in topo.senders]
        # The kernel caches per-destination TCP metrics (ssthresh, and the
        # locked cwnd of a route) when a connection closes and reuses them
        # for an hour: flushed so no scheme inherits another's.
        flush_tcp_metrics(emulation, hosts)
        if config.warmup_seconds:
            run_client(config, emulation, topo.receiver, servers, block, ["--seconds", str(config.warmup_seconds)],
                       lambda done: progress.update(0, config.rounds))
        switch, port = topo.switch_port(topo.receiver)
        bottleneck = f"{switch}:{port}"
        ports = switch_ports(topo)
        interfaces = ports + [(h, schemes.data_interface(emulation, h)) for h in hosts]
        flush_tcp_metrics(emulation, hosts)
        before_counters = {h: measure.tcp_counters(emulation, h) for h in hosts}
        before_path = measure.path_counters(emulation, interfaces)
        with measure.Probe(emulation, topo.probe, data_ips[topo.receiver], config.probe_interval_s) as probe, \
                measure.BacklogSampler(emulation, switch, port) as backlog:
            rounds = run_client(config, emulation, topo.receiver, servers, block, ["--rounds", str(config.rounds)],
                                lambda done: progress.update(done, config.rounds))
            rtts, sent = probe.stop()
        after_path = measure.path_counters(emulation, interfaces)
        after_counters = {h: measure.tcp_counters(emulation, h) for h in hosts}
        record_routes(config.out, emulation, scheme.name, hosts, f"{heading}: after the measured rounds")
    counters = {h: stats.counter_deltas(before_counters[h], after_counters[h], measure.TCP_COUNTERS) for h in hosts}
    run = {"scheme": scheme.name, "senders": len(topo.senders), "buffer_bytes": buffer_bytes, "sru_bytes": block,
           "rounds": len(rounds), "persistent": int(config.persistent)}
    run.update(stats.summarize_rounds(rounds))
    path = {place: stats.counter_deltas(before_path[place], after_path[place], after_path[place])
            for place in after_path}
    run["drops"] = path[bottleneck]["qdisc_drops"]
    run["drops_elsewhere"] = sum(d["qdisc_drops"] + d["rx_dropped"] + d["tx_dropped"] for d in path.values()) \
        - run["drops"]
    run["lost_in_switch"] = measure.lost_in_switch(path, [f"{s}:{p}" for s, p in ports])
    run["peak_backlog_bytes"] = backlog.peak
    run["timeouts"] = sum(c["TcpExtTCPTimeouts"] for c in counters.values())
    run["retransmissions"] = sum(c["TcpRetransSegs"] for c in counters.values())
    run.update(stats.summarize_probe(rtts, sent))
    # Kept for the database, popped before the run joins the summary.
    run.update({"_rounds": rounds, "_servers": topo.senders, "_counters": counters, "_probe_rtts": rtts,
                "_drops": path})
    return run


def switch_ports(topo):
    """(switch, interface) of every switch port that faces a host."""
    return [topo.switch_port(host) for host in topo.hosts()]


def run_client(config, emulation, receiver, servers, block, count, on_round):
    """Run the workload client in receiver for count (["--rounds", N] or
    ["--seconds", S]); return its round records."""
    argv = [sys.executable, "-m", "experiments.incast_client", "--servers", ",".join(servers),
            "--port", str(WORKLOAD_PORT), "--block-bytes", str(block), *count,
            "--cc", "cubic", "--round-timeout", str(config.round_timeout_s)]
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
    whatever the route says later (see experiments/README-section.md).
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
    plots.goodput_plot(os.path.join(out, "goodput.png"), runs, ceiling)
    plots.fct_cdf_plot(os.path.join(out, "fct_cdf.png"), runs, dict(enumerate(round_durations)))
    plots.fct_bars_plot(os.path.join(out, "fct_bars.png"), runs)


def summary_table(runs, ceiling):
    """The table printed at the end of a sweep."""
    header = (f"{'scheme':<18}{'senders':>8}{'buffer':>9}{'goodput':>9}{'%ceil':>7}{'mean':>8}{'p95':>8}"
              f"{'p99':>8}{'drops':>7}{'other':>6}{'ovs':>6}{'peakq':>7}{'RTOs':>6}{'rtx':>7}{'probe avg/max ms':>18}")
    lines = [header, "-" * len(header)]
    for run in runs:
        probe = (f"{run['probe_rtt_avg_ms']:.2f}/{run['probe_rtt_max_ms']:.2f}"
                 if run["probe_rtt_avg_ms"] is not None else "no answers")
        lines.append(f"{run['scheme']:<18}{run['senders']:>8}{run['buffer_bytes']:>9}{run['goodput_mbps']:>9.1f}"
                     f"{100 * run['goodput_mbps'] / ceiling:>6.0f}%{run['fct_mean_ms']:>8.1f}{run['fct_p95_ms']:>8.1f}"
                     f"{run['fct_p99_ms']:>8.1f}{run['drops']:>7}{run['drops_elsewhere']:>6}{run['lost_in_switch']:>6}"
                     f"{run['peak_backlog_bytes'] // 1000:>6}k{run['timeouts']:>6}{run['retransmissions']:>7}"
                     f"{probe:>18}")
    lines.append(f"goodput in Mb/s (single-flow ceiling {ceiling:.1f} Mb/s), completion times in ms; drops: at "
                 "the bottleneck buffer, at other queues and veths, lost inside OVS; peakq: largest bottleneck "
                 "backlog seen; RTOs and retransmitted segments summed over the hosts")
    return "\n".join(lines)


def _note_once(state, progress, note):
    if note and note not in state["notes"]:
        state["notes"].append(note)
        progress.message(f"note: {note}")

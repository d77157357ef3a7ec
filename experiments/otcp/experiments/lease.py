"""The lease experiment: the controller killed in the middle of an incast, and what its agents do.

One star (senders, a receiver and the probe host) under the OTCP controller with a short lease
(``agents.lease_s``), otcp-lossless's agents (routes and the sock_ops program) in every host:

1. the single-flow ceiling (1500 B packets) on the idle network, before any agent runs;
2. the agents, and incast rounds until they hold the plan for every sender's flow
   (``otcp.experiments.incast.warm_up``): window clamps and segments sized for all senders;
3. the incast again, and ``kill_after_s`` into it the controller is killed with SIGKILL. From
   before the kill to the end, every host's routes (proto 79) and sock_ops entries are read
   every ``poll_s`` (`HostWatch`) and compared with its agent's stored set: its planned values,
   or their safe state (`otcp.agent.lease.safe_state`);
4. when the incast has ended, one flow from the first sender to the receiver while the dead
   controller's plan still holds (when the first of their leases leaves the time): what a lone
   transfer gets from a stale plan;
5. the wait until every host holds the safe state. The target: every host there within the
   lease plus the agent's poll (`otcp.agent.client.LEASE_POLL_S`) from the kill, a host's moment
   being when its agent journaled the safe state (after writing its routes and entries), checked
   by the polls around it (`reached_safe`);
6. the same flow again. The target: at least `SINGLE_FLOW_TARGET` of the ceiling;
7. the controller started again on its database, and the wait until every host holds its
   controller's set again with a live lease (restoration).

A target missed comes with the measured reason: the hosts late and when their lease ran out and
their agent applied the safe state (its journal), or what the hosts held while the flow ran and
how busy the machine was. Results: OUT/lease.json (the timeline, every host's transitions and
every poll, with the command line and the code it ran) and OUT/lease.png (every host's state over
time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from otcp.agent.client import LEASE_POLL_S
from otcp.agent.dryrun import stored_applied
from otcp.agent.lease import safe_state
from otcp.agent.routes import Route, RouteTable
from otcp.agent.state import State
from otcp.bpf.sockops import Enforced, SockOpsEnforcer, enforced_for, netns_cookie
from otcp.experiments.analysis import plots, results
from otcp.experiments.analysis.results import Outcome
from otcp.experiments.incast import IncastConfig, Servers, Workload, warm_up
from otcp.experiments.runner import measure, schemes
from otcp.experiments.runner.agents import Agents
from otcp.experiments.runner.ceiling import ceiling_samples, record_ceiling
from otcp.experiments.runner.counters import MachineTimes
from otcp.experiments.runner.network import Network, RunError, start_network
from otcp.experiments.runner.progress import Progress
from otcp.experiments.runner.schemes import ETHERNET_MTU
from otcp.experiments.runner.settings import apply_scheme
from otcp.topo.fabrics import StarTopo
from otcp.wire.paramset import ParamSet, RouteParams

SCHEME = "otcp-lossless"
#: The share of the single-flow ceiling a lone flow must reach once the hosts hold the safe state.
SINGLE_FLOW_TARGET = 0.9
#: What a flow takes beyond its seconds of iperf3: the server's start, the connection, the omitted second.
FLOW_OVERHEAD_S = 3.0
#: How long the incast goes on after the kill.
INCAST_AFTER_KILL_S = 2.0

RouteValues = tuple[int | None, int | None, int | None, int | None, bool]


@dataclasses.dataclass(kw_only=True)
class LeaseConfig(IncastConfig):
    """One lease experiment: the incast's network and workload (one sender count, one buffer) and
    the lease: its length, when the controller is killed, how often the hosts are read, whether the
    controller is started again. Validated by otcp.experiments.cli."""

    lease_s: float = 15.0
    kill_after_s: float = 3.0
    poll_s: float = 0.1
    restart: bool = True

    @property
    def deadline_s(self) -> float:
        """Seconds after the kill by which every host must hold the safe state: the lease and one poll
        of the agent's."""
        return self.lease_s + LEASE_POLL_S


# -- what a host holds -----------------------------------------------------------------------------


def route_values(route: Route | RouteParams) -> RouteValues:
    """The parameters a kernel route carries, or a set's route would: rto_min, initcwnd, clamp, advmss, quickack."""
    return (route.rto_min_ms, route.initcwnd, route.cwnd_clamp, route.advmss, route.quickack)


def holds(target: ParamSet, routes: Mapping[str, RouteValues], entries: Mapping[str, Enforced] | None) -> bool:
    """Whether a host's kernel holds target: each of its OTCP routes (by destination) carries the
    target's values for it, and, where the host enforces with BPF (entries not None), the sock_ops
    entries are those of the same destinations with the target's values. A host without routes holds nothing."""
    wanted = {route.dst: route for route in target.routes}
    if not routes or not set(routes) <= set(wanted):
        return False
    if any(values != route_values(wanted[dst]) for dst, values in routes.items()):
        return False
    return entries is None or (set(entries) == set(routes)
                               and all(entries[dst] == enforced_for(wanted[dst]) for dst in entries))


@dataclasses.dataclass(frozen=True)
class HostReading:
    """One host as one poll found it (at: wall clock): whether its kernel holds its stored set's planned
    values, their safe state (both when they are the same), the set's generation, and its stored lease."""

    host: str
    at: float
    planned: bool
    safe: bool
    generation: int | None
    lapsed: bool | None
    expires_at: float | None

    @property
    def state(self) -> str:
        """planned, safe, both (the planned values are safe ones), other (a change half-way), or none."""
        if self.generation is None:
            return "none"
        return {(True, False): "planned", (False, True): "safe", (True, True): "both"}.get(
            (self.planned, self.safe), "other")


def reading(host: str, at: float, param_set: ParamSet | None, lapsed: bool | None, expires_at: float | None,
            routes: Mapping[str, RouteValues], entries: Mapping[str, Enforced] | None) -> HostReading:
    """A host's reading from its agent's stored set and lease and what its kernel holds."""
    if param_set is None:
        return HostReading(host, at, False, False, None, None, None)
    return HostReading(host, at, holds(param_set, routes, entries), holds(safe_state(param_set), routes, entries),
                       param_set.generation, lapsed, expires_at)


class HostWatch:
    """Every host's routes and sock_ops entries read every poll_s on a thread of its own, each host
    against its agent's stored set (`reading`). Hosts enforcing with BPF are read from the machine's
    program, all in one pass over its map."""

    def __init__(self, network: Network[Any], agents: Agents, poll_s: float, bpf: bool) -> None:
        self.agents, self.poll_s = agents, poll_s
        self.readings: list[HostReading] = []
        self.latest: dict[str, HostReading] = {}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-watch", daemon=True)
        namespaces = {host: f"/proc/{network.emulation.host(host).pid}/ns/net" for host in agents.hosts}
        self.tables = {host: RouteTable(path) for host, path in namespaces.items()}
        self.cookies = {host: netns_cookie(path) for host, path in namespaces.items()} if bpf else {}
        self.program = SockOpsEnforcer.open_pinned() if bpf else None
        if bpf and self.program is None:
            self.close_tables()
            raise RunError("the agents enforce with BPF, but no sock_ops program is pinned")

    def poll(self) -> list[HostReading]:
        """Read every host once; keep and return the readings."""
        entries: dict[int, dict[str, tuple[Enforced, int]]] = {}
        if self.program is not None:
            entries = self.program.entries_of(self.cookies.values())
        found = []
        for host, table in self.tables.items():
            stored, _ = stored_applied(self.agents.state_path(host))
            active = stored if stored is not None and stored.active else None
            routes = {route.dst: route_values(route) for route in table.owned()}
            enforced = ({dst: e for dst, (e, _) in entries[self.cookies[host]].items()}
                        if self.program is not None else None)
            lease = None if active is None else active.lease
            found.append(reading(host, time.time(), None if active is None else active.param_set,
                                 None if lease is None else lease.lapsed, None if lease is None else lease.expires_at,
                                 routes, enforced))
        self.readings += found
        self.latest.update((r.host, r) for r in found)
        return found

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.poll()
                self._stop.wait(self.poll_s)
        except BaseException as error:  # noqa: BLE001 - said by wait_all, which the run waits in
            self.error = error

    def __enter__(self) -> HostWatch:
        self.poll()  # a first reading before the thread: the hosts hold something to compare with
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.close_tables()
        if self.program is not None:
            self.program.close_maps()

    def close_tables(self) -> None:
        """Close the netlink sockets in the hosts' namespaces."""
        for table in self.tables.values():
            table.close()

    def wait_all(self, done: Callable[[HostReading], bool], timeout_s: float, progress: Progress,
                 what: str, since: float) -> dict[str, HostReading]:
        """Wait until every host's latest reading is done; return each host's first such reading after
        since (wall clock). RunError after timeout_s (naming the hosts that are not)."""
        deadline = time.monotonic() + timeout_s
        first: dict[str, HostReading] = {}
        seen = 0
        while True:
            if self.error is not None:
                raise RunError(f"reading the hosts failed: {self.error}")
            for found in self.readings[seen:]:
                if found.at >= since and done(found) and found.host not in first:
                    first[found.host] = found
                    progress.message(f"{found.host} {what} {found.at - since:.2f} s after ({len(first)} of "
                                     f"{len(self.tables)})")
            seen = len(self.readings)
            if all(host in first and done(self.latest[host]) for host in self.tables):
                return first
            if time.monotonic() > deadline:
                late = sorted(set(self.tables) - set(first))
                raise RunError(f"{len(late)} host(s) not {what} within {timeout_s:.0f} s: {', '.join(late[:8])}"
                               f" (states: {', '.join(self.latest[h].state for h in late[:8])})")
            time.sleep(self.poll_s / 2)


# -- the run ---------------------------------------------------------------------------------------


def run_lease(config: LeaseConfig, progress: Progress) -> dict[str, Any]:
    """Run the experiment; write OUT/lease.json and OUT/lease.png; return the document."""
    os.makedirs(config.out, exist_ok=True)
    code = results.code_version()
    outcome = Outcome()
    registered = contextlib.ExitStack()
    document: dict[str, Any] = {"config": dataclasses.asdict(config)}
    try:
        if not schemes.plan_experiment(config, outcome, progress, registered):
            raise RunError("; ".join(f"{u.scheme}: {u.reason}" for u in outcome.unavailable))
        document.update(run_network(config, progress, outcome))
    finally:
        registered.close()
        document.update({"ceilings": results.ceiling_summary(outcome.ceilings), "notes": outcome.notes,
                         **results.provenance(code, config.command)})
        results.write_json(os.path.join(config.out, "lease.json"), document, indent=1)
    plots.lease_plot(os.path.join(config.out, "lease.png"), document)
    return document


def run_network(config: LeaseConfig, progress: Progress, outcome: Outcome) -> dict[str, Any]:
    """The star, its ceiling, the agents and the kill (see the module docstring); the document's timeline."""
    (senders,), (buffer_bytes,) = config.senders, config.buffers
    topo = StarTopo(senders, bw=config.bw_mbps, buffer_bytes=buffer_bytes, delay_us=config.delay_us, probe=True)
    assert topo.probe is not None  # built with its probe host
    scheme = schemes.catalogue(config.fine_rto_ms)[SCHEME]
    progress.message(f"building a star: {senders} senders, {buffer_bytes} B buffers, {config.bw_mbps:g} Mb/s links, "
                     f"the controller with a lease of {config.lease_s:g} s")
    with start_network(config, topo, os.path.join(config.out, "work"), with_agents=True,
                       lease_s=config.lease_s) as started:
        network: Network[Any] = started  # the incast's helpers take it as a Network[IncastConfig]
        for note in network.notes:
            outcome.note(progress, note)
        hosts = [topo.receiver, *topo.senders, topo.probe]
        network.ensure_connectivity([*topo.senders, topo.probe], network.data_ips[topo.receiver])
        taken = ceiling_samples(network, topo.senders[0], topo.receiver, ETHERNET_MTU, progress)
        record_ceiling(taken, senders, buffer_bytes, ETHERNET_MTU, outcome, None, progress)
        servers = Servers(network)
        servers.serve(scheme.congestion_control)
        with apply_scheme(network, scheme, hosts, topo.receiver, buffer_bytes) as applied:
            assert applied.agents is not None  # an OTCP scheme
            applied.agents.wait_for_routes(network.data_ips)
            workload = Workload(network, config.block_bytes(senders), scheme.congestion_control)
            progress.message(f"incast rounds until the agents hold the plan for all {senders} senders' flows")
            warm_up(network, workload, applied, hosts, progress)
            with HostWatch(network, applied.agents, config.poll_s, bpf=scheme.enforce == "bpf") as watch:
                document = {"ceiling_mbps": taken.median, **kill_and_watch(config, network, workload, watch,
                                                                                  progress)}
        document["targets"] = targets(document)
        return document


@dataclasses.dataclass
class Timeline:
    """Moments of the run on the wall clock, and what the flows measured."""

    events: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    flows: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def event(self, what: str, at: float | None = None) -> float:
        """Record that what happened at (now by default); return the moment."""
        moment = time.time() if at is None else at
        self.events.append({"at": moment, "event": what})
        return moment


def kill_and_watch(config: LeaseConfig, network: Network[Any], workload: Workload, watch: HostWatch,
                   progress: Progress) -> dict[str, Any]:
    """Steps 3 to 7 of the module docstring, with the hosts watched; the document's timeline part."""
    topo = network.topo
    controller = network.require_controller()
    timeline = Timeline()
    before = {host: found.generation for host, found in watch.latest.items()}
    progress.message(f"incast for {config.kill_after_s:g} s, then the controller is killed (SIGKILL); the hosts "
                     f"are read every {config.poll_s:g} s")
    incast = Background(lambda: workload.run(["--seconds", str(config.kill_after_s + INCAST_AFTER_KILL_S)],
                                             lambda done: None))
    timeline.event("incast starts")
    time.sleep(config.kill_after_s)
    kill = timeline.event("controller killed")
    controller.process.kill()
    rounds = incast.result()
    timeline.event(f"incast ends ({len(rounds)} rounds)")
    sender, receiver = topo.senders[0], topo.receiver
    stale_until = min((watch.latest[h].expires_at or kill) for h in (sender, receiver))
    if stale_until - time.time() > config.ceiling_seconds + FLOW_OVERHEAD_S:
        timeline.flows["stale"] = single_flow(network, timeline, "flow under the dead controller's plan", progress)
    else:
        progress.message(f"no flow under the dead controller's plan: the first lease of {sender} and "
                             f"{receiver} ran out {stale_until - kill:.1f} s after the kill")
    wait_s = config.deadline_s + 2 * config.lease_s
    progress.message(f"waiting for every host's safe state (target: within {config.deadline_s:g} s of the kill)")
    safe = watch.wait_all(lambda r: r.safe, wait_s, progress, "at the safe state", kill)
    timeline.event("every host at the safe state", max(r.at for r in safe.values()))
    timeline.flows["safe"] = single_flow(network, timeline, "flow at the safe state", progress)
    restored: dict[str, HostReading] = {}
    if config.restart:
        restart = timeline.event("controller started again")
        controller.process.start()
        progress.message("waiting for every host to hold its controller's set again")
        restored = watch.wait_all(lambda r: r.planned and r.lapsed is False, config.agent_timeout_s, progress,
                                  "restored", restart)
        timeline.event("every host restored", max(r.at for r in restored.values()))
    return summarize(config, kill, timeline, before, watch, safe, restored)


class Background:
    """A call run on a thread of its own; result() waits for it and returns its value (or raises its error)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._value = call()
        except BaseException as error:  # noqa: BLE001 - raised again in result()
            self._error = error

    def result(self) -> Any:
        """The call's value once it returned (its exception raised here)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def single_flow(network: Network[Any], timeline: Timeline, what: str, progress: Progress) -> dict[str, Any]:
    """One iperf3 flow from the first sender to the receiver, as the ceiling is measured (1500 B
    packets, the hosts' TCP metrics left as the agents keep them); its goodput and the machine's load."""
    config, topo = network.config, network.topo
    progress.message(f"{what}: {config.ceiling_seconds} s of iperf3 {topo.senders[0]} -> {topo.receiver}")
    start = timeline.event(f"{what} starts")
    before = MachineTimes.now()
    mbps = measure.single_flow_ceiling(network.emulation, topo.senders[0], topo.receiver,
                                       network.data_ips[topo.receiver], seconds=config.ceiling_seconds,
                                       packet_bytes=ETHERNET_MTU)
    load = MachineTimes.now() - before
    end = timeline.event(f"{what} ends ({mbps:.1f} Mb/s)")
    progress.message(f"{what}: {mbps:.1f} Mb/s")
    return {"mbps": mbps, "start": start, "end": end, "cpu_busy_pct": load.cpu_busy_pct}


# -- the result ------------------------------------------------------------------------------------


def lapses(state_path: str, since: float) -> list[float]:
    """When (wall clock) the agent of state_path applied its safe state from since on: its journal's lapses."""
    state = State(state_path)
    try:
        return sorted(at for at, _, _, outcome, _ in state.journal(100) if outcome == "lapsed" and at >= since)
    finally:
        state.close()


def summarize(config: LeaseConfig, kill: float, timeline: Timeline, before: Mapping[str, int | None],
              watch: HostWatch, safe: Mapping[str, HostReading],
              restored: Mapping[str, HostReading]) -> dict[str, Any]:
    """The timeline part of the document, every time in seconds from the kill, and the targets."""
    hosts = []
    for host in watch.tables:
        expiry = last_expiry(watch.readings, host, safe[host].at)
        lapsed_at = lapses(watch.agents.state_path(host), kill)
        last_planned = max((r.at for r in watch.readings if r.host == host and r.planned and not r.safe
                            and r.at < safe[host].at), default=None)
        applied_s = _since(lapsed_at[0] if lapsed_at else None, kill)
        seen_s, planned_s = round(safe[host].at - kill, 3), _since(last_planned, kill)
        hosts.append({
            "host": host, "generation_before": before.get(host), "lease_expired_s": _since(expiry, kill),
            "last_seen_planned_s": planned_s, "safe_applied_s": applied_s, "seen_safe_s": seen_s,
            "reached_safe_s": reached_safe(planned_s, applied_s, seen_s),
            "restored_s": _since(restored[host].at, kill) if host in restored else None,
            "generation_restored": restored[host].generation if host in restored else None})
    return {"kill_at": kill, "deadline_s": config.deadline_s, "hosts": hosts,
            "events": [{"t": round(e["at"] - kill, 3), "event": e["event"]} for e in timeline.events],
            "flows": {name: {**flow, "start": round(flow["start"] - kill, 3), "end": round(flow["end"] - kill, 3)}
                      for name, flow in timeline.flows.items()},
            "readings": [[r.host, round(r.at - kill, 3), r.state] for r in watch.readings]}


def reached_safe(last_seen_planned: float | None, applied: float | None, seen_safe: float) -> float:
    """When a host reached the safe state: the moment its agent journaled it (after writing its routes and
    sock_ops entries) where the polls bracket it (the last one that saw the plan before it, the first that
    saw the safe state after it); else the first poll that saw it (later by up to a poll)."""
    if applied is not None and applied <= seen_safe and (last_seen_planned is None or last_seen_planned < applied):
        return applied
    return seen_safe


def targets(document: Mapping[str, Any]) -> dict[str, Any]:
    """The two targets from a document's timeline and ceiling: every host at the safe state within the
    deadline, and the flow at the safe state at SINGLE_FLOW_TARGET of the ceiling; each met or not,
    with the measured reason when not."""
    deadline = document["deadline_s"]
    late = [h for h in document["hosts"] if h["reached_safe_s"] > deadline]
    slowest = max(document["hosts"], key=lambda h: h["reached_safe_s"])
    safe = {"met": not late, "deadline_s": deadline, "slowest_host": slowest["host"],
            "slowest_reached_safe_s": slowest["reached_safe_s"],
            "last_seen_safe_s": max(h["seen_safe_s"] for h in document["hosts"]), "reason": None}
    if late:
        safe["reason"] = "; ".join(
            f"{h['host']} at the safe state {h['reached_safe_s']:.2f} s after the kill (its lease ran out at "
            f"{_seconds(h['lease_expired_s'])}, its agent applied the safe state at "
            f"{_seconds(h['safe_applied_s'])}; polls saw the plan at {_seconds(h['last_seen_planned_s'])} and the "
            f"safe state at {h['seen_safe_s']:.2f} s)" for h in late)
    flow = document["flows"]["safe"]
    share = flow["mbps"] / document["ceiling_mbps"]
    single = {"met": share >= SINGLE_FLOW_TARGET, "target": SINGLE_FLOW_TARGET, "share": round(share, 4),
              "reason": None}
    if not single["met"]:
        stale = document["flows"].get("stale")
        single["reason"] = (f"{flow['mbps']:.1f} Mb/s against a ceiling of {document['ceiling_mbps']:.1f} Mb/s, "
                            f"both cores {flow['cpu_busy_pct']:.0f} % busy during the flow"
                            + (f"; under the dead controller's plan the same flow made {stale['mbps']:.1f} Mb/s"
                               if stale else ""))
    return {"safe_state": safe, "single_flow": single}


def _seconds(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f} s"


def last_expiry(readings: Sequence[HostReading], host: str, safe_at: float) -> float | None:
    """When host's lease ran out: its stored expiry as last read before it was seen at the safe state
    (the agent rewrites it when it lapses, and a returning controller grants another)."""
    return max((r.expires_at for r in readings if r.host == host and r.at < safe_at and r.lapsed is False
                and r.expires_at is not None), default=None)


def _since(at: float | None, kill: float) -> float | None:
    return None if at is None else round(at - kill, 3)


def summary_text(document: Mapping[str, Any]) -> str:
    """What the command prints at the end: the events, every host's transitions and the two targets."""
    lines = [f"lease {document['config']['lease_s']:g} s: every host due at the safe state "
             f"{document['deadline_s']:g} s after the kill; single-flow ceiling "
             f"{document['ceiling_mbps']:.1f} Mb/s", "",
             f"{'t (s)':>8}  event"]
    lines += [f"{event['t']:>8.2f}  {event['event']}" for event in document["events"]]
    columns = (("lease_expired_s", "lease out"), ("last_seen_planned_s", "plan seen"),
               ("safe_applied_s", "agent safe"), ("seen_safe_s", "safe seen"), ("reached_safe_s", "reached"),
               ("restored_s", "restored"))
    lines += ["", f"{'host':<8}" + "".join(f"{title:>11}" for _, title in columns)]
    for host in document["hosts"]:
        lines.append(f"{host['host']:<8}" + "".join(
            f"{'-' if host[key] is None else format(host[key], '.2f'):>11}" for key, _ in columns))
    lines.append("seconds after the kill: the host's lease ran out (its stored expiry); the last poll that saw its "
                 "plan; its agent applied the safe state (its journal); the first poll that saw its routes and "
                 "sock_ops entries at the safe state; when it reached it (the agent's moment where the polls bracket "
                 "it); a poll saw its controller's set again")
    safe, single = document["targets"]["safe_state"], document["targets"]["single_flow"]
    lines.append(f"safe state within {safe['deadline_s']:g} s: {'met' if safe['met'] else 'MISSED'} (slowest: "
                 f"{safe['slowest_host']} at {safe['slowest_reached_safe_s']:.2f} s; the last host seen there at "
                 f"{safe['last_seen_safe_s']:.2f} s)" + (f": {safe['reason']}" if safe["reason"] else ""))
    stale = document["flows"].get("stale")
    lines.append(f"single flow at the safe state: {document['flows']['safe']['mbps']:.1f} Mb/s, "
                 f"{100 * single['share']:.0f} % of the ceiling (target {100 * single['target']:.0f} %): "
                 f"{'met' if single['met'] else 'MISSED'}"
                 + (f" (under the dead controller's plan: {stale['mbps']:.1f} Mb/s)" if stale else "")
                 + (f": {single['reason']}" if single["reason"] else ""))
    return "\n".join(lines)

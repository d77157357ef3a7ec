"""How the controller core carries a large fat-tree, without os-ken or switches.

It drives `otcp.controller.core.ControllerCore` the way the glue does, with a
simulated k-ary fat-tree (otcp.topo.fabrics.FatTreeTopo: k = 16 is 1 024 hosts
and 320 switches): every switch connects and describes its ports; probe
rounds discover the links (each probe the core sends out of a switch port
is handed back as a packet-in at the port's peer); every host sends a
gratuitous ARP; the first complete plan; every host starts flows to a few
others (first packets at their edge switches, then two rounds of flow
statistics) and the plan that follows; one aggregation-core link fails,
then the forwarding after it (`ControllerCore.reroute`, whose flow mods the
app sends before it re-plans) and the re-plan. It prints events handled per second, the time to the
first complete plan, the re-plan time after the failure, OpenFlow entries
per switch, routes per agent and the bytes of parameter sets pushed. Each
re-plan's time is split into its parts as the core's own call spends it
(REPLAN_PARTS: the callables it calls for each, wrapped while it runs).

Each figure stands next to a per-pair baseline, measured in the same
run on the same plan: one entry per host pair on every switch of its path
(counted from the plan's paths), one route per destination host, every
changed host's whole set pushed again.

    .venv/bin/python benchmarks/controller_scale.py [--k 16] [--flows-per-host 4]

With --parts-only it times the planning parts alone on the fabric's
inventory, without the core: the full plan, the aggregated route sets, the
destination entries and entries per switch; then an idle and the busiest
aggregation-core link fail, and it times the re-plans and, for the second,
the forwarding's paths and entries with only what crossed the link computed
again, against computed afresh.

A generation's per-pair records are made only when read (the live view, the
metrics); the run times storing them (SQLite rows from the plan's columns,
as the app's plan loop does) and, up to MAX_RECORDS_MADE pairs, making them.
The bytes pushed for the failure are the params messages the agent server
sends agents that acknowledged the previous generation: a delta against it
where it is the shorter message, else the whole set (protocol 6).
"""

import argparse
import os
import random
import sys
import tempfile
import time
import types

import numpy as np
from os_ken.lib.packet import arp as arp_packet
from os_ken.lib.packet import ethernet, ipv4, packet
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

from otcp.controller import forwarding, store
from otcp.controller.config import DEFAULT_LEASE_S, ControllerConfig
from otcp.controller.core import ECHO_PAYLOAD, SETTLE_PROBE_ROUNDS, ControllerCore, PortInfo
from otcp.controller.publication import Publications
from otcp.controller.topology import Topology
from otcp.planning import formulas, inventory
from otcp.planning.paths import HostPaths, SwitchPaths
from otcp.planning.planner import Plan
from otcp.topo.fabrics import FatTreeTopo
from otcp.wire import framing, messages, paramset
from otcp.wire.paramset import ParamSet

DEFAULTS = {"capacity_mbps": 100, "buffer_bytes": 85000, "host_link_delay_us": 10}
PROBE_S = 1.0
#: The core's configuration here: measurements taken as they come (no grid, refresh period or
#: hold; every packet a flow; no bound on a link's delay), so every event's effect is planned.
CONFIG = ControllerConfig.model_validate({
    "intervals": {"probe_s": PROBE_S}, "delay_window": 10, "defaults": DEFAULTS,
    "stability": {"delay_step_us": 0, "delay_tolerance": 0, "refresh_s": 0, "flow_hold_s": 0, "min_flow_packets": 1},
    "measurement": {"max_link_delay_us": 5e6}})
TARGETS = {"first plan s": 2.0, "re-plan s": 0.2, "core entries": 1100, "bytes share": 0.10}
#: The most per-pair record dicts the run makes to time them (k = 24's 11.9 M would take some 10 GB).
MAX_RECORDS_MADE = 2_000_000
CODEC = types.SimpleNamespace(ofproto=ofproto_v1_3, ofproto_parser=ofproto_v1_3_parser)


class Fabric:
    """The simulated fat-tree: dpids, ports, who is at the other end of each port, and the hosts."""

    def __init__(self, k: int) -> None:
        topo = FatTreeTopo(k=k)
        self.dpid = {name: int(topo.nodeInfo(name)["dpid"], 16) for name in topo.switches()}
        self.role = {self.dpid[name]: {"c": "core", "a": "aggregation", "e": "edge"}[name[0]]
                     for name in topo.switches()}
        self.ports: dict[int, list[int]] = {dpid: [] for dpid in self.dpid.values()}
        self.peer: dict[tuple[int, int], tuple[int, int]] = {}
        self.hosts: list[tuple[str, str, int, int]] = []  # (ip, mac, dpid, port)
        for a, b in topo.links(sort=True):
            port_a, port_b = topo.port(a, b)
            if a in self.dpid and b in self.dpid:
                ends = (self.dpid[a], port_a), (self.dpid[b], port_b)
                self.peer[ends[0]], self.peer[ends[1]] = ends[1], ends[0]
                self.ports[ends[0][0]].append(port_a)
                self.ports[ends[1][0]].append(port_b)
            else:
                host, switch, port = (a, b, port_b) if b in self.dpid else (b, a, port_a)
                info = topo.nodeInfo(host)
                self.hosts.append((info["ip"].split("/")[0], info["mac"], self.dpid[switch], port))
                self.ports[self.dpid[switch]].append(port)


def arp_announcement(ip: str, mac: str) -> bytes:
    """A gratuitous ARP request from (ip, mac)."""
    frame = packet.Packet()
    frame.add_protocol(ethernet.ethernet(dst="ff:ff:ff:ff:ff:ff", src=mac, ethertype=0x0806))
    frame.add_protocol(arp_packet.arp(opcode=arp_packet.ARP_REQUEST, src_mac=mac, src_ip=ip,
                                      dst_mac="00:00:00:00:00:00", dst_ip=ip))
    frame.serialize()
    return bytes(frame.data)


def udp_packet(src: tuple[str, str], dst: tuple[str, str]) -> bytes:
    """An IPv4 packet from host src to host dst, each (ip, mac)."""
    frame = packet.Packet()
    frame.add_protocol(ethernet.ethernet(dst=dst[1], src=src[1], ethertype=0x0800))
    frame.add_protocol(ipv4.ipv4(src=src[0], dst=dst[0], proto=17))
    frame.serialize()
    return bytes(frame.data)


def pair_stat(src: str, dst: str, packets: int) -> types.SimpleNamespace:
    """One pair entry's line of a flow statistics reply."""
    return types.SimpleNamespace(cookie=forwarding.PAIR_COOKIE, priority=forwarding.PAIR_PRIORITY,
                                 packet_count=packets, match={"ipv4_src": src, "ipv4_dst": dst})


class Run:
    """One benchmark run on one fabric: the core, a clock and what was measured."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.now = 0.0
        self.core = ControllerCore(CONFIG, now=0.0)
        self.rows: list[tuple[str, str, str, str]] = []

    def row(self, what: str, now: str, baseline: str = "", note: str = "") -> None:
        """One line of the table: this design, the per-pair baseline, a remark."""
        self.rows.append((what, now, baseline, note))
        print(f"{what:<44} {now:>16} {baseline:>16}  {note}", flush=True)

    def timed(self, events):
        """Run a list of thunks; (events, seconds)."""
        started = time.perf_counter()
        for event in events:
            event()
        return len(events), time.perf_counter() - started

    def connect(self) -> None:
        """Every switch connects, is ready and describes its ports."""
        for dpid, ports in self.fabric.ports.items():
            self.core.switch_features(dpid, CODEC)
            self.core.switch_ready(dpid)
            self.core.port_description(self.now, dpid, [PortInfo(p, f"02:00:00:{dpid >> 8 & 255:02x}:"
                                                                  f"{dpid & 255:02x}:{p:02x}", 100_000)
                                                         for p in ports])

    def probe_round(self) -> tuple[int, float]:
        """One probe round: probes out, echoes back, each probe in at its peer; (packet-ins, seconds)."""
        self.now += PROBE_S
        arrivals = []
        for dpid in self.core.ready_switches():
            for out_dpid, message in self.core.probe_switch(self.now, dpid).sends:
                if isinstance(message, ofproto_v1_3_parser.OFPPacketOut):
                    peer = self.fabric.peer.get((out_dpid, message.actions[0].port))
                    if peer is not None:
                        arrivals.append((peer, message.data))
        for dpid in self.core.ready_switches():
            self.core.echo_reply(self.now + 0.0002, dpid, ECHO_PAYLOAD)
        at = self.now + 0.0003
        return self.timed([lambda p=peer, d=data: self.core.packet_in(at, p[0], p[1], d)
                           for peer, data in arrivals])

    def plan(self) -> tuple[float, object]:
        """One re-plan as the plan loop runs it: (seconds, Actions)."""
        started = time.perf_counter()
        actions = self.core.replan(self.now)
        return time.perf_counter() - started, actions

    def pushed_bytes(self, hosts) -> int:
        """Bytes of the parameter sets published for hosts, as JSON."""
        return sum(len(framing.encode_json(self.core.publications.latest(ip))) for ip in hosts)


def whole_message_bytes(param_set: ParamSet) -> int:
    """Bytes of the params message carrying a whole set (peers aside: they go only when they change)."""
    return len(framing.encode_json(messages.params_message(param_set, None, lease_s=DEFAULT_LEASE_S, epoch=0)))


def pushed_message_bytes(acknowledged: ParamSet, latest: ParamSet) -> tuple[int, bool]:
    """(bytes, whether a delta) of the params message the agent server sends an agent
    that acknowledged `acknowledged` when `latest` is published: the delta against it
    where that is the shorter message (otcp.service.agent_server), else the whole set."""
    delta = paramset.worth_a_delta(acknowledged, latest)
    if delta is not None:
        return len(framing.encode_json(messages.delta_message(delta, None, lease_s=DEFAULT_LEASE_S, epoch=0))), True
    return whole_message_bytes(latest), False


def per_host_bytes(plan: Plan, hosts, generation: int) -> int:
    """The per-pair baseline: bytes of hosts' sets with one route per destination host."""
    return sum(len(framing.encode_json({"generation": generation, "routes": plan.routes_for(host)})) for host in hosts)


#: The parts of a re-plan timed apart, each (owner, attribute) of the callable the core calls for it.
REPLAN_PARTS = {
    "fabric": (Topology, "fabric"),
    "paths": (SwitchPaths, "__init__"),
    "host paths": (HostPaths, "__init__"),
    "plan": (Plan, "__init__"),
    "route sets": (Plan, "route_sets"),
    "entries": (forwarding, "destination_entries"),
    "flow mods": (forwarding, "sync_messages"),
    "publishing": (Publications, "publish"),
}


class PartTimes:
    """While active, the seconds the core spends in each of REPLAN_PARTS (each wrapped, then restored)."""

    def __enter__(self) -> "PartTimes":
        self.seconds = dict.fromkeys(REPLAN_PARTS, 0.0)
        self._originals = []
        for name, (owner, attribute) in REPLAN_PARTS.items():
            original = getattr(owner, attribute)

            def timed(*args, _original=original, _name=name, **kwargs):
                started = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.seconds[_name] += time.perf_counter() - started

            setattr(owner, attribute, timed)
            self._originals.append((owner, attribute, original))
        return self

    def __exit__(self, *_) -> None:
        for owner, attribute, original in self._originals:
            setattr(owner, attribute, original)

    def summary(self, total: float) -> str:
        """The parts of a re-plan that took total seconds, and what is left of it."""
        parts = [f"{name} {seconds:.2f}" for name, seconds in self.seconds.items()]
        return "parts, s: " + ", ".join(parts) + f", other {total - sum(self.seconds.values()):.2f}"


def timed_once(part) -> float:
    """Seconds one call of part takes."""
    started = time.perf_counter()
    part()
    return time.perf_counter() - started


def store_seconds(generation) -> float:
    """Seconds the app's plan loop spends storing a generation (otcp.controller.store, a fresh SQLite file)."""
    with tempfile.TemporaryDirectory() as directory:
        state = store.Store(os.path.join(directory, "otcp.db"))
        try:
            return timed_once(lambda: state.save_generation(generation))
        finally:
            state.close()


def per_pair_entries(plan: Plan, fabric: Fabric) -> dict[str, int]:
    """The per-pair baseline: {role: most entries on one switch}, one entry
    per host pair on every switch of its path, counted from the plan's paths."""
    paths = plan.host_paths
    switches = paths.switch_paths.switches
    hosts_behind = np.bincount(paths.attach, minlength=len(switches))
    edges = np.nonzero(hosts_behind)[0]
    nodes = paths.node_matrix(edges)  # (edge switch, destination host, switches on the way)
    # The sources behind each edge switch toward each host, the host itself left out.
    weight = hosts_behind[edges][:, None] - (paths.attach[None, :] == edges[:, None])
    on_path = nodes != -1
    through = np.zeros(len(switches), dtype=np.int64)
    np.add.at(through, nodes[on_path], np.broadcast_to(weight[:, :, None], nodes.shape)[on_path])
    most: dict[str, int] = {}
    for i, name in enumerate(switches):  # the core names a switch s<dpid>
        role = fabric.role[int(name[1:])]
        most[role] = max(most.get(role, 0), int(through[i]))
    return most


def parts_only(k: int, flows_per_host: int) -> None:
    """The planning parts on the inventory of a k-ary fat-tree, timed one by one."""
    fabric = inventory.parse(FatTreeTopo(k=k).inventory(), f"fat-tree k={k}").fabric()
    rng = random.Random(1)
    names = sorted(fabric.hosts)
    fabric.flows = {(h, d): 1 for h in names for d in rng.sample(names, flows_per_host) if d != h}
    dpids = {name: i + 1 for i, name in enumerate(fabric.switches)}
    for (u, v) in fabric.links:  # egress ports, as the live fabric carries them
        if u in dpids:
            fabric.egress[(u, v)] = (dpids[u], len(fabric.egress) % 64 + 1)
    timings = {}

    def timed(name, part):
        started = time.perf_counter()
        result = part()
        timings[name] = time.perf_counter() - started
        return result

    plan = timed("full plan", lambda: Plan(fabric, formulas.Bounds()))
    sets = timed("route sets", plan.route_sets)
    entries = timed("destination entries", lambda: forwarding.destination_entries(plan.fabric, plan.host_paths))
    loads = plan.link_flows()
    uplinks = sorted(link for link in fabric.links if link[0].startswith("a") and link[1].startswith("c"))

    def fail(link) -> dict:
        """Take link away (both ways, with its egress ports); the egress ports before."""
        before = dict(fabric.egress)
        for way in (link, link[::-1]):
            del fabric.links[way], fabric.egress[way]
        return before

    idle = next(link for link in uplinks if link not in loads and link[::-1] not in loads)
    egress = fail(idle)
    replan = timed("re-plan, an idle link failed", lambda: Plan(fabric, formulas.Bounds(), previous=plan))
    timed("  its route sets (idle)", replan.route_sets)
    before = forwarding.MadeEntries(plan.host_paths, fabric.hosts, egress, entries)
    entries = forwarding.entries_after_links_went(fabric, replan.host_paths, before)
    busiest = max((link for link in uplinks if link in loads), key=loads.get)
    egress = fail(busiest)
    switch_paths = timed("busiest failed: moved paths",
                         lambda: SwitchPaths(fabric.switches, fabric.switch_links(), previous=replan.switch_paths))
    timed("  all paths afresh", lambda: SwitchPaths(fabric.switches, fabric.switch_links()))
    paths = timed("  forwarding toward each host",
                  lambda: HostPaths(switch_paths, fabric.attachments(), previous=replan.host_paths))
    timed("busiest failed: their entries",
          lambda: forwarding.entries_after_links_went(
              fabric, paths, forwarding.MadeEntries(replan.host_paths, fabric.hosts, egress, entries)))
    timed("  all entries afresh", lambda: forwarding.destination_entries(fabric, paths))
    again = timed("re-plan, the busiest link failed",
                  lambda: Plan(fabric, formulas.Bounds(), previous=replan, switch_paths=switch_paths,
                               host_paths=paths))
    timed("  its route sets (busiest)", again.route_sets)
    print(f"fat-tree k={k}: {len(fabric.switches)} switches, {len(fabric.hosts)} hosts, {len(plan):,} pairs")
    for name, seconds in timings.items():
        print(f"  {name:<32} {seconds:8.2f} s")
    print(f"  most entries on one switch       {max(len(e) for e in entries.values()):8,}")
    print(f"  most routes on one host          {max(len(r) for r in sets.values()):8,}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=16, help="fat-tree arity (even)")
    parser.add_argument("--flows-per-host", type=int, default=4, help="destinations each host sends to")
    parser.add_argument("--parts-only", action="store_true", help="time the planning parts alone, without the core")
    args = parser.parse_args(argv)
    if args.parts_only:
        parts_only(args.k, args.flows_per_host)
        return 0
    started = time.perf_counter()
    fabric = Fabric(args.k)
    run = Run(fabric)
    print(f"fat-tree k={args.k}: {len(fabric.dpid)} switches, {len(fabric.hosts)} hosts, "
          f"{len(fabric.peer) // 2} switch links (built in {time.perf_counter() - started:.1f} s)")
    print(f"{'':<44} {'this design':>16} {'per pair':>16}")
    run.connect()
    events, seconds = 0, 0.0
    for _ in range(2):
        n, s = run.probe_round()
        events, seconds = events + n, seconds + s
    assert len(run.core.topology.links) == len(fabric.peer), "discovery incomplete"
    run.row("discovery: probe packet-ins/s", f"{events / seconds:,.0f}", "", f"{events} probes, 2 rounds")
    run.now += SETTLE_PROBE_ROUNDS * PROBE_S
    n, s = run.timed([lambda h=h: run.core.packet_in(run.now, h[2], h[3], arp_announcement(h[0], h[1]))
                      for h in fabric.hosts])
    assert len(run.core.topology.hosts) == len(fabric.hosts), "hosts not all learned"
    run.row("hosts arriving: ARP packet-ins/s", f"{n / s:,.0f}", "", f"{n} hosts")

    run.now += SETTLE_PROBE_ROUNDS * PROBE_S
    with PartTimes() as parts:
        first_s, first = run.plan()
    assert first.generation is not None and len(first.deliver) == len(fabric.hosts)
    plan = run.core._last_plan
    run.row("first complete plan (s)", f"{first_s:.2f}", "", f"target < {TARGETS['first plan s']} s; "
            f"{parts.summary(first_s)}")
    run.row("  then storing the generation (s)", f"{store_seconds(first.generation):.2f}", "",
            f"{len(first.generation.records):,} parameter rows from the plan's columns (the app's plan loop)")
    if len(first.generation.records) <= MAX_RECORDS_MADE:
        run.row("  records made when first read (s)", f"{timed_once(first.generation.records.made):.2f}",
                "", "once per generation, for the live view and the metrics; not in the plan")
    else:
        run.row("  records made when first read (s)", "not measured", "",
                f"{len(first.generation.records):,} dicts would not fit in this machine's memory")
    entries = run.core.entries_per_switch()
    before = per_pair_entries(plan, fabric)
    for role in ("core", "aggregation", "edge"):
        ours = max(n for dpid, n in entries.items() if fabric.role[dpid] == role)
        note = f"target <= {TARGETS['core entries']}" if role == "core" else ""
        run.row(f"OpenFlow entries, most on one {role} switch", f"{ours:,}", f"{before[role]:,}", note)
    routes = [len(run.core.publications.latest(h[0]).routes) for h in fabric.hosts]
    edge_switches = sum(1 for role in fabric.role.values() if role == "edge")
    run.row("routes per agent (max)", f"{max(routes):,}", f"{len(fabric.hosts) - 1:,}",
            f"target <= {edge_switches} (one per edge switch)")
    full_bytes = run.pushed_bytes([h[0] for h in fabric.hosts])
    run.row("bytes pushed, first generation (all hosts)", f"{full_bytes:,}",
            f"{per_host_bytes(plan, plan.hosts, first.generation.number):,}", "")

    rng = random.Random(1)
    by_ip = {h[0]: h for h in fabric.hosts}
    pairs = [(h[0], d) for h in fabric.hosts for d in rng.sample(sorted(set(by_ip) - {h[0]}), args.flows_per_host)]
    run.now += 0.5
    n, s = run.timed([lambda p=p: run.core.packet_in(run.now, by_ip[p[0]][2], by_ip[p[0]][3],
                                                     udp_packet(by_ip[p[0]][:2], by_ip[p[1]][:2])) for p in pairs])
    run.row("first packets of pairs: packet-ins/s", f"{n / s:,.0f}", "", f"{n} pairs, pair entry at the ingress")
    by_edge: dict[int, list[tuple[str, str]]] = {}
    for src, dst in pairs:
        by_edge.setdefault(by_ip[src][2], []).append((src, dst))
    stats_events, stats_s = 0, 0.0
    for packets in (10, 20):
        n, s = run.timed([lambda d=d, ps=ps, k=packets: run.core.flow_stats(d, [pair_stat(a, b, k) for a, b in ps])
                          for d, ps in by_edge.items()])
        stats_events, stats_s = stats_events + n, stats_s + s
    run.row("flow statistics replies/s", f"{stats_events / stats_s:,.0f}", "",
            f"{len(pairs) // len(by_edge)} pairs per edge switch")
    run.now += 1.0
    with PartTimes() as parts:
        flows_s, flows = run.plan()
    run.row("re-plan with the flows (s)", f"{flows_s:.2f}", "",
            f"{len(flows.deliver)} hosts changed; {parts.summary(flows_s)}")
    routes = [len(run.core.publications.latest(h[0]).routes) for h in fabric.hosts]
    run.row("routes per agent with the flows (max)", f"{max(routes):,}", f"{len(fabric.hosts) - 1:,}",
            f"target <= {edge_switches}; mean {sum(routes) / len(routes):.0f}")

    # The aggregation-core link that carries the most flows fails.
    loads = run.core._last_plan.link_flows()
    egress = run.core._last_plan.fabric.egress
    src, dst = max(((egress[link], run.core.topology.links[egress[link]]) for link in loads
                    if link in egress and fabric.role[egress[link][0]] == "aggregation"
                    and fabric.role[run.core.topology.links[egress[link]][0]] == "core"),
                   key=lambda ends: loads[next(link for link in loads if egress.get(link) == ends[0])])
    acknowledged = {ip: run.core.publications.latest(ip) for ip in by_ip}
    run.now += 1.0
    run.core.link_deleted(run.now, src, dst)
    run.core.link_deleted(run.now, dst, src)
    run.now += SETTLE_PROBE_ROUNDS * PROBE_S
    with PartTimes() as parts:
        reroute_started = time.perf_counter()
        rerouted = run.core.reroute()
        reroute_s = time.perf_counter() - reroute_started
    run.row("forwarding after the failure (s)", f"{reroute_s:.2f}", "",
            f"the flow mods the app sends before it re-plans; {parts.summary(reroute_s)}")
    with PartTimes() as parts:
        failure_s, failure = run.plan()
    mods = sum(1 for _, m in rerouted.sends + failure.sends if isinstance(m, ofproto_v1_3_parser.OFPFlowMod))
    run.row("re-plan after one link failure (s)", f"{failure_s:.3f}", "",
            f"target < {TARGETS['re-plan s']} s; {parts.summary(failure_s)}")
    run.row("flow mods sent for the failure", f"{mods:,}", "",
            f"only entries that changed; {len(failure.sends)} of them in the re-plan")
    number = failure.generation.number if failure.generation else 0
    before_full = per_host_bytes(run.core._last_plan, run.core._last_plan.hosts, number)
    before_pushed = per_host_bytes(run.core._last_plan, failure.deliver, number)
    all_whole = sum(whole_message_bytes(run.core.publications.latest(ip)) for ip in by_ip)
    whole = sum(whole_message_bytes(run.core.publications.latest(ip)) for ip in failure.deliver)
    sent = [pushed_message_bytes(acknowledged[ip], run.core.publications.latest(ip)) for ip in failure.deliver]
    pushed = sum(size for size, _ in sent)
    run.row("bytes pushed for the failure", f"{pushed:,}", f"{before_pushed:,}",
            f"{sum(d for _, d in sent)} deltas, {sum(not d for _, d in sent)} whole sets to {len(failure.deliver)} "
            f"hosts: {pushed / all_whole:.1%} of all hosts' whole sets (before {before_pushed / before_full:.1%}; "
            f"target < {TARGETS['bytes share']:.0%})")
    run.row("  the same hosts' whole sets", f"{whole:,}", "",
            f"{whole / all_whole:.1%} of all sets; the deltas are {pushed / whole:.1%} of them")
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

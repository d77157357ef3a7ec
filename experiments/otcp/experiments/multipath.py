"""``otcp-experiment multipath``: how OTCP's forwarding spreads a fabric's load, planned and in Mininet.

    otcp-experiment multipath --topo leafspine,2,2,4 --topo fattree,4 --out results/multipath

Per topology, with one path per switch pair (``forwarding: {multipath: false}``) and
with multipath (the default), both:

- planned: the ordered host pairs whose data path crosses each link into or out of
  the top tier (spines, cores), every pair one flow (``Plan.pairs_per_link``, what
  ``otcp-controller plan --link-load`` prints);
- in Mininet with the real controller: ``pingAll`` once the controller has found
  every switch link (the share lost), then two iperf3 flows at once between
  different pairs of edge switches, and which top-tier switch carried each: the
  one whose destination entry for the flow's receiver counted most of its bytes
  (Open vSwitch's counters, ``ovs-ofctl dump-flows``).

The two flows are chosen from the multipath plan: the first host of the first edge
switch to the first host of the last, and the first pair between another two edge
switches, of two other hosts, whose planned path crosses another top-tier switch;
both modes run the same two. It writes summary.json and multipath.md (the results page, with this
command) into --out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from otcp.controller import store
from otcp.experiments.runner.controller import ControllerProcess, wait_for
from otcp.experiments.runner.emulation import Emulation, emulate
from otcp.planning import inventory
from otcp.planning.paths import UNREACHABLE
from otcp.planning.planner import Plan

#: Probe and re-plan rounds short enough that the controller finds every link in seconds.
FAST = {"probe_s": 0.5, "flow_stats_s": 0.5, "recompute_s": 0.5}
IPERF_SECONDS = 5
IPERF_PORTS = (5201, 5202)
#: How long the controller gets to find every switch link, and the hosts to reach each other.
DISCOVERY_TIMEOUT_S = 60.0
MODES = (("one path per switch pair", False), ("multipath", True))


@dataclasses.dataclass
class FlowResult:
    """One iperf3 flow: its hosts, the top-tier switch its plan crosses, the one that carried it."""

    src: str
    dst: str
    planned_via: str
    carried_via: str | None
    carried_bytes: int
    rate_mbps: float


@dataclasses.dataclass
class ModeResult:
    """One topology under one forwarding mode."""

    mode: str
    link_pairs: dict[str, int]  # "u -> v": planned pairs, for the links into and out of the top tier
    pingall_loss_percent: float
    flows: list[FlowResult]


def top_tier(plan: Plan) -> list[str]:
    """The switches farthest (in hops) from every switch hosts hang off: spines, cores."""
    sp = plan.host_paths.switch_paths
    edges = sorted(set(plan.host_paths.attach.tolist()))
    reach = [min((int(sp.hops[i, e]) for e in edges if sp.hops[i, e] != UNREACHABLE), default=-1)
             for i in range(len(sp.switches))]
    return [sp.switches[i] for i, hops in enumerate(reach) if hops == max(reach) and hops > 0]


def chosen_flows(plan: Plan, top: list[str]) -> list[tuple[str, str]]:
    """Two (source, destination) addresses between different pairs of edge switches whose
    planned paths cross different top-tier switches where the plan has such (see the module)."""
    attachment, hosts = plan.attachment, plan.hosts
    edges = sorted({attachment[h] for h in hosts})
    by_edge = {edge: [h for h in hosts if attachment[h] == edge] for edge in edges}
    first = (by_edge[edges[0]][0], by_edge[edges[-1]][0])
    via = planned_via(plan, *first, top)
    candidates = [(s, d) for s in hosts for d in hosts
                  if attachment[s] != attachment[d] and (attachment[s], attachment[d]) != (edges[0], edges[-1])
                  and planned_via(plan, s, d, top) != "-"]
    # Best: hosts of its own (no link shared with the first flow's hosts), over another top-tier switch.
    ranked = sorted(candidates, key=lambda pair: (bool(set(pair) & set(first)),
                                                  planned_via(plan, pair[0], pair[1], top) == via))
    return [first, ranked[0]]


def planned_via(plan: Plan, src: str, dst: str, top: list[str]) -> str:
    """The top-tier switch on the planned data path from src to dst ('-' if none)."""
    path = plan.host_paths.path(plan.attachment[src], dst) or []
    return next((switch for switch in path if switch in top), "-")


def entry_bytes(switch: str) -> dict[str, int]:
    """{destination address: bytes} of a switch's destination entries (ovs-ofctl dump-flows)."""
    listing = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", switch], capture_output=True,
                             text=True, check=True).stdout
    counted: dict[str, int] = {}
    for line in listing.splitlines():
        dst, sent = re.search(r"nw_dst=([0-9.]+)[ ,]", line), re.search(r"n_bytes=(\d+)", line)
        if dst and sent and "nw_src" not in line:
            counted[dst.group(1)] = counted.get(dst.group(1), 0) + int(sent.group(1))
    return counted


def run_flows(emulation: Emulation, names: dict[str, str], flows: list[tuple[str, str]],
              top: list[str]) -> list[tuple[str | None, int, float]]:
    """Two iperf3 flows at once; per flow, the top-tier switch that counted most of its bytes,
    those bytes, and its rate (Mb/s)."""
    before = {switch: entry_bytes(switch) for switch in top}
    servers = [emulation.start(names[dst], ["iperf3", "-s", "-1", "-p", str(port)])
               for (_, dst), port in zip(flows, IPERF_PORTS)]
    for (_, dst), port in zip(flows, IPERF_PORTS):
        emulation.wait_listening(names[dst], port)
    clients = [emulation.start(names[src], ["iperf3", "-J", "-t", str(IPERF_SECONDS), "-p", str(port), "-c", dst],
                               stdout=subprocess.PIPE)
               for (src, dst), port in zip(flows, IPERF_PORTS)]
    reports = [json.loads(client.communicate(timeout=IPERF_SECONDS + 30)[0]) for client in clients]
    for server in servers:
        emulation.stop(server)
    after = {switch: entry_bytes(switch) for switch in top}
    results = []
    for (_, dst), report in zip(flows, reports):
        carried = {switch: after[switch].get(dst, 0) - before[switch].get(dst, 0) for switch in top}
        busiest = max(carried, key=carried.__getitem__)
        results.append((busiest if carried[busiest] else None, carried[busiest],
                        report["end"]["sum_received"]["bits_per_second"] / 1e6))
    return results


def pingall_loss(emulation: Emulation, switch_links: int, controller: ControllerProcess) -> float:
    """pingAll's loss (percent) once the controller has found every switch link (both ways)."""
    def found() -> bool:
        db = store.Store(controller.database, readonly=True)
        try:
            return db.db.execute("SELECT COUNT(*) FROM links WHERE up = 1").fetchone()[0] >= switch_links
        finally:
            db.close()

    wait_for(lambda: os.path.exists(controller.database) and found(), DISCOVERY_TIMEOUT_S,
             what="the controller finding every switch link")
    return float(emulation.net.pingAll(timeout=2))


@contextlib.contextmanager
def _started(controller: ControllerProcess, management_ip: str | None) -> Iterator[int]:
    """The controller running, as a ControllerStarter (otcp.experiments.runner.emulation) runs it (no
    management network: management_ip is None): its OpenFlow port."""
    with controller:
        yield controller.openflow_port


def run_topology(topo: Any, spec: str, out: str) -> dict[str, Any]:
    """Both modes on one topology (see the module docstring)."""
    workdir = os.path.abspath(os.path.join(out, spec.replace(",", "-")))  # the controller's files name it
    os.makedirs(workdir, exist_ok=True)
    inventory_path = topo.write_inventory(os.path.join(workdir, "inventory.yaml"))
    fabric = inventory.load(inventory_path).fabric()
    multipath_plan = Plan(fabric)
    top = top_tier(multipath_plan)
    flows = chosen_flows(multipath_plan, top)
    names = {ip: name for ip, name in fabric.hosts.items()}
    switch_links = len(fabric.switch_links())
    modes = []
    for mode, multipath in MODES:
        plan = Plan(fabric, multipath=multipath)
        load = plan.pairs_per_link()
        link_pairs = {f"{u} -> {v}": load.get((u, v), 0) for (u, v) in sorted(fabric.switch_links())
                      if u in top or v in top}
        print(f"*** {spec}, {mode}: starting Mininet with the controller", flush=True)
        controller = ControllerProcess(os.path.join(workdir, "multipath" if multipath else "single-path"),
                                       inventory=inventory_path, intervals=FAST,
                                       forwarding={"multipath": multipath}, log_level="info")

        with emulate(topo, controller=functools.partial(_started, controller)) as emulation:
            loss = pingall_loss(emulation, switch_links, controller)
            time.sleep(1)  # the pair entries the pings made stay; the flows make their own
            carried = run_flows(emulation, names, flows, top)
        results = [FlowResult(names[src], names[dst], planned_via(plan, src, dst, top), via, sent, rate)
                   for (src, dst), (via, sent, rate) in zip(flows, carried)]
        for flow in results:
            print(f"    {flow.src} -> {flow.dst}: planned via {flow.planned_via}, carried via {flow.carried_via} "
                  f"({flow.carried_bytes} B, {flow.rate_mbps:.1f} Mb/s)", flush=True)
        modes.append(ModeResult(mode, link_pairs, loss, results))
    return {"topo": spec, "top_tier": top, "modes": [dataclasses.asdict(m) for m in modes]}


def page(summary: dict[str, Any], command: str) -> str:
    """The results page (Markdown) of a run's summary."""
    lines = ["# Multipath forwarding", "",
             "Made by the program from its run (`summary.json`):", "", f"    {command}", "",
             "Planned: the ordered host pairs whose data path crosses each link into or out of the top tier "
             "(every pair one flow), with one path per switch pair and with multipath. In Mininet with the "
             "controller: pingAll's loss once the controller has found every switch link, and two iperf3 flows "
             "at once between different pairs of edge switches, with the top-tier switch the plan puts each "
             "on and the one whose destination entry counted its bytes.", ""]
    for topology in summary["topologies"]:
        modes = topology["modes"]
        lines += [f"## {topology['topo']}", "", "| link | " + " | ".join(m["mode"] for m in modes) + " |",
                  "|---|" + "---|" * len(modes)]
        for link in modes[0]["link_pairs"]:
            lines.append(f"| {link} | " + " | ".join(str(m["link_pairs"][link]) for m in modes) + " |")
        lines += ["", "| | " + " | ".join(m["mode"] for m in modes) + " |", "|---|" + "---|" * len(modes)]
        spread = [f"{min(m['link_pairs'].values())} to {max(m['link_pairs'].values())}" for m in modes]
        lines.append("| pairs per top-tier link | " + " | ".join(spread) + " |")
        lines.append("| pingAll lost | " + " | ".join(f"{m['pingall_loss_percent']:g} %" for m in modes) + " |")
        for k in range(len(modes[0]["flows"])):
            flow = modes[0]["flows"][k]
            cells = [f"planned via {m['flows'][k]['planned_via']}, carried via {m['flows'][k]['carried_via']} "
                     f"({m['flows'][k]['rate_mbps']:.1f} Mb/s)" for m in modes]
            lines.append(f"| iperf3 {flow['src']} -> {flow['dst']} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def run(topologies: list[tuple[str, Any]], out: str, command: str) -> int:
    """Every topology (spec, FabricTopo); writes summary.json and multipath.md into out; returns 0."""
    os.makedirs(out, exist_ok=True)
    summary = {"command": command, "topologies": [run_topology(topo, spec, out) for spec, topo in topologies]}
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=1)
    with open(os.path.join(out, "multipath.md"), "w", encoding="utf-8") as handle:
        handle.write(page(summary, command))
    print(f"*** wrote {out}/summary.json and {out}/multipath.md")
    return 0

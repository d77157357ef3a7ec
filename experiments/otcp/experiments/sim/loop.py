"""The closed loop: at every controller poll the simulator reports what each host pair has sent, and
the controller's own flow counting and the real planner give the hosts their new settings.

As the live controller does (otcp.controller): a pair is active when its counter at its ingress edge
switch grew by ``min_packets`` since the previous poll and carried data, not only ACKs
(``FlowCounter``), an active pair counts for
``hold_s`` after it was last seen (``HeldFlows``), and the planner plans the fabric with those flows
(``Plan``, incremental from the previous plan, with its aggregated route sets). Each host's settings
toward each peer of the workload are what longest-prefix match finds in its route set
(mapping.planned). The simulator has every host take them: new connections at once, established ones
(with the agents' BPF) at their next RTT sample.

Differences from the live controller: the link delays are the fabric's declared ones (as an
inventory gives them), not LLDP measurements nor the hosts' measured round trips; the plan is made
at every poll (the controller re-plans every ``recompute_s``, 2 s by default, from the flows its
polls found).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from otcp.controller.flowcount import FlowCounter, HeldFlows, PairCounters
from otcp.experiments.sim import mapping
from otcp.experiments.sim.fabric import SimFabric
from otcp.experiments.sim.schemes import SimScheme
from otcp.planning import formulas
from otcp.planning.fabric import Fabric
from otcp.planning.planner import Plan

#: The controller's defaults (otcp.controller.config): flow-statistics poll, the packets that make a
#: pair a flow, and how long a flow that stopped still counts.
POLL_S = 1.0
MIN_FLOW_PACKETS = 3
FLOW_HOLD_S = 5.0

#: What the simulator reports at a poll: (source host, destination host, packets sent so far, their
#: bytes as a switch counts frames).
PairCount = tuple[str, str, int, int]


@dataclasses.dataclass
class PollRecord:
    """One poll: when, the active pairs the planner got, and whether any host's settings changed."""

    t: float
    active_pairs: int
    changed: bool


class ClosedLoop:
    """The controller and agents of one simulated run (see the module docstring).

    pairs: the (host, peer) pairs whose settings the simulator needs; lossless / pacing: the
    formulas' settings (None: the published formulas, no pacing); bpf: the agents' BPF enforces.
    """

    def __init__(self, fabric: SimFabric, pairs: Iterable[tuple[str, str]], bounds: formulas.Bounds,
                 lossless: formulas.Lossless | None, pacing: formulas.Pacing | None, bpf: bool,
                 min_packets: int = MIN_FLOW_PACKETS, hold_s: float = FLOW_HOLD_S) -> None:
        self.fabric = fabric
        self.pairs = sorted(set(pairs))
        self.bounds, self.lossless, self.pacing, self.bpf = bounds, lossless, pacing, bpf
        self.counter = FlowCounter(min_packets)
        self.held = HeldFlows(hold_s)
        self.base = fabric.planner_fabric()
        self.plan: Plan | None = None
        self.settings: dict[tuple[str, str], mapping.ConnSettings] = {}
        self.polls: list[PollRecord] = []

    @classmethod
    def for_scheme(cls, fabric: SimFabric, pairs: Iterable[tuple[str, str]], scheme: SimScheme,
                   lossless_settings: formulas.Lossless) -> ClosedLoop:
        """The loop of an OTCP scheme's run: the scheme's formulas (lossless with lossless_settings),
        pacing and enforcement, the default bounds."""
        lossless = (dataclasses.replace(lossless_settings, fan_in_admission=scheme.admission)
                    if scheme.formulas == "lossless" else None)
        return cls(fabric, pairs, formulas.Bounds(), lossless, formulas.Pacing() if scheme.pacing else None,
                   scheme.follows)

    def admit(self, host: str) -> int | None:
        """How many senders host may ask to send to it at once: its K of the loop's planner (Plan.admissions,
        what the controller publishes as its set's admit), None without fan-in admission. K follows from the
        host's downlink buffer alone, so the fabric is planned without flows."""
        plan = Plan(self.base, self.bounds, self.lossless, self.pacing, multipath=False)
        return plan.admissions().get(self.fabric.address[host])

    def poll(self, t: float, counts: Sequence[PairCount]) -> dict[str, Any]:
        """Take one poll's counters; return the settings that changed, as the scenario reads them
        ({host: {"peers": {peer: settings}}})."""
        by_edge: dict[str, list[PairCounters]] = {edge: [] for edge in self.fabric.edges}
        for src, dst, packets, size in counts:
            by_edge[self.fabric.edge[src]].append((self.fabric.address[src], self.fabric.address[dst], packets, size))
        for number, edge in enumerate(self.fabric.edges):
            self.counter.update(number + 1, by_edge[edge])
        flows = self.held.update(t, self.counter.active_pairs())
        fabric = Fabric(switches=self.base.switches, hosts=self.base.hosts, links=self.base.links, flows=flows)
        # The simulated switches route per edge switch (one path per switch pair): so does the plan.
        self.plan = Plan(fabric, self.bounds, self.lossless, self.pacing, previous=self.plan, multipath=False)
        changed = self._settings(self.plan)
        self.polls.append(PollRecord(t, len(flows), bool(changed)))
        return {"settings": changed}

    def _settings(self, plan: Plan) -> dict[str, Any]:
        """The settings of self.pairs under plan that differ from the last ones sent."""
        sets = plan.route_sets()
        changed: dict[str, Any] = {}
        for host, peer in self.pairs:
            address, peer_address = self.fabric.address[host], self.fabric.address[peer]
            toward = mapping.longest_match(sets[address], peer_address)
            back = mapping.longest_match(sets[peer_address], address)
            if toward is None:
                raise RuntimeError(f"the plan has no route from {host} toward {peer}")
            settings = mapping.planned(toward, back, self.bpf, self.bounds.mss_bytes)
            if self.settings.get((host, peer)) != settings:
                self.settings[(host, peer)] = settings
                changed.setdefault(host, {"peers": {}})["peers"][peer] = settings.as_json()
        return changed

    def generations_between(self, start: float, end: float) -> int:
        """Polls within [start, end] (simulated seconds) that changed some host's settings."""
        return sum(1 for record in self.polls if start <= record.t <= end and record.changed)

"""The schemes a simulation compares: the runner's catalogue (runner.schemes), as ns-3 runs them,
and the IMC 2024 static receive-window clamp, which only the simulator runs.

Each scheme says where a host's TCP settings come from: Linux's defaults with a static rto_min
(default, fine-rto, dctcp, static-rwnd), or the planner in the loop (the otcp schemes: its
published or lossless formulas, with pacing for otcp-paced). Route-enforced OTCP (otcp,
otcp+dctcp) takes a route's parameters at connection set-up only; the agents' BPF (otcp-lossless,
otcp-paced) also sets ssthresh with the clamp and has established connections follow a new clamp
and pacing rate. DCTCP runs ns-3's TcpDctcp at both ends (with Linux's two-segment ssthresh floor)
and the switches mark at K. otcp-admit's receiver asks at most K senders at once, its K of the
loop's plan (Plan.admissions, the admit the controller publishes), as the emulator's incast client
asks the admit its agent shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from otcp.experiments.runner import schemes as runner_schemes
from otcp.experiments.runner.schemes import DEFAULT_FINE_RTO_MS

#: The ns-3 congestion controls of the runner's congestion-control names.
NS3_CONGESTION_CONTROL = {"cubic": "ns3::TcpCubic", runner_schemes.DCTCP_CC: "ns3::TcpDctcp"}
#: Linux's rto_min when nothing sets one (TCP_RTO_MIN).
LINUX_RTO_MIN_MS = 200
STATIC_RWND = "static-rwnd"
#: The runner's schemes the simulator runs (the small-packet ones change host MTUs: not modelled).
RUNNER_SCHEMES = ("default", "fine-rto", "dctcp", "otcp", "otcp+dctcp", "otcp-lossless", "otcp-paced", "otcp-admit")


@dataclasses.dataclass(frozen=True)
class SimScheme:
    """One scheme as the simulator runs it.

    formulas: the planner's formula set for an OTCP scheme ("published" or "lossless"), None for a
    static one; pacing: plan fair-share pacing rates; follows: the agents' BPF (established
    connections follow, the clamp sets ssthresh); congestion_control: an ns-3 TypeId name; ecn: ECN at
    the hosts and marking at K on every switch egress; rto_min_ms: a static scheme's rto_min;
    static_rwnd: the receiver advertises the fair share of the bottleneck's BDP and buffer;
    admission: the planner counts at most the admitted senders on a receiver's downlink, and the
    incast receiver asks that many at once.
    """

    name: str
    description: str
    formulas: str | None = None
    pacing: bool = False
    follows: bool = False
    congestion_control: str = "ns3::TcpCubic"
    ecn: bool = False
    rto_min_ms: int = LINUX_RTO_MIN_MS
    static_rwnd: bool = False
    admission: bool = False

    @property
    def planned(self) -> bool:
        """Whether the planner gives its hosts their settings (a closed loop)."""
        return self.formulas is not None


def catalogue(fine_rto_ms: int = DEFAULT_FINE_RTO_MS) -> dict[str, SimScheme]:
    """Every scheme the simulator knows, by name, in the runner catalogue's order, static-rwnd last."""
    chosen = []
    for name, scheme in runner_schemes.catalogue(fine_rto_ms).items():
        if name not in RUNNER_SCHEMES:
            continue
        chosen.append(SimScheme(
            name, scheme.description, formulas=scheme.formulas if scheme.kind == "otcp" else None,
            pacing=scheme.pacing, follows=scheme.enforce == "bpf",
            congestion_control=NS3_CONGESTION_CONTROL[scheme.congestion_control], ecn=scheme.ecn,
            rto_min_ms=scheme.rto_min_ms or LINUX_RTO_MIN_MS, admission=scheme.admission))
    chosen.append(SimScheme(STATIC_RWND, "IMC 2024's static receive-window clamp: the receiver advertises every "
                            "connection the fair share of the bottleneck's BDP and buffer, (C x RTT + B) / N, at "
                            "least one segment; Linux defaults otherwise", static_rwnd=True))
    return {scheme.name: scheme for scheme in chosen}


def selected(names: Sequence[str], fine_rto_ms: int = DEFAULT_FINE_RTO_MS) -> list[SimScheme]:
    """The schemes a simulated experiment was asked for (names, each known), in the catalogue's order:
    the order every simulated experiment runs them in."""
    known = catalogue(fine_rto_ms)
    return [known[name] for name in sorted(names, key=list(known).index)]

"""The schemes an experiment compares, each a named, documented setting, and which of them can run here.

Route-attribute schemes change every host's data route(s) in the host's
namespace (``ip route replace ... rto_min``) and, for small packets, the MTU
of the hosts' data interfaces; they put the original routes and MTU back
afterwards (the commands: ``otcp.experiments.runner.settings``). The OTCP
schemes are driven by the real controller and agents
(``otcp.experiments.runner.controller``, ``otcp.experiments.runner.agents``):
``otcp`` with the published formulas and route attributes only,
``otcp-lossless`` with the lossless formulas and the agents' BPF
enforcement, ``otcp-paced`` with these and fair-share pacing, ``otcp-admit``
with otcp-lossless's and the receiving program admitting its senders in turns
(as many at once as the planner's fan-in admission counts). The DCTCP
schemes use the project's BPF congestion control (``otcp_dctcp``, registered
once per experiment: ``plan``), ECN on in every host and the ECN marker on
the bottleneck port.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING

from otcp import bpf as otcp_bpf
from otcp.bpf import CC_NAME as DCTCP_CC
from otcp.experiments.analysis.results import Outcome, Unavailable
from otcp.experiments.runner.agents import agent_unavailable_reason

if TYPE_CHECKING:  # runner.config imports this module
    from otcp.experiments.runner.config import ExperimentConfig
    from otcp.experiments.runner.progress import Progress

# Ge et al. compare 750 B packets against 1500 B ones.
SMALL_PACKET_MTU = 750
# HZ=250 here: the retransmission timer ticks in 4 ms, so 1 ms acts as 4 ms.
DEFAULT_FINE_RTO_MS = 1


# The IP packet of a full Ethernet frame, and what an IP packet carries beyond the MSS the receiver
# advertises (IP and TCP headers; options come out of the MSS).
ETHERNET_MTU = 1500
TCP_IP_HEADER_BYTES = 40


@dataclasses.dataclass(frozen=True)
class Scheme:
    """One named setting.

    kind: 'routes' (static route attributes and MTU, applied by the runner)
    or 'otcp' (the controller and an agent in every host). formulas: the
    controller's parameter formulas for an otcp scheme, and pacing whether
    it paces every flow at its fair share; enforce: the agents' --enforce.
    congestion_control: every workload socket's; ecn: ECN on in every host
    and CE marking at the bottleneck; static_rwnd: the receiving program
    clamps every connection's receive window to the static 1/N share of the
    bottleneck (formulas.static_rwnd_bytes, N the senders it expects at once);
    admission: the controller plans with fan-in admission and the receiving program asks at
    most formulas.admitted_flows of its senders at once (the incast workload's client only).
    """

    name: str
    kind: str
    description: str
    rto_min_ms: int | None = None
    mtu: int | None = None
    formulas: str = "published"
    pacing: bool = False
    enforce: str = "routes"
    congestion_control: str = "cubic"
    ecn: bool = False
    static_rwnd: bool = False
    admission: bool = False


def catalogue(fine_rto_ms: int = DEFAULT_FINE_RTO_MS) -> dict[str, Scheme]:
    """Every scheme the runner knows, by name, in the order they are run."""
    schemes = [
        Scheme("default", "routes", "kernel defaults: 200 ms RTOmin, initcwnd 10, delayed ACKs"),
        Scheme("fine-rto", "routes",
               f"one small static RTOmin on every host's routes (rto_min {fine_rto_ms}ms), Vasudevan et al.",
               rto_min_ms=fine_rto_ms),
        Scheme("small-packets", "routes", f"{SMALL_PACKET_MTU} B packets (host MTU) instead of 1500 B, Ge et al.",
               mtu=SMALL_PACKET_MTU),
        Scheme("small-packets-rto", "routes",
               f"{SMALL_PACKET_MTU} B packets and rto_min {fine_rto_ms}ms on every host's routes, Ge et al.",
               rto_min_ms=fine_rto_ms, mtu=SMALL_PACKET_MTU),
        Scheme("static-rwnd", "routes", "every receiving socket's window clamped to a static 1/N of the "
               "bottleneck's link and buffer, (C x RTT + B) / N in whole segments, N the senders expected at "
               "once (IMC 2024, Canel et al.); kernel defaults otherwise", static_rwnd=True),
        Scheme("otcp", "otcp", "the OTCP controller's per-path rto_min, initcwnd, cwnd lock and quickack, "
               "applied by the real agent in every host"),
        Scheme("dctcp", "routes", f"DCTCP ({DCTCP_CC}, BPF) senders and receivers, ECN marking at the bottleneck, "
               "kernel-default rto_min", congestion_control=DCTCP_CC, ecn=True),
        Scheme("otcp+dctcp", "otcp", "otcp's route parameters with DCTCP and ECN marking",
               congestion_control=DCTCP_CC, ecn=True),
        Scheme("otcp-lossless", "otcp", "the lossless formulas: windows of the fair share of BDP plus a queue "
               "target, per-path segment size (advmss), enforced from the first packet by the agents' BPF",
               formulas="lossless", enforce="bpf"),
        Scheme("otcp-lossless+dctcp", "otcp", "otcp-lossless's windows, segments and BPF enforcement with "
               "DCTCP and ECN marking", formulas="lossless", enforce="bpf", congestion_control=DCTCP_CC, ecn=True),
        Scheme("otcp-paced", "otcp", "otcp-lossless's windows, and every connection paced at its fair share of "
               "the path's bottleneck (SO_MAX_PACING_RATE from the agents' BPF)",
               formulas="lossless", pacing=True, enforce="bpf"),
        Scheme("otcp-admit", "otcp", "otcp-lossless's windows and BPF enforcement, with the receiver admitting "
               "its senders in turns: at most as many at once as full frames fit its downlink's buffer (the "
               "controller's fan-in admission), the next as one finishes; every sender keeps full-size segments",
               formulas="lossless", enforce="bpf", admission=True),
    ]
    return {scheme.name: scheme for scheme in schemes}


def packet_bytes_of(scheme: Scheme, advmss: int | None = None) -> int:
    """The IP packet size a scheme's senders send: their MTU, or the
    receiver's advmss (the segment the OTCP controller chose) plus the IP
    and TCP headers, when the receiver's routes carry one."""
    if advmss is not None:
        return advmss + TCP_IP_HEADER_BYTES
    return scheme.mtu or ETHERNET_MTU


def plan(names: list[str], forwarding: str, catalogue: dict[str, Scheme],
         registered: contextlib.ExitStack, admits: bool = False) -> tuple[list[Scheme], list[Unavailable]]:
    """(the schemes named that can run, in the catalogue's order; those that cannot, and why).

    Registers the BPF DCTCP congestion control if a scheme needs it, on the
    ExitStack registered (which unregisters it); the kernel's refusal is the
    reason those schemes cannot run. The OTCP schemes need the controller to
    forward (forwarding "controller") and the agent installed; the admission
    schemes a workload whose receiver admits its senders in turns (admits).
    """
    runnable: list[Scheme] = []
    unavailable: list[Unavailable] = []
    dctcp_refused = None
    if any(catalogue[name].congestion_control == DCTCP_CC for name in names):
        try:
            registered.enter_context(otcp_bpf.register_dctcp(wait_s=60.0))
        except otcp_bpf.BpfUnavailable as exc:
            dctcp_refused = f"the kernel refused the BPF congestion control {DCTCP_CC}: {exc}"
    for name in sorted(names, key=list(catalogue).index):
        scheme = catalogue[name]
        reason = None
        if scheme.admission and not admits:
            reason = "needs a receiver that admits its senders in turns: only the incast experiment's client does"
        if reason is None and scheme.congestion_control == DCTCP_CC and dctcp_refused:
            reason = dctcp_refused
        if reason is None and scheme.kind == "otcp":
            reason = "needs the OTCP controller (--forwarding controller)" if forwarding != "controller" \
                else agent_unavailable_reason()
        if reason:
            unavailable.append(Unavailable(name, reason))
        else:
            runnable.append(scheme)
    return runnable, unavailable


def plan_experiment(config: ExperimentConfig, outcome: Outcome, progress: Progress,
                    registered: contextlib.ExitStack, admits: bool = False) -> list[Scheme]:
    """The config's schemes that can run here (plan, from the catalogue at its fine_rto_ms; admits:
    the experiment's receivers admit their senders in turns); those that cannot go to
    outcome.unavailable, each said to progress."""
    runnable, outcome.unavailable = plan(config.schemes, config.forwarding, catalogue(config.fine_rto_ms),
                                         registered, admits)
    for entry in outcome.unavailable:
        progress.message(f"scheme {entry.scheme} unavailable: {entry.reason}")
    return runnable

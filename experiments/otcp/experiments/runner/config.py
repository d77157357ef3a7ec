"""What every experiment on the runner core is set by: one base that each experiment extends.

``ExperimentConfig`` holds the network (link rate, bottleneck buffers, link
delay, who forwards), the schemes and their knobs, how the single-flow
ceiling is measured, how long the agents may take, where the results go and
the command line that asked for them. An experiment adds its own workload
and topology size in a subclass (``IncastConfig``: sender counts and block
sizes; ``FairnessConfig``: flows and their timing; ...). The CLI validates
every field before an experiment sees it.
"""

from __future__ import annotations

import dataclasses

from otcp.experiments.runner.datapath import DEFAULT_DATAPATH, DEFAULT_XDP_MODE, Datapath
from otcp.experiments.runner.schemes import DEFAULT_FINE_RTO_MS
from otcp.planning.formulas import Lossless

#: The switches' egress buffer an experiment uses unless told otherwise: the shallow one (bytes).
SHALLOW_BUFFER_BYTES = 85000


@dataclasses.dataclass(kw_only=True)
class ExperimentConfig:
    """The base of every experiment's configuration.

    out: the output directory; schemes: the scheme names to run (the
    catalogue's, runner.schemes); bw_mbps: every link's rate; buffers: the
    bottleneck buffers in bytes, one network each; delay_us: one-way delay
    per link (enforced only with sch_netem); forwarding: "controller" (the
    OTCP controller forwards) or "standalone" (learning bridges); datapath,
    xdp_mode: what the switches' ports should be (runner.datapath: afpacket,
    afxdp-nonpmd or afxdp; native or generic XDP for the AF_XDP ones);
    pin_hosts: the experiment's processes run apart from the switch's
    forwarding threads (runner.placement); pmd_maxsleep_us: how long afxdp's
    PMD thread may sleep in an iteration that found few packets (0: it busy-polls);
    tx_flush_us: how long a forwarded frame may wait in an output batch (0: none);
    fine_rto_ms: the fine-rto schemes' rto_min; queue_target_fraction:
    otcp-lossless's standing queue as a share of the buffer;
    fan_in_queue_fraction: the share of the buffer its queue may rise to
    where the senders' full frames do not fit that (formulas.Lossless);
    ceiling_seconds / ceiling_repeats: each single-flow ceiling sample's
    length and how many are taken; agent_timeout_s: how long the agents may
    take to get their routes and parameters; command: the command line that
    started the experiment, recorded with its results.
    """

    out: str
    schemes: list[str] = dataclasses.field(default_factory=list)
    bw_mbps: float = 100.0
    buffers: list[int] = dataclasses.field(default_factory=lambda: [SHALLOW_BUFFER_BYTES])
    delay_us: float | None = None
    forwarding: str = "controller"
    datapath: str = DEFAULT_DATAPATH
    xdp_mode: str = DEFAULT_XDP_MODE
    pin_hosts: bool = False
    pmd_maxsleep_us: int = 0
    tx_flush_us: int = 0
    fine_rto_ms: int = DEFAULT_FINE_RTO_MS
    queue_target_fraction: float = Lossless.queue_target_fraction
    fan_in_queue_fraction: float = Lossless.fan_in_queue_fraction
    ceiling_seconds: int = 3
    ceiling_repeats: int = 3
    agent_timeout_s: float = 120.0
    command: list[str] = dataclasses.field(default_factory=list)

    def lossless(self) -> Lossless:
        """otcp-lossless's settings: its queue target and fan-in share."""
        return Lossless(queue_target_fraction=self.queue_target_fraction,
                        fan_in_queue_fraction=self.fan_in_queue_fraction)

    def switch_datapath(self) -> Datapath:
        """The datapath asked for, as the emulation takes it."""
        return Datapath.named(self.datapath, self.xdp_mode, self.pin_hosts, self.pmd_maxsleep_us, self.tx_flush_us)

"""The single-flow ceiling every run is judged against: one iperf3 flow over a network's own links.

``ceiling_samples`` measures it on a running network at one packet size,
``ExperimentConfig.ceiling_repeats`` times, more where the samples disagree
(a busy CPU elsewhere only ever lowers one flow's rate): the ones that agree
with the best are kept, the rest set aside. ``record_ceiling`` keeps the
samples in an experiment's Outcome (and its database), and the set-aside
ones in its notes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

from otcp.experiments.analysis import stats
from otcp.experiments.analysis.results import CeilingSample, Outcome, ResultStore
from otcp.experiments.runner import measure
from otcp.experiments.runner.counters import MachineTimes

if TYPE_CHECKING:
    from otcp.experiments.runner.network import Network


class CeilingMeasured(NamedTuple):
    """One single-flow ceiling sample: Mb/s, both cores' busy share, the switch threads'
    (counters.switch_thread_time; None without ovs-vswitchd) and the part of its PMD threads'
    cycles spent on packets (counters.pmd_busy; None without PMD threads), in %."""

    mbps: float
    cpu_busy_pct: float
    switch_cpu_pct: float | None
    switch_pmd_busy_pct: float | None


@dataclasses.dataclass
class CeilingTaken:
    """One network's single-flow ceiling at one packet size: the samples kept, and the
    disturbed ones set aside (stats.agreeing_ceilings), each a CeilingMeasured."""

    kept: list[CeilingMeasured]
    set_aside: list[CeilingMeasured]

    @property
    def median(self) -> float:
        """The ceiling: the median of the samples kept."""
        return stats.Spread(tuple(s.mbps for s in self.kept)).median


def ceiling_samples(network: Network[Any], sender: str, receiver: str, packet_bytes: int,
                    progress: Any) -> CeilingTaken:
    """The single-flow ceiling sender -> receiver on network at packet_bytes: config.ceiling_repeats
    samples, and while fewer than that many agree with the best (stats.agreeing_ceilings), one
    more, up to twice as many in all. The ones that agree are kept; the rest are set aside, since
    a busy CPU elsewhere only ever lowers one flow's rate (if they never agree, the ones within
    reach of the best are kept all the same)."""
    config = network.config
    # A scheme's locked cwnd lives on in the metrics cache after its routes are gone.
    network.flush_tcp_metrics([sender, receiver])
    samples: list[CeilingMeasured] = []
    while len(samples) < 2 * config.ceiling_repeats:
        if len(samples) >= config.ceiling_repeats and \
                len(stats.agreeing_ceilings([s.mbps for s in samples])) >= config.ceiling_repeats:
            break
        extra = "" if len(samples) < config.ceiling_repeats else ", again: the samples disagree"
        progress.message(f"measuring the single-flow ceiling, {packet_bytes} B packets "
                         f"({len(samples) + 1}/{config.ceiling_repeats}{extra}, {config.ceiling_seconds} s of iperf3)")
        before = MachineTimes.now()
        mbps = measure.single_flow_ceiling(network.emulation, sender, receiver, network.data_ips[receiver],
                                           seconds=config.ceiling_seconds, packet_bytes=packet_bytes)
        load = MachineTimes.now() - before
        samples.append(CeilingMeasured(mbps, load.cpu_busy_pct, load.switch_cpu_pct, load.switch_pmd_busy_pct))
    agreeing = stats.agreeing_ceilings([s.mbps for s in samples])
    taken = CeilingTaken([s for s in samples if s.mbps in agreeing], [s for s in samples if s.mbps not in agreeing])
    aside = f"; set aside as disturbed: {', '.join(f'{s.mbps:.1f}' for s in taken.set_aside)}" \
        if taken.set_aside else ""
    switch = [s.switch_cpu_pct for s in taken.kept if s.switch_cpu_pct is not None]
    pmd = [s.switch_pmd_busy_pct for s in taken.kept if s.switch_pmd_busy_pct is not None]
    busy = (f"; switch threads {min(switch):.0f}-{max(switch):.0f} % of a core" if switch else "") + \
        (f", of which on packets in its PMD threads {min(pmd):.0f}-{max(pmd):.0f} %" if pmd else "")
    progress.message(f"single-flow ceiling, {packet_bytes} B packets: median "
                     f"{taken.median:.1f} Mb/s "
                     f"({', '.join(f'{s.mbps:.1f}' for s in taken.kept)}){aside}{busy}")
    return taken


def record_ceiling(taken: CeilingTaken, senders: int, buffer_bytes: int, packet_bytes: int, outcome: Outcome,
                   store: ResultStore | None, progress: Any) -> None:
    """Keep the samples taken on the network of senders and buffer_bytes in outcome (and store),
    and the set-aside ones in outcome's notes."""
    for kept in taken.kept:
        sample = CeilingSample(senders, buffer_bytes, packet_bytes, *kept)
        outcome.ceilings.append(sample)
        if store is not None:
            store.add_ceiling(sample, outcome.ceiling())
    if taken.set_aside:
        outcome.note(progress, f"ceiling at {packet_bytes} B packets on the {senders}-sender network "
                               f"({buffer_bytes} B): set aside as disturbed (more than "
                               f"{stats.CEILING_AGREEMENT:.0%} below the best, Mb/s (both cores busy, the switch "
                               "thread busy)): "
                     + ", ".join(f"{s.mbps:.1f} ({s.cpu_busy_pct:.0f} %, "
                                 f"{'-' if s.switch_cpu_pct is None else f'{s.switch_cpu_pct:.0f} %'})"
                                 for s in taken.set_aside))

"""Every counter a run is judged by, read before and after it as one typed Snapshot.

``Counters(...).measuring()`` drains the bottleneck's queue, takes a
``Snapshot`` before the run and another after it, and gives the run their
difference, a ``Change``:

- per host, the TCP counters of ``nstat`` (TCP_COUNTERS: RTOs, retransmitted
  segments, SYN retransmissions, the receiver's own drops, ...); each
  namespace has its own MIB;
- per host, the two IPv4 queues of its link (its own egress queue and the
  switch's egress buffer toward it): what they passed on and dropped, and
  from them the loss account (``LossAccount``): every IPv4 packet the hosts
  sent is delivered, dropped at a named buffer, or "unexplained";
- per interface on the data path, its qdisc's drops and the veth's packet
  and drop counters;
- the machine's CPU (/proc/stat: both cores' busy share, its softirq and
  steal parts) and the switch's: the busy share of ovs-vswitchd's main
  thread, which forwards every packet, and where PMD threads poll the ports
  (``afxdp``), the share of their cycles spent processing packets;
- the CE marks of the ECN markers (the bottleneck's, or every marked egress), and the generations the OTCP
  controller made, where there is one.

The reading order is symmetric: before the run the network's counters
first and the machine's last, after it the machine's first, then the queue
is drained, then the network's. Parsers and the arithmetic are separate from
the readers so they can be tested on text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from otcp.experiments.runner import ovs_sockets

if TYPE_CHECKING:
    from otcp.bpf import Marker
    from otcp.experiments.runner.controller import Controller
    from otcp.experiments.runner.emulation import Emulation

# nstat counters kept per host and run.
TCP_COUNTERS = (
    "TcpExtTCPTimeouts",  # retransmission timer expirations (the incast signature)
    "TcpRetransSegs",  # every retransmitted segment
    "TcpExtTCPSynRetrans",  # SYN / SYN-ACK retransmissions (1 s initial RTO)
    "TcpExtTCPLossProbes",  # tail loss probes
    "TcpExtTCPFastRetrans",  # fast retransmits (dup ACKs / SACK)
    "TcpExtTCPSpuriousRTOs",  # timeouts F-RTO found spurious
    "TcpExtTCPDSACKRecv",  # the receiver said a retransmission was a duplicate
    "TcpExtTCPSACKReorder",  # reordering detected from SACKs
    # Where a receiver can drop what the network delivered:
    "TcpExtTCPRcvQDrop",  # receive queue full (rmem)
    "TcpExtTCPOFODrop",  # out-of-order queue full
    "TcpExtPruneCalled",  # receive queue pruned under memory pressure
    "TcpExtRcvPruned",
    "TcpExtOfoPruned",
    "TcpExtTCPBacklogDrop",  # socket backlog full while the socket was busy
    "TcpExtListenOverflows",  # accept queue full: SYNs dropped
    "TcpExtListenDrops",
    "IpInDiscards",
)
# The qdisc that holds a link's IPv4 packets (otcp.topo.fabrics.BufferedIntf.DATA_HANDLE).
DATA_QUEUE_HANDLE = "10:"
# The queue of everything else: ARP, LLDP, IPv6 (BufferedIntf.CONTROL_HANDLE).
CONTROL_QUEUE_HANDLE = "20:"


def counter_deltas(before: Mapping[str, int], after: Mapping[str, int], names: Iterable[str]) -> dict[str, int]:
    """after - before for each counter name (a missing counter counts as 0)."""
    return {name: after.get(name, 0) - before.get(name, 0) for name in names}


# --- queues and the loss account ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class QueueCounters:
    """One queue's kernel counters (``tc -s qdisc``), absolute: packets it
    passed on, packets it dropped, and what it holds now."""

    sent_packets: int
    drops: int
    backlog_bytes: int = 0
    backlog_packets: int = 0

    def __sub__(self, before: QueueCounters) -> QueueCounters:
        return QueueCounters(*(getattr(self, f.name) - getattr(before, f.name) for f in dataclasses.fields(self)))


@dataclasses.dataclass(frozen=True)
class LinkQueues:
    """The two IPv4 queues of one host's link (otcp.topo.fabrics.BufferedIntf):
    egress, the host's own queue onto its link (what it passes on is what the
    host put on the wire); buffer, the switch's egress buffer toward the host
    (the IFB's bfifo: what it passes on reaches the host)."""

    egress: QueueCounters
    buffer: QueueCounters

    def __sub__(self, before: LinkQueues) -> LinkQueues:
        return LinkQueues(self.egress - before.egress, self.buffer - before.buffer)

    def counts(self) -> dict[str, dict[str, int]]:
        """{"egress"|"buffer": {"sent_packets", "drops"}}, as the results database keeps a change."""
        return {name: {"sent_packets": queue.sent_packets, "drops": queue.drops}
                for name, queue in (("egress", self.egress), ("buffer", self.buffer))}


@dataclasses.dataclass(frozen=True)
class LossAccount:
    """Where every IPv4 data packet of a run went (ARP, LLDP and IPv6 travel
    in classes of their own and are not counted).

    sent: packets the hosts put on their links toward the switch;
    delivered: packets the switch's egress buffers passed to hosts;
    drops: packets the bottleneck's buffer (toward the receiver) dropped;
    drops_other_buffers: drops at the switch's other egress buffers;
    queued: change of what the buffers hold (0 once traffic has stopped);
    sender_queue_drops: drops in the hosts' own queues, before the wire
    (not between sender and receiver: TCP sees them as local congestion);
    switch_input_drops: frames the switch's AF_XDP ports dropped on input, their
    receive rings full (otcp.experiments.runner.ovs_sockets.xdp_input_drops; 0 on
    AF_PACKET ports, whose raised receive buffers are never full);
    unexplained: sent - delivered - drops - drops_other_buffers - queued -
    switch_input_drops, packets lost somewhere no kernel counter names (the switch itself).
    """

    sent: int
    delivered: int
    drops: int
    drops_other_buffers: int
    queued: int
    sender_queue_drops: int
    switch_input_drops: int = 0

    @property
    def unexplained(self) -> int:
        """Packets lost where no kernel counter names them."""
        return (self.sent - self.delivered - self.drops - self.drops_other_buffers - self.queued
                - self.switch_input_drops)

    def as_dict(self) -> dict[str, int]:
        """The account as the summary and the database hold it, unexplained included."""
        return {**dataclasses.asdict(self), "unexplained": self.unexplained}


def loss_account(before: Mapping[str, LinkQueues], after: Mapping[str, LinkQueues], bottleneck: str,
                 switch_input_drops: int = 0) -> LossAccount:
    """The LossAccount between two snapshots {host: LinkQueues} (the same
    hosts in both), bottleneck the host whose buffer is the bottleneck;
    switch_input_drops: what the switch's AF_XDP ports dropped on input meanwhile."""
    if set(before) != set(after):
        raise ValueError(f"snapshots of different hosts: {sorted(set(before) ^ set(after))}")
    if bottleneck not in after:
        raise ValueError(f"the bottleneck host {bottleneck} is not in the snapshots")
    change = {host: after[host] - before[host] for host in after}
    others = [host for host in change if host != bottleneck]
    return LossAccount(sent=sum(c.egress.sent_packets for c in change.values()),
                       delivered=sum(c.buffer.sent_packets for c in change.values()),
                       drops=change[bottleneck].buffer.drops,
                       drops_other_buffers=sum(change[host].buffer.drops for host in others),
                       queued=sum(c.buffer.backlog_packets for c in change.values()),
                       sender_queue_drops=sum(c.egress.drops for c in change.values()),
                       switch_input_drops=switch_input_drops)


def parse_nstat(text: str) -> dict[str, int]:
    """The kernel counters of ``nstat --json`` output, as {name: int}."""
    try:
        document = json.loads(text)
        counters = document["kernel"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable nstat output: {exc}") from None
    return {name: int(value) for name, value in counters.items()}


def parse_qdisc_drops(text: str) -> dict[str, int]:
    """{device: drops at its root qdisc} from ``tc -s -j qdisc show`` (all devices).

    A root qdisc counts what its children drop (HTB adds a child's failed
    enqueue to its own drops), so the root's number is the device's total.
    """
    return {q["dev"]: int(q["drops"]) for q in json.loads(text) if q.get("root") and "dev" in q}


def parse_link_counters(text: str) -> dict[str, dict[str, int]]:
    """{device: {"rx_packets", "tx_packets", "rx_dropped", "tx_dropped"}} from ``ip -j -s link show``."""
    found = {}
    for link in json.loads(text):
        counters = link.get("stats64") or link.get("stats") or {}
        rx, tx = counters.get("rx", {}), counters.get("tx", {})
        found[link["ifname"]] = {"rx_packets": int(rx.get("packets", 0)), "tx_packets": int(tx.get("packets", 0)),
                                 "rx_dropped": int(rx.get("dropped", 0)), "tx_dropped": int(tx.get("dropped", 0))}
    return found


def parse_queue_counters(text: str, handle: str = DATA_QUEUE_HANDLE) -> dict[str, QueueCounters]:
    """{device: QueueCounters of its qdisc with handle} from ``tc -s -j qdisc show`` (all devices)."""
    return {q["dev"]: QueueCounters(sent_packets=int(q.get("packets", 0)), drops=int(q.get("drops", 0)),
                                    backlog_bytes=int(q.get("backlog", 0)), backlog_packets=int(q.get("qlen", 0)))
            for q in json.loads(text) if q.get("handle") == handle and "dev" in q}


def tcp_counters(emulation: Emulation, host: str) -> dict[str, int]:
    """TCP_COUNTERS of host's namespace now (absolute)."""
    counters = parse_nstat(emulation.run(host, ["nstat", "--ignore", "--noupdate", "--zeros", "--json"]))
    return {name: counters.get(name, 0) for name in TCP_COUNTERS}


def path_counters(emulation: Emulation, interfaces: Iterable[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """Packet and drop counters of every interface on the data path, now (absolute).

    interfaces: (node, device) pairs: host data interfaces and switch ports.
    Returns {"node:device": {"qdisc_drops", "rx_dropped", "tx_dropped",
    "rx_packets", "tx_packets"}}.
    """
    by_node: dict[str, list[str]] = {}
    for node, device in interfaces:
        by_node.setdefault(node, []).append(device)
    found = {}
    for node, devices in by_node.items():
        qdiscs = parse_qdisc_drops(emulation.run(node, ["tc", "-s", "-j", "qdisc", "show"]))
        links = parse_link_counters(emulation.run(node, ["ip", "-j", "-s", "link", "show"]))
        for device in devices:
            found[f"{node}:{device}"] = {"qdisc_drops": qdiscs.get(device, 0), **links[device]}
    return found


def link_queues(emulation: Emulation, hosts: Iterable[str]) -> dict[str, LinkQueues]:
    """{host: LinkQueues} now: the IPv4 queues of every host's data link
    (its own egress queue and the switch's egress buffer toward it, on the
    IFB in its namespace)."""
    found = {}
    for host in hosts:
        intf = emulation.host(host).defaultIntf()
        queues = parse_queue_counters(emulation.run(host, ["tc", "-s", "-j", "qdisc", "show"]))
        buffer_device = intf.buffer_device
        missing = [d for d in (intf.name, buffer_device) if d not in queues]
        if missing:
            raise RuntimeError(f"{host}: no IPv4 queue ({DATA_QUEUE_HANDLE}) on {', '.join(map(str, missing))}")
        found[host] = LinkQueues(egress=queues[intf.name], buffer=queues[buffer_device])
    return found


def wait_empty(emulation: Emulation, host: str, device: str, timeout: float = 10.0) -> None:
    """Wait until the IPv4 queue on device (in host's namespace) holds nothing."""
    deadline = time.monotonic() + timeout
    while True:
        queues = parse_queue_counters(emulation.run(host, ["tc", "-s", "-j", "qdisc", "show"]))
        if queues[device].backlog_packets == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{host}:{device} still holds {queues[device].backlog_packets} packets after "
                               f"{timeout:.0f} s")
        time.sleep(0.05)


# --- the machine: CPU and the switch's thread --------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CpuTimes:
    """Jiffies from /proc/stat, per CPU: busy (everything but idle and iowait), total, and two
    parts of busy: softirq (the kernel's network processing: veth, qdiscs, TCP) and steal
    (time the hypervisor gave another guest)."""

    busy: tuple[int, ...]
    total: tuple[int, ...]
    softirq: tuple[int, ...]
    steal: tuple[int, ...]


def parse_proc_stat(text: str) -> CpuTimes:
    """CpuTimes of every cpuN line of /proc/stat."""
    busy, total, softirq, steal = [], [], [], []
    for line in text.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or fields[0] == "cpu":
            continue
        values = [int(v) for v in fields[1:]] + [0] * 8  # older kernels have fewer columns
        # user nice system idle iowait irq softirq steal (guest and guest_nice are inside user and nice).
        idle = values[3] + values[4]
        everything = sum(values[:8])
        busy.append(everything - idle)
        total.append(everything)
        softirq.append(values[6])
        steal.append(values[7])
    if not total:
        raise ValueError("no cpuN lines in /proc/stat")
    return CpuTimes(tuple(busy), tuple(total), tuple(softirq), tuple(steal))


def cpu_busy(before: CpuTimes, after: CpuTimes) -> tuple[float, float]:
    """(mean busy % over all CPUs, busy % of the busiest CPU) between two CpuTimes."""
    if len(before.total) != len(after.total):
        raise ValueError("CPU count changed between the samples")
    shares = []
    for b0, b1, t0, t1 in zip(before.busy, after.busy, before.total, after.total):
        shares.append(100.0 * (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0)
    total = sum(t1 - t0 for t0, t1 in zip(before.total, after.total))
    busy = sum(b1 - b0 for b0, b1 in zip(before.busy, after.busy))
    return (100.0 * busy / total if total else 0.0), max(shares)


def cpu_parts(before: CpuTimes, after: CpuTimes) -> dict[str, float]:
    """{"softirq": %, "steal": %}: those parts of all CPUs' time between two CpuTimes."""
    total = sum(after.total) - sum(before.total)
    return {name: 100.0 * (sum(getattr(after, name)) - sum(getattr(before, name))) / total if total else 0.0
            for name in ("softirq", "steal")}


@dataclasses.dataclass(frozen=True)
class ThreadTime:
    """One thread's CPU seconds so far (user and system) and the monotonic clock then."""

    tid: int
    cpu_s: float
    at_s: float


def parse_task_stat(text: str, ticks_per_second: int) -> float:
    """CPU seconds (utime + stime) from a /proc/PID/task/TID/stat line."""
    fields = text[text.rindex(")") + 2:].split()  # the name in parentheses may hold spaces
    return (int(fields[11]) + int(fields[12])) / ticks_per_second


def thread_busy(before: ThreadTime | None, after: ThreadTime | None) -> float | None:
    """The thread's busy share of one core between two ThreadTimes, in %; None if either is
    missing or they are of different threads (the process restarted)."""
    if before is None or after is None or before.tid != after.tid or after.at_s <= before.at_s:
        return None
    return 100.0 * (after.cpu_s - before.cpu_s) / (after.at_s - before.at_s)


def read_cpu_times() -> CpuTimes:
    """The machine's CPU times now (/proc/stat; the same in every namespace)."""
    with open("/proc/stat", encoding="ascii") as handle:
        return parse_proc_stat(handle.read())


def switch_thread_time(pid: int | None) -> ThreadTime | None:
    """The CPU time of ovs-vswitchd's forwarding threads now, or None when no ovs-vswitchd runs
    (pid: its pid, ``ovs_sockets.vswitchd_pid()``).

    On AF_PACKET and afxdp-nonpmd ports (otcp.experiments.runner.datapath) the main thread polls
    every port and forwards every packet of the emulation, so its busy share of a core is the
    switch's load; afxdp ports are polled by PMD threads (``pmd-c..``) instead, whose time is
    added (a PMD thread busy-polls: it is at 100 % of its core whatever the load)."""
    if pid is None:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = 0.0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", encoding="ascii", errors="replace") as handle:
                text = handle.read()
        except OSError:
            if int(task) == pid:
                return None
            continue
        if int(task) == pid or _task_name(text).startswith("pmd"):
            seconds += parse_task_stat(text, ticks)
    return ThreadTime(pid, seconds, time.monotonic())


def _task_name(stat: str) -> str:
    """A task's name, the (comm) field of its /proc/PID/task/TID/stat line."""
    return stat[stat.find("(") + 1:stat.rfind(")")]


@dataclasses.dataclass(frozen=True)
class PmdCycles:
    """One PMD thread's TSC cycles so far, as ``ovs-appctl dpif-netdev/pmd-stats-show`` counts
    them: spent polling ports that had nothing (idle) and spent on packets (processing)."""

    idle: int
    processing: int


_PMD_THREAD = re.compile(r"^pmd thread (.*):$")
_PMD_CYCLES = re.compile(r"^\s+(idle|processing) cycles: (\d+)")


def parse_pmd_stats(text: str) -> dict[str, PmdCycles]:
    """{thread ("numa_id 0 core_id 1"): PmdCycles} of every PMD thread in ``ovs-appctl
    dpif-netdev/pmd-stats-show`` output; the main thread's section is left out (its time is
    switch_thread_time's). A PMD thread that prints no cycle lines is an error: the format changed."""
    threads: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        header = _PMD_THREAD.match(line)
        if header:
            current = threads.setdefault(header.group(1), {})
            continue
        if line and not line[0].isspace():
            current = None  # "main thread:" and anything else unindented
            continue
        cycles = _PMD_CYCLES.match(line)
        if cycles and current is not None:
            current[cycles.group(1)] = int(cycles.group(2))
    missing = [name for name, found in threads.items() if set(found) != {"idle", "processing"}]
    if missing:
        raise ValueError(f"pmd-stats-show: no idle and processing cycles for pmd thread {missing[0]}")
    return {name: PmdCycles(found["idle"], found["processing"]) for name, found in threads.items()}


def pmd_cycles(pid: int | None) -> dict[str, PmdCycles] | None:
    """The PMD threads' cycles now (parse_pmd_stats), or None where no ovs-vswitchd runs (pid None)
    or answers, or it runs no PMD thread (AF_PACKET and afxdp-nonpmd ports)."""
    if pid is None:
        return None
    shown = subprocess.run(["ovs-appctl", "--timeout=10", "dpif-netdev/pmd-stats-show"], capture_output=True,
                           text=True, check=False)
    if shown.returncode != 0:
        return None  # no userspace datapath yet: nothing polls
    return parse_pmd_stats(shown.stdout) or None


def pmd_busy(before: Mapping[str, PmdCycles] | None, after: Mapping[str, PmdCycles] | None) -> float | None:
    """The PMD threads' processing share between two readings, in % of one core, summed over the
    threads in both (each polls on its own core, so 100 % per thread at most); None if either
    reading is missing, no thread is in both, or no cycle passed. A PMD thread is at 100 % of its
    core by the clock whatever the load: this is the part that did work."""
    if not before or not after:
        return None
    shares = []
    for name in before.keys() & after.keys():
        processing = after[name].processing - before[name].processing
        spent = processing + after[name].idle - before[name].idle
        if spent > 0 and processing >= 0:
            shares.append(100.0 * processing / spent)
    return sum(shares) if shares else None


@dataclasses.dataclass(frozen=True)
class MachineLoad:
    """What the machine did between two MachineTimes, in %: both cores' busy share, of the
    busiest core, the softirq and steal parts of all cores' time, the switch's
    forwarding threads' share of one core (None without ovs-vswitchd), and the part of
    its PMD threads' cycles spent processing packets (pmd_busy; None without PMD threads)."""

    cpu_busy_pct: float
    cpu_busiest_pct: float
    cpu_softirq_pct: float
    cpu_steal_pct: float
    switch_cpu_pct: float | None
    switch_pmd_busy_pct: float | None = None


@dataclasses.dataclass(frozen=True)
class MachineTimes:
    """The machine's CPU times, the switch thread's and its PMD threads' cycles, at one moment."""

    cpu: CpuTimes
    switch_thread: ThreadTime | None
    pmd: dict[str, PmdCycles] | None = None

    @classmethod
    def now(cls) -> MachineTimes:
        """Read all three now."""
        pid = ovs_sockets.vswitchd_pid()
        return cls(read_cpu_times(), switch_thread_time(pid), pmd_cycles(pid))

    def __sub__(self, before: MachineTimes) -> MachineLoad:
        mean, busiest = cpu_busy(before.cpu, self.cpu)
        parts = cpu_parts(before.cpu, self.cpu)
        return MachineLoad(mean, busiest, parts["softirq"], parts["steal"],
                           thread_busy(before.switch_thread, self.switch_thread), pmd_busy(before.pmd, self.pmd))


# --- the snapshot ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Change:
    """What happened between two Snapshots (after - before), per counter.

    tcp: {host: {TCP_COUNTERS name: delta}}; queues: {host: LinkQueues of
    deltas}; interfaces: {"node:device": {counter: delta}}; loss: the
    LossAccount; machine: the CPU's and the switch's load; ce_marks: CE marks
    at the bottleneck (None: no marker); generations: new controller
    generations (None: no controller asked).
    """

    tcp: dict[str, dict[str, int]]
    queues: dict[str, LinkQueues]
    interfaces: dict[str, dict[str, int]]
    loss: LossAccount
    machine: MachineLoad
    ce_marks: int | None
    generations: int | None

    def tcp_total(self, name: str) -> int:
        """One TCP counter's change summed over the hosts."""
        return sum(counters[name] for counters in self.tcp.values())

    @property
    def timeouts(self) -> int:
        """Retransmission timeouts, summed over the hosts."""
        return self.tcp_total("TcpExtTCPTimeouts")

    @property
    def retransmissions(self) -> int:
        """Retransmitted segments, summed over the hosts."""
        return self.tcp_total("TcpRetransSegs")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Every counter of one network at one moment (absolute values; see the module docstring).

    bottleneck: the host whose switch buffer is the bottleneck (for the loss
    account); tcp: {host: TCP_COUNTERS}; queues: {host: LinkQueues};
    interfaces: {"node:device": counters}; machine: CPU and switch thread;
    ce_marked: the marker's CE count (None: no marker); generation: the
    controller's newest generation (None: not asked); switch_input_drops: what
    the switch's AF_XDP ports have dropped on input so far (None: AF_PACKET ports).
    """

    bottleneck: str
    tcp: dict[str, dict[str, int]]
    queues: dict[str, LinkQueues]
    interfaces: dict[str, dict[str, int]]
    machine: MachineTimes
    ce_marked: int | None = None
    generation: int | None = None
    switch_input_drops: int | None = None

    def __sub__(self, before: Snapshot) -> Change:
        if self.bottleneck != before.bottleneck:
            raise ValueError(f"snapshots of different bottlenecks: {before.bottleneck}, {self.bottleneck}")
        return Change(
            tcp={host: counter_deltas(before.tcp[host], self.tcp[host], TCP_COUNTERS) for host in self.tcp},
            queues={host: self.queues[host] - before.queues[host] for host in self.queues},
            interfaces={place: counter_deltas(before.interfaces[place], counters, counters)
                        for place, counters in self.interfaces.items()},
            loss=loss_account(before.queues, self.queues, self.bottleneck,
                              _difference(before.switch_input_drops, self.switch_input_drops) or 0),
            machine=self.machine - before.machine,
            ce_marks=_difference(before.ce_marked, self.ce_marked),
            generations=_difference(before.generation, self.generation))


def _difference(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else after - before


@dataclasses.dataclass
class Window:
    """A run between two Snapshots: before is taken on entering Counters.measuring, after and
    change when the run inside it ends without an exception."""

    before: Snapshot
    after: Snapshot | None = None

    @property
    def change(self) -> Change:
        """after - before."""
        if self.after is None:
            raise RuntimeError("the run has not ended")
        return self.after - self.before


class Counters:
    """Reads Snapshots of one running network.

    hosts: whose TCP counters and link queues are read; bottleneck: the host
    whose switch buffer is the bottleneck (drained before each snapshot's
    network part); interfaces: (node, device) pairs whose packet and drop
    counters are read; markers: the ECN markers (their CE counts, summed);
    controller: the OTCP controller (its generation); quiet: a context
    manager factory the network's counters are read under (the agents
    paused: Agents.paused).
    """

    def __init__(self, emulation: Emulation, hosts: Iterable[str], bottleneck: str,
                 interfaces: Iterable[tuple[str, str]] = (), markers: Iterable[Marker] = (),
                 controller: Controller | None = None,
                 quiet: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext) -> None:
        self.emulation = emulation
        self.hosts = list(hosts)
        self.bottleneck = bottleneck
        self.interfaces = list(interfaces)
        self.markers = list(markers)
        self.controller = controller
        self.quiet = quiet

    def drain(self) -> None:
        """Wait until the bottleneck's buffer is empty: a loss account needs nothing in flight."""
        wait_empty(self.emulation, self.bottleneck, self.emulation.host(self.bottleneck).defaultIntf().buffer_device)

    def _network(self, closest_first: bool) -> dict[str, Any]:
        """The network's counters, the queues read closest to the run (last before it, first after)."""
        with self.quiet():
            readers: list[tuple[str, Callable[[], Any]]] = [
                ("tcp", lambda: {host: tcp_counters(self.emulation, host) for host in self.hosts}),
                ("interfaces", lambda: path_counters(self.emulation, self.interfaces)),
                ("queues", lambda: link_queues(self.emulation, self.hosts))]
            if self.emulation.datapath.used.is_xdp:
                readers.insert(1, ("switch_input_drops", ovs_sockets.xdp_input_drops))
            return {name: read() for name, read in (reversed(readers) if closest_first else readers)}

    def _marked(self) -> int | None:
        return sum(marker.counters().marked for marker in self.markers) if self.markers else None

    def _generation(self) -> int | None:
        return None if self.controller is None else self.controller.generation()

    def snapshot(self) -> Snapshot:
        """Every counter now (the bottleneck drained first)."""
        self.drain()
        network = self._network(closest_first=False)
        marked = self._marked()
        return Snapshot(self.bottleneck, machine=MachineTimes.now(), ce_marked=marked,
                        generation=self._generation(), **network)

    @contextlib.contextmanager
    def measuring(self) -> Iterator[Window]:
        """A Window around the run inside: the snapshot before it, the network's counters
        first; after it the machine's first (CPU over the run alone), the bottleneck
        drained, then the network's."""
        window = Window(self.snapshot())
        yield window
        machine, generation = MachineTimes.now(), self._generation()
        self.drain()
        marked = self._marked()
        window.after = Snapshot(self.bottleneck, machine=machine, ce_marked=marked, generation=generation,
                                **self._network(closest_first=True))

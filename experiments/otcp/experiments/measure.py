"""What a run measures besides the workload itself, and how to read it.

- TCP counters per host: ``nstat`` in the host's namespace (each namespace
  has its own MIB), absolute values read before and after a run;
- the loss account (``stats.LossAccount``): IPv4 packets the hosts put on
  their links, packets the switch's egress buffers delivered and dropped,
  and what no counter explains; plus every qdisc's and veth's counters;
- the peak backlog of the bottleneck queue (sampled);
- host CPU (/proc/stat) over the measured rounds, and the switch's: the
  busy share of ovs-vswitchd's main thread, which forwards every packet;
- the latency probe: ``ping`` at a fixed interval through the bottleneck
  while the workload runs;
- the single-flow ceiling: one iperf3 flow over the same links, at a given packet size.

Parsers are separate from the collectors so they can be tested on text.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

from otcp.experiments import stats

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
PING_REPLY = re.compile(r"icmp_seq=(\d+) .*time=([0-9.]+) ms")
PING_SENT = re.compile(r"(\d+) packets transmitted")


def parse_nstat(text):
    """The kernel counters of ``nstat --json`` output, as {name: int}."""
    try:
        document = json.loads(text)
        counters = document["kernel"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable nstat output: {exc}") from None
    return {name: int(value) for name, value in counters.items()}


def parse_ping(text):
    """(RTTs in ms of the answered probes, probes sent) from ping's output.

    The number sent is ping's own summary line (printed when it is stopped
    with SIGINT); without it, the highest sequence number seen.
    """
    rtts = []
    highest = 0
    for match in PING_REPLY.finditer(text):
        highest = max(highest, int(match.group(1)))
        rtts.append(float(match.group(2)))
    sent = PING_SENT.search(text)
    return rtts, int(sent.group(1)) if sent else highest


def parse_iperf3(text):
    """Receiver-side goodput in Mb/s of an ``iperf3 -J`` client run."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"unreadable iperf3 output: {exc}") from None
    if "error" in document:
        raise ValueError(f"iperf3: {document['error']}")
    return document["end"]["sum_received"]["bits_per_second"] / 1e6


def tcp_counters(emulation, host):
    """TCP_COUNTERS of host's namespace now (absolute)."""
    counters = parse_nstat(emulation.run(host, ["nstat", "--ignore", "--noupdate", "--zeros", "--json"]))
    return {name: counters.get(name, 0) for name in TCP_COUNTERS}


class Probe:
    """A ping from one host to another every interval seconds, while a run goes on."""

    def __init__(self, emulation, source, target_ip, interval=0.01):
        self.emulation = emulation
        self.argv = ["ping", "-n", "-i", f"{interval:g}", "-W", "1", target_ip]
        self.source = source
        self.process = None

    def __enter__(self):
        self.process = self.emulation.start(self.source, self.argv, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT)
        return self

    def stop(self):
        """Stop ping (SIGINT: it prints its summary) and return (rtts_ms, sent)."""
        self.process.send_signal(signal.SIGINT)
        try:
            out, _ = self.process.communicate(timeout=5)
        finally:
            self.emulation.stop(self.process)
        return parse_ping(out.decode(errors="replace"))

    def __exit__(self, *exc):
        if self.process is not None:
            self.emulation.stop(self.process)


def single_flow_ceiling(emulation, sender, receiver, receiver_ip, seconds=5, port=5299, cc="cubic",
                        packet_bytes=1500):
    """Goodput (Mb/s) of one iperf3 flow sender -> receiver over the emulated links,
    in IP packets of packet_bytes (TCP_MAXSEG packet_bytes - 40: the segments a
    host with that MTU sends)."""
    server = emulation.start(receiver, ["iperf3", "-s", "-1", "-p", str(port)])
    try:
        emulation.wait_listening(receiver, port)
        output = emulation.run(sender, ["iperf3", "-c", receiver_ip, "-p", str(port), "-t", str(seconds), "-O", "1",
                                        "-C", cc, "-M", str(packet_bytes - 40), "-J"],
                              check=False)
        return parse_iperf3(output)
    finally:
        emulation.stop(server)



def parse_qdisc_drops(text):
    """{device: drops at its root qdisc} from ``tc -s -j qdisc show`` (all devices).

    A root qdisc counts what its children drop (HTB adds a child's failed
    enqueue to its own drops), so the root's number is the device's total.
    """
    return {q["dev"]: int(q["drops"]) for q in json.loads(text) if q.get("root") and "dev" in q}


def parse_link_counters(text):
    """{device: {"rx_packets", "tx_packets", "rx_dropped", "tx_dropped"}} from ``ip -j -s link show``."""
    found = {}
    for link in json.loads(text):
        counters = link.get("stats64") or link.get("stats") or {}
        rx, tx = counters.get("rx", {}), counters.get("tx", {})
        found[link["ifname"]] = {"rx_packets": int(rx.get("packets", 0)), "tx_packets": int(tx.get("packets", 0)),
                                 "rx_dropped": int(rx.get("dropped", 0)), "tx_dropped": int(tx.get("dropped", 0))}
    return found


def path_counters(emulation, interfaces):
    """Packet and drop counters of every interface on the data path, now (absolute).

    interfaces: (node, device) pairs: host data interfaces and switch ports.
    Returns {"node:device": {"qdisc_drops", "rx_dropped", "tx_dropped",
    "rx_packets", "tx_packets"}}.
    """
    by_node = {}
    for node, device in interfaces:
        by_node.setdefault(node, []).append(device)
    found = {}
    for node, devices in by_node.items():
        qdiscs = parse_qdisc_drops(emulation.run(node, ["tc", "-s", "-j", "qdisc", "show"]))
        links = parse_link_counters(emulation.run(node, ["ip", "-j", "-s", "link", "show"]))
        for device in devices:
            found[f"{node}:{device}"] = {"qdisc_drops": qdiscs.get(device, 0), **links[device]}
    return found


def parse_queue_counters(text, handle=DATA_QUEUE_HANDLE):
    """{device: QueueCounters of its qdisc with handle} from ``tc -s -j qdisc show`` (all devices)."""
    return {q["dev"]: stats.QueueCounters(sent_packets=int(q.get("packets", 0)), drops=int(q.get("drops", 0)),
                                          backlog_bytes=int(q.get("backlog", 0)), backlog_packets=int(q.get("qlen", 0)))
            for q in json.loads(text) if q.get("handle") == handle and "dev" in q}


def link_queues(emulation, hosts):
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
        found[host] = stats.LinkQueues(egress=queues[intf.name], buffer=queues[buffer_device])
    return found


def wait_empty(emulation, host, device, timeout=10.0):
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


def read_cpu_times():
    """The machine's CPU times now (/proc/stat; the same in every namespace)."""
    with open("/proc/stat", encoding="ascii") as handle:
        return stats.parse_proc_stat(handle.read())


#: Where Open vSwitch keeps its pid files (its own OVS_RUNDIR convention).
OVS_RUNDIR = os.environ.get("OVS_RUNDIR", "/var/run/openvswitch")


def switch_thread_time():
    """ovs-vswitchd's main thread's CPU time now (a stats.ThreadTime), or None when no
    ovs-vswitchd runs. Without DPDK the userspace datapath runs no PMD threads: that one
    thread polls every port and forwards every packet of the emulation, so its busy share
    of a core is the switch's load."""
    try:
        with open(os.path.join(OVS_RUNDIR, "ovs-vswitchd.pid"), encoding="ascii") as handle:
            pid = int(handle.read())
        with open(f"/proc/{pid}/task/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except (OSError, ValueError):
        return None
    return stats.ThreadTime(pid, stats.parse_task_stat(text, os.sysconf("SC_CLK_TCK")), time.monotonic())


class BacklogSampler:
    """Samples the backlog (bytes) of one queue, the qdisc with handle on
    device in node's namespace, while the context lasts: a sampler process
    in that namespace (otcp.experiments.backlog_probe, a netlink dump every half
    millisecond). peak is the largest backlog seen: the buffer the port
    really offered; samples how many were taken; mean their mean; with
    series, every sample as (CLOCK_MONOTONIC seconds, bytes), and with
    switch_inputs (root-namespace ifindexes of switch ports, which need
    series) a third value: the bytes queued in the switch's input sockets
    for those ports (otcp.experiments.backlog_probe --switch-inputs)."""

    def __init__(self, emulation, node, device, handle=DATA_QUEUE_HANDLE, interval=0.0005, series=False,
                 switch_inputs=()):
        self.emulation = emulation
        self.node = node
        self.argv = [sys.executable, "-m", "otcp.experiments.backlog_probe", "--dev", device, "--handle", handle,
                     "--interval", str(interval)] + (["--series"] if series else []) \
            + (["--switch-inputs", ",".join(str(index) for index in switch_inputs)] if switch_inputs else [])
        self.peak = 0
        self.samples = 0
        self.mean = 0.0
        self.series = []
        self.process = None

    def __enter__(self):
        self.process = self.emulation.start(self.node, self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE)
        if self.process.stdout.readline().strip() != b"ready":
            error = self.process.stderr.read().decode(errors="replace").strip()
            self.emulation.stop(self.process)
            raise RuntimeError(f"{self.node}: the backlog sampler did not start: {error}")
        return self

    def __exit__(self, *exc):
        try:
            out, err = self.process.communicate(input=b"", timeout=10)
            if self.process.returncode != 0:
                raise RuntimeError(f"{self.node}: the backlog sampler failed: {err.decode(errors='replace').strip()}")
            result = json.loads(out)
            self.peak, self.samples, self.mean = result["peak"], result["samples"], result["mean"]
            self.series = [tuple(sample) for sample in result.get("series", [])]
        finally:
            self.emulation.stop(self.process)

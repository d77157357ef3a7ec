"""What a run measures besides the workload itself, and how to read it.

- TCP counters per host: ``nstat`` in the host's namespace (each namespace
  has its own MIB), absolute values read before and after a run;
- drops at a switch port: ``tc -s -j qdisc`` on the port, from the bfifo
  that is the port's egress buffer;
- the latency probe: ``ping`` at a fixed interval through the bottleneck
  while the workload runs;
- the single-flow ceiling: one iperf3 flow over the same links.

Parsers are separate from the collectors so they can be tested on text.
"""

import json
import re
import signal
import subprocess

# nstat counters kept per host and run.
TCP_COUNTERS = (
    "TcpExtTCPTimeouts",  # retransmission timer expirations (the incast signature)
    "TcpRetransSegs",  # every retransmitted segment
    "TcpExtTCPSynRetrans",  # SYN / SYN-ACK retransmissions (1 s initial RTO)
    "TcpExtTCPLossProbes",  # tail loss probes
    "TcpExtTCPFastRetrans",  # fast retransmits (dup ACKs / SACK)
    "TcpExtTCPSpuriousRTOs",  # timeouts F-RTO found spurious
)
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


def parse_buffer_drops(text):
    """Drops counted by the bfifo (the egress buffer) in ``tc -s -j qdisc show`` output."""
    try:
        qdiscs = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"unreadable tc output: {exc}") from None
    fifos = [q for q in qdiscs if q.get("kind") == "bfifo"]
    if len(fifos) != 1:
        raise ValueError(f"expected one bfifo on the port, found {len(fifos)}")
    return int(fifos[0]["drops"])


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


def port_drops(emulation, switch, interface):
    """Drops so far at the egress buffer of switch's interface."""
    return parse_buffer_drops(emulation.run(switch, ["tc", "-s", "-j", "qdisc", "show", "dev", interface]))


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


def single_flow_ceiling(emulation, sender, receiver, receiver_ip, seconds=5, port=5299, cc="cubic"):
    """Goodput (Mb/s) of one iperf3 flow sender -> receiver over the emulated links."""
    server = emulation.start(receiver, ["iperf3", "-s", "-1", "-p", str(port)])
    try:
        emulation.wait_listening(receiver, port)
        output = emulation.run(sender, ["iperf3", "-c", receiver_ip, "-p", str(port), "-t", str(seconds), "-O", "1",
                                        "-C", cc, "-J"], check=False)
        return parse_iperf3(output)
    finally:
        emulation.stop(server)


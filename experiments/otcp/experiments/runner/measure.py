"""What a run measures while it goes on, besides the counters (otcp.experiments.runner.counters).

- the latency probe: ``ping`` at a fixed interval through the bottleneck
  while the workload runs;
- the backlog of the bottleneck queue, sampled (its peak, mean and series),
  and with it what the switch's input sockets hold;
- the single-flow ceiling: one iperf3 flow over the same links, at a given packet size;
- the idle network's round trip between two hosts (a ping series' median).

Parsers are separate from the collectors so they can be tested on text.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from otcp.experiments.runner.counters import DATA_QUEUE_HANDLE

if TYPE_CHECKING:
    from otcp.experiments.runner.emulation import Emulation

PING_REPLY = re.compile(r"icmp_seq=(\d+) .*time=([0-9.]+) ms")
PING_SENT = re.compile(r"(\d+) packets transmitted")


def parse_ping(text: str) -> tuple[list[float], int]:
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


def parse_iperf3(text: str) -> float:
    """Receiver-side goodput in Mb/s of an ``iperf3 -J`` client run."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"unreadable iperf3 output: {exc}") from None
    if "error" in document:
        raise ValueError(f"iperf3: {document['error']}")
    return document["end"]["sum_received"]["bits_per_second"] / 1e6


class Probe:
    """A ping from one host to another every interval seconds, while a run goes on."""

    def __init__(self, emulation: Emulation, source: str, target_ip: str, interval: float = 0.01) -> None:
        self.emulation = emulation
        self.argv = ["ping", "-n", "-i", f"{interval:g}", "-W", "1", target_ip]
        self.source = source
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Probe:
        self.process = self.emulation.start(self.source, self.argv, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT)
        return self

    def stop(self) -> tuple[list[float], int]:
        """Stop ping (SIGINT: it prints its summary) and return (rtts_ms, sent)."""
        if self.process is None:
            raise RuntimeError("the probe was not started")
        self.process.send_signal(signal.SIGINT)
        try:
            out, _ = self.process.communicate(timeout=5)
        finally:
            self.emulation.stop(self.process)
        return parse_ping(out.decode(errors="replace"))

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.emulation.stop(self.process)


def idle_rtt_s(emulation: Emulation, source: str, target_ip: str, pings: int = 20, interval: float = 0.01) -> float:
    """The idle path's round trip from source to target_ip (s): the median of pings pings, after
    one left out (it may wait for the controller to set up the pair's path). RuntimeError when
    fewer than half are answered."""
    argv = ["ping", "-n", "-c", str(pings + 1), "-i", f"{interval:g}", "-W", "1", target_ip]
    rtts, _ = parse_ping(emulation.run(source, argv, check=False))
    if len(rtts) < (pings + 1) // 2:
        raise RuntimeError(f"{source} -> {target_ip}: {len(rtts)} of {pings + 1} pings answered on the idle network")
    kept = sorted(rtts[1:] or rtts)
    return kept[len(kept) // 2] / 1000.0


def single_flow_ceiling(emulation: Emulation, sender: str, receiver: str, receiver_ip: str, seconds: float = 5,
                        port: int = 5299, cc: str = "cubic", packet_bytes: int = 1500) -> float:
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



class BacklogSampler:
    """Samples the backlog (bytes) of one queue, the qdisc with handle on
    device in node's namespace, while the context lasts: a sampler process
    in that namespace (otcp.experiments.hostprogs.backlog_probe, a netlink dump every half
    millisecond). peak is the largest backlog seen: the buffer the port
    really offered; samples how many were taken; mean their mean; with
    series, every sample as (CLOCK_MONOTONIC seconds, bytes), and with
    switch_inputs (root-namespace ifindexes of switch ports, which need
    series) a third value: the bytes queued in the switch's input sockets
    for those ports (otcp.experiments.hostprogs.backlog_probe --switch-inputs)."""

    def __init__(self, emulation: Emulation, node: str, device: str, handle: str = DATA_QUEUE_HANDLE,
                 interval: float = 0.0005, series: bool = False, switch_inputs: Iterable[int] = ()) -> None:
        self.emulation = emulation
        self.node = node
        inputs = ",".join(str(index) for index in switch_inputs)
        self.argv = [sys.executable, "-m", "otcp.experiments.hostprogs.backlog_probe", "--dev", device,
                     "--handle", handle, "--interval", str(interval)] + (["--series"] if series else []) \
            + (["--switch-inputs", inputs] if inputs else [])
        self.peak = 0
        self.samples = 0
        self.mean = 0.0
        self.series: list[tuple[float, ...]] = []
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> BacklogSampler:
        self.process = self.emulation.start(self.node, self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE)
        assert self.process.stdout is not None and self.process.stderr is not None
        if self.process.stdout.readline().strip() != b"ready":
            error = self.process.stderr.read().decode(errors="replace").strip()
            self.emulation.stop(self.process)
            raise RuntimeError(f"{self.node}: the backlog sampler did not start: {error}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is None:
            return
        try:
            out, err = self.process.communicate(input=b"", timeout=10)
            if self.process.returncode != 0:
                raise RuntimeError(f"{self.node}: the backlog sampler failed: {err.decode(errors='replace').strip()}")
            result = json.loads(out)
            self.peak, self.samples, self.mean = result["peak"], result["samples"], result["mean"]
            self.series = [tuple(sample) for sample in result.get("series", [])]
        finally:
            self.emulation.stop(self.process)

"""Calibration of the emulated switch: does the bottleneck hold exactly its
configured buffer, and is every lost packet counted where it is dropped?

For every buffer size, one network: the receiver h1 behind the switch's
bottleneck port (bw Mb/s, the buffer under test) and one sender h2 whose own
link runs ``overload`` times faster, so a burst from h2 fills the bottleneck
and keeps it full. For every packet size, one UDP burst
(``otcp.experiments.hostprogs.burst``), long enough to fill the buffer and keep it full
for ``overflow_ms`` more. Each row reports:

- peak_backlog_bytes: the largest backlog sampled on the bottleneck's
  buffer (frames, Ethernet header included, as the queue counts them);
- sent, received: datagrams of the burst the sender sent and the receiver
  got (distinct sequence numbers: ARP, LLDP and the rest are not counted);
- drops: packets the bottleneck's buffer dropped (kernel counter of its
  IPv4 queue; ARP and LLDP go through a queue of their own);
- switch_input_drops: frames the switch's AF_XDP ports dropped on input,
  their receive rings full (the kernel's count; always 0 on AF_PACKET ports),
  which must be 0 too: a faithful switch loses packets at its buffer only;
- unexplained: sent - received - drops - switch_input_drops, which must be 0.

The switch is Open vSwitch forwarding under the OTCP controller, as in the
incast runs, on the datapath asked for (--datapath; each row names the one
used). The rows go to OUT/calibration.json with the command line that
made them and the code it ran.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

from otcp.experiments.analysis import results
from otcp.experiments.runner import measure
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.counters import CONTROL_QUEUE_HANDLE, Counters, parse_queue_counters
from otcp.experiments.runner.datapath import DEFAULT_DATAPATH, DatapathInUse
from otcp.experiments.runner.emulation import Emulation
from otcp.experiments.runner.network import Network, RunError, start_network
from otcp.experiments.runner.progress import Progress
from otcp.topo.fabrics import FabricTopo

BURST_PORT = 5400
ETHERNET_HEADER = 14


class CalibrationTopo(FabricTopo):
    """s1, the receiver h1 on the bottleneck port (bw, buffer_bytes) and one
    sender h2 on a link sender_bw fast."""

    def build(self, bw: float = 100, buffer_bytes: int = 85000, sender_bw: float = 200) -> None:
        """Add s1, the receiver's bottleneck link and the sender's faster link."""
        switch = self.add_switch("s1")
        self.receiver = self.add_host("h1")
        self.addLink(self.receiver, switch, **self._link_options(bw, buffer_bytes, None))
        self.sender = self.add_host("h2")
        self.addLink(self.sender, switch, **self._link_options(sender_bw, buffer_bytes, None))


@dataclasses.dataclass(kw_only=True)
class CalibrationConfig(ExperimentConfig):
    """One calibration: the base's network (a network per buffer; no schemes), the packet
    sizes of the bursts, the sender link's rate as a multiple of the bottleneck's
    (overload) and how long each burst keeps the buffer full (overflow_ms). Validated by
    otcp.experiments.cli."""

    packet_sizes: list[int]
    overload: float = 2.0
    overflow_ms: float = 200.0

    def burst_seconds(self, buffer_bytes: int) -> float:
        """How long one burst lasts: the sender's link runs at overload x the
        drain rate, so the queue grows at (overload - 1) x bw at best; the
        burst lasts three times the time that fills the buffer at that rate
        (the sender or the switch may not reach its full rate, with small
        packets above all), then overflow_ms more."""
        growth = (self.overload - 1) * self.bw_mbps * 1e6 / 8
        return 3 * buffer_bytes / growth + self.overflow_ms / 1000.0


@dataclasses.dataclass(frozen=True)
class CalibrationRow:
    """One burst's measurements (the rows of calibration.json)."""

    buffer_bytes: int
    packet_bytes: int
    peak_backlog_bytes: int
    sent: int
    received: int
    drops: int
    control_packets: int
    backlog_samples: int
    switch_input_drops: int = 0
    datapath: str = DEFAULT_DATAPATH

    @property
    def unexplained(self) -> int:
        """Datagrams neither received nor dropped by the bottleneck's buffer or the switch's input."""
        return self.sent - self.received - self.drops - self.switch_input_drops

    @property
    def frame_bytes(self) -> int:
        """The frame the queue counts: the IP packet and its Ethernet header."""
        return self.packet_bytes + ETHERNET_HEADER

    @property
    def within_one_packet(self) -> bool:
        """The peak backlog is the buffer, less less than one frame (a bfifo
        takes a frame only if it fits whole)."""
        return 0 <= self.buffer_bytes - self.peak_backlog_bytes < self.frame_bytes

    @property
    def ok(self) -> bool:
        """Filled (something dropped), within one packet, nothing lost anywhere but the buffer."""
        return self.drops > 0 and self.within_one_packet and self.unexplained == 0 and self.switch_input_drops == 0

    def as_dict(self) -> dict[str, Any]:
        """The row as calibration.json holds it."""
        return {**dataclasses.asdict(self), "unexplained": self.unexplained, "frame_bytes": self.frame_bytes,
                "within_one_packet": self.within_one_packet, "ok": self.ok}


def run_calibration(config: CalibrationConfig, progress: Progress) -> list[CalibrationRow]:
    """Every (buffer, packet size) burst; returns the rows (also written to OUT/calibration.json)."""
    os.makedirs(config.out, exist_ok=True)
    code = results.code_version()
    progress.total = len(config.buffers) * len(config.packet_sizes)
    rows: list[CalibrationRow] = []
    datapaths: list[DatapathInUse] = []
    burst_id = 0
    for buffer_bytes in config.buffers:
        topo = CalibrationTopo(bw=config.bw_mbps, buffer_bytes=buffer_bytes,
                               sender_bw=config.overload * config.bw_mbps)
        progress.message(f"building the calibration network: {buffer_bytes} B buffer, bottleneck "
                         f"{config.bw_mbps:g} Mb/s, sender link {config.overload * config.bw_mbps:g} Mb/s")
        with start_network(config, topo, os.path.join(config.out, "work", f"buffer{buffer_bytes}")) as network:
            if network.emulation.datapath not in datapaths:
                datapaths.append(network.emulation.datapath)
            network.ensure_connectivity([topo.sender], network.data_ips[topo.receiver])
            for packet_bytes in config.packet_sizes:
                burst_id += 1
                seconds = config.burst_seconds(buffer_bytes)
                progress.start_run(f"buffer {buffer_bytes} B, {packet_bytes} B packets, "
                                   f"a {seconds * 1000:.0f} ms burst")
                rows.append(one_burst(network, buffer_bytes, packet_bytes, seconds, burst_id))
                progress.update(1, 1)
                progress.finish_run()
                write_rows(config.out, rows, results.provenance(code, config.command), datapaths)
    return rows


def one_burst(network: Network[Any], buffer_bytes: int, packet_bytes: int, seconds: float,
              burst_id: int) -> CalibrationRow:
    """Send one burst h2 -> h1 and account for every packet of it."""
    emulation, topo = network.emulation, network.topo
    receiver, sender = topo.receiver, topo.sender
    program = [sys.executable, "-m", "otcp.experiments.hostprogs.burst"]
    buffer_device = emulation.host(receiver).defaultIntf().buffer_device
    with Counters(emulation, [receiver, sender], receiver).measuring() as window:
        control_before = _control_packets(emulation, receiver, buffer_device)
        listener = emulation.start(receiver, [*program, "receive", "--port", str(BURST_PORT),
                                              "--burst-id", str(burst_id), "--idle", "1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert listener.stdout is not None and listener.stderr is not None
        try:
            if listener.stdout.readline().strip() != b"ready":
                raise RunError(f"the burst receiver did not start: {listener.stderr.read().decode(errors='replace')}")
            with measure.BacklogSampler(emulation, receiver, buffer_device) as sampler:
                sent = json.loads(emulation.run(sender, [
                    *program, "send", "--to", network.data_ips[receiver], "--port", str(BURST_PORT),
                    "--burst-id", str(burst_id), "--packet-bytes", str(packet_bytes), "--seconds", f"{seconds:.4f}"]))
                out, err = listener.communicate(timeout=120)
            if listener.returncode != 0:
                raise RunError(f"the burst receiver failed: {err.decode(errors='replace').strip()}")
            received = json.loads(out)
        finally:
            emulation.stop(listener)
    account = window.change.loss
    if sent["errors"] or account.sent != sent["sent"]:
        raise RunError(f"the sender's link carried {account.sent} IPv4 packets for {sent['sent']} datagrams sent "
                       f"({sent['errors']} send errors)")
    return CalibrationRow(buffer_bytes=buffer_bytes, packet_bytes=packet_bytes, peak_backlog_bytes=sampler.peak,
                          sent=sent["sent"], received=received["received"], drops=account.drops,
                          control_packets=_control_packets(emulation, receiver, buffer_device) - control_before,
                          backlog_samples=sampler.samples, switch_input_drops=account.switch_input_drops,
                          datapath=emulation.datapath.used.label)


def _control_packets(emulation: Emulation, host: str, device: str) -> int:
    """Packets (ARP, LLDP, IPv6) the bottleneck's control queue has passed and dropped so far."""
    queues = parse_queue_counters(emulation.run(host, ["tc", "-s", "-j", "qdisc", "show"]),
                                  handle=CONTROL_QUEUE_HANDLE)
    counters = queues[device]
    return counters.sent_packets + counters.drops


def write_rows(out: str, rows: list[CalibrationRow], provenance: dict[str, Any],
               datapaths: list[DatapathInUse] | None = None) -> str:
    """Write OUT/calibration.json (atomically) and return its path; provenance: results.provenance's;
    datapaths: the switch's datapath asked for and used on each network."""
    return results.write_json(os.path.join(out, "calibration.json"),
                              {"rows": [row.as_dict() for row in rows],
                               "datapaths": [d.as_dict() for d in datapaths or []], **provenance})


def calibration_table(rows: list[CalibrationRow]) -> str:
    """The table printed at the end of a calibration."""
    header = (f"{'buffer B':>9}{'packet B':>9}{'peak backlog B':>16}{'short by':>9}{'sent':>7}{'received':>9}"
              f"{'drops':>7}{'switch in':>10}{'unexplained':>12}{'ARP/LLDP':>9}  datapath: verdict")
    lines = [header, "-" * len(header)]
    for row in rows:
        if row.ok:
            verdict = "ok"
        elif row.unexplained:
            verdict = "UNEXPLAINED LOSS"
        elif row.switch_input_drops:
            verdict = "LOST AT THE SWITCH'S INPUT"
        elif not row.drops:
            verdict = "never filled (no drops): burst too short"
        else:
            verdict = "NOT within one packet"
        lines.append(f"{row.buffer_bytes:>9}{row.packet_bytes:>9}{row.peak_backlog_bytes:>16}"
                     f"{row.buffer_bytes - row.peak_backlog_bytes:>9}{row.sent:>7}{row.received:>9}{row.drops:>7}"
                     f"{row.switch_input_drops:>10}{row.unexplained:>12}{row.control_packets:>9}  "
                     f"{row.datapath}: {verdict}")
    lines.append("peak backlog in bytes of frames (Ethernet header included), short by: buffer - peak, within one "
                 "frame when ok; drops: the bottleneck buffer's kernel counter; switch in: frames the switch's AF_XDP "
                 "ports dropped on input (rings full); unexplained: sent - received - drops - switch in; "
                 "ARP/LLDP: control frames through the bottleneck, queued and counted apart")
    return "\n".join(lines)

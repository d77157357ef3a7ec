"""Measure the ways the bottleneck's buffer could be built, to justify the one used.

    python -m otcp.experiments.switch_alternatives MODE BUFFER_BYTES

MODE is one of:

- ``port-default``: the bfifo on the switch port's egress (the switch as it
  was first built), OVS's send socket as it is;
- ``port-raised``: the bfifo on the switch port, OVS's socket buffers raised;
- ``ifb-default``: the bfifo on an IFB in the receiver's namespace, OVS's
  send socket as it is;
- ``ifb-raised``: the IFB and the raised buffers (what otcp.experiments.runner.emulation
  does).

On the calibration's 2-host network (standalone bridge: the same userspace
datapath send path as under a controller), one UDP burst at twice the
bottleneck's rate for every packet size, 1500 and 750 B. Prints per burst
the datagrams sent and received, the bfifo's drops, the unexplained rest
and the sampled peak backlog.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from otcp.experiments.calibrate import BURST_PORT, CalibrationTopo
from otcp.experiments.runner import measure
from otcp.experiments.runner.config import ExperimentConfig
from otcp.experiments.runner.counters import parse_queue_counters, wait_empty
from otcp.experiments.runner.emulation import Emulation
from otcp.experiments.runner.network import start_network
from otcp.topo.fabrics import ifb_name, shaping_commands

MODES = ("port-default", "port-raised", "ifb-default", "ifb-raised")


def burst(emulation: Emulation, node: str, device: str, packet_bytes: int, seconds: float,
          burst_id: int) -> tuple[int, int, int, int]:
    """One burst h2 -> h1; returns (sent, received, drops at node:device, peak backlog)."""

    def drops() -> int:
        return parse_queue_counters(emulation.run(node, ["tc", "-s", "-j", "qdisc", "show"]))[device].drops

    wait_empty(emulation, node, device)
    before = drops()
    listener = emulation.start("h1", [sys.executable, "-m", "otcp.experiments.hostprogs.burst", "receive",
                                      "--port", str(BURST_PORT), "--burst-id", str(burst_id), "--idle", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert listener.stdout is not None
        if listener.stdout.readline().strip() != b"ready":
            raise RuntimeError("the burst receiver did not start")
        with measure.BacklogSampler(emulation, node, device) as sampler:
            sent = json.loads(emulation.run("h2", [
                sys.executable, "-m", "otcp.experiments.hostprogs.burst", "send", "--to", emulation.host("h1").IP(),
                "--port", str(BURST_PORT), "--burst-id", str(burst_id), "--packet-bytes", str(packet_bytes),
                "--seconds", f"{seconds:.4f}"]))
            out, _ = listener.communicate(timeout=120)
    finally:
        emulation.stop(listener)
    wait_empty(emulation, node, device)
    return sent["sent"], json.loads(out)["received"], drops() - before, sampler.peak


def main(argv: list[str] | None = None) -> int:
    """Run one mode's bursts and print one line per packet size."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in MODES or not argv[1].isdigit() or int(argv[1]) < 1514:
        print(f"usage: python -m otcp.experiments.switch_alternatives {{{','.join(MODES)}}} BUFFER_BYTES (>= 1514)",
              file=sys.stderr)
        return 2
    mode, buffer_bytes = argv[0], int(argv[1])
    on_port = mode.startswith("port")
    topo = CalibrationTopo(bw=100, buffer_bytes=buffer_bytes, sender_bw=200)
    with tempfile.TemporaryDirectory(prefix="otcp-alternatives-") as workdir:
        config = ExperimentConfig(out=workdir, buffers=[buffer_bytes], forwarding="standalone")
        with start_network(config, topo, workdir, raise_ovs_buffers=mode.endswith("raised")) as network:
            emulation = network.emulation
            if on_port:
                # Back to the switch as it was: nothing redirected at h1, HTB and the bfifo on s1's port.
                emulation.run("h1", ["tc", "qdisc", "del", "dev", "h1-eth0", "clsact"])
                for command, _ in shaping_commands("s1-eth1", True, True, 100, buffer_bytes):
                    emulation.run("s1", command)
            node, device = ("s1", "s1-eth1") if on_port else ("h1", ifb_name("h1-eth0"))
            network.ensure_connectivity(["h2"], network.data_ips["h1"])
            seconds = 3 * buffer_bytes * 8 / 100e6 + 0.2
            for burst_id, packet_bytes in enumerate((1500, 750), start=1):
                sent, received, drops, peak = burst(emulation, node, device, packet_bytes, seconds, burst_id)
                print(f"{mode} {buffer_bytes} B buffer, {packet_bytes} B packets: sent {sent}, received {received}, "
                      f"drops {drops}, unexplained {sent - received - drops}, peak backlog {peak} B", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One calibration burst for real: a 2-host network (receiver behind the
bottleneck, one sender on a link twice as fast), Open vSwitch forwarding
under the OTCP controller, its ports on each datapath (AF_PACKET, and AF_XDP
polled by the main thread in native XDP). The bottleneck must hold its
configured buffer to within one frame, and every packet of the burst must be
received or counted as dropped by the bottleneck's buffer. No assertion on speed."""

import json
import subprocess
import sys

import pytest

from otcp.experiments.runner import ovs_sockets
from support.emulations import ovs_bridges

BUFFER = 85000
PACKET = 1500


def send_buffers():
    return {s.inode: s.sndbuf for s in ovs_sockets.packet_sockets() if s.port is None}


@pytest.mark.parametrize(("datapath", "label"), [("afpacket", "afpacket"), ("afxdp-nonpmd", "afxdp-nonpmd native")])
def test_one_burst_fills_the_buffer_and_every_loss_is_counted(tmp_path, datapath, label):
    before_bridges = ovs_bridges()
    before_buffers = send_buffers()
    completed = subprocess.run(
        [sys.executable, "-m", "otcp.experiments.cli", "calibrate", "--buffer-bytes", str(BUFFER),
         "--packet-bytes", str(PACKET), "--datapath", datapath, "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    document = json.loads((tmp_path / "calibration.json").read_text())
    (row,) = document["rows"]
    # The run says which datapath it ran on: the one asked for.
    assert document["datapaths"] == [{"asked": label, "used": label, "reason": None}]
    assert row["datapath"] == label
    assert (row["buffer_bytes"], row["packet_bytes"]) == (BUFFER, PACKET)
    # The burst overflowed the buffer...
    assert row["drops"] > 0 and row["received"] > 0
    # ...which held its configured bytes, less less than one 1514 B frame, never more.
    assert 0 <= BUFFER - row["peak_backlog_bytes"] < PACKET + 14
    # Every datagram sent was received or dropped by the bottleneck's buffer.
    assert row["drops"] == row["sent"] - row["received"]
    assert row["unexplained"] == 0 and row["switch_input_drops"] == 0
    assert "ok" in completed.stdout and str(BUFFER) in completed.stdout
    # Torn down (no AF_XDP socket left), and OVS's shared send socket back to the size it had.
    assert ovs_bridges() == before_bridges
    assert ovs_sockets.xdp_sockets() == []
    after_buffers = send_buffers()
    assert {inode: size for inode, size in after_buffers.items() if inode in before_buffers} == \
        {inode: size for inode, size in before_buffers.items() if inode in after_buffers}

"""One calibration burst for real: a 2-host network (receiver behind the
bottleneck, one sender on a link twice as fast), Open vSwitch forwarding
under the OTCP controller. The bottleneck must hold its configured buffer to
within one frame, and every packet of the burst must be received or counted
as dropped by the bottleneck's buffer. No assertion on speed."""

import json
import subprocess
import sys

from otcp.experiments.runner import ovs_sockets
from support.emulations import ovs_bridges

BUFFER = 85000
PACKET = 1500


def send_buffers():
    return {s.inode: s.sndbuf for s in ovs_sockets.packet_sockets() if s.port is None}


def test_one_burst_fills_the_buffer_and_every_loss_is_counted(tmp_path):
    before_bridges = ovs_bridges()
    before_buffers = send_buffers()
    completed = subprocess.run(
        [sys.executable, "-m", "otcp.experiments.cli", "calibrate", "--buffer-bytes", str(BUFFER),
         "--packet-bytes", str(PACKET), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    (row,) = json.loads((tmp_path / "calibration.json").read_text())["rows"]
    assert (row["buffer_bytes"], row["packet_bytes"]) == (BUFFER, PACKET)
    # The burst overflowed the buffer...
    assert row["drops"] > 0 and row["received"] > 0
    # ...which held its configured bytes, less less than one 1514 B frame, never more.
    assert 0 <= BUFFER - row["peak_backlog_bytes"] < PACKET + 14
    # Every datagram sent was received or dropped by the bottleneck's buffer.
    assert row["drops"] == row["sent"] - row["received"]
    assert row["unexplained"] == 0
    assert "ok" in completed.stdout and str(BUFFER) in completed.stdout
    # Torn down, and OVS's shared send socket back to the size it had.
    assert ovs_bridges() == before_bridges
    after_buffers = send_buffers()
    assert {inode: size for inode, size in after_buffers.items() if inode in before_buffers} == \
        {inode: size for inode, size in before_buffers.items() if inode in after_buffers}

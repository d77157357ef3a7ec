"""The faithful switch's pieces that need no network: OVS's socket list, the
backlog probe's netlink reading, the burst sizes and the calibration rows."""

import pytest

from otcp.experiments import calibrate
from otcp.experiments.hostprogs import backlog_probe, burst
from otcp.experiments.runner import ovs_sockets

SS_OUTPUT = """\
p_raw 0      0      [0]:*       * users:(("ovs-vswitchd",pid=3387,fd=69)) ino:12092 sk:13
\tver:0 cpy_thresh:0 flags( 0 ) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)
p_raw 0      0        *:s1-eth2 * users:(("ovs-vswitchd",pid=3387,fd=39)) ino:205089 sk:100c
\tver:0 cpy_thresh:0 flags( running auxdata ) skmem:(r0,rb212992,t0,tb212992,f0,w0,o176,bl0,d17)
p_raw 0      0        *:eth0 * users:(("dhclient",pid=99,fd=5)) ino:1 sk:1
\tver:0 cpy_thresh:0 flags( 0 ) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)
"""


def test_ovs_packet_sockets_are_read_from_ss():
    found = ovs_sockets.parse_packet_sockets(SS_OUTPUT)
    assert found == [
        ovs_sockets.PacketSocket(port=None, pid=3387, fd=69, inode=12092, rcvbuf=212992, sndbuf=212992, drops=0),
        ovs_sockets.PacketSocket(port="s1-eth2", pid=3387, fd=39, inode=205089, rcvbuf=212992, sndbuf=212992,
                                 drops=17),
    ]
    assert ovs_sockets.parse_packet_sockets("") == []


def test_raised_buffers_cannot_be_reached_by_the_largest_sweep():
    # 66 ports of a 64-sender star, each with a full 512 000 B buffer of 1514 B frames (~2.3 KB of truesize).
    queued_truesize = 66 * (512000 // 1514 + 1) * 2304
    assert 2 * ovs_sockets.SEND_BUFFER > queued_truesize


def test_backlog_probe_reads_the_handle_it_is_given():
    # tc's handles are hexadecimal: "10:" is major 0x10.
    assert backlog_probe.parse_handle("10:") == 0x00100000
    assert backlog_probe.parse_handle("5:10") == 0x00050010
    with pytest.raises(ValueError):
        backlog_probe.parse_handle("x:")
    messages = [
        {"handle": 0x00050000, "attrs": [("TCA_STATS2", {"attrs": [("TCA_STATS_QUEUE", {"backlog": 99})]})]},
        {"handle": 0x00100000, "attrs": [("TCA_KIND", "bfifo"),
                                         ("TCA_STATS2", {"attrs": [("TCA_STATS_BASIC", {"bytes": 1}),
                                                                   ("TCA_STATS_QUEUE", {"backlog": 84784})]})]},
    ]
    assert backlog_probe.backlog_of(messages, 0x00100000) == 84784
    assert backlog_probe.backlog_of(messages, 0x00200000) is None


def test_backlog_probe_sums_the_receive_queues_of_the_switch_ports_it_is_given():
    # /proc/net/packet as the root namespace shows it with ovs-vswitchd on three ports: its shared send
    # socket (protocol 0, unbound) holds what waits further on and is never counted.
    table = """sk               RefCnt Type Proto  Iface R Rmem   User   Inode
000000002400b815 2      3    0000   0     0 93000  0      43727443
00000000e7fea42b 3      3    0003   5872  1 2304   0      49041384
000000009956ea83 3      3    0003   5870  1 0      0      49041385
0000000041f89a63 3      3    0003   5869  1 4608   0      49041386
"""
    assert backlog_probe.switch_input_bytes(table, {5872, 5869}) == 6912
    assert backlog_probe.switch_input_bytes(table, {5870}) == 0
    assert backlog_probe.switch_input_bytes(table, {0}) == 0
    assert backlog_probe.parse_ifindexes("5872,5869") == {5872, 5869}
    for bad in ("", "5872,x", "0", "-3"):
        with pytest.raises(ValueError, match="interface indexes"):
            backlog_probe.parse_ifindexes(bad)


def test_burst_datagrams_make_ip_packets_of_the_size_asked():
    assert burst.payload_size(1500) == 1472
    assert burst.payload_size(750) == 722
    with pytest.raises(ValueError):
        burst.payload_size(30)


def row(**changes):
    fields = {"buffer_bytes": 85000, "packet_bytes": 1500, "peak_backlog_bytes": 84784, "sent": 3712,
              "received": 1911, "drops": 1801, "control_packets": 1, "backlog_samples": 900}
    fields.update(changes)
    return calibrate.CalibrationRow(**fields)


def test_a_full_buffer_with_every_loss_counted_is_ok():
    good = row()
    assert good.unexplained == 0 and good.within_one_packet and good.ok
    assert good.as_dict()["unexplained"] == 0 and good.as_dict()["frame_bytes"] == 1514


@pytest.mark.parametrize("changes, verdict", [
    ({"peak_backlog_bytes": 85000 - 1514}, "NOT within one packet"),  # a whole frame would still fit
    ({"peak_backlog_bytes": 85001}, "NOT within one packet"),  # more than the buffer
    ({"received": 1900}, "UNEXPLAINED LOSS"),
    ({"drops": 0, "received": 3712}, "never filled"),
])
def test_rows_that_fail_say_why(changes, verdict):
    bad = row(**changes)
    assert not bad.ok
    assert verdict in calibrate.calibration_table([bad])


def test_within_one_packet_uses_the_frame_the_queue_counts():
    assert row(packet_bytes=750, peak_backlog_bytes=85000 - 763).within_one_packet
    assert not row(packet_bytes=750, peak_backlog_bytes=85000 - 764).within_one_packet

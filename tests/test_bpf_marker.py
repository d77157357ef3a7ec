"""The ECN marker (bpf/otcp_mark.bpf.c) run with BPF_PROG_TEST_RUN on
synthetic packets, and the otcp_bpf package's loading, layout and errors.
Needs root and the BPF toolchain (scripts/bootstrap.sh); runs for real."""

import itertools
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otcp import bpf as otcp_bpf
from otcp.bpf.build import object_path
from otcp.bpf.marker import CONFIG, QUEUE, Marker, MarkerConfig, MarkerCounters
from otcp.bpf.objects import BPF_F_LOCK, PIN_ROOT, load_pinned, unpin_stale
from support.btf import btf_struct
from support.privileges import needs_root

ETH = b"\x02" * 6 + b"\x04" * 6
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3
FRAME = 1000  # bytes on the wire per synthetic packet
SLOW = 8  # 1 byte/s: the virtual queue does not drain during a test
_names = itertools.count()


def unique(prefix):
    """A pin or device name no other test process uses at the same time."""
    return f"{prefix}{os.getpid()}-{next(_names)}"


def checksum_ok(header):
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def ipv4(ecn, frame=FRAME, tos_dscp=0x28):
    payload = bytes(20) + bytes(frame - 14 - 20 - 20)
    payload = payload[:12] + b"\x50" + payload[13:]  # TCP data offset 5
    header = struct.pack("!BBHHHBBH4s4s", 0x45, tos_dscp | ecn, 20 + len(payload), 7, 0, 64, 6, 0,
                         bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    header = header[:10] + struct.pack("!H", ~total & 0xFFFF) + header[12:]
    packet = ETH + b"\x08\x00" + header + payload
    assert len(packet) == frame and checksum_ok(header)
    return packet


def ipv6(ecn, frame=FRAME):
    payload = bytes(frame - 14 - 40)
    first = (6 << 28) | ((0x28 | ecn) << 20) | 0x12345
    header = struct.pack("!IHBB16s16s", first, len(payload), 6, 64, bytes(15) + b"\x01", bytes(15) + b"\x02")
    return ETH + b"\x86\xdd" + header + payload


def ecn_of(packet):
    if packet[12:14] == b"\x08\x00":
        return packet[15] & 3
    return (packet[15] >> 4) & 3


@pytest.fixture
@needs_root
def marker(built):
    m = Marker(MarkerConfig(rate_bps=SLOW, k_bytes=3 * FRAME), unique("test-"))
    yield m
    m.close()
    assert not m.loaded.path.exists()


def fill(marker, frames):
    """Queue `frames` not-ECT packets (never marked) so the next arrival sees that backlog."""
    for _ in range(frames):
        verdict, out = marker.test_run(ipv4(NOT_ECT))
        assert verdict == 0 and ecn_of(out) == NOT_ECT


@pytest.mark.root
def test_marks_ect_above_k_and_not_at_or_below(marker):
    outcomes = []
    for _ in range(6):
        verdict, out = marker.test_run(ipv4(ECT0))
        assert verdict == 0  # TC_ACT_OK: the marker never drops
        outcomes.append(ecn_of(out))
    # Arrivals see 0, 1000, 2000, 3000 (= K, not above), 4000, 5000 bytes queued.
    assert outcomes == [ECT0, ECT0, ECT0, ECT0, CE, CE]
    counters = marker.counters()
    assert (counters.packets, counters.ect, counters.marked, counters.not_ect_over_k) == (6, 6, 2, 0)
    assert counters.wire_bytes == 6 * FRAME and counters.backlog_max == 5 * FRAME


@pytest.mark.root
def test_marked_ipv4_header_keeps_dscp_and_a_valid_checksum(marker):
    fill(marker, 4)
    before = ipv4(ECT1, tos_dscp=0xB8)
    _, out = marker.test_run(before)
    assert out[15] == 0xB8 | CE
    assert checksum_ok(out[14:34])
    assert out[:15] + out[16:24] + out[26:] == before[:15] + before[16:24] + before[26:]


@pytest.mark.root
def test_not_ect_never_marked_and_counted_over_k(marker):
    fill(marker, 5)
    _, out = marker.test_run(ipv4(NOT_ECT))
    assert ecn_of(out) == NOT_ECT
    counters = marker.counters()
    assert counters.marked == 0
    assert counters.not_ect_over_k == 2  # the 5th fill packet (4000 queued) and this one


@pytest.mark.root
def test_ect1_and_ect0_both_marked_and_ce_left_alone(marker):
    fill(marker, 4)
    assert ecn_of(marker.test_run(ipv4(ECT1))[1]) == CE
    assert ecn_of(marker.test_run(ipv4(ECT0))[1]) == CE
    _, out = marker.test_run(ipv4(CE))
    assert out == ipv4(CE)
    counters = marker.counters()
    assert (counters.marked, counters.ce_arrived, counters.ect) == (2, 1, 2)


@pytest.mark.root
def test_ipv6_traffic_class_marked_above_k_only(marker):
    below = marker.test_run(ipv6(ECT0))[1]
    assert ecn_of(below) == ECT0 and below == ipv6(ECT0)
    fill(marker, 3)
    above = marker.test_run(ipv6(ECT0))[1]
    assert ecn_of(above) == CE
    assert above[14] == ipv6(ECT0)[14] and above[15] & 0xCF == ipv6(ECT0)[15] & 0xCF  # flow label, DSCP kept
    assert ecn_of(marker.test_run(ipv6(NOT_ECT))[1]) == NOT_ECT


@pytest.mark.root
def test_queue_drains_at_the_configured_rate(marker):
    # 1000 B/s, 5000 B queued two seconds ago: at least 2000 B have drained,
    # so an arrival now finds at most 3000 B (= K) and is not marked.
    marker.configure(MarkerConfig(rate_bps=8000, k_bytes=3 * FRAME))
    past = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - 2_000_000_000
    marker.queue_map.update(QUEUE.pack(0, 0, 5 * FRAME, past, *[0] * 11), flags=BPF_F_LOCK)
    assert ecn_of(marker.test_run(ipv4(ECT0))[1]) == ECT0
    counters = marker.counters()
    assert counters.backlog_sum <= 3 * FRAME
    # Without the drain the same state marks.
    marker.configure(MarkerConfig(rate_bps=SLOW, k_bytes=3 * FRAME))
    marker.queue_map.update(QUEUE.pack(0, 0, 5 * FRAME, time.clock_gettime_ns(time.CLOCK_MONOTONIC), *[0] * 11),
                            flags=BPF_F_LOCK)
    assert ecn_of(marker.test_run(ipv4(ECT0))[1]) == CE


@pytest.mark.root
def test_a_token_bucket_burst_passes_an_empty_queue_without_queueing(marker):
    # 1000 B/s, burst 1500 B, idle for 3 s with 1000 B queued: the queue
    # empties and the unused capacity caps at the burst.
    marker.configure(MarkerConfig(rate_bps=8000, k_bytes=FRAME // 2, burst_bytes=1500))
    past = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - 3_000_000_000
    marker.queue_map.update(QUEUE.pack(0, 0, FRAME, past, *[0] * 11), flags=BPF_F_LOCK)
    outcomes = [ecn_of(marker.test_run(ipv4(ECT0))[1])]
    first = marker.counters()
    assert first.backlog_bytes == 0 and first.credit_bytes == 1500 - FRAME  # sent on credit
    marker.configure(MarkerConfig(rate_bps=SLOW, k_bytes=FRAME // 2, burst_bytes=1500))
    outcomes += [ecn_of(marker.test_run(ipv4(ECT0))[1]) for _ in range(2)]
    # The credit left (500 B) cannot send a 1000 B packet: it queues, and the next one finds it.
    assert outcomes == [ECT0, ECT0, CE]
    assert marker.counters().backlog_bytes == 2 * FRAME


@pytest.mark.root
def test_packets_over_the_buffer_are_not_queued(marker):
    marker.configure(MarkerConfig(rate_bps=SLOW, k_bytes=FRAME // 2, limit_bytes=int(2.5 * FRAME)))
    for _ in range(4):
        marker.test_run(ipv4(ECT0))
    counters = marker.counters()
    # 0 -> 1000 -> 2000 queued; the 3rd and 4th would make 3000 > 2500: the qdisc drops them.
    assert counters.over_limit == 2 and counters.backlog_bytes == 2 * FRAME
    assert counters.marked == 1  # the 2nd arrival saw 1000 > K; the dropped ones are not marked


@pytest.mark.root
def test_reset_empties_the_queue(marker):
    fill(marker, 5)
    marker.reset()
    assert marker.counters() == MarkerCounters.unpack(bytes(QUEUE.size))
    assert ecn_of(marker.test_run(ipv4(ECT0))[1]) == ECT0


def test_python_layouts_match_the_programs_btf(built):
    obj = object_path("otcp_mark")
    queue = btf_struct(obj, "otcp_mark_queue")
    assert queue["size"] == QUEUE.size
    names = [m["name"] for m in queue["members"]]
    python = ["bytes" if f == "wire_bytes" else f for f in MarkerCounters.__dataclass_fields__]
    assert names == ["lock", "pad", *python]
    assert [m["bits_offset"] // 8 for m in queue["members"][2:]] == [8 + 8 * i for i in range(13)]
    config = btf_struct(obj, "otcp_mark_config")
    assert config["size"] == CONFIG.size
    assert [m["name"] for m in config["members"]] == ["rate_bytes_per_s", "k_bytes", "limit_bytes", "burst_bytes"]


def test_default_k_follows_the_dctcp_guideline():
    assert otcp_bpf.default_k_bytes(1e9) == 20 * 1500  # the paper's 1 Gb/s threshold
    assert otcp_bpf.default_k_bytes(10e9) == 65 * 1500  # and its 10 Gb/s one
    assert otcp_bpf.default_k_bytes(100e6) == 9231  # 6.15 packets in between, on the same power law
    assert otcp_bpf.default_k_bytes(10e9, rtt_s=1e-3) == 178572  # C x RTT / 7 when that is larger
    assert otcp_bpf.default_k_bytes(1e6) == 1500  # never below one packet
    with pytest.raises(ValueError):
        otcp_bpf.default_k_bytes(0)


def test_a_rate_given_as_a_float_packs_as_bytes_per_second():
    assert CONFIG.unpack(MarkerConfig(rate_bps=100e6, k_bytes=9231.0).pack()) == (12_500_000, 9231, 0, 0)


def test_rates_the_program_cannot_drain_are_refused():
    with pytest.raises(ValueError):
        MarkerConfig(rate_bps=8 * (1 << 34), k_bytes=1).pack()
    with pytest.raises(ValueError):
        MarkerConfig(rate_bps=4, k_bytes=1).pack()


@pytest.mark.root
def test_a_kernel_refusal_carries_the_kernels_words(built):
    # The marker is a classifier; as a sock_ops program the verifier refuses it.
    with pytest.raises(otcp_bpf.BpfUnavailable) as refused:
        load_pinned(object_path("otcp_mark"), unique("test-refused-"), "sockops")
    assert "loading otcp_mark.bpf.o failed" in str(refused.value)
    assert "libbpf" in refused.value.detail
    assert not list(PIN_ROOT.glob(f"test-refused-{os.getpid()}-*"))


@pytest.mark.root
def test_attaching_to_a_missing_device_says_so_and_leaves_nothing(built):
    device = f"otcpt{os.getpid() % 100000}"  # 15 characters at most, absent
    with pytest.raises(otcp_bpf.BpfUnavailable) as refused:
        otcp_bpf.attach_marker(device, 100_000_000)
    assert "Cannot find device" in str(refused.value)
    assert not list(PIN_ROOT.glob(f"mark-root-{device}-pid*"))


def test_ecn_sysctls_are_commands_to_run():
    assert otcp_bpf.ecn_sysctls() == {"net.ipv4.tcp_ecn": "1"}
    assert otcp_bpf.ecn_sysctl_commands() == [["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"]]
    assert otcp_bpf.ecn_sysctl_commands("h1")[0][:2] == ["nsenter", "--net=/run/netns/h1"]
    assert otcp_bpf.ecn_sysctl_commands("/proc/42/ns/net")[0][:2] == ["nsenter", "--net=/proc/42/ns/net"]


@pytest.mark.root
def test_pins_of_a_killed_process_are_found_and_removed(built):
    mine = Marker(MarkerConfig(rate_bps=SLOW, k_bytes=FRAME), unique("test-live-"))
    try:
        loader = subprocess.Popen(
            [sys.executable, "-c", "import time\nfrom otcp import bpf as otcp_bpf\n"
             "m = otcp_bpf.Marker(otcp_bpf.MarkerConfig(8, 1000), 'stale-test')\n"
             "print(m.loaded.path, flush=True)\n"
             "time.sleep(120)\n"],
            stdout=subprocess.PIPE, text=True)
        try:
            path = Path(loader.stdout.readline().strip())
            assert path.name == f"stale-test-pid{loader.pid}" and path.exists()
        finally:
            loader.send_signal(signal.SIGKILL)  # no clean-up runs
            loader.wait()
        assert path.exists()
        assert path in unpin_stale()
        assert not path.exists() and mine.loaded.path.exists()  # a live process's pins stay
    finally:
        mine.close()


@pytest.mark.root
def test_pinned_map_keys_and_refusals(marker):
    assert marker.queue_map.lookup(bytes(4), flags=BPF_F_LOCK) == marker.queue_map.lookup(0, flags=BPF_F_LOCK)
    with pytest.raises(otcp_bpf.BpfUnavailable, match="No such file"):
        marker.cfg_map.lookup(1)  # the array has one entry
    with pytest.raises(otcp_bpf.BpfUnavailable, match="Invalid argument"):
        marker.cfg_map.delete(0)  # arrays cannot delete
    with pytest.raises(ValueError):
        marker.cfg_map.lookup(b"\0" * 8)

"""otcp_scalable for real: its window rules under BPF_PROG_TEST_RUN, its
registration and per-destination map, and connections between two
namespaces through a shaped bottleneck whose windows are read with TCP_INFO
and ``ss -tin``. Needs root and the BPF toolchain (scripts/bootstrap.sh);
nothing skips.

The kernel runs a tcp_congestion_ops program only on connections:
BPF_PROG_TEST_RUN of one is refused ("Operation not supported": the
struct_ops test-run hook serves bpf_dummy_ops alone). So the rules are
checked through otcp_scalable_rule, a syscall program built from the same C
(otcp_scalable.h), and the algorithm itself on real connections.
"""

import ctypes
import ctypes.util
import math
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest

from otcp import bpf as otcp_bpf
from otcp.bpf import scalable
from otcp.bpf.build import object_path
from otcp.bpf.congestion import available_congestion_controls
from otcp.bpf.objects import PIN_ROOT, load_pinned
from otcp.bpf.scalable import ScalableEntry
from otcp.bpf.sockops import in_netns, netns_cookie
from otcp.experiments.kernel.testbed import Testbed, finish
from otcp.planning import formulas
from support.btf import btf_struct
from support.registrations import registered_then_killed

# The algorithm's name is machine-wide: wait for another OTCP process using it.
WAIT_FOR_OTHERS_S = 900

# struct otcp_sc_run: op, acks, acked, increase_x256, flags, pad; the window (frac, cwnd, ssthresh, clamp,
# pad); then slow_start_acked, additive_acked, additive_increase, additive_rounds_x1024, scalable_acked,
# scalable_increase.
RUN = struct.Struct("<6IQ4I6Q")
GROW, REDUCE = 0, 1
NO_CLAMP = 1 << 20


@pytest.fixture(scope="module", autouse=True)
def built():
    otcp_bpf.build()


# -- the rules, under BPF_PROG_TEST_RUN ----------------------------------------------------


class _TestRunOpts(ctypes.Structure):
    """libbpf's struct bpf_test_run_opts (1.1)."""

    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32)]


@dataclass
class Window:
    """What a run of the rules left: the window and what the ACKs did."""

    cwnd: int
    ssthresh: int
    frac: float
    slow_start_acked: int
    additive_acked: int
    additive_increase: int
    additive_rounds: float
    scalable_acked: int
    scalable_increase: int


class Rules:
    """otcp_scalable_rule loaded and pinned; runs it with BPF_PROG_TEST_RUN.
    (bpftool's ``prog run`` cannot: a syscall program's test run takes no
    ``repeat`` and writes its result back into the input context.)"""

    def __init__(self):
        self.lib = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so.1", use_errno=True)
        self.lib.bpf_obj_get.argtypes = [ctypes.c_char_p]
        self.lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.POINTER(_TestRunOpts)]
        self.loaded = load_pinned(object_path("otcp_scalable_rule"), "test-scalable-rule", "syscall")
        self.fd = self.lib.bpf_obj_get(str(self.loaded.programs["otcp_scalable_rule"]).encode())
        assert self.fd >= 0

    def run(self, op, cwnd, ssthresh=2, acks=0, acked=1, increase=1.0, griddt=False, clamp=NO_CLAMP):
        context = ctypes.create_string_buffer(RUN.pack(op, acks, acked, round(increase * 256), int(griddt), 0, 0,
                                                       cwnd, ssthresh, clamp, 0, 0, 0, 0, 0, 0, 0), RUN.size)
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), ctx_in=ctypes.cast(context, ctypes.c_void_p),
                            ctx_size_in=RUN.size)
        assert self.lib.bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)) == 0, os.strerror(ctypes.get_errno())
        assert opts.retval == 0
        out = RUN.unpack(context.raw)
        frac, cwnd, ssthresh = out[6:9]
        return Window(cwnd, ssthresh, frac / 2**32, out[11], out[12], out[13], out[14] / 1024, out[15], out[16])

    def grow(self, cwnd, acks, **kwargs):
        return self.run(GROW, cwnd, acks=acks, **kwargs)

    def reduce(self, cwnd, griddt=False):
        return self.run(REDUCE, cwnd, griddt=griddt).cwnd

    def close(self):
        os.close(self.fd)
        self.loaded.unpin()


@pytest.fixture(scope="module")
def rules():
    runner = Rules()
    yield runner
    runner.close()
    assert not runner.loaded.path.exists()


def test_scalable_adds_a_hundredth_of_a_segment_per_segment_acknowledged(rules):
    # Above lwnd = 16: 1 000 segments acknowledged one per ACK add 10 segments, whatever the window.
    for cwnd in (17, 50, 5000):
        grown = rules.grow(cwnd, 1000)
        assert grown.cwnd == cwnd + 10 and grown.scalable_acked == 1000 and grown.scalable_increase == 10
    # Delayed ACKs: 500 ACKs of two segments add the same (per segment, not per ACK).
    assert rules.grow(50, 500, acked=2).cwnd == 60
    # 99 segments are not yet one: the window grows at the 100th.
    assert (rules.grow(50, 99).cwnd, rules.grow(50, 100).cwnd) == (50, 51)
    # Scalable's increase is the same at every window: A does not change it.
    assert rules.grow(50, 1000, increase=4).cwnd == 60


def test_aimd_below_lwnd_adds_a_segments_per_round_trip(rules):
    # A = 1 (Reno): from 4 to 16 takes 4 + 5 + ... + 15 = 114 segments acknowledged.
    assert (rules.grow(4, 113).cwnd, rules.grow(4, 114).cwnd) == (15, 16)
    reno = rules.grow(4, 114)
    assert (reno.additive_acked, reno.additive_increase, reno.scalable_acked) == (114, 12, 0)
    assert reno.additive_rounds == pytest.approx(12, abs=0.05)  # a window acknowledged per step (1/1024 truncated)
    # A = 4: a quarter of it, 114 / 4 = 28.5 -> 28 (the fractions carry over), four segments per round trip.
    grid = rules.grow(4, 28, increase=4)
    assert grid.cwnd == 16 and rules.grow(4, 27, increase=4).cwnd == 15
    assert grid.additive_increase / grid.additive_rounds == pytest.approx(4, rel=0.05)
    # At lwnd the AIMD rule still holds (16 ACKs: 16 -> 17), above it Scalable's (84 more: 0.84).
    assert rules.grow(16, 16).cwnd == 17
    above = rules.grow(16, 100)
    assert (above.cwnd, above.additive_acked, above.scalable_acked) == (17, 16, 84)
    assert above.frac == pytest.approx(0.84, abs=1e-6)
    # A fraction of a segment: A = 0.5 needs two windows' worth.
    assert (rules.grow(8, 15, increase=0.5).cwnd, rules.grow(8, 16, increase=0.5).cwnd) == (8, 9)


def test_griddt_mode_keeps_aimd_at_every_window(rules):
    # A = 4 at 50 segments: one window of ACKs (50) adds A / cwnd each, about 4 (a little less: cwnd grows
    # meanwhile; dw/dn = A / w gives w = sqrt(50^2 + 2 x 4 x 50) = 53.85).
    grown = rules.grow(50, 50, increase=4, griddt=True)
    assert (grown.cwnd, grown.additive_acked, grown.scalable_acked) == (53, 50, 0)
    assert grown.cwnd + grown.frac == pytest.approx(math.sqrt(2900), abs=0.05)
    # The same ACKs under Scalable: half a segment.
    assert rules.grow(50, 50, increase=4).cwnd == 50


def test_a_loss_cuts_an_eighth_above_lwnd_and_halves_at_or_below_it(rules):
    assert rules.reduce(64) == 56 and rules.reduce(100) == 88 and rules.reduce(1000) == 875
    assert rules.reduce(17) == 15  # 17 - floor(17 / 8)
    assert rules.reduce(16) == 8 and rules.reduce(10) == 5
    assert rules.reduce(3) == 2 and rules.reduce(2) == 2  # never below 2
    assert rules.reduce(64, griddt=True) == 32  # GridDT halves at every window


def test_slow_start_up_to_ssthresh_then_the_rule_and_the_clamp(rules):
    # cwnd 10, ssthresh 20: 10 segments double up to 20, the next 5 are Scalable's (0.05).
    grown = rules.grow(10, 15, ssthresh=20)
    assert (grown.cwnd, grown.slow_start_acked, grown.scalable_acked) == (20, 10, 5)
    # One ACK of 12 segments: 10 to ssthresh 20 in slow start, 2 in congestion avoidance.
    grown = rules.grow(10, 1, acked=12, ssthresh=20)
    assert (grown.cwnd, grown.slow_start_acked, grown.scalable_acked) == (20, 10, 2)
    # The kernel's clamp holds in both.
    assert rules.grow(50, 1000, clamp=52).cwnd == 52
    assert rules.grow(10, 100, ssthresh=1000, clamp=30).cwnd == 30


def test_the_rule_program_refuses_an_unknown_operation(rules):
    context = ctypes.create_string_buffer(RUN.pack(7, *([0] * 5), 0, 10, 2, NO_CLAMP, 0, *([0] * 6)), RUN.size)
    opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), ctx_in=ctypes.cast(context, ctypes.c_void_p),
                        ctx_size_in=RUN.size)
    assert rules.lib.bpf_prog_test_run_opts(rules.fd, ctypes.byref(opts)) == 0
    assert ctypes.c_int32(opts.retval).value == -1


# -- layouts, entries and keys -------------------------------------------------------------


def test_python_layouts_match_the_programs_btf():
    obj = object_path("otcp_scalable")
    key = btf_struct(obj, "otcp_sc_key")
    assert key["size"] == scalable.KEY.size == 28
    assert [m["name"] for m in key["members"]] == ["prefixlen", "netns", "addr"]
    value = btf_struct(obj, "otcp_sc_params")
    assert value["size"] == scalable.VALUE.size
    assert [m["name"] for m in value["members"]] == ["increase_x256", "initial_ssthresh", "flags", "pad", "applied"]
    counters = btf_struct(obj, "otcp_sc_counters")
    assert [m["name"] for m in counters["members"]] == list(scalable.COUNTERS)
    assert counters["size"] == 8 * len(scalable.COUNTERS)
    run = btf_struct(object_path("otcp_scalable_rule"), "otcp_sc_run")
    assert run["size"] == RUN.size


def test_constants_agree_with_the_formulas():
    assert (scalable.LWND, scalable.A, scalable.B) == (formulas.SCALABLE_LWND_SEGMENTS, formulas.SCALABLE_A,
                                                       formulas.SCALABLE_B)
    assert scalable.MAX_SSTHRESH == formulas.SSTHRESH_SEGMENTS[1]
    assert formulas.GRIDDT_INCREASE_HIGH <= 0xFFFF / scalable.INCREASE_ONE


def test_entries_pack_and_refuse_what_the_map_cannot_hold():
    entry = ScalableEntry(increase=7, initial_ssthresh=431, griddt=True)
    assert ScalableEntry.unpack(entry.pack(applied=3)) == (ScalableEntry(7.0, 431, True), 3)
    assert ScalableEntry.unpack(ScalableEntry(increase=2.5).pack())[0].increase == 2.5
    # Steps of 1/256, as the map holds A: what is read back equals what was written.
    third = ScalableEntry(increase=1 / 3)
    assert third.increase == 85 / 256 and ScalableEntry.unpack(third.pack())[0] == third
    for bad in (0, 1 / 512, 256, -1, float("nan"), float("inf"), True, "4"):
        with pytest.raises(ValueError, match="increase"):
            ScalableEntry(increase=bad)
    for bad in (1, -2, 2**20, 4.0, True, None):
        with pytest.raises(ValueError, match="initial_ssthresh"):
            ScalableEntry(initial_ssthresh=bad)
    with pytest.raises(ValueError, match="griddt"):
        ScalableEntry(griddt=1)


def test_keys_count_the_cookie_and_map_ipv4_into_ipv6():
    key = scalable.encode_key(0x1234, "10.199.0.0/24")
    bits, cookie, address = scalable.KEY.unpack(key)
    assert (bits, cookie) == (64 + 96 + 24, 0x1234)
    assert address == bytes(10) + b"\xff\xff" + bytes([10, 199, 0, 0])
    assert scalable.decode_key(key) == (0x1234, "10.199.0.0/24")
    assert scalable.decode_key(scalable.encode_key(7, "2001:db8::1")) == (7, "2001:db8::1/128")
    with pytest.raises(ValueError):
        scalable.encode_key(-1, "10.0.0.1")
    with pytest.raises(ValueError):
        scalable.encode_key(1, "10.0.0.300")


# -- registration ------------------------------------------------------------------------


@pytest.fixture
def cc():
    registered = otcp_bpf.register_scalable(wait_s=WAIT_FOR_OTHERS_S)
    yield registered
    registered.close()
    assert scalable.CC_NAME not in available_congestion_controls()
    assert not scalable.PIN.exists()


def test_registration_pins_the_maps_is_exclusive_and_undone(cc, tmp_path):
    assert scalable.CC_NAME in available_congestion_controls()
    assert (scalable.PIN / "maps" / scalable.DST_MAP).exists() and PIN_ROOT in scalable.PIN.parents
    with pytest.raises(otcp_bpf.BpfUnavailable, match="in use by another OTCP process"):
        otcp_bpf.register_scalable()
    # The kernel does not test-run congestion-control programs: the rules are checked through
    # otcp_scalable_rule instead (above), the algorithm on connections (below).
    prog = re.search(r"otcp_scalable_cong_control/prog_id:(\d+)", subprocess.run(
        ["bpftool", "-j", "struct_ops", "dump", "id", str(cc.map_id)], capture_output=True, text=True,
        check=True).stdout)
    assert prog
    context = tmp_path / "ctx"
    context.write_bytes(bytes(64))
    refused = subprocess.run(["bpftool", "prog", "run", "id", prog.group(1), "ctx_in", str(context)],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and "Operation not supported" in refused.stderr, refused.stderr
    cc.close()
    assert not cc.registered() and not scalable.PIN.exists()
    cc.close()  # idempotent


def test_a_hosts_entries_are_set_exactly_read_back_and_removed(cc):
    table = scalable.ScalableTable.open_pinned()
    try:
        first = {"10.199.0.0/24": ScalableEntry(increase=3), "10.199.0.2/32": ScalableEntry(7, 431)}
        cc.table.update(11, first)
        cc.table.update(12, {"2001:db8::/64": ScalableEntry(griddt=True)})
        assert table.entries(11) == {prefix: (entry, 0) for prefix, entry in first.items()}
        # Exactly the new set: one kept, one changed, one gone, one added.
        second = {"10.199.0.2/32": ScalableEntry(7, 431), "10.199.1.0/24": ScalableEntry(2)}
        table.update(11, second)
        assert table.entries(11) == {prefix: (entry, 0) for prefix, entry in second.items()}
        # Bad input is refused before anything is written.
        with pytest.raises(ValueError):
            table.update(11, {"10.199.2.0/24": ScalableEntry(), "10.199.3.0/33": ScalableEntry()})
        with pytest.raises(ValueError, match="not a ScalableEntry"):
            table.update(11, {"10.199.2.0/24": {"increase": 2}})
        assert table.entries(11) == {prefix: (entry, 0) for prefix, entry in second.items()}
        table.remove(11)
        assert table.entries(11) == {} and list(table.entries(12)) == ["2001:db8::/64"]
    finally:
        table.close()


def test_a_registration_left_by_a_killed_process_is_cleaned_up_on_request():
    with registered_then_killed("register_scalable", WAIT_FOR_OTHERS_S) as map_id:
        # While its owner lives, clean-up leaves it alone.
        assert scalable.cleanup_leftover() == []
        assert scalable.CC_NAME in available_congestion_controls() and scalable.PIN.exists()
    assert scalable.CC_NAME in available_congestion_controls() and scalable.PIN.exists()
    cleaned = subprocess.run([sys.executable, "-m", "otcp.bpf", "cleanup"], capture_output=True, text=True)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"unregistered {scalable.CC_NAME} (struct_ops id {map_id})" in cleaned.stdout
    assert scalable.CC_NAME not in available_congestion_controls() and not scalable.PIN.exists()


# -- connections -----------------------------------------------------------------------------


@pytest.fixture
def testbed():
    beds = []

    def make(rate_mbit, buffer_bytes):
        beds.append(Testbed(rate_mbit, buffer_bytes))
        return beds[-1]

    yield make
    for bed in beds:
        bed.delete()
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
        assert bed.sender not in names and bed.receiver not in names


@dataclass(frozen=True)
class Sample:
    """One TCP_INFO reading of the sender's socket."""

    ca_state: int  # 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss
    cwnd: int
    ssthresh: int
    total_retrans: int
    delivered: int


def _sample(sock):
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    ssthresh, cwnd = struct.unpack_from("=II", raw, 76)
    (total_retrans,) = struct.unpack_from("=I", raw, 100)
    (delivered,) = struct.unpack_from("=I", raw, 192)
    return Sample(raw[1], cwnd, ssthresh, total_retrans, delivered)


def traced_transfer(bed, port, seconds, choose=True):
    """Send for ``seconds`` from the sender namespace with otcp_scalable (chosen by the socket, or
    with ``choose`` False by whatever the route says), reading TCP_INFO every millisecond and
    ``ss -tin`` once mid-way; returns (samples, the algorithm the socket used, the ss line of the
    connection)."""
    sink = bed.sink(port, "cubic", flows=1)  # the receiver's algorithm plays no part

    def send():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if choose:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, scalable.CC_NAME.encode())
        sock.connect((bed.receiver_ip, port))
        samples = [_sample(sock)]
        sending = threading.Event()
        sending.set()

        def sample():
            while sending.is_set():
                samples.append(_sample(sock))
                time.sleep(0.001)

        sampler = threading.Thread(target=sample)
        sampler.start()
        chunk, end, seen = b"\0" * 65536, time.monotonic() + seconds, ""
        try:
            while time.monotonic() < end:
                sock.sendall(chunk)
                if not seen and time.monotonic() > end - seconds / 2:
                    seen = subprocess.run(["ip", "netns", "exec", bed.sender, "ss", "-tin", "dst",
                                           f"{bed.receiver_ip}:{port}"], capture_output=True, text=True,
                                          check=True).stdout
        finally:
            sending.clear()
            sampler.join()
        cc = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)
        sock.close()
        return samples, cc, seen

    measured = in_netns(bed.sender, send)
    finish(sink)
    return measured


def growth(samples, regime):
    """Growth in congestion avoidance from the samples: (segments the window
    grew, segments acknowledged, round trips' worth of ACKs (acknowledged /
    cwnd)), over stretches in the Open state with no retransmission, each
    counted from its first increase to its last (so neither end is a partial
    step). ``regime(cwnd)`` picks the windows to count."""
    grew = acked = rounds = 0.0
    stretch = []

    def close():
        changes = [i for i in range(1, len(stretch)) if stretch[i].cwnd != stretch[i - 1].cwnd]
        if len(changes) < 2:
            return 0.0, 0.0, 0.0
        first, last = changes[0], changes[-1]
        pairs = list(zip(stretch[first:last], stretch[first + 1:last + 1], strict=True))
        return (stretch[last].cwnd - stretch[first].cwnd, stretch[last].delivered - stretch[first].delivered,
                sum((b.delivered - a.delivered) / a.cwnd for a, b in pairs))

    for previous, sample in zip(samples, samples[1:], strict=False):
        steady = (sample.ca_state == 0 and previous.ca_state == 0 and sample.total_retrans == previous.total_retrans
                  and previous.cwnd >= previous.ssthresh and sample.cwnd >= previous.cwnd
                  and regime(previous.cwnd) and regime(sample.cwnd))
        if steady:
            stretch = stretch or [previous]
            stretch.append(sample)
        elif stretch:
            g, a, r = close()
            grew, acked, rounds = grew + g, acked + a, rounds + r
            stretch = []
    if stretch:
        g, a, r = close()
        grew, acked, rounds = grew + g, acked + a, rounds + r
    return grew, acked, rounds


def cuts(samples):
    """(cwnd before, ssthresh after) at each episode of CWR, Recovery or Loss entered from Open or
    Disorder (the threshold may stay the same: 14 -> 7 again and again), where the two readings
    are at most 3 segments delivered apart (on a busy machine the sampler may sleep through
    ACKs, and then the window read before is not the one cut)."""
    return [(before.cwnd, after.ssthresh) for before, after in zip(samples, samples[1:], strict=False)
            if before.ca_state <= 1 and after.ca_state >= 2 and after.delivered - before.delivered <= 3]


def unlike_the_rule(seen, cut):
    """The cuts in ``seen`` that ``cut(cwnd)`` does not give from the window read before them
    or one or two segments above it (that reading may still be an ACK or two old)."""
    return [(before, after) for before, after in seen if after not in {cut(before + k) for k in range(3)}]


def reduced(cwnd):
    """Scalable's cut above lwnd, halving at or below (otcp_scalable.h)."""
    return max(cwnd - cwnd // 8, 2) if cwnd > scalable.LWND else max(cwnd // 2, 2)


def test_scalable_grows_a_hundredth_per_segment_and_cuts_an_eighth(cc, testbed):
    # 20 Mb/s, 150 000 B of buffer: the window fills the pipe and the buffer near 100 segments.
    bed = testbed(20, 150_000)
    samples, used, ss_line = traced_transfer(bed, 5301, seconds=8)
    counters = cc.counters()

    assert used == scalable.CC_NAME and scalable.CC_NAME in ss_line.split(), ss_line
    assert re.search(r"\bcwnd:\d+", ss_line), ss_line
    # Above lwnd in congestion avoidance: cwnd grows by a = 0.01 per segment acknowledged.
    grew, acked, _ = growth(samples, lambda cwnd: cwnd > scalable.LWND)
    assert grew >= 20, (grew, acked)
    assert grew / acked == pytest.approx(scalable.A, rel=0.12), (grew, acked)
    # Each window with a loss cuts cwnd by b = 1/8 (the sample before may be an ACK or two behind).
    seen = [(before, after) for before, after in cuts(samples) if before > scalable.LWND]
    assert len(seen) >= 3 and not unlike_the_rule(seen, reduced), seen
    # The algorithm's own counters say the same.
    assert counters["connections"] == 1 and counters["matched"] == 0
    assert counters["scalable_increase"] / counters["scalable_acked"] == pytest.approx(scalable.A, rel=0.12)
    assert counters["scalable_cuts"] >= len(seen)
    print(f"\nScalable: cwnd grew {grew:.0f} segments over {acked:.0f} acknowledged in congestion avoidance "
          f"({grew / acked:.4f} per segment); cuts (cwnd before, ssthresh after): {seen}; counters {counters}")


def test_griddt_increase_from_the_map_below_lwnd_and_the_initial_ssthresh(cc, testbed):
    # 2 Mb/s, 10 frames of buffer: the window stays below lwnd (at most ~14 segments).
    bed = testbed(2, 10 * 1514)
    cookie = netns_cookie(bed.sender)
    measured = {}
    for increase, port in ((4, 5302), (1, 5303)):
        cc.table.update(cookie, {f"{bed.receiver_ip}/32": ScalableEntry(increase=increase, initial_ssthresh=4)})
        samples, used, ss_line = traced_transfer(bed, port, seconds=4)
        assert used == scalable.CC_NAME and scalable.CC_NAME in ss_line.split(), ss_line
        # The map's ssthresh was set at the start (the kernel's would be infinite).
        assert samples[0].ssthresh == 4, samples[0]
        assert max(s.cwnd for s in samples) <= scalable.LWND
        grew, acked, rounds = growth(samples, lambda cwnd: cwnd <= scalable.LWND)
        assert grew >= 15, (grew, acked, rounds)
        measured[increase] = grew / rounds
        ((entry, applied),) = cc.table.entries(cookie).values()
        assert entry.increase == increase and applied == 1
        assert cuts(samples) and not unlike_the_rule(cuts(samples), reduced), cuts(samples)
    assert measured[4] == pytest.approx(4, rel=0.15), measured
    assert measured[1] == pytest.approx(1, rel=0.15), measured
    counters = cc.counters()
    assert counters["matched"] == counters["ssthresh_from_map"] == 2 and counters["scalable_acked"] == 0
    assert counters["halvings"] > 0 and counters["scalable_cuts"] == 0
    print(f"\nGridDT below lwnd: measured A {measured[4]:.2f} (entry 4) and {measured[1]:.2f} (entry 1) segments "
          f"per round trip; counters {counters}")


def test_griddt_mode_adds_a_per_round_trip_above_lwnd_and_halves(cc, testbed):
    bed = testbed(20, 150_000)
    cc.table.update(netns_cookie(bed.sender), {"10.199.0.0/24": ScalableEntry(increase=4, griddt=True)})
    samples, used, _ = traced_transfer(bed, 5304, seconds=4)
    assert used == scalable.CC_NAME
    grew, acked, rounds = growth(samples, lambda cwnd: cwnd > scalable.LWND)
    assert grew >= 50, (grew, acked, rounds)
    assert grew / rounds == pytest.approx(4, rel=0.12), (grew, rounds)
    seen = cuts(samples)
    assert seen and not unlike_the_rule(seen, lambda cwnd: max(cwnd // 2, 2)), seen
    counters = cc.counters()
    assert counters["scalable_acked"] == 0 and counters["scalable_cuts"] == 0 and counters["halvings"] >= len(seen)
    print(f"\nGridDT mode: measured A {grew / rounds:.2f} segments per round trip above lwnd; halvings {seen}")


def test_a_planned_route_gives_a_connection_the_algorithm_its_ssthresh_and_increase_from_the_first_packet(
        cc, testbed, tmp_path):
    """The whole mechanism: the planner's values for a long fat path (the worked example of
    docs/design.md: 1 Gb/s, 120.04 ms, GridDT on: otcp_scalable, ssthresh 10362, A = 3), applied
    by an agent to the sender's route toward the receiver. A connection that chooses nothing
    runs otcp_scalable with ssthresh 10362 from its first packet (TCP_INFO, ss -tin), the map's
    entry counts it, and its window grows by the planned A per round trip above lwnd."""
    from otcp.agent.core import Agent
    from otcp.agent.enforcement import Enforcement
    from otcp.planning import inventory
    from otcp.planning.planner import Plan

    host = {"capacity_mbps": 1000, "delay_us": 10, "buffer_bytes": 131072}
    long_fabric = inventory.parse({
        "switches": ["s1", "s2"], "hosts": {"h1": {"ip": "10.0.0.1"}, "h3": {"ip": "10.0.1.1"}},
        "links": [{"a": "h1", "b": "s1", **host}, {"a": "h3", "b": "s2", **host},
                  {"a": "s1", "b": "s2", "capacity_mbps": 1000, "delay_us": 60000, "buffer_bytes": 10**6}]}).fabric()
    (planned,) = Plan(long_fabric, long_paths=formulas.LongPaths(griddt=True)).routes_for("10.0.0.1")
    assert (planned.congctl, planned.ssthresh, planned.increase) == ("otcp_scalable", 10362, 3)
    bed = testbed(20, 150_000)
    route = planned.model_copy(update={"dst": f"{bed.receiver_ip}/32", "cwnd_clamp": None, "initcwnd": 10})
    enforcing = Enforcement.start("bpf", netns=bed.sender)
    assert enforcing.mode == "bpf", enforcing.reason
    with Agent(str(tmp_path / "state.db"), netns=bed.sender, enforcement=enforcing) as agent:
        _, results = agent.apply({"generation": 1, "routes": [route.model_dump()]}, "test")
        assert results[0].status == "applied" and results[0].reason is None, results
        shown = subprocess.run(["ip", "-n", bed.sender, "route", "show", "proto", "79"], capture_output=True,
                               text=True, check=True).stdout
        assert "congctl otcp_scalable" in shown and "ssthresh lock 10362" in shown, shown
        samples, used, ss_line = traced_transfer(bed, 5305, seconds=4, choose=False)
        ((entry, applied),) = enforcing.scalable.entries(netns_cookie(bed.sender)).values()
        agent.revert()
    assert used == scalable.CC_NAME and scalable.CC_NAME in ss_line.split(), ss_line
    assert samples[0].ssthresh == 10362, samples[0]
    assert (entry, applied) == (ScalableEntry(increase=3, initial_ssthresh=10362, griddt=True), 1)
    grew, acked, rounds = growth(samples, lambda cwnd: cwnd > scalable.LWND)
    assert grew >= 30, (grew, acked, rounds)
    assert grew / rounds == pytest.approx(3, rel=0.15), (grew, rounds)
    print(f"\nplanned route: {used}, ssthresh {samples[0].ssthresh} at the first reading; "
          f"measured A {grew / rounds:.2f} segments per round trip (planned 3); ss: {ss_line.strip()[:200]}")

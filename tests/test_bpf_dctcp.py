"""DCTCP for real: the otcp_dctcp congestion control (bpf/otcp_dctcp.bpf.c)
between two namespaces through a shaped bottleneck with the ECN marker on
it. Needs root and the BPF toolchain (scripts/bootstrap.sh); nothing skips."""

import re
import subprocess
import time

import pytest

from otcp import bpf as otcp_bpf
from otcp.bpf.dctcp import available_congestion_controls, unregister_leftover
from otcp.bpf.objects import PIN_ROOT
from otcp.experiments.kernel.testbed import finish
from support.privileges import needs_root
from support.registrations import registered_then_killed
from support.testbeds import deleted_after

pytestmark = pytest.mark.root

RATE_MBIT = 20
BUFFER = 85000
PORT = 5201


# The algorithm's name is machine-wide: wait for another OTCP process using it.
WAIT_FOR_OTHERS_S = 900


@pytest.fixture
@needs_root
def cc():
    registered = otcp_bpf.register_dctcp(wait_s=WAIT_FOR_OTHERS_S)
    yield registered
    registered.close()
    assert otcp_bpf.CC_NAME not in available_congestion_controls()


@pytest.fixture
@needs_root
def testbed():
    with deleted_after(RATE_MBIT, BUFFER) as bed:
        yield bed


def connection_line(ss_output, peer):
    """The info line of the connection to peer:PORT in `ss -tine` output, or ''."""
    lines = ss_output.splitlines()
    for i, line in enumerate(lines[:-1]):
        if f"{peer}:{PORT}" in line:
            return lines[i + 1]
    return ""


def test_dctcp_connection_negotiates_ecn_and_the_marker_counts_ce(cc, testbed):
    assert otcp_bpf.CC_NAME in available_congestion_controls()
    dev, ns = testbed.bottleneck
    with otcp_bpf.attach_marker(dev, RATE_MBIT * 1_000_000, limit_bytes=BUFFER, netns=ns) as marker:
        pin_dir = marker.loaded.path
        sink = testbed.sink(PORT, otcp_bpf.CC_NAME, flows=1)
        source = testbed.source(PORT, otcp_bpf.CC_NAME, seconds=3)
        info = ""
        while source.poll() is None and "bytes_acked" not in info:
            time.sleep(0.2)
            info = connection_line(testbed.ss(testbed.sender), testbed.receiver_ip)
        sent, received = finish(source), finish(sink)
        counters = marker.counters()
        stats = cc.stats()

    assert not pin_dir.exists()
    # The sender's socket uses the BPF algorithm and negotiated ECN.
    assert otcp_bpf.CC_NAME in info.split() and "ecn" in info.split(), info
    # The receiver's accepted socket inherited it (the DCTCP ACK machine echoes CE).
    assert received["flows"][0]["cc"] == otcp_bpf.CC_NAME
    assert received["flows"][0]["bytes"] == sent["sent"] > 0
    # The marker saw the flow's ECT packets and marked some of them CE ...
    assert counters.ect > 0 and counters.marked > 0 and counters.mark_errors == 0
    # ... and the receiver echoed them: the sender counted CE-echoed deliveries.
    delivered_ce = re.search(r"delivered_ce:(\d+)", info)
    assert delivered_ce and int(delivered_ce.group(1)) > 0, info
    # The receiver echoed exactly the marked segments (DCTCP's ACK machine, not
    # RFC 3168's echo-until-CWR): the sender's count of segments acknowledged
    # with an ECN-Echo equals the marks, to within delayed-ACK edges.
    assert abs(sent["delivered_ce"] - counters.marked) <= max(5, counters.marked // 50), (sent, counters)
    # The sender's DCTCP cut its window for those echoes and updated alpha.
    assert stats["cuts"] > 0 and stats["alpha_updates"] > 0, stats


def test_registration_is_exclusive_and_undone(cc):
    with pytest.raises(otcp_bpf.BpfUnavailable, match="in use by another OTCP process"):
        otcp_bpf.register_dctcp()
    assert cc.registered()
    cc.close()
    assert not cc.registered() and otcp_bpf.CC_NAME not in available_congestion_controls()
    cc.close()  # idempotent


def test_marker_detach_leaves_the_interface_as_it_was(testbed):
    dev, ns = testbed.bottleneck
    show = ["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", dev]
    before = subprocess.run(show, capture_output=True, text=True, check=True).stdout
    with otcp_bpf.attach_marker(dev, RATE_MBIT * 1_000_000, netns=ns) as marker:
        during = subprocess.run(show, capture_output=True, text=True, check=True).stdout
        assert "clsact" in during and marker.loaded.path.exists()
        filters = subprocess.run(["ip", "netns", "exec", ns, "tc", "filter", "show", "dev", dev, "egress"],
                                 capture_output=True, text=True, check=True).stdout
        assert "otcp_mark" in filters
    after = subprocess.run(show, capture_output=True, text=True, check=True).stdout
    assert after == before
    assert not marker.loaded.path.exists() and PIN_ROOT in marker.loaded.path.parents
    # A clsact that was there before stays, with the other filter on it.
    receiver_if = "otcpt-r"
    with otcp_bpf.attach_marker(receiver_if, RATE_MBIT * 1_000_000, netns=ns):
        pass
    kept = subprocess.run(["ip", "netns", "exec", ns, "tc", "filter", "show", "dev", receiver_if, "ingress"],
                          capture_output=True, text=True, check=True).stdout
    assert "mirred" in kept
    qdiscs = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", receiver_if],
                            capture_output=True, text=True, check=True).stdout
    assert "clsact" in qdiscs


def test_a_registration_left_by_a_killed_process_is_cleaned_up_on_request():
    with registered_then_killed("register_dctcp", WAIT_FOR_OTHERS_S) as map_id:
        # While its owner lives, clean-up leaves it alone.
        assert unregister_leftover() == []
        assert otcp_bpf.CC_NAME in available_congestion_controls()
    assert otcp_bpf.CC_NAME in available_congestion_controls()
    assert unregister_leftover() == [map_id]
    assert otcp_bpf.CC_NAME not in available_congestion_controls()

"""The static receive window (the static-rwnd scheme) on this kernel, for real: a flow pulled through a
shaped bottleneck with a deep buffer, whose queue can only grow as far as the receiver's window lets it.

A window clamp set once (TCP_WINDOW_CLAMP before connect()) does not hold: the kernel raises it when
it learns the segments' buffer overhead and with receive-buffer autotuning, and the queue grows far
beyond it. Held as the host programs hold it (common.hold_receive_window: SO_RCVBUF fixed, the clamp set
again after every read), the queue stays within the window. Needs root (two namespaces); nothing skips.
"""

import json
import subprocess
import sys
import threading
import time

import pytest

from otcp.experiments.kernel.testbed import IFB, Testbed
from support.privileges import needs_root

pytestmark = pytest.mark.root

RATE_MBIT = 10
BUFFER = 400_000
PORT = 5311
WINDOW = 6 * 1448
FLOW_BYTES = 2_000_000
#: What may sit in the queue beyond the window: the frames' headers, one frame in service, and two
#: segments more, which the held window lets through in about half of the runs that follow other
#: tests in one process (always 12 178 B at the peak; the kernel path behind it is not pinned down).
SLACK = 6 * 66 + 1514 + 2 * 1448

ONCE = """
import socket, sys
sock = socket.socket()
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, int(sys.argv[2]))
sock.connect((sys.argv[1], int(sys.argv[3])))
sock.send((1).to_bytes(8, "big") + int(sys.argv[4]).to_bytes(8, "big"))
left = int(sys.argv[4])
while left:
    left -= len(sock.recv(1 << 16))
"""


@pytest.fixture
@needs_root
def bed():
    testbed = Testbed(RATE_MBIT, BUFFER, prefix="otcpw")
    server = subprocess.Popen(["nsenter", f"--net=/run/netns/{testbed.sender}", sys.executable, "-m",
                               "otcp.experiments.hostprogs.flow_server", "--port", str(PORT), "--cc", "cubic"],
                              stdout=subprocess.PIPE, text=True)
    testbed.processes.append(server)
    assert server.stdout.readline().strip() == f"listening {PORT}"
    yield testbed
    testbed.delete()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert testbed.sender not in names and testbed.receiver not in names


def peak_backlog_while(bed, argv):
    """Run argv in the receiver's namespace and return the bottleneck's largest backlog (bytes) meanwhile."""
    peak, done = 0, threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            shown = subprocess.run(["ip", "netns", "exec", bed.receiver, "tc", "-s", "-j", "qdisc", "show", "dev",
                                    IFB], capture_output=True, text=True, check=True).stdout
            peak = max([peak] + [int(q.get("backlog", 0)) for q in json.loads(shown) if q.get("handle") == "10:"])
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        completed = subprocess.run(["nsenter", f"--net=/run/netns/{bed.receiver}", *argv], capture_output=True,
                                   text=True, timeout=120)
    finally:
        done.set()
        sampler.join()
    assert completed.returncode == 0, completed.stderr
    return peak, completed.stdout


def test_a_clamp_set_once_is_lifted_and_the_held_window_holds(bed, tmp_path):
    once, _ = peak_backlog_while(bed, [sys.executable, "-c", ONCE, bed.sender_ip, str(WINDOW), str(PORT),
                                       str(FLOW_BYTES)])
    assert once > 4 * WINDOW, once

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"duration_s": 0.1, "flows": [{"key": "f0", "start_s": 0.0, "server": bed.sender_ip,
                                                               "bytes": FLOW_BYTES}]}))
    held, out = peak_backlog_while(bed, [
        sys.executable, "-m", "otcp.experiments.hostprogs.flow_client", "--plan", str(plan), "--port", str(PORT),
        "--start-at", repr(time.monotonic() + 0.5), "--drain-s", "30", "--window-clamp", str(WINDOW)])
    (record,) = map(json.loads, out.splitlines())
    assert record["error"] is None and record["bytes"] == FLOW_BYTES
    assert 0 < held <= WINDOW + SLACK, held
    # Held to six segments over a round trip of about a millisecond plus the queue, the flow still
    # kept the link busy: the window is a ceiling on the queue, not a trickle.
    assert FLOW_BYTES * 8 / (record["end"] - record["start"]) > 0.8 * RATE_MBIT * 1e6

"""The static receive window (the static-rwnd scheme) on this kernel, for real: a flow pulled through a
shaped bottleneck with a deep buffer, whose queue can only grow as far as the receiver's window lets it.

A window clamp set once (TCP_WINDOW_CLAMP before connect()) does not hold: the kernel raises it when
it learns the segments' buffer overhead and with receive-buffer autotuning, and the queue grows far
beyond it. Held as the host programs hold it (common.hold_receive_window: SO_RCVBUF fixed, the clamp set
again after every read), the queue stays within the window once the first segments are in. Before
that, the first full-sized segment lifts the clamp until the reader's next read, and every segment the
kernel takes meanwhile may advance the advertised edge, which it never takes back: a few segments more
reach the queue in the first milliseconds, as many as the reader was late. Needs root (two
namespaces); nothing skips.
"""

import json
import subprocess
import sys
import threading
import time

import pytest

from otcp.experiments.kernel.testbed import IFB
from support.privileges import needs_root
from support.testbeds import deleted_after

pytestmark = pytest.mark.root

RATE_MBIT = 10
BUFFER = 400_000
PORT = 5311
WINDOW = 6 * 1448
FLOW_BYTES = 2_000_000
#: What may sit in the queue beyond the window: the frames' headers and one frame in service.
SLACK = 6 * 66 + 1514
#: When the held window holds: after the first segments (whose transient lasts a few milliseconds).
SETTLED_S = 0.1

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
    with deleted_after(RATE_MBIT, BUFFER, prefix="otcpw") as testbed:
        server = subprocess.Popen(["nsenter", f"--net=/run/netns/{testbed.sender}", sys.executable, "-m",
                                   "otcp.experiments.hostprogs.flow_server", "--port", str(PORT), "--cc", "cubic"],
                                  stdout=subprocess.PIPE, text=True)
        testbed.processes.append(server)
        assert server.stdout.readline().strip() == f"listening {PORT}"
        yield testbed


def backlog_while(bed, argv):
    """Run argv in the receiver's namespace; return the bottleneck's backlog meanwhile, as
    (monotonic time, bytes) samples, and argv's output."""
    samples, done = [], threading.Event()

    def sample():
        while not done.is_set():
            shown = subprocess.run(["ip", "netns", "exec", bed.receiver, "tc", "-s", "-j", "qdisc", "show", "dev",
                                    IFB], capture_output=True, text=True, check=True).stdout
            backlogs = [int(q.get("backlog", 0)) for q in json.loads(shown) if q.get("handle") == "10:"]
            samples.append((time.monotonic(), max(backlogs, default=0)))
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
    return samples, completed.stdout


def test_a_clamp_set_once_is_lifted_and_the_held_window_holds(bed, tmp_path):
    samples, _ = backlog_while(bed, [sys.executable, "-c", ONCE, bed.sender_ip, str(WINDOW), str(PORT),
                                       str(FLOW_BYTES)])
    once = max(backlog for _, backlog in samples)
    assert once > 4 * WINDOW, once

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"duration_s": 0.1, "flows": [{"key": "f0", "start_s": 0.0, "server": bed.sender_ip,
                                                               "bytes": FLOW_BYTES}]}))
    samples, out = backlog_while(bed, [
        sys.executable, "-m", "otcp.experiments.hostprogs.flow_client", "--plan", str(plan), "--port", str(PORT),
        "--start-at", repr(time.monotonic() + 0.5), "--drain-s", "30", "--window-clamp", str(WINDOW)])
    (record,) = map(json.loads, out.splitlines())
    assert record["error"] is None and record["bytes"] == FLOW_BYTES
    settled = [backlog for at, backlog in samples if at > record["start"] + SETTLED_S]
    assert 0 < max(settled) <= WINDOW + SLACK, max(settled)
    assert max(backlog for _, backlog in samples) < once / 2, (samples, once)
    # Held to six segments over a round trip of about a millisecond plus the queue, the flow still
    # kept the link busy: the window is a ceiling on the queue, not a trickle.
    assert FLOW_BYTES * 8 / (record["end"] - record["start"]) > 0.8 * RATE_MBIT * 1e6

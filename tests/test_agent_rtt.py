"""The agent's round-trip meter against the real kernel: two throwaway
namespaces joined by a veth pair; everything runs inside them with
`ip netns exec`. No assertion on speed: only that samples come from the
right source and a silent address gives none."""

import itertools
import json
import os
import subprocess
import sys

import pytest

from otcp.agent.rtt import RttMeter, Sample
from otcp.wire.messages import RoundTrip
from support.privileges import needs_root

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_names = itertools.count()


@pytest.fixture
@needs_root
def pair():
    """Namespaces (a, b): a has 10.66.0.1, b 10.66.0.2 on a veth pair."""
    a, b = (f"otcprtt-{os.getpid()}-{next(_names)}" for _ in range(2))
    for name in (a, b):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "link", "add", "va", "netns", a, "type", "veth", "peer", "name", "vb", "netns", b],
                       check=True)
        for name, dev, address in ((a, "va", "10.66.0.1/24"), (b, "vb", "10.66.0.2/24")):
            for command in (["link", "set", "lo", "up"], ["link", "set", dev, "up"],
                            ["addr", "add", address, "dev", dev]):
                subprocess.run(["ip", "-n", name, *command], check=True)
        yield a, b
    finally:
        for name in (a, b):
            subprocess.run(["ip", "netns", "del", name], check=False)


def in_namespace(name, code):
    done = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.root
def test_a_syn_probe_measures_the_round_trip_to_a_closed_port(pair):
    a, _ = pair
    code = ("import json; from otcp.agent.rtt import syn_probe\n"
            "print(json.dumps([syn_probe('10.66.0.2', 1.0), syn_probe('10.66.0.99', 0.3)]))")
    answered, silent = in_namespace(a, code)
    assert answered is not None and 0 < answered < 0.2
    assert silent is None  # nobody there: no answer, no sample


@pytest.mark.root
def test_tcp_connections_give_their_kernel_min_rtt_and_the_meter_reports_minima(pair):
    a, b = pair
    server = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-c",
                               "import socket, time\n"
                               "s = socket.create_server(('10.66.0.2', 7000)); c, _ = s.accept()\n"
                               "while c.recv(65536): pass\n"], cwd=ROOT)
    try:
        code = ("import dataclasses, json, socket, time\n"
                "from otcp.agent.rtt import RttMeter\n"
                "for _ in range(50):\n"
                "    try:\n"
                "        c = socket.create_connection(('10.66.0.2', 7000)); break\n"
                "    except OSError: time.sleep(0.1)\n"
                "for _ in range(20): c.sendall(b'x' * 10000); time.sleep(0.01)\n"
                "meter = RttMeter()\n"
                "meter.measure(['10.66.0.2/32', '10.66.0.77/32'])\n"
                "print(json.dumps([dataclasses.asdict(trip) for trip in meter.report()]))\n")
        rows = in_namespace(a, code)
    finally:
        server.kill()
        server.wait()
    (row,) = rows  # 10.66.0.77 has no connection and answers no probe
    assert row["dst"] == "10.66.0.2" and row["source"] == "tcp" and 0 < row["min_s"] < 0.2


def test_the_window_minimum_spread_and_rotation():
    meter = RttMeter(window_s=60.0, probes_per_round=2, clock=lambda: now[0])
    now = [0.0]
    for rtt in (300e-6, 100e-6, 200e-6, 900e-6):
        meter.add("10.0.0.2", Sample(0.0, rtt, "probe"))
    (row,) = meter.report()
    assert row == RoundTrip("10.0.0.2", 100e-6, pytest.approx(200e-6), 4, "probe")  # seconds
    now[0] = 61.0
    assert meter.report() == []  # the window moved past them
    assert [meter._rotation(["a", "b", "c"]) for _ in range(3)] == [["a", "b"], ["c", "a"], ["b", "c"]]


@pytest.mark.root
def test_the_sending_counter_counts_the_connections_that_sent_to_each_destination(pair):
    """Three connections from a to b: two send, one only connects. The first count sees the two; the
    second, with nothing sent since, none; then one sends again. A destination outside the prefixes is
    not reported."""
    a, b = pair
    server = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-c",
                               "import socket, threading\n"
                               "s = socket.create_server(('10.66.0.2', 7000))\n"
                               "def drain(c):\n"
                               "    while c.recv(65536): pass\n"
                               "while True: threading.Thread(target=drain, args=(s.accept()[0],)).start()\n"],
                              cwd=ROOT)
    try:
        code = ("import json, socket, time\n"
                "from otcp.agent.sending import SendingCounter\n"
                "for _ in range(50):\n"
                "    try:\n"
                "        first = socket.create_connection(('10.66.0.2', 7000)); break\n"
                "    except OSError: time.sleep(0.1)\n"
                "second, idle = (socket.create_connection(('10.66.0.2', 7000)) for _ in range(2))\n"
                "def send(c): c.sendall(b'x' * 20000); time.sleep(0.2)\n"
                "counter = SendingCounter(); counts = []\n"
                "send(first); send(second)\n"
                "counts.append(counter.count(['10.66.0.0/24'])); counts.append(counter.count(['10.66.0.0/24']))\n"
                "send(second)\n"
                "counts.append(counter.count(['10.66.0.0/24'])); send(first)\n"
                "counts.append(counter.count(['10.77.0.0/16']))\n"
                "print(json.dumps([[[s.dst, s.connections] for s in c] for c in counts]))\n")
        counts = in_namespace(a, code)
    finally:
        server.kill()
        server.wait()
    assert counts == [[["10.66.0.2", 2]], [], [["10.66.0.2", 1]], []]

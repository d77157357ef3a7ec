"""The controller against real Open vSwitch switches in Mininet: forwarding,
discovery, delay measurement, flow counts, stored parameters, link changes."""

import math
import sys
import time

from otcp.controller import store
from otcp.experiments.runner.controller import wait_for
from otcp.planning import formulas, inventory
from otcp.planning.planner import Plan
from support.emulations import FAST

#: How far above its stored minimum a route's minRTO may be: each link estimate's top adds the
#: spread of its accepted samples, at most the 100 us physical bound, over at most 8 links of a round trip.
SPREAD_BOUND_US = 8 * 100


def state(controller):
    return store.Store(controller.database, readonly=True)


def up_links(controller):
    db = state(controller)
    try:
        return {(src, dst) for src, dst in db.db.execute("SELECT src, dst FROM links WHERE up = 1")}
    finally:
        db.close()


def mininet_switch_links(topo):
    links = set()
    for a, b in topo.links():
        if a in topo.switches() and b in topo.switches():
            links |= {(a, b), (b, a)}
    return links


def latest_measurements(controller):
    db = state(controller)
    try:
        return db.latest_link_measurements()
    finally:
        db.close()


def test_pingall_and_discovered_topology(triangle_controller):
    topo, emulation, controller = triangle_controller.topo, triangle_controller.emulation, triangle_controller.controller
    expected_links = mininet_switch_links(topo)
    wait_for(lambda: up_links(controller) == expected_links, 30, what="LLDP discovery of every switch link")
    # First contact: ARP for a host the controller has not seen yet is
    # answered once that host replies to the controller's own probe.
    assert emulation.net.pingAll(timeout=2) == 0
    db = state(controller)
    try:
        switches = dict(db.db.execute("SELECT name, dpid FROM switches WHERE up = 1"))
        hosts = {row[1]: row[3:5] for row in db.db.execute("SELECT * FROM hosts")}
    finally:
        db.close()
    assert switches == {name: int(topo.nodeInfo(name)["dpid"], 16) for name in topo.switches()}
    expected_hosts = {}
    for host in topo.hosts():
        switch, _ = topo.switch_port(host)
        expected_hosts[host] = (int(topo.nodeInfo(switch)["dpid"], 16), topo.port(host, switch)[1])
    assert hosts == expected_hosts
    assert up_links(controller) == mininet_switch_links(topo)


def test_every_switch_link_has_a_delay_control_plane_time_cannot_inflate(triangle_controller):
    """Every switch link gets a delay: measured where a probe sample passed the checks, else the
    default; never above a link's physical bound (100 µs), whatever the userspace switch adds."""
    topo, controller = triangle_controller.topo, triangle_controller.controller
    expected = mininet_switch_links(topo)

    def known():
        rows = latest_measurements(controller)
        return all(rows.get(link, {}).get("delay_source") in ("measured", "default") for link in expected) and rows

    rows = wait_for(known, 30, what="a delay on every switch link")
    for link in expected:
        assert math.isfinite(rows[link]["delay_s"]) and 0 <= rows[link]["delay_s"] <= 100e-6, (link, rows[link])
        if rows[link]["delay_source"] == "measured":
            assert rows[link]["samples"] >= 1


def test_traffic_raises_flow_counts_on_its_path(triangle_controller):
    emulation, controller = triangle_controller.emulation, triangle_controller.controller
    path = [("h1", "s1"), ("s1", "s3"), ("s3", "h4")]
    # Earlier tests' pings stay "active" until two polls have seen them stop.
    quiet_from = time.time() + 2 * FAST["flow_stats_s"]
    wait_for(lambda: all(r["at"] > quiet_from and r["flows"] == 0 for r in latest_measurements(controller).values()),
             30, what="every link idle before traffic")
    h4_ip = emulation.host("h4").IP()
    server = emulation.start("h4", ["iperf3", "-s", "-1", "-B", h4_ip])
    wait_for(lambda: "iperf3" in emulation.run("h4", ["ss", "-ltnp"]), 10, what="iperf3 server")
    client = emulation.start("h1", ["iperf3", "-c", h4_ip, "-t", "8", "-b", "20M"])
    try:
        rows = wait_for(lambda: (lambda r: all(r.get(link, {}).get("flows", 0) >= 1 for link in path) and r)(
            latest_measurements(controller)), 15, what="flow counts on h1 -> h4's path")
        assert rows[("s2", "h3")]["flows"] == 0  # not on the path
    finally:
        emulation.stop(client)
        emulation.stop(server)


def test_stored_parameters_match_the_planner(triangle_controller):
    controller, inventory_path = triangle_controller.controller, triangle_controller.inventory_path
    db = state(controller)
    try:
        generation, _, records = db.latest_generation()
        links, flows = db.generation_inputs(generation)
    finally:
        db.close()
    assert len(records) == 4 * 3
    declared = inventory.load(inventory_path)
    # The same inventory, with every delay the controller used for this
    # generation (a link's two directions averaged: only their sum counts,
    # as every path is the same both ways).
    document = {
        "switches": {name: {"dpid": dpid} for name, dpid in declared.switches.items()},
        "hosts": {name: {"ip": ip} for name, ip in declared.hosts.items()},
        "links": [],
        "flows": [{"src": s, "dst": d, "count": n} for (s, d), n in flows.items()],
    }
    for spec in declared.links:
        there, back = links[(spec.a, spec.b)], links[(spec.b, spec.a)]
        document["links"].append({
            "a": spec.a, "b": spec.b, "capacity_mbps": spec.capacity_mbps, "buffer_bytes": spec.buffer_bytes,
            "delay_us": (there["delay_s"] + back["delay_s"]) / 2 * 1e6,
        })
    expected = {(r["src"], r["dst"]): r for r in Plan(inventory.parse(document).fabric(), formulas.Bounds()).records()}
    for record in records:
        want = expected[(record["src"], record["dst"])]
        # minRTO takes the top of each link's estimate: its minimum plus the spread of its accepted
        # samples, each at most the 100 µs physical bound, over at most 8 links of a round trip here.
        assert want["min_rto_us"] - 0.01 <= record["min_rto_us"] <= want["min_rto_us"] + 8 * 100 + 0.01
        assert record["rto_min_ms"] >= want["rto_min_ms"]
        for key in ("hops", "initcwnd", "cwnd_clamp", "quickack"):  # the windows take the minimum
            assert record[key] == want[key], (record, want)
    # 100 Mb/s and 85 000 B everywhere: h1 -> h4 crosses s1 and s3, four
    # switch egresses on the round trip at 6.8 ms each, plus sub-ms delays.
    h1_h4 = next(r for r in records if (r["src"], r["dst"]) == ("h1", "h4"))
    assert h1_h4["hops"] == ["h1", "s1", "s3", "h4"]
    forward = list(zip(h1_h4["hops"], h1_h4["hops"][1:]))
    rtt_prop_us = sum(links[link]["delay_s"] + links[link[::-1]]["delay_s"] for link in forward) * 1e6
    assert 4 * 6800 + rtt_prop_us - 0.01 <= h1_h4["min_rto_us"] <= 4 * 6800 + rtt_prop_us + SPREAD_BOUND_US + 0.01
    assert h1_h4["rto_min_ms"] == math.ceil(h1_h4["min_rto_us"] / 1000)


def test_link_down_and_up_replans(triangle_controller):
    emulation, controller = triangle_controller.emulation, triangle_controller.controller

    def h1_h4():
        db = state(controller)
        try:
            latest = db.latest_generation()
        finally:
            db.close()
        return next(r for r in latest[2] if (r["src"], r["dst"]) == ("h1", "h4"))

    emulation.net.configLinkStatus("s1", "s3", "down")
    try:
        detour = wait_for(lambda: (lambda r: r["hops"] == ["h1", "s1", "s2", "s3", "h4"] and r)(h1_h4()), 30,
                          what="a plan around the failed link")
        # Two more switch egresses on the round trip: +2 x 6.8 ms.
        assert detour["min_rto_us"] >= 6 * 85000 / 12.5e6 * 1e6
        assert emulation.net.ping([emulation.host("h1"), emulation.host("h4")], timeout=2) == 0
    finally:
        emulation.net.configLinkStatus("s1", "s3", "up")
    direct = wait_for(lambda: (lambda r: r["hops"] == ["h1", "s1", "s3", "h4"] and r)(h1_h4()), 30,
                      what="the plan after the link came back")
    assert direct["min_rto_us"] < detour["min_rto_us"]


FORGE_PROBE = """
import socket, sys
from otcp.controller.delay import probe_frame
sender = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sender.bind((sys.argv[1], 0))
for sequence in range(1, 5001):
    sender.send(probe_frame(int(sys.argv[2]), int(sys.argv[3]), "00:00:00:00:00:99", sequence))
"""


def test_probes_forged_by_a_host_are_ignored(triangle_controller):
    topo, emulation, controller = triangle_controller.topo, triangle_controller.emulation, triangle_controller.controller
    wait_for(lambda: up_links(controller) == mininet_switch_links(topo), 30, what="the real links")
    assert emulation.net.pingAll(timeout=2) == 0  # every host known, so its port is host-facing
    # h2 claims, in the controller's own probe format, to be s2's port 1 (a real link port),
    # with every sequence number a probe of this run may have carried.
    emulation.run("h2", [sys.executable, "-c", FORGE_PROBE, "h2-eth0", "2", "1"])
    h2_port = topo.port("h2", "s1")[1]
    time.sleep(3 * FAST["probe_s"])  # three probe rounds: a forged link would be known and planned by now
    assert f"-> s1:{h2_port} up" not in controller.log()
    assert up_links(controller) == mininet_switch_links(topo)

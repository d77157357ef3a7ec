"""The controller on fabrics larger than a toy: a 6-ary fat-tree (45
switches, 54 hosts) and a leaf-spine with 4 spines, on real Open vSwitch
switches in Mininet.

A fat-tree this size never settles under a controller that answers its own
ARP probes where they come back through undiscovered links, re-sends missed
packets hop by hop into the fabric, or lets os-ken's LLDP round (50 ms per
port, 270 ports) outlast its link timeout: hosts are learned on switch links
over and over, and links next to a wrongly placed host are refused for good.
Here every link must be discovered and stay up, every host learned once, at
its real port, and pingall must lose nothing.
"""

import re

import pytest

from otcp.controller import store
from otcp.experiments.runner.controller import wait_for
from otcp.topo.fabrics import FatTreeTopo, LeafSpineTopo
from support.emulations import controller_network
from support.privileges import needs_root

TOPOLOGIES = {
    "fattree6": lambda: FatTreeTopo(k=6),
    "leafspine4x4": lambda: LeafSpineTopo(leaves=4, spines=4, hosts_per_leaf=3),
}


@pytest.fixture(params=sorted(TOPOLOGIES))
@needs_root
def network(request, tmp_path):
    """The topology under the controller, without an inventory."""
    with controller_network(TOPOLOGIES[request.param](), tmp_path) as network:
        yield network


def switch_links(topo):
    """Every directed switch-to-switch link of the topology, by the controller's
    names for the switches (s<dpid>: it runs without an inventory)."""
    name = {switch: f"s{int(topo.nodeInfo(switch)['dpid'], 16)}" for switch in topo.switches()}
    links = set()
    for a, b in topo.links():
        if a in name and b in name:
            links |= {(name[a], name[b]), (name[b], name[a])}
    return links


def stored(controller, query):
    db = store.Store(controller.database, readonly=True)
    try:
        return list(db.db.execute(query))
    finally:
        db.close()


def test_every_link_found_every_host_learned_once_where_it_is_and_pingall_loses_nothing(network):
    topo, emulation, controller = network.topo, network.emulation, network.controller
    expected_links = switch_links(topo)
    wait_for(lambda: set(stored(controller, "SELECT src, dst FROM links WHERE up = 1")) == expected_links, 90,
             interval=1, what="discovery of every switch link")
    assert emulation.net.pingAll(timeout=2) == 0
    expected_hosts = {}
    for host in topo.hosts():
        switch, _ = topo.switch_port(host)
        expected_hosts[emulation.host(host).IP()] = (int(topo.nodeInfo(switch)["dpid"], 16),
                                                      topo.port(host, switch)[1])
    wait_for(lambda: {ip: (dpid, port) for ip, _, dpid, port in stored(
        controller, "SELECT ip, mac, dpid, port FROM hosts")} == expected_hosts, 30, what="every host stored")
    log = controller.log()
    sightings = re.findall(r"host (\S+) \(\S+\) at s(\d+):(\d+)", log)
    # Learned once each, at its own port: no host ever placed on a switch link.
    assert sorted(ip for ip, _, _ in sightings) == sorted(expected_hosts)
    assert {ip: (int(dpid), int(port)) for ip, dpid, port in sightings} == expected_hosts
    assert re.findall(r"link s\d+:\d+ -> s\d+:\d+ down", log) == []
    assert set(stored(controller, "SELECT src, dst FROM links WHERE up = 1")) == expected_links

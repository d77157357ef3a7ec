"""Multipath forwarding in Mininet with the controller: on a leaf-spine of two spines, every host
reaches every other at the first pingAll, and two flows between different pairs of leaves take
different spines, the ones the plan puts them on (the spines' own byte counters say so)."""

from otcp.experiments import multipath
from otcp.planning import inventory
from otcp.planning.planner import Plan
from otcp.topo.fabrics import LeafSpineTopo
from support.emulations import FAST, controller_network


def test_two_flows_between_different_leaf_pairs_take_different_spines_and_pingall_is_clean(tmp_path):
    topo = LeafSpineTopo(leaves=2, spines=2, hosts_per_leaf=4)
    inventory_path = topo.write_inventory(str(tmp_path / "inventory.yaml"))
    fabric = inventory.load(inventory_path).fabric()
    plan = Plan(fabric)
    top = multipath.top_tier(plan)
    flows = multipath.chosen_flows(plan, top)
    assert top == ["spine1", "spine2"]
    leaf_pairs = [(plan.attachment[src], plan.attachment[dst]) for src, dst in flows]
    planned = [multipath.planned_via(plan, src, dst, top) for src, dst in flows]
    assert leaf_pairs[0] != leaf_pairs[1] and planned[0] != planned[1]
    names = {ip: name for ip, name in fabric.hosts.items()}
    with controller_network(topo, tmp_path / "controller", inventory=inventory_path, intervals=FAST) as network:
        assert multipath.pingall_loss(network.emulation, len(fabric.switch_links()), network.controller) == 0
        carried = multipath.run_flows(network.emulation, names, flows, top)
    assert [via for via, _, _ in carried] == planned
    assert all(sent > 1_000_000 and rate > 1 for _, sent, rate in carried)

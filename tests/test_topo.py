"""The Mininet topologies and the inventories they write (no network started)."""

import collections

import pytest
import yaml

from ryu_app import inventory as controller_inventory
from topo.fabrics import (
    DEEP_BUFFER,
    SHALLOW_BUFFER,
    FatTreeTopo,
    LeafSpineTopo,
    StarTopo,
    topos,
)


def degree(document):
    counts = collections.Counter()
    for link in document["links"]:
        counts[link["a"]] += 1
        counts[link["b"]] += 1
    return counts


def test_topos_dict_names_the_three_topologies():
    assert topos == {"star": StarTopo, "leafspine": LeafSpineTopo, "fattree": FatTreeTopo}


def test_star_inventory_matches_the_design_note_format():
    document = StarTopo(16).inventory()
    assert document["switches"] == {"s1": {"dpid": 1}}
    assert len(document["hosts"]) == 17
    assert document["hosts"]["h1"] == {"ip": "10.0.0.1"}
    assert document["hosts"]["h17"] == {"ip": "10.0.0.17"}
    assert len(document["links"]) == 17
    for link in document["links"]:
        assert link["b"] == "s1"
        assert link["capacity_mbps"] == 100
        assert link["buffer_bytes"] == SHALLOW_BUFFER
        assert "delay_us" not in link


def test_star_receiver_and_senders():
    topo = StarTopo(3, bw=1000, buffer_bytes=DEEP_BUFFER)
    assert topo.receiver == "h1"
    assert topo.senders == ["h2", "h3", "h4"]
    assert topo.switch_port("h1") == ("s1", "s1-eth1")
    assert topo.switch_port("h3") == ("s1", "s1-eth3")
    assert {link["buffer_bytes"] for link in topo.inventory()["links"]} == {DEEP_BUFFER}
    assert topo.probe is None
    assert not topo.has_loop()


def test_star_probe_host_is_extra_and_sends_no_data():
    topo = StarTopo(3, probe=True)
    assert topo.senders == ["h2", "h3", "h4"]
    assert topo.probe == "h5"
    assert topo.inventory()["hosts"]["h5"] == {"ip": "10.0.0.5"}


def test_delay_is_written_only_when_enforced():
    topo = StarTopo(2, delay_us=25)
    assert all("delay_us" not in link for link in topo.inventory()["links"])
    assert all(link["delay_us"] == 25 for link in topo.inventory(delay_enforced=True)["links"])


def test_leafspine_shape():
    topo = LeafSpineTopo(leaves=3, spines=2, hosts_per_leaf=4, fabric_bw=400)
    document = topo.inventory()
    assert [name for name in document["switches"]] == ["leaf1", "leaf2", "leaf3", "spine1", "spine2"]
    assert [v["dpid"] for v in document["switches"].values()] == [1, 2, 3, 4, 5]
    assert len(document["hosts"]) == 12
    counts = degree(document)
    assert counts["spine1"] == 3 and counts["leaf2"] == 2 + 4
    fabric = [link for link in document["links"] if link["a"].startswith("leaf") and link["b"].startswith("spine")]
    assert len(fabric) == 6 and {link["capacity_mbps"] for link in fabric} == {400}
    assert topo.has_loop()


def test_fattree_shape():
    k = 4
    document = FatTreeTopo(k).inventory()
    assert len(document["hosts"]) == k ** 3 // 4
    assert len(document["switches"]) == 5 * k * k // 4
    assert len(document["links"]) == 3 * k ** 3 // 4
    counts = degree(document)
    # Every switch has k ports in use, every host one.
    assert all(counts[s] == k for s in document["switches"])
    assert all(counts[h] == 1 for h in document["hosts"])
    dpids = [v["dpid"] for v in document["switches"].values()]
    assert len(set(dpids)) == len(dpids)
    ips = [v["ip"] for v in document["hosts"].values()]
    assert len(set(ips)) == len(ips)


def test_many_hosts_get_distinct_addresses_beyond_254():
    document = FatTreeTopo(12).inventory()
    ips = [v["ip"] for v in document["hosts"].values()]
    assert len(ips) == 432 and len(set(ips)) == 432
    assert ips[254] == "10.0.0.255" and ips[255] == "10.0.1.0"


def test_written_inventory_is_accepted_by_the_controller(tmp_path):
    path = StarTopo(4).write_inventory(str(tmp_path / "inventory.yaml"),
                                       flows=[{"src": f"h{i}", "dst": "h1", "count": 1} for i in range(2, 6)])
    document = yaml.safe_load(open(path, encoding="utf-8"))
    assert document["flows"][0] == {"src": "h2", "dst": "h1", "count": 1}
    parsed = controller_inventory.load(path)
    assert parsed.switches == {"s1": 1}
    assert parsed.hosts["h5"] == "10.0.0.5"
    assert len(parsed.links) == 5 and parsed.links[0].buffer_bytes == SHALLOW_BUFFER
    assert parsed.flows[("h2", "h1")] == 1
    # No delay declared: the live controller measures it.
    assert not parsed.pinned_delays


@pytest.mark.parametrize("build, message", [
    (lambda: StarTopo(0), "senders"),
    (lambda: StarTopo(4, bw=0), "bw"),
    (lambda: StarTopo(4, bw=5000), "bw"),
    (lambda: StarTopo(4, buffer_bytes=0), "buffer_bytes"),
    (lambda: StarTopo(4, delay_us=-1), "delay_us"),
    (lambda: FatTreeTopo(3), "even"),
    (lambda: LeafSpineTopo(leaves=0), "leaves"),
    (lambda: StarTopo(4, bw=float("nan")), "bw: NaN is not a finite number"),
    (lambda: StarTopo(4, buffer_bytes=float("inf")), "buffer_bytes: Infinity is not a finite number"),
    (lambda: StarTopo(True), "senders: true is not an integer"),
    (lambda: FatTreeTopo(4, bw=True), "bw: true is not a number"),
])
def test_bad_parameters_are_refused_with_their_name(build, message):
    with pytest.raises(ValueError, match=message):
        build()

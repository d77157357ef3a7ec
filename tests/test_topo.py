"""The Mininet topologies and the inventories they write (no network started)."""

import collections
import sys

import pytest
import yaml

from otcp.planning import inventory as controller_inventory
from otcp.topo.fabrics import (
    DEEP_BUFFER,
    SHALLOW_BUFFER,
    FatTreeTopo,
    LeafSpineTopo,
    StarTopo,
    ifb_name,
    shaping_commands,
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


def argvs(commands):
    return [" ".join(argv) for argv, _ in commands]


def test_a_hosts_end_shapes_its_link_and_holds_the_switchs_buffer_on_an_ifb():
    commands = argvs(shaping_commands("h1-eth0", on_switch=False, peer_is_switch=True, bw=100, buffer_bytes=85000))
    assert commands[0] == "ethtool -K h1-eth0 tx off tso off gso off gro off"
    # The host's own link: HTB at the rate, IPv4 in 5:10 (a pfifo), the rest in 5:20.
    assert "tc qdisc replace dev h1-eth0 root handle 5: htb default 20" in commands
    assert "tc class replace dev h1-eth0 parent 5: classid 5:1 htb rate 100.0mbit burst 15k quantum 1514" in commands
    assert "tc qdisc replace dev h1-eth0 parent 5:10 handle 10: pfifo limit 1000" in commands
    assert ("tc filter replace dev h1-eth0 parent 5: protocol ip prio 1 u32 match u32 0 0 flowid 5:10"
            in commands)
    # The switch's egress buffer toward h1: an IFB in h1's namespace, HTB at the rate and the bfifo.
    ifb = ifb_name("h1-eth0")
    assert ifb == "h1-eth0-ifb"
    assert commands.index(f"ip link add name {ifb} type ifb") < commands.index(f"ip link set dev {ifb} up")
    assert f"tc qdisc replace dev {ifb} parent 5:10 handle 10: bfifo limit 85000" in commands
    assert f"tc qdisc replace dev {ifb} parent 5:20 handle 20: pfifo limit 100" in commands
    # What h1 receives goes through the IFB, and only after the IFB is ready.
    redirect = (f"tc filter replace dev h1-eth0 ingress protocol all prio 1 u32 match u32 0 0 "
                f"action mirred egress redirect dev {ifb}")
    assert commands[-1] == redirect
    assert commands.index("tc qdisc replace dev h1-eth0 clsact") < len(commands) - 1
    assert not any("bfifo" in c and "dev h1-eth0 " in c for c in commands)


def test_a_switch_port_toward_a_host_keeps_no_queue():
    # OVS's sends into it must never fail: only offloads change.
    commands = shaping_commands("s1-eth1", on_switch=True, peer_is_switch=False, bw=100, buffer_bytes=85000)
    assert argvs(commands) == ["ethtool -K s1-eth1 tx off tso off gso off gro off"]


def test_a_port_between_switches_keeps_its_buffer_on_egress():
    commands = argvs(shaping_commands("leaf1-eth1", on_switch=True, peer_is_switch=True, bw=400, buffer_bytes=512000))
    assert "tc class replace dev leaf1-eth1 parent 5: classid 5:1 htb rate 400.0mbit burst 15k quantum 1514" \
        in commands
    assert "tc qdisc replace dev leaf1-eth1 parent 5:10 handle 10: bfifo limit 512000" in commands
    assert not any("ifb" in c for c in commands)


def test_delay_goes_between_htb_and_the_queue_only_with_netem():
    with_netem = argvs(shaping_commands("h2-eth0", False, True, bw=100, buffer_bytes=85000, delay_us=25))
    assert "tc qdisc replace dev h2-eth0 parent 5:10 handle 30: netem delay 25.0us limit 100000" in with_netem
    assert "tc qdisc replace dev h2-eth0 parent 30:1 handle 10: pfifo limit 1000" in with_netem
    assert "tc qdisc replace dev h2-eth0-ifb parent 30:1 handle 10: bfifo limit 85000" in with_netem
    without = argvs(shaping_commands("h2-eth0", False, True, bw=100, buffer_bytes=85000, delay_us=25, netem=False))
    assert not any("netem" in c for c in without)
    assert "tc qdisc replace dev h2-eth0-ifb parent 5:10 handle 10: bfifo limit 85000" in without


def test_a_link_without_rate_or_buffer_only_turns_offloads_off():
    assert argvs(shaping_commands("h1-eth1", False, True)) == ["ethtool -K h1-eth1 tx off tso off gso off gro off"]


def test_ifb_names_fit_the_kernels_limit():
    assert len(ifb_name("h250-eth0")) <= 15
    assert len(ifb_name("a-very-long-intf0")) <= 15


def test_every_command_says_what_it_does():
    for argv, what in shaping_commands("h1-eth0", False, True, bw=100, buffer_bytes=85000, delay_us=10):
        assert argv[0] in ("tc", "ip", "ethtool") and what


def test_mn_custom_loads_the_file_with_debians_python(tmp_path):
    """Debian's `mn --custom FILE` execs the file in /usr/bin/python3, outside the virtualenv,
    from wherever mn was started: the file must find the checkout's packages itself."""
    import os
    import subprocess

    path = os.path.abspath(sys.modules[StarTopo.__module__].__file__)
    program = f"import runpy; print(sorted(runpy.run_path({path!r})['topos']))"
    done = subprocess.run(["/usr/bin/python3", "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['fattree', 'leafspine', 'star']"

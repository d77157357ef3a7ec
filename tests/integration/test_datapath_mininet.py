"""The switch's datapath for real (otcp.experiments.runner.datapath): the ports Open vSwitch
and the kernel really have are the ones the emulation reports, and where the kernel refuses
XDP on a veth the switch runs on AF_PACKET, says why in the kernel's words, and forwards.

The refusal is real: native XDP on a veth whose peer's MTU is larger than a page-sized XDP
frame holds (the host's end at 9000 B) is refused by the veth driver ("Peer MTU is too large
to set XDP"), and Open vSwitch fails to add the port."""

import json
import os
import subprocess
import sys
import time

from mininet.node import Switch

from otcp.experiments.calibrate import CalibrationTopo
from otcp.experiments.runner import counters, measure, ovs_sockets, placement
from otcp.experiments.runner.datapath import Datapath, DatapathInUse
from otcp.experiments.runner.emulation import emulate
from otcp.topo.fabrics import BufferedLink
from support.emulations import ovs_bridges

# The XDP attach modes `ip -d link` reports (IFLA_XDP_ATTACHED): driver (native) and generic (skb).
XDP_ATTACHED = {"native": 1, "generic": 2}


def ovs_type(port):
    return subprocess.run(["ovs-vsctl", "get", "Interface", port, "type"], capture_output=True, text=True,
                          check=True).stdout.strip().strip('"') or "system"


def ovs_error(port):
    return subprocess.run(["ovs-vsctl", "get", "Interface", port, "error"], capture_output=True, text=True,
                          check=True).stdout.strip()


def xdp_attached(port):
    (link,) = json.loads(subprocess.run(["ip", "-j", "-d", "link", "show", "dev", port], capture_output=True,
                                        text=True, check=True).stdout)
    return link.get("xdp", {}).get("mode", 0)


def pings(emulation):
    return "1 received" in emulation.run("h2", ["ping", "-n", "-c", "1", "-W", "2", emulation.host("h1").IP()],
                                         check=False)


def test_the_ports_are_the_datapath_the_emulation_reports():
    before = ovs_bridges()
    for asked in (Datapath.named("afxdp-nonpmd", "native"), Datapath.named("afxdp-nonpmd", "generic"), Datapath()):
        with emulate(CalibrationTopo(bw=100, buffer_bytes=85000, sender_bw=200), datapath=asked) as emulation:
            assert emulation.datapath == DatapathInUse(asked, asked)
            ports = [intf.name for intf in emulation.net.get("s1").intfList() if intf.name != "lo"]
            assert ports == ["s1-eth1", "s1-eth2"]
            for port in ports:
                assert ovs_type(port) == asked.ovs_type and ovs_error(port) == "[]"
                assert xdp_attached(port) == (XDP_ATTACHED[asked.xdp_mode] if asked.is_xdp else 0)
            # One AF_XDP socket per port, its send buffer raised out of reach while the network runs.
            xsks = ovs_sockets.xdp_sockets()
            assert len(xsks) == (len(ports) if asked.is_xdp else 0)
            assert all(s.sndbuf >= 2 * ovs_sockets.SEND_BUFFER for s in xsks)
            assert pings(emulation)
        assert ovs_sockets.xdp_sockets() == []
    assert ovs_bridges() == before


def test_the_switchs_pmd_threads_are_read_for_the_share_of_their_cycles_spent_on_packets():
    # afxdp ports are polled by PMD threads, at 100 % of their core by the clock whatever the load:
    # one second of a single flow must show a processing share, the part that did work.
    before = ovs_bridges()
    topo = CalibrationTopo(bw=100, buffer_bytes=85000, sender_bw=200)
    with emulate(topo, datapath=Datapath.named("afxdp", "native")) as emulation:
        assert emulation.datapath.used == Datapath.named("afxdp", "native")
        start = counters.MachineTimes.now()
        assert start.pmd, "ovs-appctl dpif-netdev/pmd-stats-show listed no PMD thread"
        mbps = measure.single_flow_ceiling(emulation, "h2", "h1", emulation.host("h1").IP(), seconds=1)
        load = counters.MachineTimes.now() - start
        assert mbps > 10
        assert load.switch_pmd_busy_pct is not None and 0 < load.switch_pmd_busy_pct <= 100 * len(start.pmd)
    # AF_PACKET ports: the main thread forwards, and no PMD thread polls.
    with emulate(topo, datapath=Datapath()) as emulation:
        start = counters.MachineTimes.now()
        assert pings(emulation)
        assert (counters.MachineTimes.now() - start).switch_pmd_busy_pct is None
    assert ovs_bridges() == before


def test_a_sleeping_pmd_thread_gives_its_idle_core_back_and_still_forwards():
    """afxdp's PMD thread busy-polls: idle, it still takes its whole core by the clock. Allowed to sleep
    (other_config:pmd-maxsleep), with its output batched (other_config:tx-flush-interval), both set while the
    network runs and put back after, the idle thread takes a small part of it, and the ports still forward."""
    def idle_share():
        start = counters.MachineTimes.now()
        time.sleep(2)
        return (counters.MachineTimes.now() - start).switch_cpu_pct

    def settings():
        return [subprocess.run(["ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", f"other_config:{key}"],
                               capture_output=True, text=True, check=True).stdout.strip()
                for key in ("pmd-maxsleep", "tx-flush-interval")]

    before, set_before = ovs_bridges(), settings()
    topo = CalibrationTopo(bw=100, buffer_bytes=85000, sender_bw=200)
    with emulate(topo, datapath=Datapath.named("afxdp", "native")) as emulation:
        busy = idle_share()
    sleeping = Datapath.named("afxdp", "native", pmd_maxsleep_us=1000, tx_flush_us=50)
    with emulate(topo, datapath=sleeping) as emulation:
        assert emulation.datapath.used == sleeping
        assert settings() == ['"1000"', '"50"']
        idle = idle_share()
        assert measure.single_flow_ceiling(emulation, "h2", "h1", emulation.host("h1").IP(), seconds=1) > 10
    assert busy is not None and idle is not None and busy > 90 and idle < 50, (busy, idle)
    assert settings() == set_before and ovs_bridges() == before


def test_a_pinned_datapath_keeps_every_process_of_the_experiment_off_the_switchs_cores():
    """afxdp pinned: the PMD thread's core is the switch's alone; the hosts' shells, what they run and
    this process run on the others; afpacket pinned: the last core is left to the main thread.
    This process's CPUs are back once the network is down."""
    before, cpus = ovs_bridges(), os.sched_getaffinity(0)
    topo = CalibrationTopo(bw=100, buffer_bytes=85000, sender_bw=200)
    for asked in (Datapath.named("afxdp", "native", pinned=True), Datapath(pinned=True)):
        with emulate(topo, datapath=asked) as emulation:
            assert emulation.datapath.used == asked
            where = emulation.placement
            assert where.pinned and not set(where.host_cpus) & set(where.switch_cpus)
            assert set(where.host_cpus) | set(where.switch_cpus) == cpus
            pmd = placement.pmd_cores()
            assert (set(pmd) == set(where.switch_cpus)) if asked.is_xdp else (pmd == [] and where.switch_cpus ==
                                                                              (max(cpus),))
            assert os.sched_getaffinity(0) == set(where.host_cpus)
            assert os.sched_getaffinity(emulation.host("h1").pid) == set(where.host_cpus)
            shown = emulation.run("h2", [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"])
            assert shown.strip() == str(list(where.host_cpus))
            assert pings(emulation)
        assert os.sched_getaffinity(0) == cpus
    # Unpinned, nothing is placed.
    with emulate(topo, datapath=Datapath()) as emulation:
        assert emulation.placement is None and os.sched_getaffinity(0) == cpus
    assert ovs_bridges() == before


class JumboHostLink(BufferedLink):
    """A BufferedLink whose host end has a 9000 B MTU (set before the switch adds its port)."""

    def __init__(self, node1, node2, **params):
        BufferedLink.__init__(self, node1, node2, **params)
        host_end = self.intf2 if isinstance(node1, Switch) else self.intf1
        host_end.node.pexec(["ip", "link", "set", "dev", host_end.name, "mtu", "9000"])


class JumboCalibrationTopo(CalibrationTopo):
    """The calibration network, every host's end at MTU 9000."""

    def _link_options(self, bw, buffer_bytes, delay_us):
        return {**super()._link_options(bw, buffer_bytes, delay_us), "cls": JumboHostLink}


def test_where_the_kernel_refuses_xdp_the_switch_falls_back_to_afpacket_and_says_why(capfd):
    before = ovs_bridges()
    asked = Datapath.named("afxdp-nonpmd", "native")
    with emulate(JumboCalibrationTopo(bw=100, buffer_bytes=85000, sender_bw=200), datapath=asked) as emulation:
        in_use = emulation.datapath
        assert (in_use.asked, in_use.used) == (asked, Datapath())
        # Open vSwitch's error, and the kernel's reason from its log.
        assert "could not add network device s1-eth" in in_use.reason
        assert "Peer MTU is too large to set XDP" in in_use.reason
        for port in ("s1-eth1", "s1-eth2"):
            assert ovs_type(port) == "system" and ovs_error(port) == "[]" and xdp_attached(port) == 0
        assert ovs_sockets.xdp_sockets() == []
        assert pings(emulation)
    assert f"otcp: {in_use.note}" in capfd.readouterr().err
    assert ovs_bridges() == before

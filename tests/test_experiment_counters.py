"""Every counter of a run as one Snapshot before and after it, and their difference
(otcp.experiments.runner.counters), on a network whose commands answer from a script (no network)."""

import contextlib
import ctypes
import dataclasses
import json
import os
import threading
import time
import types

import pytest

from otcp.experiments.runner import counters, ovs_sockets
from otcp.experiments.runner.datapath import Datapath, DatapathInUse


def queues(egress_sent, egress_drops, buffer_sent, buffer_drops, backlog_packets=0):
    return counters.LinkQueues(counters.QueueCounters(egress_sent, egress_drops),
                               counters.QueueCounters(buffer_sent, buffer_drops, backlog_packets=backlog_packets))


def machine(busy, total, switch_s=None, at=0.0):
    return counters.MachineTimes(counters.CpuTimes((busy, busy), (total, total), (busy // 10, busy // 10), (0, 0)),
                                 None if switch_s is None else counters.ThreadTime(7, switch_s, at))


def test_a_change_is_after_minus_before_per_counter_with_the_loss_account():
    before = counters.Snapshot(
        "h1", tcp={"h1": {"TcpExtTCPTimeouts": 1, "TcpRetransSegs": 10}, "h2": {"TcpExtTCPTimeouts": 0}},
        queues={"h1": queues(100, 0, 1000, 5), "h2": queues(2000, 0, 50, 0)},
        interfaces={"s1:s1-eth1": {"qdisc_drops": 1, "tx_packets": 10}},
        machine=machine(100, 1000, switch_s=1.0, at=10.0), ce_marked=7, generation=3)
    after = counters.Snapshot(
        "h1", tcp={"h1": {"TcpExtTCPTimeouts": 3, "TcpRetransSegs": 40}, "h2": {"TcpExtTCPTimeouts": 2}},
        queues={"h1": queues(150, 0, 2900, 105), "h2": queues(4050, 2, 100, 0)},
        interfaces={"s1:s1-eth1": {"qdisc_drops": 4, "tx_packets": 60}},
        machine=machine(600, 2000, switch_s=1.5, at=11.0), ce_marked=17, generation=5)
    change = after - before
    assert change.tcp["h1"]["TcpExtTCPTimeouts"] == 2 and change.tcp["h2"]["TcpRetransSegs"] == 0
    assert (change.timeouts, change.retransmissions) == (4, 30)
    assert change.interfaces == {"s1:s1-eth1": {"qdisc_drops": 3, "tx_packets": 50}}
    # The hosts sent 50 + 2050, the buffers delivered 1900 + 50 and the receiver's dropped 100: 50 unexplained.
    assert change.loss == counters.LossAccount(sent=2100, delivered=1950, drops=100, drops_other_buffers=0,
                                               queued=0, sender_queue_drops=2)
    assert change.loss.unexplained == 50
    assert change.queues["h2"].counts() == {"egress": {"sent_packets": 2050, "drops": 2},
                                            "buffer": {"sent_packets": 50, "drops": 0}}
    assert change.machine == counters.MachineLoad(cpu_busy_pct=50.0, cpu_busiest_pct=50.0, cpu_softirq_pct=5.0,
                                                  cpu_steal_pct=0.0, switch_cpu_pct=pytest.approx(50.0))
    assert (change.ce_marks, change.generations) == (10, 2)


def test_what_was_not_read_stays_unknown():
    quiet = counters.Snapshot("h1", {}, {"h1": queues(0, 0, 0, 0)}, {}, machine(0, 100))
    change = quiet - quiet
    assert (change.ce_marks, change.generations, change.machine.switch_cpu_pct) == (None, None, None)
    with pytest.raises(ValueError, match="different bottlenecks"):
        quiet - counters.Snapshot("h2", {}, {"h2": queues(0, 0, 0, 0)}, {}, machine(0, 100))


class ScriptedNetwork:
    """An emulation whose hosts answer nstat, tc and ip from counts that grow by `step` per
    reading, and that logs what was read when; one IPv4 queue per link (h1's IFB the bottleneck)."""

    def __init__(self, datapath=Datapath()):
        self.log = []
        self.readings = 0
        self.datapath = DatapathInUse(datapath, datapath)

    def host(self, name):
        return types.SimpleNamespace(defaultIntf=lambda: types.SimpleNamespace(name=f"{name}-eth0",
                                                                             buffer_device=f"{name}-ifb"))

    def run(self, host, argv, check=True):
        self.log.append((host, argv[0]))
        self.readings += 1
        count = self.readings
        if argv[0] == "nstat":
            return json.dumps({"kernel": {"TcpExtTCPTimeouts": count}})
        if argv[:2] == ["tc", "-s"]:
            return json.dumps([{"dev": f"{host}-{device}", "handle": "10:", "root": True, "packets": count,
                                "drops": 0, "backlog": 0, "qlen": 0} for device in ("eth0", "ifb")])
        return json.dumps([{"ifname": f"{host}-eth0", "stats64": {"rx": {"packets": count}, "tx": {}}}])


def test_measuring_reads_the_queues_closest_to_the_run_and_the_machine_around_it_alone(monkeypatch):
    network = ScriptedNetwork()
    events = []
    monkeypatch.setattr(counters, "read_cpu_times", lambda: events.append("cpu") or counters.CpuTimes((0,), (1,),
                                                                                                     (0,), (0,)))
    monkeypatch.setattr(counters, "switch_thread_time", lambda pid: None)

    @contextlib.contextmanager
    def quiet():
        events.append("paused")
        yield
        events.append("resumed")

    reader = counters.Counters(network, ["h1", "h2"], "h1", interfaces=[("h1", "h1-eth0")], quiet=quiet)
    with reader.measuring() as window:
        events.append("run")
        network.log.append(("run", None))
    kinds = [kind for _, kind in network.log]
    # Before: drained (tc), then under the quiet: TCP counters, interfaces, queues; after, in reverse.
    run = kinds.index(None)
    assert kinds[:run] == ["tc", "nstat", "nstat", "tc", "ip", "tc", "tc"]
    assert kinds[run + 1:] == ["tc", "tc", "tc", "tc", "ip", "nstat", "nstat"]
    assert events == ["paused", "resumed", "cpu", "run", "cpu", "paused", "resumed"]
    change = window.change
    assert set(change.tcp) == {"h1", "h2"} and change.tcp["h1"]["TcpExtTCPTimeouts"] > 0
    assert change.loss.unexplained == 0


def test_afxdp_ports_input_drops_are_read_around_the_run_and_named_in_the_loss_account(monkeypatch):
    network = ScriptedNetwork(Datapath.named("afxdp-nonpmd"))
    readings = iter([40, 47])
    monkeypatch.setattr(counters, "switch_thread_time", lambda pid: None)
    monkeypatch.setattr(ovs_sockets, "xdp_input_drops", lambda: next(readings))
    with counters.Counters(network, ["h1", "h2"], "h1").measuring() as window:
        pass
    # 7 frames lost at the switch's input between the snapshots: named, so not unexplained.
    assert window.change.loss.switch_input_drops == 7
    assert window.change.loss.as_dict()["switch_input_drops"] == 7
    assert window.change.loss.unexplained == counters.LossAccount(**{
        **dataclasses.asdict(window.change.loss), "switch_input_drops": 0}).unexplained - 7


def test_afpacket_ports_have_no_input_drops_to_read(monkeypatch):
    monkeypatch.setattr(counters, "switch_thread_time", lambda pid: None)
    monkeypatch.setattr(ovs_sockets, "xdp_input_drops", lambda: pytest.fail("AF_PACKET ports have no XSK to read"))
    with counters.Counters(ScriptedNetwork(), ["h1"], "h1").measuring() as window:
        pass
    assert window.change.loss.switch_input_drops == 0


def test_a_run_that_fails_has_no_after():
    network = ScriptedNetwork()
    reader = counters.Counters(network, ["h1"], "h1")
    with pytest.raises(RuntimeError, match="broke"), reader.measuring() as window:
        raise RuntimeError("broke")
    with pytest.raises(RuntimeError, match="has not ended"):
        assert window.change is None


def test_the_switch_time_is_its_main_threads_and_its_pmd_threads_not_the_others(monkeypatch):
    # This process stands in for ovs-vswitchd: a thread named like a PMD thread, and another.
    monkeypatch.setattr(ovs_sockets, "vswitchd_pid", os.getpid)
    libc = ctypes.CDLL(None)
    busy, stop = threading.Barrier(3), threading.Event()

    def spin(name):
        libc.prctl(15, name, 0, 0, 0)  # PR_SET_NAME
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        busy.wait()
        stop.wait()

    threads = [threading.Thread(target=spin, args=(name,)) for name in (b"pmd-c01", b"handler1")]
    for thread in threads:
        thread.start()
    try:
        busy.wait()
        main = counters.parse_task_stat(open(f"/proc/{os.getpid()}/task/{os.getpid()}/stat").read(),
                                        os.sysconf("SC_CLK_TCK"))
        switch = counters.switch_thread_time(ovs_sockets.vswitchd_pid())
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert switch is not None and switch.tid == os.getpid()
    # The PMD thread's 0.3 s counted (ticks of 10 ms or less), the handler's not.
    assert 0.25 <= switch.cpu_s - main <= 0.45


#: ovs-appctl dpif-netdev/pmd-stats-show as Open vSwitch 3.1 prints it (the counters shortened to what differs).
PMD_STATS = """pmd thread numa_id 0 core_id 0:
  packets received: 1200
  packet recirculations: 0
  avg. datapath passes per packet: 1.00
  emc hits: 1100
  megaflow hits: 99
  miss with success upcall: 1
  miss with failed upcall: 0
  avg. packets per output batch: 1.20
  idle cycles: 3000000 (75.00%)
  processing cycles: 1000000 (25.00%)
  avg cycles per packet: 3333.33 (4000000/1200)
  avg processing cycles per packet: 833.33 (1000000/1200)
pmd thread numa_id 0 core_id 1:
  packets received: 0
  idle cycles: 500 (100.00%)
  processing cycles: 0 (0.00%)
main thread:
  packets received: 40
  idle cycles: 777 (1.00%)
  processing cycles: 7 (99.00%)
"""


def test_pmd_stats_give_each_pmd_threads_cycles_and_leave_the_main_thread_out():
    assert counters.parse_pmd_stats(PMD_STATS) == {
        "numa_id 0 core_id 0": counters.PmdCycles(idle=3000000, processing=1000000),
        "numa_id 0 core_id 1": counters.PmdCycles(idle=500, processing=0)}
    assert counters.parse_pmd_stats("main thread:\n  idle cycles: 1 (50.00%)\n  processing cycles: 1 (50.00%)\n") == {}
    with pytest.raises(ValueError, match="pmd thread numa_id 0 core_id 3"):
        counters.parse_pmd_stats("pmd thread numa_id 0 core_id 3:\n  packets received: 4\n")


def test_pmd_load_is_the_processing_share_of_the_cycles_between_two_readings_per_thread_summed():
    before = {"a": counters.PmdCycles(1000, 1000), "b": counters.PmdCycles(0, 0), "gone": counters.PmdCycles(5, 5)}
    after = {"a": counters.PmdCycles(1000 + 300, 1000 + 100), "b": counters.PmdCycles(50, 50),
             "new": counters.PmdCycles(1, 1)}
    # a: 100 of 400 cycles on packets (25 %), b: 50 of 100 (50 %); threads not in both readings are left out.
    assert counters.pmd_busy(before, after) == pytest.approx(75.0)
    assert counters.pmd_busy(before, before) is None  # no cycle passed
    assert counters.pmd_busy(None, after) is None and counters.pmd_busy(before, {}) is None


def test_the_machine_load_carries_the_pmd_threads_share_where_both_readings_have_them():
    cpu = counters.CpuTimes((0, 0), (100, 100), (0, 0), (0, 0))
    later = counters.CpuTimes((50, 50), (200, 200), (0, 0), (0, 0))
    before = counters.MachineTimes(cpu, None, {"t": counters.PmdCycles(0, 0)})
    after = counters.MachineTimes(later, None, {"t": counters.PmdCycles(90, 10)})
    assert (after - before).switch_pmd_busy_pct == pytest.approx(10.0)
    assert (counters.MachineTimes(later, None) - counters.MachineTimes(cpu, None)).switch_pmd_busy_pct is None

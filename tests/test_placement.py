"""Where the experiment's processes run (otcp.experiments.runner.placement): the plan on hand-made
CPU sets, Open vSwitch's PMD listing as text, and the pinning of this process and its children for
real (no root: a process may set its own and its children's CPUs). With a network:
tests/integration/test_datapath_mininet.py."""

import os
import subprocess
import sys

import pytest

from otcp.experiments.cli import build_parser, datapath_config_from_args
from otcp.experiments.runner import placement
from otcp.experiments.runner.datapath import Datapath

# ovs-appctl dpif-netdev/pmd-rxq-show as Open vSwitch 3.1 prints it (one port shown).
PMD_RXQ_SHOW = """Displaying last 60 seconds pmd usage %
pmd thread numa_id 0 core_id 1:
  isolated : false
  port: s1-eth1           queue-id:  0 (enabled)   pmd usage:  3 %
  overhead:  0 %
"""


def test_the_pmd_threads_cores_are_read_from_open_vswitch():
    assert placement.parse_pmd_cores(PMD_RXQ_SHOW) == [1]
    assert placement.parse_pmd_cores(PMD_RXQ_SHOW + PMD_RXQ_SHOW.replace("core_id 1", "core_id 3")) == [1, 3]
    assert placement.parse_pmd_cores("") == []


def test_the_hosts_get_every_cpu_but_the_switchs():
    # A PMD thread on core 1 of 2: the hosts on 0. None (afpacket): the last core is the switch's.
    assert placement.plan({0, 1}, [1]) == placement.Placement((0,), (1,))
    assert placement.plan({0, 1, 2, 3}, []) == placement.Placement((0, 1, 2), (3,))
    assert placement.plan({0, 1, 2, 3}, [0, 2]) == placement.Placement((1, 3), (0, 2))
    # Nothing to keep apart: one CPU, or PMD threads on every CPU the experiment may use.
    alone = placement.plan({0}, [])
    assert not alone.pinned and "one CPU only (0)" in alone.reason
    everywhere = placement.plan({0, 1}, [0, 1])
    assert not everywhere.pinned and "every CPU the experiment may use (0-1)" in everywhere.reason
    assert placement.plan({0, 1}, [1]).note == ("hosts pinned apart from the switch: every process of the "
                                                "experiment on CPU(s) 0, the switch's forwarding thread(s) alone on 1")
    assert placement.cpu_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"


def test_this_process_and_its_children_run_on_the_hosts_cpus_while_pinned():
    allowed = sorted(os.sched_getaffinity(0))
    chosen = placement.plan(allowed, [allowed[-1]])
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert child.pid in placement.own_processes(os.getpid())
        with placement.pinned(chosen):
            assert os.sched_getaffinity(0) == set(chosen.host_cpus)
            assert os.sched_getaffinity(child.pid) == set(chosen.host_cpus)
            started = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                                     capture_output=True, text=True, check=True)
            assert started.stdout.strip() == str(list(chosen.host_cpus))  # what starts later inherits them
        assert os.sched_getaffinity(0) == set(allowed)
    finally:
        child.communicate()


def test_a_placement_that_pins_nothing_changes_nothing():
    before = os.sched_getaffinity(0)
    with placement.pinned(placement.plan({0}, [])):
        assert os.sched_getaffinity(0) == before


def test_a_pinned_candidate_is_named_and_parsed():
    assert Datapath.named("afxdp", pinned=True).label == "afxdp native, pinned"
    parser = build_parser()
    config = datapath_config_from_args(parser.parse_args(
        ["datapath", "--datapaths", "afpacket+pinned,afxdp:native+pinned,afxdp", "--out", "/tmp/otcp-pin-args"]),
        parser)
    assert config.candidates == [Datapath(pinned=True), Datapath("afxdp", "native", True), Datapath("afxdp", "native")]
    for bad in ("afxdp+pinned,afxdp:native+pinned", "afxdp+pin", "afpacket:native+pinned"):
        with pytest.raises(SystemExit):
            datapath_config_from_args(parser.parse_args(["datapath", "--datapaths", bad]), parser)

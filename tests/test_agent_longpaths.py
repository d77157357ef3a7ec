"""The agent on a long fat path's routes (otcp.agent.enforcement, docs/longpaths.md): a route's
congctl and ssthresh lock and otcp_scalable's map entry are applied together and undone together,
a congctl the kernel does not have is left off the route and said, and a host without BPF keeps
the routes and says what it cannot enforce. In a namespace of its own; needs root and the BPF
toolchain (scripts/bootstrap.sh); nothing skips. Namespaces are named otcps*."""

import itertools
import json
import os

import pytest

from otcp import bpf as otcp_bpf
from otcp.agent.client import ControllerClient
from otcp.agent.core import Agent
from otcp.agent.enforcement import Enforcement, status_path
from otcp.agent.routes import ApplyError, RouteTable
from otcp.bpf.scalable import ScalableEntry
from otcp.bpf.sockops import netns_cookie
from otcp.experiments.kernel.firstconn import PREFIX
from otcp.wire import framing, messages
from support.agents import RacedRouteTable, agent_show
from support.namespaces import Named, otcp_route_lines, veth_host
from support.privileges import needs_root
from support.routes import route

_names = itertools.count()
LONG = {"congctl": "otcp_scalable", "ssthresh": 50, "increase": 3}


@pytest.fixture(scope="module", autouse=True)
def built():
    otcp_bpf.build()


@pytest.fixture
@needs_root
def host():
    with veth_host(f"{PREFIX}l{os.getpid()}-{next(_names)}", "10.78.0.1/16") as name:
        yield name


def entries(enforcing, ns):
    return {prefix: entry for prefix, (entry, _) in enforcing.scalable.entries(netns_cookie(ns)).items()}


@pytest.mark.root
def test_a_route_and_its_map_entry_are_applied_and_undone_together(host, tmp_path):
    enforcing = Enforcement.start("bpf", netns=host)
    assert enforcing.mode == "bpf"
    first = {"generation": 1, "routes": [route("10.78.0.2/32", **LONG), route("10.78.0.3/32")]}
    with Agent(str(tmp_path / "state.db"), netns=host, enforcement=enforcing) as agent:
        before = agent.hello().enforcement.long_paths
        assert not before.scalable_map and "opened when a set first names otcp_scalable" in before.reason
        _, results = agent.apply(first, "t")
        assert [r.status for r in results] == ["applied", "applied"] and all(r.reason is None for r in results)
        shown = otcp_route_lines(host)
        first_line, second_line = shown.splitlines()
        assert first_line.startswith("10.78.0.2 ") and "ssthresh lock 50" in first_line, shown
        assert "congctl otcp_scalable" in first_line and "congctl" not in second_line, shown
        assert entries(enforcing, host) == {"10.78.0.2/32": ScalableEntry(increase=3, initial_ssthresh=50,
                                                                             griddt=True)}
        # The kernel refuses a route: the routes and the map entry both stay as they were.
        agent.routes.close()
        agent.routes = RacedRouteTable(host, Named(host), "10.78.0.12/32")
        with pytest.raises(ApplyError, match="previous routes were restored"):
            agent.apply({"generation": 2, "routes": [route("10.78.0.2/32", **{**LONG, "ssthresh": 70}),
                                                     route("10.78.0.12/32", **LONG)]}, "t")
        assert otcp_route_lines(host) == shown
        assert entries(enforcing, host)["10.78.0.2/32"].initial_ssthresh == 50
        agent.routes.close()
        agent.routes = RouteTable(host)
        # The map refuses: the routes (and the sock_ops entries) are rolled back as well.
        table = enforcing.scalable.entries_map
        table.close()
        with pytest.raises(ApplyError, match="otcp_scalable's map refused.*routes rolled back"):
            agent.apply({"generation": 3, "routes": [route("10.78.0.2/32", **{**LONG, "ssthresh": 90})]}, "t")
        assert otcp_route_lines(host) == shown and agent.state.applied_generation() == 1
        enforcing.scalable.entries_map = type(table)(table.path, table.value_size, table.key_size)
        assert entries(enforcing, host)["10.78.0.2/32"].initial_ssthresh == 50
        # Scalable TCP proper (no increase): the entry keeps A = 1 outside GridDT mode; the ack says the map
        # enforces.
        ack = ControllerClient(agent, "127.0.0.1", 9, b"secret")._handle_params(
            {"generation": 4, "routes": [route("10.78.0.2/32", congctl="otcp_scalable", ssthresh=60)]}, lease_s=60, epoch=0)
        checked = messages.parse_message(json.loads(framing.encode_json(ack)), messages.Ack)
        assert checked.enforcement.long_paths.scalable_map and checked.enforcement.long_paths.reason is None
        assert "otcp_scalable" in checked.enforcement.long_paths.congestion_controls
        assert entries(enforcing, host) == {"10.78.0.2/32": ScalableEntry(increase=1, initial_ssthresh=60)}
        # A congestion control this kernel does not have: the route goes without it, and says so.
        _, results = agent.apply({"generation": 5, "routes": [route("10.78.0.2/32", congctl="nosuchcc",
                                                                     ssthresh=40)]}, "t")
        assert results[0].status == "applied" and "congctl nosuchcc not enforced" in results[0].reason
        assert "congctl" not in otcp_route_lines(host) and "ssthresh lock 40" in otcp_route_lines(host)
        assert entries(enforcing, host) == {}
        agent.apply({"generation": 6, "routes": [route("10.78.0.2/32", **LONG)]}, "t")
        assert entries(enforcing, host) and "congctl otcp_scalable" in otcp_route_lines(host)
        agent.revert()
        assert otcp_route_lines(host) == "" and entries(enforcing, host) == {}
    assert enforcing.scalable is None


@pytest.mark.root
def test_routes_alone_keep_congctl_and_ssthresh_and_say_what_they_cannot(host, tmp_path):
    enforcing = Enforcement.start("routes", netns=host)
    with Agent(str(tmp_path / "state.db"), netns=host, enforcement=enforcing) as agent:
        report = agent.hello().enforcement.long_paths
        assert not report.scalable_map and report.reason.startswith("routes alone (BPF enforcement turned off")
        _, results = agent.apply({"generation": 1, "routes": [route("10.78.0.2/32", congctl="cubic", ssthresh=50,
                                                                     increase=3)]}, "t")
        assert results[0].status == "applied"
        assert "congctl cubic" in otcp_route_lines(host) and "ssthresh lock 50" in otcp_route_lines(host)
        assert results[0].reason is None  # cubic is no otcp_scalable: no map entry was asked for
        _, results = agent.apply({"generation": 2, "routes": [route("10.78.0.2/32", **LONG)]}, "t")
        # otcp_scalable is not registered by a routes-alone agent: the route goes without it.
        available = enforcing.report().long_paths.congestion_controls
        if "otcp_scalable" not in available:
            assert "congctl otcp_scalable not enforced" in results[0].reason
        assert "ssthresh 50 and increase 3 not enforced from the first packet: routes alone" in results[0].reason
        assert "ssthresh lock 50" in otcp_route_lines(host)
        agent.revert()
        assert otcp_route_lines(host) == ""


@pytest.mark.root
def test_show_lists_the_map_entries_and_the_routes_congctl_and_ssthresh(host, tmp_path):
    state = str(tmp_path / "state.db")
    enforcing = Enforcement.start("bpf", netns=host, status_path=status_path(state))
    with Agent(state, netns=host, enforcement=enforcing) as agent:
        agent.apply({"generation": 1, "routes": [route("10.78.0.2/32", **LONG),
                                                 route("10.78.0.4/32", congctl="otcp_scalable", ssthresh=60),
                                                 route("10.78.0.3/32")]}, "t")
        wanted = [{"dst": "10.78.0.2/32", "congctl": "otcp_scalable", "initial_ssthresh": 50, "increase": 3.0,
                   "griddt": True, "connections": 0},
                  {"dst": "10.78.0.4/32", "congctl": "otcp_scalable", "initial_ssthresh": 60, "increase": 1.0,
                   "griddt": False, "connections": 0}]
        assert agent.show()["enforcement"]["scalable_entries"] == wanted
        assert json.loads(agent_show(host, state, "--json"))["enforcement"]["scalable_entries"] == wanted
        lines = [line.split() for line in agent_show(host, state).splitlines()]
        assert ["10.78.0.2/32", "50", "3", "aimd", "(griddt)", "0"] in lines, lines
        assert ["10.78.0.4/32", "60", "1", "scalable", "0"] in lines, lines
        routes = {line[0].removesuffix("/32"): line for line in lines if "v0" in line}
        assert routes["10.78.0.2"][-3:] == ["otcp_scalable", "50", "lock"], lines
        assert routes["10.78.0.3"][-2:] == ["-", "-"], lines
        agent.revert()
        assert agent.show()["enforcement"]["scalable_entries"] == []
    shown = agent_show(host, state)
    assert "OTCP_SCALABLE DESTINATION" not in shown, shown  # the agent's exit took its entries (and the map) away

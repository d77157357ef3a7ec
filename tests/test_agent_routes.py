"""The agent against the real kernel, in throwaway network namespaces:
apply, show, revert, routes it did not create, rollback, state and restart,
and the `otcp-agent` one-shot commands.

Every namespace is `otcp-test-<pid>-<n>` (support.namespaces), created and
deleted by name; nothing outside it is touched. What the kernel holds is read back with
`ip route show` (iproute2, not the agent's own netlink code).
"""

import json
import os
import subprocess
import sys
import time

import pytest

from otcp.agent.core import Agent
from otcp.agent.enforcement import OFF_REASON, ONE_SHOT_REASON, Enforcement
from otcp.agent.routes import OTCP_PROTO, ApplyError
from otcp.wire import framing, limits, messages, paramset
from otcp.wire.messages import RouteResult
from otcp.wire.validation import ValidationError
from support.agents import RacedRouteTable, otcp_agent
from support.namespaces import expected
from support.routes import route

pytestmark = pytest.mark.root


@pytest.fixture
def agent(ns, tmp_path):
    with Agent(str(tmp_path / "state.db"), netns=ns.name) as host_agent:
        yield host_agent


# -- apply, show, revert -------------------------------------------------------------


def test_apply_show_revert(ns, agent):
    untouched = ns.other_routes()
    _, results = agent.apply({"generation": 1, "routes": [
        route("10.77.0.2/32"),
        route("10.88.1.0/24", rto_min_ms=200, initcwnd=10, cwnd_clamp=None, quickack=False),
        route("2001:db8::5", rto_min_ms=5, initcwnd=4, cwnd_clamp=10),
    ]}, "test")
    assert [r.status for r in results] == ["applied"] * 3
    assert results[1] == RouteResult(dst="10.88.1.0/24", status="applied", dev="v0", gateway="10.77.0.254", table=254)
    assert ns.otcp_routes() == {
        "10.77.0.2/32": expected(),
        "10.88.1.0/24": expected(via="10.77.0.254", rto_min_ms=200, initcwnd=10, cwnd_lock=None, quickack=None),
        "2001:db8::5/128": expected(rto_min_ms=5, initcwnd=4, cwnd_lock=10),
    }
    shown = agent.show()
    assert shown["generation"] == 1 and shown["active"] is True
    assert {r["dst"]: (r["dev"], r["gateway"], r["rto_min_ms"], r["initcwnd"], r["cwnd_clamp"], r["quickack"])
            for r in shown["routes"]} == {
        "10.77.0.2/32": ("v0", None, 14, 1, 3, True),
        "10.88.1.0/24": ("v0", "10.77.0.254", 200, 10, None, False),
        "2001:db8::5/128": ("v0", None, 5, 4, 10, True),
    }
    assert ns.other_routes() == untouched
    removed = agent.revert()
    assert len(removed) == 3
    assert ns.otcp_routes() == {}
    assert ns.other_routes() == untouched
    assert agent.show()["active"] is False


def test_a_pacing_rate_that_routes_alone_cannot_apply_is_reported(ns, agent):
    """Routes alone (a one-shot command, or otcp-agent run --enforce routes) have no pacing
    attribute: the route is applied and its result says that the rate is not enforced."""
    _, results = agent.apply({"generation": 1, "routes": [route("10.77.0.2/32", pacing_rate=2_000_000),
                                                          route("10.77.0.3/32")]}, "test")
    paced, unpaced = results
    assert paced.status == "applied" and unpaced.reason is None
    assert paced.reason.startswith("pacing_rate 2000000 B/s not enforced: pacing needs the sock_ops program")
    assert ONE_SHOT_REASON in paced.reason
    assert ns.otcp_routes() == {"10.77.0.2/32": expected(), "10.77.0.3/32": expected()}
    shown = agent.show()
    assert [r["dst"] for r in shown["unenforced"]] == ["10.77.0.2/32"] and shown["skipped"] == []
    ack = json.loads(framing.encode_json(messages.ack_message(1, results, agent.enforcement.report())))
    assert messages.parse_message(ack, messages.Ack).results == results  # the ack says so
    routes_only = Enforcement.start("routes")
    agent.enforcement = routes_only
    _, results = agent.apply({"generation": 2, "routes": [route("10.77.0.2/32", pacing_rate=3_000_000)]}, "test")
    assert OFF_REASON in results[0].reason


def test_new_generation_replaces_changed_adds_new_and_removes_dropped(ns, agent):
    agent.apply({"generation": 1, "routes": [route("10.77.0.2/32"), route("10.77.0.3/32")]}, "test")
    agent.apply({"generation": 2, "routes": [route("10.77.0.2/32", initcwnd=8), route("10.77.0.4/32")]}, "test")
    assert ns.otcp_routes() == {"10.77.0.2/32": expected(initcwnd=8), "10.77.0.4/32": expected()}
    agent.apply({"generation": 3, "routes": []}, "test")
    assert ns.otcp_routes() == {}


def test_reapplying_an_unchanged_set_writes_nothing(ns, agent):
    routes = [route("10.77.0.2/32"), route("10.88.0.2/32", cwnd_clamp=None), route("2001:db8::2")]
    agent.apply({"generation": 1, "routes": routes}, "test")
    validated = paramset.validate_param_set({"generation": 2, "routes": routes})
    plan = agent.routes.plan(validated.routes)
    assert [op for op, _, _ in plan.writes] == ["keep", "keep", "keep"] and plan.stale == []
    changed = paramset.validate_param_set({"generation": 2, "routes": routes[:2] + [route("2001:db8::3")]})
    plan = agent.routes.plan(changed.routes)
    assert [op for op, _, _ in plan.writes] == ["keep", "keep", "add"]
    assert [r.dst for r in plan.stale] == ["2001:db8::2/128"]


def test_route_follows_the_kernels_current_nexthop(ns, agent):
    agent.apply({"generation": 1, "routes": [route("10.88.0.9/32")]}, "test")
    assert ns.otcp_routes()["10.88.0.9/32"]["via"] == "10.77.0.254"
    ns.ip("route", "replace", "10.88.0.0/16", "via", "10.77.0.253")
    agent.apply({"generation": 2, "routes": [route("10.88.0.9/32")]}, "test")
    assert ns.otcp_routes()["10.88.0.9/32"]["via"] == "10.77.0.253"


def test_routes_in_another_table_go_where_the_kernel_looks(ns, agent):
    ns.ip("route", "add", "10.99.0.0/16", "via", "10.77.0.250", "table", "100")
    ns.ip("rule", "add", "to", "10.99.0.0/16", "lookup", "100", "priority", "1000")
    agent.apply({"generation": 1, "routes": [route("10.99.0.7/32")]}, "test")
    assert ns.otcp_routes() == {"10.99.0.7/32": expected(via="10.77.0.250", table="100")}
    agent.revert()
    assert "10.99.0.0/16 via 10.77.0.250" in ns.ip("route", "show", "table", "100")


TCP_PROBE = r"""
import re, socket, subprocess, sys, time
for attempt in range(200):  # the server in the other namespace may still be starting
    try:
        connection = socket.create_connection(("10.77.0.2", 5001), timeout=5)
        break
    except OSError:
        time.sleep(0.05)
connection.sendall(b"x" * 65536)
time.sleep(0.2)
out = subprocess.run(["ss", "-tin", "state", "established", "dst", "10.77.0.2"], capture_output=True,
                     text=True).stdout
print(re.search(r"rto:(\d+)", out).group(1), re.search(r"cwnd:(\d+)", out).group(1))
"""

TCP_SINK = r"""
import socket
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("10.77.0.2", 5001))
server.listen(8)
while True:
    connection, _ = server.accept()
    while connection.recv(65536):
        pass
    connection.close()
"""


def test_tcp_uses_the_applied_values(ns, agent):
    """Real connections through an OTCP route take its rto_min and window
    clamp (read with `ss`): the metrics are in effect, not just stored.

    The clamp reaches TCP through the kernel's TCP metrics cache (see
    `otcp.agent.tcp_metrics`): the agent clears the entry made before its route,
    and the entry the next connection leaves behind carries the clamp."""
    peer = f"{ns.name}-peer"
    subprocess.run(["ip", "netns", "add", peer], check=True)
    sink = None
    try:
        ns.ip("link", "set", "v1", "netns", peer)
        for command in (["link", "set", "lo", "up"], ["link", "set", "v1", "up"],
                        ["addr", "add", "10.77.0.2/16", "dev", "v1"]):
            subprocess.run(["ip", "-n", peer, *command], check=True)
        sink = subprocess.Popen(["ip", "netns", "exec", peer, sys.executable, "-c", TCP_SINK])

        def probe():
            done = subprocess.run(["ip", "netns", "exec", ns.name, sys.executable, "-c", TCP_PROBE],
                                  capture_output=True, text=True, check=True)
            rto, cwnd = done.stdout.split()
            return int(rto), int(cwnd)

        def cached():
            return "10.77.0.2 " in ns.ip("tcp_metrics", "show")

        rto, cwnd = probe()
        assert rto < 500 and cwnd > 3  # kernel defaults: 200 ms minimum, initcwnd 10
        wait_for_condition(cached, "the TCP metrics entry of the first connection")
        agent.apply({"generation": 1, "routes": [route("10.77.0.2/32", rto_min_ms=500, initcwnd=1,
                                                       cwnd_clamp=3)]}, "test")
        assert not cached()  # the entry made without the clamp is gone
        rto, _ = probe()
        assert rto >= 500  # rto_min: read from the route at every timer computation
        wait_for_condition(cached, "the TCP metrics entry of a connection through the OTCP route")
        rto, cwnd = probe()
        assert rto >= 500 and cwnd <= 3
    finally:
        if sink is not None:
            sink.kill()
            sink.wait()
        subprocess.run(["ip", "netns", "del", peer], check=False)


def wait_for_condition(condition, what, timeout=30):
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


# -- routes the agent did not create ---------------------------------------------------


def test_existing_non_otcp_route_is_left_alone_and_reported(ns, agent):
    ns.ip("route", "add", "10.77.5.5/32", "dev", "v0", "proto", "static")
    ns.ip("route", "add", "10.77.6.0/24", "via", "10.77.0.254", "metric", "50")
    before = ns.other_routes()
    _, results = agent.apply({"generation": 1, "routes": [
        route("10.77.5.5/32"), route("10.77.6.0/24"), route("10.77.0.9/32")]}, "test")
    assert results[0].status == "skipped"
    assert "non-OTCP route for 10.77.5.5/32 exists in table main (proto static)" in results[0].reason
    assert results[1].status == "skipped" and "10.77.6.0/24" in results[1].reason
    assert results[2].status == "applied"
    assert ns.otcp_routes() == {"10.77.0.9/32": expected()}
    assert ns.other_routes() == before
    agent.revert()
    assert ns.other_routes() == before


def test_a_destination_behind_a_nexthop_object_is_skipped(ns, agent):
    """pyroute2 does not decode RTA_NH_ID; the agent reads the kernel's attribute itself."""
    ns.ip("nexthop", "add", "id", "5", "via", "10.77.0.254", "dev", "v0")
    ns.ip("route", "add", "10.44.0.0/16", "nhid", "5")
    before = ns.other_routes()
    _, results = agent.apply({"generation": 1, "routes": [route("10.44.0.1/32"), route("10.77.0.2/32")]}, "test")
    assert results[0].status == "skipped" and "uses nexthop object 5" in results[0].reason, results[0]
    assert results[1].status == "applied"
    assert ns.otcp_routes() == {"10.77.0.2/32": expected()}
    assert ns.other_routes() == before


def test_local_unreachable_destinations_are_skipped(ns, agent):
    _, results = agent.apply({"generation": 1, "routes": [
        route("10.77.0.1/32"), route("10.66.0.1/32"), route("10.77.0.2/32")]}, "test")
    assert results[0].status == "skipped" and "as local, not unicast" in results[0].reason
    assert results[1].status == "skipped" and "no route to 10.66.0.1" in results[1].reason
    assert ns.otcp_routes() == {"10.77.0.2/32": expected()}


def test_a_foreign_route_appearing_later_makes_the_agent_drop_its_own(ns, agent):
    agent.apply({"generation": 1, "routes": [route("10.77.0.2/32")]}, "test")
    ns.ip("route", "add", "10.77.0.2/32", "dev", "v0", "proto", "static", "metric", "10")
    _, results = agent.apply({"generation": 2, "routes": [route("10.77.0.2/32")]}, "test")
    assert results[0].status == "skipped"
    assert ns.otcp_routes() == {}
    assert "10.77.0.2 dev v0 proto static scope link metric 10" in ns.other_routes()


# -- a set applies as a whole ------------------------------------------------------------


def test_rollback_when_one_route_of_a_set_fails(ns, agent):
    generation_1 = {"generation": 1, "routes": [route("10.77.0.2/32"), route("10.77.0.3/32"),
                                                route("2001:db8::2", initcwnd=2)]}
    agent.apply(generation_1, "test")
    before = ns.otcp_routes()
    agent.routes.close()
    agent.routes = RacedRouteTable(ns.name, ns, "10.77.0.12/32")
    generation_2 = {"generation": 2, "routes": [
        route("10.77.0.2/32", initcwnd=9),  # replaced first...
        route("10.77.0.10/32"), route("10.77.0.11/32"),  # ...added...
        route("10.77.0.12/32"),  # ...refused: EEXIST
        route("10.77.0.13/32"), route("2001:db8::2", initcwnd=5),
    ]}  # and 10.77.0.3 would have been removed
    with pytest.raises(ApplyError, match=r"10.77.0.12/32: the kernel refused the route \(EEXIST.*previous routes "
                                         r"were restored"):
        agent.apply(generation_2, "test")
    assert ns.otcp_routes() == before
    assert "10.77.0.12 dev v0 proto static scope link" in ns.other_routes()
    assert agent.state.applied_generation() == 1
    assert agent.state.journal(1)[0][3] == "failed"


def test_bad_set_touches_nothing(ns, agent):
    agent.apply({"generation": 1, "routes": [route("10.77.0.2/32")]}, "test")
    before = ns.otcp_routes()
    with pytest.raises(ValidationError, match=r"^routes\[1\].initcwnd: 300 is out of range 1..256$"):
        agent.apply({"generation": 2, "routes": [route("10.77.0.3/32"), route("10.77.0.4/32", initcwnd=300)]},
                    "test")
    with pytest.raises(ValidationError, match="^generation: 1 was already applied with different parameters"):
        agent.apply({"generation": 1, "routes": [route("10.77.0.3/32")]}, "test")
    with pytest.raises(ValidationError, match="^generation: 0 is out of range"):
        agent.apply({"generation": 0, "routes": []}, "test")
    assert ns.otcp_routes() == before
    assert agent.state.applied_generation() == 1
    assert agent.state.journal(1)[0][3] == "rejected"


def test_stale_generation_is_refused_and_the_same_set_may_be_reapplied(ns, agent):
    agent.apply({"generation": 5, "routes": [route("10.77.0.2/32")]}, "test")
    with pytest.raises(ValidationError, match="^generation: 4 is not newer than the applied generation 5$"):
        agent.apply({"generation": 4, "routes": [route("10.77.0.2/32")]}, "test")
    ns.ip("route", "del", "10.77.0.2/32", "proto", str(OTCP_PROTO))
    agent.apply({"generation": 5, "routes": [route("10.77.0.2")]}, "test")  # same set, written differently
    assert ns.otcp_routes() == {"10.77.0.2/32": expected()}


# -- state ---------------------------------------------------------------------------------


def test_restart_reapplies_the_stored_generation(ns, tmp_path):
    state = str(tmp_path / "state.db")
    with Agent(state, netns=ns.name) as first:
        first.apply({"generation": 3, "routes": [route("10.77.0.2/32"), route("10.88.0.2/32")]}, "test")
    applied = ns.otcp_routes()
    ns.ip("route", "flush", "proto", str(OTCP_PROTO))  # as after a reboot
    assert ns.otcp_routes() == {}
    with Agent(state, netns=ns.name) as second:
        results = second.reapply_stored()
        assert [r.status for r in results] == ["applied", "applied"]
        assert ns.otcp_routes() == applied
        with pytest.raises(ValidationError, match="not newer than the applied generation 3"):
            second.apply({"generation": 2, "routes": []}, "test")
        second.revert()
    with Agent(state, netns=ns.name) as third:
        assert third.reapply_stored() is None  # reverted: nothing comes back
        assert ns.otcp_routes() == {}
        assert third.state.applied_generation() == 3


def test_hello_reports_addresses_and_kernel_facts(ns, agent):
    hello = agent.hello()  # a validated messages.Hello
    assert hello.addresses == ["10.77.0.1", "2001:db8::1"]
    assert hello.interfaces == [messages.Interface(name="v0", mtu=1500, addresses=["10.77.0.1", "2001:db8::1"])]
    assert hello.mtu == 1500 and hello.mss_bytes in (1448, 1460)
    assert hello.tcp_rto_min_us == os.path.exists("/proc/sys/net/ipv4/tcp_rto_min_us")
    assert "reno" in hello.congestion_controls
    assert messages.parse_message(json.loads(framing.encode_json(hello)), messages.Hello) == hello


# -- the command line ------------------------------------------------------------------------


def test_cli_apply_show_revert(ns, tmp_path):
    state = str(tmp_path / "state.db")
    good = tmp_path / "set.json"
    good.write_text(json.dumps({"generation": 2, "routes": [route("10.77.0.2/32"), route("10.77.5.5/32")]}))
    ns.ip("route", "add", "10.77.5.5/32", "dev", "v0", "proto", "static")
    done = otcp_agent(ns, "apply", str(good), "--state", state)
    assert done.returncode == 0, done.stderr
    assert "generation 2: 1 route(s) applied, 1 skipped" in done.stdout
    assert "skipped 10.77.5.5/32: a non-OTCP route" in done.stdout
    shown = otcp_agent(ns, "show", "--json", "--state", state)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["generation"] == 2
    assert [(r["dst"], r["rto_min_ms"], r["initcwnd"], r["cwnd_clamp"]) for r in document["routes"]] == [
        ("10.77.0.2/32", 14, 1, 3)]
    assert [s["dst"] for s in document["skipped"]] == ["10.77.5.5/32"]
    assert document["lease"] is None
    table = otcp_agent(ns, "show", "--state", state)
    assert "10.77.0.2/32  v0" in table.stdout and "3 lock" in table.stdout
    assert "lease: none (applied by hand: held until replaced)" in table.stdout
    reverted = otcp_agent(ns, "revert", "--state", state)
    assert reverted.returncode == 0 and "removed 1 OTCP route(s)" in reverted.stdout
    assert ns.otcp_routes() == {}
    assert "10.77.5.5 dev v0 proto static scope link" in ns.other_routes()


def test_routes_removed_that_the_state_did_not_know_are_reported(ns, tmp_path):
    state = str(tmp_path / "state.db")
    ns.ip("route", "add", "10.66.1.0/24", "dev", "v0", "table", "100", "proto", str(OTCP_PROTO))
    first = tmp_path / "g1.json"
    first.write_text(json.dumps({"generation": 1, "routes": [route("10.77.0.2/32")]}))
    done = otcp_agent(ns, "apply", str(first), "--state", state)
    assert done.returncode == 0, done.stderr
    assert "removed 1 OTCP route(s) the state did not know: 10.66.1.0/24 (table 100)" in done.stdout
    assert "removed 1 OTCP route(s) its state did not know: 10.66.1.0/24 (table 100)" in done.stderr
    # Its own routes of the previous generation are not reported; a stray one met at revert is.
    second = tmp_path / "g2.json"
    second.write_text(json.dumps({"generation": 2, "routes": [route("10.77.0.3/32")]}))
    done = otcp_agent(ns, "apply", str(second), "--state", state, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["removed_unknown"] == []
    ns.ip("route", "add", "10.66.2.0/24", "dev", "v0", "proto", str(OTCP_PROTO))
    reverted = otcp_agent(ns, "revert", "--state", state)
    assert reverted.returncode == 0, reverted.stderr
    assert reverted.stdout.splitlines() == ["removed 2 OTCP route(s)",
                                            "  of which 1 the state did not know: 10.66.2.0/24 (table main)"]
    with Agent(state, netns=ns.name) as agent:
        assert [entry[3] for entry in agent.state.journal()][:2] == ["removed unknown routes", "reverted"]


def test_cli_applies_a_hand_written_set_that_leaves_out_what_it_does_not_set(ns, tmp_path):
    """A set written by hand names only what it sets: no clamp, MSS or pacing rate here."""
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"generation": 1, "routes": [
        {"dst": "10.77.0.2/32", "rto_min_ms": 14, "initcwnd": 10, "quickack": False}]}))
    done = otcp_agent(ns, "apply", str(short), "--state", str(tmp_path / "state.db"))
    assert done.returncode == 0, done.stderr
    assert ns.otcp_routes() == {"10.77.0.2/32": expected(initcwnd=10, cwnd_lock=None, quickack=None)}


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"generation": 2, "routes": [{"dst": "10.77.0.2/32", "rto_m', "invalid JSON at line 1 column"),
        ('{"generation": 2, "routes": [{"dst": "10.77.0.2/32", "rto_min_ms": "14", "initcwnd": 1, '
         '"cwnd_clamp": 3, "quickack": true}]}', 'routes[0].rto_min_ms: "14" is not an integer'),
        ('{"generation": 2, "routes": [], "owner": "me"}', "owner: unknown key"),
        ('{"generation": 1, "routes": []}', "generation: 1 is not newer than the applied generation 2"),
        ("[1, 2]", "expected a JSON object, got a list"),
    ],
)
def test_cli_apply_refuses_bad_input_naming_file_and_field(ns, tmp_path, content, message):
    state = str(tmp_path / "state.db")
    with Agent(state, netns=ns.name) as host_agent:
        host_agent.apply({"generation": 2, "routes": [route("10.77.0.3/32")]}, "test")
    before = ns.otcp_routes()
    path = tmp_path / "bad.json"
    path.write_text(content)
    done = otcp_agent(ns, "apply", str(path), "--state", state)
    assert done.returncode == 2
    assert f"otcp-agent: {path}: " in done.stderr and message in done.stderr
    assert ns.otcp_routes() == before


def test_cli_apply_refuses_oversized_and_missing_files(ns, tmp_path):
    state = str(tmp_path / "state.db")
    big = tmp_path / "big.json"
    big.write_bytes(b'{"generation": 1, "routes": [' + b" " * limits.MAX_FRAME_BYTES + b"]}")
    done = otcp_agent(ns, "apply", str(big), "--state", state)
    assert done.returncode == 2 and "larger than the 8388608-byte limit" in done.stderr
    done = otcp_agent(ns, "apply", str(tmp_path / "missing.json"), "--state", state)
    assert done.returncode == 2 and "No such file or directory" in done.stderr
    assert ns.otcp_routes() == {}


def test_cli_apply_reads_stdin(ns, tmp_path):
    document = json.dumps({"generation": 1, "routes": [route("10.77.0.2/32")]})
    done = otcp_agent(ns, "apply", "-", "--json", "--state", str(tmp_path / "state.db"), stdin=document)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["status"] == "applied"
    assert ns.otcp_routes() == {"10.77.0.2/32": expected()}


def test_advmss_is_written_and_read_back(ns, agent):
    agent.apply({"generation": 1, "routes": [route("10.77.0.2/32", advmss=1352), route("10.77.0.3/32")]}, "test")
    lines = {line.split()[0]: line for line in ns.ip("route", "show", "proto", str(OTCP_PROTO)).splitlines()}
    assert "advmss 1352" in lines["10.77.0.2"] and "advmss" not in lines["10.77.0.3"]
    shown = {r["dst"]: r["advmss"] for r in agent.show()["routes"]}
    assert shown == {"10.77.0.2/32": 1352, "10.77.0.3/32": None}


# -- deltas (protocol 6) ------------------------------------------------------------------------


def test_a_delta_is_applied_as_a_whole_set_against_the_applied_generation(ns, agent):
    first = {"generation": 1, "routes": [route("10.77.0.2/32"), route("10.77.0.3/32"), route("10.88.0.2/32")]}
    agent.apply(first, "test")
    second = {"generation": 2, "routes": [route("10.77.0.2/32", initcwnd=8, cwnd_clamp=None), route("10.88.0.2/32"),
                                          route("10.77.0.4/32", rto_min_ms=30)]}
    delta = paramset.make_delta(paramset.validate_param_set(first), paramset.validate_param_set(second))
    assert delta["changed"] == [{"dst": "10.77.0.2/32", "initcwnd": 8, "cwnd_clamp": None}]
    assert [r.dst for r in delta["added"]] == ["10.77.0.4/32"] and delta["removed"] == ["10.77.0.3/32"]
    validated, results = agent.apply_delta(delta, "test")
    assert paramset.same_parameters(validated, paramset.validate_param_set(second))
    assert ns.otcp_routes() == {"10.77.0.2/32": expected(initcwnd=8, cwnd_lock=None),
                                "10.88.0.2/32": expected(via="10.77.0.254"),
                                "10.77.0.4/32": expected(rto_min_ms=30)}
    assert agent.state.applied().generation == 2 and agent.state.journal(1)[0][3] == "applied"
    assert len(results) == 3


def test_a_delta_against_another_generation_touches_nothing(ns, agent):
    from otcp.agent.core import BaseMismatch

    agent.apply({"generation": 3, "routes": [route("10.77.0.2/32")]}, "test")
    before, journal = ns.otcp_routes(), agent.state.journal()
    delta = {"base": 2, "generation": 4, "added": [], "copied": [], "changed": [{"dst": "10.77.0.2/32", "initcwnd": 9}],
             "removed": []}
    with pytest.raises(BaseMismatch, match="against generation 2, and this agent holds generation 3") as caught:
        agent.apply_delta(delta, "test")
    assert (caught.value.generation, caught.value.applied_generation) == (4, 3)
    agent.revert()  # nothing active: every delta needs the whole set
    with pytest.raises(BaseMismatch, match="holds no active set"):
        agent.apply_delta(dict(delta, base=3), "test")
    assert agent.state.applied().generation == 3 and ns.otcp_routes() == {}
    assert before == {"10.77.0.2/32": expected()} and len(journal) >= 1


def test_a_malformed_delta_is_refused_and_journaled(ns, agent):
    agent.apply({"generation": 1, "routes": [route("10.77.0.2/32")]}, "test")
    before = ns.otcp_routes()
    bad = {"base": 1, "generation": 2, "added": [], "copied": [], "changed": [{"dst": "10.77.0.9/32", "initcwnd": 2}],
           "removed": []}
    with pytest.raises(ValidationError, match=r"^changed\[0\].dst: 10.77.0.9/32 is not in generation 1$"):
        agent.apply_delta(bad, "test")
    with pytest.raises(ValidationError, match=r"^changed\[0\].initcwnd: 300 is out of range 1..256$"):
        agent.apply_delta(dict(bad, changed=[{"dst": "10.77.0.2/32", "initcwnd": 300}]), "test")
    assert ns.otcp_routes() == before and agent.state.applied().generation == 1
    assert agent.state.journal(1)[0][3] == "rejected"

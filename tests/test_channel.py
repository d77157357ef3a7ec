"""The controller <-> agent channel over loopback.

The server (`otcp.service.agent_server`) runs on os-ken's hub in this process,
as it does inside osken-manager. Two kinds of peer talk to it:

- the real agent, `python -m otcp.agent.cli --netns NS run ...`, in a throwaway
  namespace whose loopback the server listens on: authentication, push ->
  apply -> ack, reconnection, restart;
- hand-written green clients on the root namespace's loopback that
  misbehave on purpose: wrong secret, silence, oversized frames, bad JSON,
  forged MACs, floods, not reading. Each is disconnected and logged, and a
  well-behaved agent connected at the same time is not disturbed.

The deadlines (support.channel) only stop a broken test from hanging;
nothing asserts on speed.
"""

import hashlib
import hmac
import json
import os
import resource
import socket
import struct

import pytest
from eventlet.green import socket as green_socket
from os_ken.lib import hub

from otcp.controller.publication import Publications
from otcp.wire import framing, limits, messages
from otcp.wire.paramset import ParamSet, RouteParams
from support.agents import otcp_agent
from support.channel import AgentProcess, Controller, GreenPeer, agent_under_controller, metric, scrape, wait_for
from support.namespaces import expected
from support.routes import route, set_for

ROUTES_ONLY = {"mode": "routes", "reason": None}


# -- the real agent --------------------------------------------------------------------


@pytest.mark.root
def test_push_apply_ack(ns, tmp_path, cleanup):
    controller, agent = agent_under_controller(ns, tmp_path, cleanup, set_for(1, "10.77.0.2/32", "10.88.0.5/32"))
    wait_for(lambda: controller.acked(1), "the ack of generation 1")
    host_ip, generation, results = controller.acks[0]
    assert (host_ip, generation) == ("10.77.0.1", 1)
    assert [(r.dst, r.status, r.gateway) for r in results] == [
        ("10.77.0.2/32", "applied", None), ("10.88.0.5/32", "applied", "10.77.0.254")]
    assert ns.otcp_routes() == {"10.77.0.2/32": expected(), "10.88.0.5/32": expected(via="10.77.0.254")}
    (agent_host, hello), = controller.agents
    assert agent_host == "10.77.0.1"
    assert hello.addresses == ["10.77.0.1", "2001:db8::1"] and hello.mss_bytes in (1448, 1460)
    assert hello.applied_generation is None and "cubic" in hello.congestion_controls
    assert controller.server.connected_hosts() == {"10.77.0.1", "2001:db8::1"}
    # A change while connected is pushed at once; a bad one is refused by the agent.
    controller.publish("10.77.0.1", set_for(2, "10.77.0.2/32", initcwnd=4))
    wait_for(lambda: controller.acked(2), "the ack of generation 2")
    assert ns.otcp_routes() == {"10.77.0.2/32": expected(initcwnd=4)}
    assert controller.server.acked == {"10.77.0.1": 2}
    controller.publish("10.77.0.1", set_for(2, "10.77.0.3/32"))
    wait_for(lambda: controller.rejects, "the agent's refusal of a changed generation 2")
    assert controller.rejects[0][:2] == ("10.77.0.1", 2)
    assert "already applied with different parameters" in controller.rejects[0][2]
    assert ns.otcp_routes() == {"10.77.0.2/32": expected(initcwnd=4)}


@pytest.mark.root
def test_the_real_agent_applies_a_delta_against_its_acked_generation(ns, tmp_path, cleanup):
    controller, agent = agent_under_controller(ns, tmp_path, cleanup,
                                               set_for(1, "10.77.0.2/32", "10.77.0.3/32", "10.88.0.5/32"))
    wait_for(lambda: controller.acked(1), "the ack of generation 1")
    changed = set_for(2, "10.77.0.2/32", "10.88.0.5/32")
    changed["routes"].append(route("10.77.0.3/32", initcwnd=4, cwnd_clamp=None))
    controller.publish("10.77.0.1", changed)
    wait_for(lambda: controller.acked(2), "the ack of generation 2")
    assert controller.log.has("sent generation 2 as a delta against 1 (0 added, 0 copied, 1 changed, 0 removed of 3 routes")
    assert ns.otcp_routes() == {"10.77.0.2/32": expected(), "10.77.0.3/32": expected(initcwnd=4, cwnd_lock=None),
                                "10.88.0.5/32": expected(via="10.77.0.254")}
    assert sorted(r.dst for r in controller.acks[-1][2]) == ["10.77.0.2/32", "10.77.0.3/32", "10.88.0.5/32"]
    assert "applied generation 2: 3 route(s)" in agent.log()


def test_publish_validates_before_anything_is_sent(cleanup):
    controller = Controller()
    cleanup.append(controller)
    with pytest.raises(ValueError, match=r"routes\[0\].initcwnd: 0 is out of range 1..256"):
        controller.publish("10.77.0.1", set_for(1, "10.77.0.2/32", initcwnd=0))
    with pytest.raises(ValueError, match="host_ip: 'h1' is not an IPv4 or IPv6 address"):
        controller.publish("h1", set_for(1, "10.77.0.2/32"))


def host_routes(count, **params):
    """count host routes in 10.0.0.0/8, validated as the planner makes them."""
    return [RouteParams(**route(f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}/32", advmss=1448,
                                pacing_rate=125_000_000, **params)) for i in range(count)]


def test_a_set_over_the_frame_limit_is_not_published_and_the_host_keeps_its_previous_set():
    publications = Publications()
    publications.peers = ["10.9.0.1", "10.9.0.2"]
    assert publications.publish(1, {"10.9.0.1": host_routes(3)}) == {}
    big = host_routes(100_000)
    refused = publications.publish(2, {"10.9.0.1": big, "10.9.0.2": host_routes(5)})
    assert list(refused) == ["10.9.0.1"] and refused["10.9.0.1"].message_bytes > limits.MAX_FRAME_BYTES
    assert publications.latest("10.9.0.1").generation == 1 and publications.latest("10.9.0.2").generation == 2
    assert not publications.changed("10.9.0.1", big)  # refused once, not again at every plan
    assert publications.changed("10.9.0.1", host_routes(4))
    assert refused["10.9.0.1"].describe("10.9.0.1").startswith(
        "10.9.0.1: generation 2 not published: its 100000 routes make a ")
    # What a set that is published must never make: a message over the frame limit.
    fits = host_routes(40_000)
    assert publications.publish(3, {"10.9.0.1": fits}) == {}
    assert len(publications.latest("10.9.0.1").model_dump_json()) < limits.MAX_FRAME_BYTES
    assert "10.9.0.1" not in publications.too_large


def test_a_writer_that_cannot_send_closes_the_connection(controller, good_agent):
    peer = GreenPeer(controller.port)
    assert peer.authenticate(addresses=("10.9.0.12",))
    wait_for(lambda: "10.9.0.12" in controller.server.connected_hosts(), "the peer to register")
    # A set that bypassed publishing's size check: the writer cannot frame it.
    controller.publications._sets["10.9.0.12"] = ParamSet(generation=1, routes=host_routes(80_000))
    controller.server.deliver("10.9.0.12")
    assert peer.read_until_closed() == []  # closed, so that the agent reconnects
    assert controller.log.has("cannot send to it: ProtocolError: message of"), controller.log.lines
    assert "10.9.0.12" not in controller.server.connected_hosts()


@pytest.mark.root
def test_wrong_secret_is_refused(ns, tmp_path, cleanup):
    controller, agent = agent_under_controller(ns, tmp_path, cleanup,
                                               set_for(1, "10.77.0.2/32"), secret=b"not-the-secret-at-all")
    wait_for(lambda: sum("authentication failed: wrong secret" in line for line in controller.log.lines) >= 2,
             "two refused attempts (the agent retries)")
    assert controller.acks == [] and controller.agents == []
    assert controller.server.connected_hosts() == set()
    assert ns.otcp_routes() == {}
    assert "authentication refused (wrong secret?)" in agent.log()


@pytest.mark.root
def test_agent_reconnects_and_keeps_its_routes_meanwhile(ns, tmp_path, cleanup):
    first = Controller(netns=ns.name)
    first.publish("10.77.0.1", set_for(1, "10.77.0.2/32"))
    agent = AgentProcess(ns, first.port, tmp_path)
    cleanup.append(agent)
    wait_for(lambda: first.acked(1), "the ack of generation 1")
    first.stop()  # the controller goes away
    wait_for(lambda: "closed the connection" in agent.log(), "the agent to notice")
    wait_for(lambda: agent.log().count("reconnecting in") >= 3, "reconnection attempts")
    assert ns.otcp_routes() == {"10.77.0.2/32": expected()}
    second = Controller(netns=ns.name, port=first.port)  # a restarted controller
    cleanup.append(second)
    second.publish("10.77.0.1", set_for(2, "10.77.0.2/32", rto_min_ms=30))
    wait_for(lambda: second.acked(2), "the ack of generation 2 from the restarted controller")
    assert second.agents[0][1].applied_generation == 1
    assert ns.otcp_routes() == {"10.77.0.2/32": expected(rto_min_ms=30)}


@pytest.mark.root
def test_restarted_agent_reapplies_its_state_before_the_controller_answers(ns, tmp_path, cleanup):
    controller, agent = agent_under_controller(ns, tmp_path, cleanup, set_for(4, "10.77.0.2/32", "10.77.0.3/32"))
    wait_for(lambda: controller.acked(4), "the ack of generation 4")
    applied = ns.otcp_routes()
    assert agent.stop() == 0
    assert ns.otcp_routes() == applied  # a stopped agent leaves its routes
    ns.ip("route", "flush", "proto", "79")  # as after a reboot
    controller.stop()  # and no controller to help
    agent.start()
    wait_for(lambda: ns.otcp_routes() == applied, "the stored generation to come back")
    # The log line follows the routes: wait for it rather than race it.
    wait_for(lambda: "re-applied stored generation 4" in agent.log(), "the agent to log the re-apply")


@pytest.mark.root
def test_agent_metrics_follow_the_channel(ns, tmp_path, cleanup):
    controller, agent = agent_under_controller(ns, tmp_path, cleanup,
                                               set_for(4, "10.77.0.2/32", "10.77.0.3/32"),
                                               extra=["--metrics", "127.0.0.1:9464"])
    wait_for(lambda: controller.acked(4), "the ack of generation 4")
    wait_for(lambda: "otcp_agent_connected 1.0" in scrape(ns, 9464), "the agent's metrics")
    page = scrape(ns, 9464)
    assert "otcp_agent_applied_generation 4.0" in page
    assert 'otcp_agent_routes{status="applied"} 2.0' in page and 'otcp_agent_routes{status="skipped"} 0.0' in page
    assert "otcp_agent_apply_duration_seconds_count 1.0" in page
    controller.stop()
    wait_for(lambda: "otcp_agent_connected 0.0" in scrape(ns, 9464), "the metrics to show the lost controller")
    wait_for(lambda: metric(scrape(ns, 9464), "otcp_agent_reconnects_total") >= 1, "a reconnection attempt")


LEASE_S = 2.0


def shown(ns, agent):
    """``otcp-agent show --json`` of an agent's state, in its namespace."""
    done = otcp_agent(ns, "show", "--json", "--state", str(agent.state))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def entries(shown_json):
    """The agent's sock_ops entries as show reads them back: {dst: (cwnd_clamp, initcwnd, pacing_rate)}."""
    return {e["dst"]: (e["cwnd_clamp"], e["initcwnd"], e["pacing_rate"]) for e in shown_json["enforcement"]["entries"]}


@pytest.mark.root
def test_a_set_whose_lease_runs_out_lapses_to_its_safe_state_and_a_new_set_restores_it(ns, tmp_path, cleanup):
    """A 2 s lease: renewed while the controller is there; once it is gone, the routes and the BPF
    entries lose their clamp, segment size and pacing within the lease and one poll; a returning
    controller's set restores them; an agent restarted after the lease ran out starts in the safe state."""
    first = Controller(netns=ns.name, lease_s=LEASE_S)
    planned = set_for(1, "10.77.0.2/32", "10.88.0.5/32", initcwnd=12, cwnd_clamp=20, advmss=600,
                      pacing_rate=125_000)
    first.publish("10.77.0.1", planned)
    agent = AgentProcess(ns, first.port, tmp_path, extra=["--metrics", "127.0.0.1:9465"])
    cleanup.append(agent)
    wait_for(lambda: first.acked(1), "the ack of generation 1")
    kept = {"10.77.0.2/32": expected(initcwnd=12, cwnd_lock=20),
            "10.88.0.5/32": expected(via="10.77.0.254", initcwnd=12, cwnd_lock=20)}
    safe = {"10.77.0.2/32": expected(initcwnd=10, cwnd_lock=None),
            "10.88.0.5/32": expected(via="10.77.0.254", initcwnd=10, cwnd_lock=None)}
    # Three leases long with the controller there: the renewals hold the plan.
    hub.sleep(3 * LEASE_S)
    assert ns.otcp_routes() == kept and "advmss 600" in ns.ip("route", "show", "proto", "79")
    before = shown(ns, agent)
    assert before["enforcement"]["mode"] == "bpf", before["enforcement"]
    assert entries(before) == {"10.77.0.2/32": (20, 12, 125_000), "10.88.0.5/32": (20, 12, 125_000)}
    assert not before["lease"]["safe_state"] and 0 < before["lease"]["remaining_s"] <= LEASE_S
    assert f"s left of {LEASE_S:g} s" in otcp_agent(ns, "show", "--state", str(agent.state)).stdout
    assert metric(scrape(ns, 9465), "otcp_agent_lease_expired") == 0
    first.stop()  # the controller goes quiet
    wait_for(lambda: ns.otcp_routes() == safe, "the safe state", timeout=LEASE_S + 1.0 + 2.0)
    assert "advmss" not in ns.ip("route", "show", "proto", "79")
    after = shown(ns, agent)
    assert entries(after) == {"10.77.0.2/32": (None, 10, None), "10.88.0.5/32": (None, 10, None)}
    assert after["lease"]["safe_state"] and after["lease"]["expired"] and after["generation"] == 1
    assert "safe state applied" in otcp_agent(ns, "show", "--state", str(agent.state)).stdout
    assert metric(scrape(ns, 9465), "otcp_agent_lease_expired") == 1
    assert agent.log().count("no controller renewed the lease of generation 1") == 1
    # The controller is back: its next set is the planned values again.
    second = Controller(netns=ns.name, port=first.port, lease_s=LEASE_S)
    second.publish("10.77.0.1", dict(planned, generation=2))
    wait_for(lambda: second.acked(2), "the ack of generation 2")
    assert ns.otcp_routes() == kept and entries(shown(ns, agent)) == entries(before)
    assert not shown(ns, agent)["lease"]["safe_state"]
    assert metric(scrape(ns, 9465), "otcp_agent_lease_expired") == 0
    # Stopped, its controller gone for longer than the lease, the routes lost (as after a reboot):
    # the restarted agent applies the safe state, not the stale plan.
    assert agent.stop() == 0
    second.stop()
    hub.sleep(LEASE_S + 0.5)
    ns.ip("route", "flush", "proto", "79")
    agent.start()
    wait_for(lambda: ns.otcp_routes() == safe, "the safe state after the restart")
    wait_for(lambda: "the lease of stored generation 2 ran out" in agent.log(), "the restart's log line")
    assert ns.otcp_routes() == safe  # and it stays there


@pytest.mark.root
def test_agent_reports_round_trips_to_its_destinations(ns, tmp_path, cleanup):
    ns.ip("addr", "add", "10.77.0.2/32", "dev", "v1")  # answers the agent's probe with a RST
    controller, agent = agent_under_controller(ns, tmp_path, cleanup,
                                               set_for(4, "10.77.0.2/32"), extra=["--rtt-interval", "0.3"])
    wait_for(lambda: controller.rtts, "a round-trip report")
    _, host_ip, round_trips = controller.rtts[0]  # seconds, as the controller holds them
    assert host_ip == "10.77.0.1"
    assert [(trip.dst, trip.source) for trip in round_trips] == [("10.77.0.2", "probe")]
    assert 0 < round_trips[0].min_s < 1
    wait_for(lambda: len(controller.rtts) >= 3, "reports to keep coming")
    assert "Traceback" not in agent.log()


@pytest.mark.root
def test_agent_probes_the_peers_under_an_aggregated_prefix(ns, tmp_path, cleanup):
    """The set names only 10.77.0.0/30; the controller's peer list tells the agent whom to probe."""
    controller = Controller(netns=ns.name)
    cleanup.append(controller)
    controller.publications.peers = ["10.77.0.1", "10.77.0.2"]  # the agent's own address is left out for it
    controller.publish("10.77.0.1", set_for(4, "10.77.0.0/30"))
    agent = AgentProcess(ns, controller.port, tmp_path, extra=["--rtt-interval", "0.3"])
    cleanup.append(agent)
    wait_for(lambda: controller.acked(4), "the set to be applied")
    ns.ip("addr", "add", "10.77.0.2/32", "dev", "v1")  # the peer appears (after the hello), answers with a RST
    wait_for(lambda: controller.rtts, "a round-trip report")
    assert [trip.dst for trip in controller.rtts[-1][2]] == ["10.77.0.2"]


def test_agent_state_defaults_to_one_file_per_namespace():
    from otcp.agent.cli import default_state_path

    assert default_state_path(None) == "/var/lib/otcp-agent/state.db"
    assert default_state_path("h1") == "/var/lib/otcp-agent/h1/state.db"
    assert default_state_path("/run/netns/h2") == "/var/lib/otcp-agent/h2/state.db"


# -- misbehaving peers (green clients on the root loopback) ---------------------------------


@pytest.fixture
def controller(cleanup):
    server = Controller(handshake_timeout=1.0, write_timeout=1.0, rate_per_s=5, burst=20)
    cleanup.append(server)
    return server


@pytest.fixture
def good_agent(controller):
    """A well-behaved agent for 10.9.0.100 that must be unaffected by the others."""
    peer = GreenPeer(controller.port)
    assert peer.authenticate(addresses=("10.9.0.100",))
    controller.publish("10.9.0.100", set_for(1, "10.9.0.2/32"))
    message = peer.receive()
    assert message["type"] == "params" and message["set"]["generation"] == 1
    peer.sock.sendall(peer.session.seal(messages.ack_message(1, [], ROUTES_ONLY)))
    wait_for(lambda: controller.acked(1), "the good agent's first ack")
    yield peer
    # Still connected and served after whatever the test did to the server.
    controller.publish("10.9.0.100", set_for(99, "10.9.0.2/32"))
    message = peer.receive()  # the same routes: a delta that changes nothing, against the acknowledged 1
    assert message is not None and message["delta"] == {"base": 1, "generation": 99, "added": [], "copied": [],
                                                         "changed": [], "removed": []}
    peer.sock.sendall(peer.session.seal(messages.ack_message(99, [], ROUTES_ONLY)))
    wait_for(lambda: controller.acked(99), "the good agent's last ack")
    assert "10.9.0.100" in controller.server.connected_hosts()
    peer.close()


def test_unauthenticated_peer_gets_the_challenge_and_nothing_else(controller, good_agent):
    controller.publish("10.9.0.1", set_for(5, "10.9.0.2/32"))
    silent = GreenPeer(controller.port)
    frames = silent.read_until_closed()  # the server hangs up after handshake_timeout
    assert len(frames) == 1 and json.loads(frames[0])["type"] == "challenge"
    assert controller.log.has("no authentication within 1 s")


def test_wrong_secret_gets_nothing_after_the_challenge(controller, good_agent):
    controller.publish("10.9.0.1", set_for(5, "10.9.0.2/32"))
    intruder = GreenPeer(controller.port)
    assert not intruder.authenticate(secret=b"guessed")
    assert intruder.read_until_closed() == []
    assert controller.log.has("authentication failed: wrong secret")
    assert "10.9.0.1" not in controller.server.connected_hosts()


@pytest.mark.parametrize(
    "attack, reason",
    [
        (lambda peer: peer.sock.sendall((100 * 1024 * 1024).to_bytes(4, "big")),
         "frame of 104857600 bytes exceeds the 1024-byte limit"),
        (lambda peer: peer.sock.sendall(framing.frame(b'{"type": "auth", "nonce": ')), "auth: invalid JSON"),
        (lambda peer: peer.send_json({"type": "hello"}), "type: expected auth"),
        (lambda peer: peer.send_json({"type": "auth", "nonce": "00", "mac": "00"}), "nonce must be 32 bytes"),
    ],
    ids=["oversized-frame", "truncated-json", "hello-before-auth", "short-nonce"],
)
def test_bad_handshakes_are_disconnected(controller, good_agent, attack, reason):
    peer = GreenPeer(controller.port)
    peer.read()  # the challenge
    attack(peer)
    assert peer.read_until_closed() == []
    assert controller.log.has(reason), controller.log.lines


def sealed_raw(peer, body):
    """Seal arbitrary bytes (not necessarily JSON) the way Session.seal would."""
    session = peer.session
    mac = hmac.new(session._send_key, struct.pack("!Q", session._sent) + body, hashlib.sha256).digest()
    session._sent += 1
    return framing.frame(mac + body)


@pytest.mark.parametrize(
    "attack, reason",
    [
        (lambda peer: peer.sock.sendall(sealed_raw(peer, b'{"type": "ack", "generation": 1, "res')),
         "invalid JSON"),
        (lambda peer: peer.sock.sendall(framing.frame(b"\0" * 32 + b'{"type": "reject"}')), "bad MAC"),
        (lambda peer: peer.sock.sendall(peer.session.seal({"type": "shutdown"})), "expected ack or reject"),
        (lambda peer: peer.sock.sendall(peer.session.seal(messages.ack_message(1, [{"dst": 5}], ROUTES_ONLY))),
         "results[0].dst: 5 is not a string"),
        (lambda peer: peer.sock.sendall(peer.session.seal(messages.ack_message(42, [], ROUTES_ONLY))),
         "ack for generation 42, which was not sent to it"),
        (lambda peer: peer.sock.sendall((limits.MAX_FRAME_BYTES + 1).to_bytes(4, "big")),
         "exceeds the 8388608-byte limit"),
        (lambda peer: [peer.sock.sendall(peer.session.seal(messages.reject_message(None, "spam")))
                       for _ in range(200)], "flooding"),
    ],
    ids=["truncated-json", "forged-mac", "unknown-type", "bad-ack", "unsent-generation", "oversized", "flood"],
)
def test_misbehaving_authenticated_agents_are_disconnected(controller, good_agent, attack, reason):
    peer = GreenPeer(controller.port)
    assert peer.authenticate(addresses=("10.9.0.7",))
    wait_for(lambda: "10.9.0.7" in controller.server.connected_hosts(), "the peer to register")
    attack(peer)
    wait_for(lambda: "10.9.0.7" not in controller.server.connected_hosts(), "the peer to be dropped")
    assert peer.read_until_closed() == []
    assert controller.log.has(reason), controller.log.lines


def test_slow_reader_is_disconnected(controller, good_agent):
    peer = GreenPeer(controller.port)
    peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    assert peer.authenticate(addresses=("10.9.0.8",))
    wait_for(lambda: "10.9.0.8" in controller.server.connected_hosts(), "the peer to register")
    big = [f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}/32" for i in range(30000)]
    for generation in range(1, 6):  # never read: the socket buffers fill, then the write times out
        controller.publish("10.9.0.8", set_for(generation, *big))
        hub.sleep(0.2)
    wait_for(lambda: controller.log.has("slow reader"), "the slow reader to be dropped")
    assert "10.9.0.8" not in controller.server.connected_hosts()


def test_a_newer_connection_from_the_same_host_replaces_the_older(controller, good_agent):
    old = GreenPeer(controller.port)
    assert old.authenticate(addresses=("10.9.0.9",))
    wait_for(lambda: "10.9.0.9" in controller.server.connected_hosts(), "the first connection")
    new = GreenPeer(controller.port)
    assert new.authenticate(addresses=("10.9.0.9",))
    assert old.read_until_closed() == []
    controller.publish("10.9.0.9", set_for(3, "10.9.0.2/32"))
    assert new.receive()["set"]["generation"] == 3
    assert controller.log.has("replaced by a newer connection")


def test_only_the_latest_set_is_sent(controller, good_agent):
    peer = GreenPeer(controller.port)
    assert peer.authenticate(addresses=("10.9.0.10",))
    wait_for(lambda: "10.9.0.10" in controller.server.connected_hosts(), "the peer to register")
    for generation in (1, 2, 3):  # published back to back, before the writer runs
        controller.publish("10.9.0.10", set_for(generation, "10.9.0.2/32"))
    assert peer.receive()["set"]["generation"] == 3


def test_a_set_withheld_for_want_of_authority_goes_once_the_controller_leads_the_host_again(cleanup):
    # The host's switch reconnecting (or led by another instance) when its agent connects: the set
    # is withheld. Taking the switch back publishes nothing new when the parameters are the same,
    # so the withheld set must go then: after the next plan, or at the writer's next renewal.
    leading = set()
    controller = Controller(lease_s=3, authority=lambda host_ip: 0 if host_ip in leading else None)
    cleanup.append(controller)
    controller.publish("10.9.0.30", set_for(4, "10.9.0.2/32"))
    controller.publish("10.9.0.31", set_for(5, "10.9.0.2/32"))
    after_plan, at_renewal = GreenPeer(controller.port), GreenPeer(controller.port)
    assert after_plan.authenticate(addresses=("10.9.0.30",)) and at_renewal.authenticate(addresses=("10.9.0.31",))
    wait_for(lambda: len(controller.agents) == 2, "both agents mapped to their hosts")
    with pytest.raises(hub.Timeout):
        after_plan.read(timeout=0.5)
    leading.add("10.9.0.31")  # no plan follows: the writer's renewal tick (every lease / 3) sends it
    assert at_renewal.receive()["set"]["generation"] == 5
    leading.add("10.9.0.30")
    controller.server.release_withheld()  # what the app does after each plan
    assert after_plan.receive()["set"]["generation"] == 4
    controller.server.release_withheld()  # nothing is withheld any more: nothing goes twice
    with pytest.raises(hub.Timeout):
        after_plan.read(timeout=0.5)
    with pytest.raises(hub.Timeout):
        at_renewal.read(timeout=0.5)


def test_too_many_connections_are_refused(cleanup):
    controller = Controller(max_connections=2, max_unauthenticated=2, handshake_timeout=5.0)
    cleanup.append(controller)
    first, second = GreenPeer(controller.port), GreenPeer(controller.port)
    assert first.read() is not None and second.read() is not None
    third = GreenPeer(controller.port)
    assert third.read_until_closed() == []
    assert controller.log.has("2 connections already open")


# -- the server under exhaustion and slow attacks ---------------------------------------------


def test_an_agent_that_never_reads_is_dropped_at_its_first_large_set(controller, good_agent):
    """One 0.86 MB set that the peer never reads: the bounded send buffer makes the write block,
    and the write deadline drops the peer (an autotuned kernel buffer could take the whole set, and
    sendall would return with nothing read)."""
    peer = GreenPeer(controller.port)
    assert peer.authenticate(addresses=("10.9.0.11",))
    wait_for(lambda: "10.9.0.11" in controller.server.connected_hosts(), "the peer to register")
    routes = [f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}/32" for i in range(11_500)]
    big = set_for(1, *routes)
    assert len(framing.encode_json(messages.params_message(big, lease_s=60, epoch=0))) > 800_000
    controller.publish("10.9.0.11", big)
    wait_for(lambda: controller.log.has("slow reader: generation 1"), "the peer to be dropped")
    assert "10.9.0.11" not in controller.server.connected_hosts()


def test_the_listener_survives_running_out_of_descriptors(cleanup):
    controller = Controller(max_connections=10_000, max_unauthenticated=10_000, unauthenticated_per_source=10_000,
                            handshake_timeout=30.0)
    cleanup.append(controller)
    sockets = [green_socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(12)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 4, hard))
    try:
        for sock in sockets:  # no new descriptor on this side; the server's accept needs one each
            sock.connect(("127.0.0.1", controller.port))
        wait_for(lambda: controller.log.has("cannot accept agents: Too many open files"), "accept to hit EMFILE")
    finally:
        for sock in sockets:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    late = GreenPeer(controller.port)
    assert late.authenticate(addresses=("10.9.0.12",))
    wait_for(lambda: "10.9.0.12" in controller.server.connected_hosts(), "an agent after the exhaustion")
    late.close()


def test_unauthenticated_peers_cannot_take_the_agents_connections(cleanup):
    controller = Controller(max_connections=8, max_unauthenticated=4, unauthenticated_per_source=3,
                            handshake_timeout=30.0)
    cleanup.append(controller)
    squatters = [GreenPeer(controller.port) for _ in range(3)]
    for squatter in squatters:
        assert squatter.read() is not None  # the challenge: they are in, waiting
    fourth = GreenPeer(controller.port)
    assert fourth.read_until_closed() == []
    assert controller.log.has("3 connections from 127.0.0.1 already waiting to authenticate")
    squatters[0].close()
    agent = GreenPeer(controller.port)
    assert agent.authenticate(addresses=("10.9.0.13",))
    wait_for(lambda: "10.9.0.13" in controller.server.connected_hosts(), "a real agent beside the squatters")
    for squatter in squatters[1:]:
        squatter.close()
    agent.close()


def test_a_trickled_frame_after_authentication_is_cut_off(controller, good_agent):
    peer = GreenPeer(controller.port)
    assert peer.authenticate(addresses=("10.9.0.14",))
    wait_for(lambda: "10.9.0.14" in controller.server.connected_hosts(), "the peer to register")
    frame = peer.session.seal(messages.reject_message(None, "slowly"))
    for byte in frame[:10]:  # 0.4 s apart: each receive is quick, the frame never completes in 1 s
        try:
            peer.sock.sendall(bytes([byte]))
        except OSError:  # dropped, as it should be
            break
        hub.sleep(0.4)
    wait_for(lambda: "10.9.0.14" not in controller.server.connected_hosts(), "the trickler to be dropped")
    assert controller.log.has("a frame did not arrive whole within 1 s")


# -- deltas (protocol 6) ------------------------------------------------------------------------


def test_a_delta_goes_against_the_acked_set_and_a_resync_gets_the_whole_set(controller, good_agent):
    peer = GreenPeer(controller.port)
    assert peer.authenticate(addresses=("10.9.0.12",))
    controller.publications.peers = ["10.9.0.12", "10.9.0.13"]
    routes = [f"10.9.1.{i}/32" for i in range(10)]
    controller.publish("10.9.0.12", set_for(1, *routes))
    first = peer.receive()
    assert first["set"]["generation"] == 1 and first["peers"] == ["10.9.0.13"]
    # Before an ack there is no base: the next set goes whole.
    controller.publish("10.9.0.12", set_for(2, *routes))
    assert "set" in peer.receive()
    peer.sock.sendall(peer.session.seal(messages.ack_message(2, [], ROUTES_ONLY)))
    wait_for(lambda: controller.acked(2), "the ack of generation 2")
    controller.publish("10.9.0.12", set_for(3, *routes[1:], "10.9.2.0/24"))
    message = peer.receive()
    assert "peers" not in message  # unchanged since the last params message
    assert message["delta"]["base"] == 2 and message["delta"]["generation"] == 3
    assert message["delta"]["removed"] == ["10.9.1.0/32"] and message["delta"]["changed"] == []
    # The new destination's route is the removed one's: sent as a copy of it.
    assert message["delta"]["added"] == [] and message["delta"]["copied"] == [{"dst": "10.9.2.0/24",
                                                                               "like": "10.9.1.0/32"}]
    # The agent holds another generation: it asks for the whole set, and gets it.
    peer.sock.sendall(peer.session.seal(messages.resync_message(3, 1)))
    whole = peer.receive()
    assert whole["set"]["generation"] == 3 and len(whole["set"]["routes"]) == 10
    peer.sock.sendall(peer.session.seal(messages.ack_message(3, [], ROUTES_ONLY)))
    wait_for(lambda: controller.acked(3), "the ack of generation 3")
    # A resync for a set that did not go as a delta is a protocol error.
    controller.publish("10.9.0.12", set_for(4, "10.9.3.0/24"))
    assert "set" in peer.receive()  # one route: a delta would name more
    peer.sock.sendall(peer.session.seal(messages.resync_message(4, 3)))
    assert peer.read_until_closed() == []
    assert controller.log.has("resync for generation 4, which was not sent to it as a delta")

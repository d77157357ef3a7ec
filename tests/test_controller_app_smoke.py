"""Every handler of the os-ken app (`otcp.service.app`), driven with os-ken's own
event and message classes on fake datapaths, without a switch; the app's
loops run one step at a time; a failing loop step is logged and run again.

In the manner of Faucet's tests/unit/faucet/test_valveapp_smoke.py.
"""

import inspect
import logging
import os
import signal

import pytest
import yaml
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER
from os_ken.lib import hub
from os_ken.lib.packet import arp as arp_packet
from os_ken.lib.packet import packet
from os_ken.ofproto import ofproto_v1_3 as ofproto
from os_ken.ofproto import ofproto_v1_3_parser as parser

from otcp.controller import config, core, delay, forwarding
from otcp.experiments.runner.controller import free_port
from otcp.service import app
from support.controller_fakes import H1, H2, PORTS, FakeDatapath, arp_frame, ipv4_frame, port_mac
from support.messages import hello


@pytest.fixture
def controller(tmp_path, monkeypatch):
    (tmp_path / "secret").write_bytes(b"smoke-test-secret-0123456789")
    settings = {
        "database": "state.db", "intervals": {"probe_s": 0.05, "flow_stats_s": 0.05, "recompute_s": 0.05},
        "agents": {"port": free_port(), "secret_file": "secret"},
        # Probes cross no wire here: the time between sending and handling one is this process's own.
        "measurement": {"max_link_delay_us": 1_000_000},
    }
    monkeypatch.setattr(app, "CONFIG", config.validate(settings, str(tmp_path / "controller.yaml")))
    instance = app.OTCPController()
    yield instance
    instance.store.close()


class RecordingAgentServer:
    """Stands in for the agent channel: records which hosts a set was delivered to, and how often
    withheld sets were released."""

    def __init__(self):
        self.delivered = []
        self.releases = 0

    def deliver(self, host_ip):
        self.delivered.append(host_ip)

    def release_withheld(self):
        self.releases += 1


def state_event(datapath, state):
    event = ofp_event.EventOFPStateChange(datapath)
    event.state = state
    return event


def packet_in_event(datapath, in_port, data):
    return ofp_event.EventOFPPacketIn(parser.OFPPacketIn(
        datapath, buffer_id=ofproto.OFP_NO_BUFFER, total_len=len(data), reason=ofproto.OFPR_NO_MATCH, table_id=0,
        cookie=0, match=parser.OFPMatch(in_port=in_port), data=data))


def port_description_event(datapath):
    ports = [parser.OFPPort(port, port_mac(datapath.id, port), b"eth", 0, 0, 0, 0, 0, 0, 100_000, 100_000)
             for port in [*PORTS[datapath.id], ofproto.OFPP_LOCAL]]
    return ofp_event.EventOFPPortDescStatsReply(parser.OFPPortDescStatsReply(datapath, body=ports))


def flow_stats_event(datapath, packets):
    entry = parser.OFPFlowStats(
        table_id=0, duration_sec=1, duration_nsec=0, priority=forwarding.PAIR_PRIORITY, idle_timeout=0,
        hard_timeout=0, flags=0, cookie=forwarding.PAIR_COOKIE, packet_count=packets, byte_count=packets * 100,
        match=parser.OFPMatch(eth_type=0x0800, ipv4_src=H1[0], ipv4_dst=H2[0]), instructions=[])
    return ofp_event.EventOFPFlowStatsReply(parser.OFPFlowStatsReply(datapath, flags=0, body=[entry]))  # the last part


def kinds(messages):
    return [type(message).__name__ for message in messages]


def test_every_handler_drives_the_core_and_sends_through_the_datapath(controller):
    driven = set()

    def handle(name, event):
        driven.add(name)
        getattr(controller, name)(event)

    s1, s2 = FakeDatapath(1), FakeDatapath(2)
    for datapath in (s1, s2):
        handle("switch_features", ofp_event.EventOFPSwitchFeatures(parser.OFPSwitchFeatures(datapath)))
        # clear, the packet-in meter (delete, add), probes up, table miss
        assert kinds(datapath.take()) == ["OFPFlowMod", "OFPMeterMod", "OFPMeterMod", "OFPFlowMod", "OFPFlowMod"]
        handle("state_change", state_event(datapath, MAIN_DISPATCHER))
        assert kinds(datapath.take()) == ["OFPPortDescStatsRequest"]
        handle("port_description", port_description_event(datapath))
    handle("port_status", ofp_event.EventOFPPortStatus(parser.OFPPortStatus(s1, ofproto.OFPPR_MODIFY)))
    assert kinds(s1.take()) == ["OFPPortDescStatsRequest"]

    # A probe round: echoes and probes leave; a probe crossing a link discovers it.
    controller._probe()
    probes = {datapath.id: datapath.take() for datapath in (s1, s2)}
    assert kinds(probes[1]) == ["OFPEchoRequest", "OFPPacketOut", "OFPPacketOut", "OFPPacketOut"]  # ports 1-3
    for datapath in (s1, s2):
        handle("echo_reply", ofp_event.EventOFPEchoReply(parser.OFPEchoReply(datapath, data=b"otcp")))
    out_of_port_1 = {dpid: next(m.data for m in sent[1:] if m.actions[0].port == 1) for dpid, sent in probes.items()}
    assert delay.parse_probe(out_of_port_1[1])[:2] == (1, 1)
    handle("packet_in", packet_in_event(s2, 1, out_of_port_1[1]))
    handle("packet_in", packet_in_event(s1, 1, out_of_port_1[2]))
    assert controller.core.topology.links == {(1, 1): (2, 1), (2, 1): (1, 1)}
    assert (1, 1) in controller.core.delays.delays()

    # Hosts speak; h1 asks for h2, whom the controller knows by now.
    handle("packet_in", packet_in_event(s1, 2, arp_frame(arp_packet.ARP_REQUEST, H1, H1[0])))
    handle("packet_in", packet_in_event(s2, 2, arp_frame(arp_packet.ARP_REQUEST, H2, H2[0])))
    s1.take(), s2.take()  # the second gratuitous ARP answers nothing of interest
    handle("packet_in", packet_in_event(s1, 2, arp_frame(arp_packet.ARP_REQUEST, H1, H2[0])))
    [reply] = s1.take()
    answer = packet.Packet(reply.data).get_protocol(arp_packet.arp)
    assert reply.actions[0].port == 2 and (answer.opcode, answer.src_mac) == (arp_packet.ARP_REPLY, H2[1])

    # A first packet goes straight out of its destination's edge port; its entries come with the plan.
    handle("packet_in", packet_in_event(s1, 2, ipv4_frame(H1, H2)))
    [delivered] = s2.take()
    assert kinds([delivered]) == ["OFPPacketOut"] and delivered.actions[0].port == 2 and s1.take() == []
    assert controller.replan.is_set()  # hosts were learned
    controller._poll_stats()
    assert kinds(s1.take()) == ["OFPFlowStatsRequest"]
    for packets in (10, 20):
        handle("flow_stats", flow_stats_event(s1, packets))
    assert controller.core.flow_counter.active_pairs() == {(H1[0], H2[0]): 1}

    # The plan loop's step, once discovery has settled: a generation stored and delivered.
    controller.agent_server = RecordingAgentServer()
    controller.core.changed_at = 0.0
    controller._replan()
    assert not controller.replan.is_set()
    generation, _, records = controller.store.latest_generation()
    assert generation == 1 and len(records) == 2
    assert controller.agent_server.delivered == [H1[0], H2[0]]
    assert controller.agent_server.releases == 1  # after the plan, sets held back may go
    assert controller.store.latest_link_measurements()[("s1", "s2")]["flows"] == 1

    # Probes stop crossing the link: the probe round after LINK_TIMEOUT_ROUNDS unanswered ones forgets it.
    for _ in range(core.LINK_TIMEOUT_ROUNDS + 1):
        controller._probe()
    assert controller.core.topology.links == {}
    # A stale DEAD of an earlier connection leaves the switch's current one alone.
    handle("state_change", state_event(FakeDatapath(2), DEAD_DISPATCHER))
    assert controller.core.ready_switches() == [1, 2]
    handle("state_change", state_event(s2, DEAD_DISPATCHER))
    assert controller.core.ready_switches() == [1] and 2 not in controller.core.topology.switches

    # Alone, the instance asks no role: an answer or a refusal it did not ask for changes nothing.
    s1.take()
    handle("role_reply", ofp_event.EventOFPRoleReply(parser.OFPRoleReply(s1, ofproto.OFPCR_ROLE_SLAVE, 5)))
    handle("error", ofp_event.EventOFPErrorMsg(parser.OFPErrorMsg(
        s1, type_=ofproto.OFPET_ROLE_REQUEST_FAILED, code=ofproto.OFPRRFC_STALE)))
    assert controller.core.roles.is_master(1) and s1.take() == []

    handlers = {name for name, member in inspect.getmembers(app.OTCPController) if hasattr(member, "callers")}
    assert driven == handlers


def test_one_of_two_instances_asks_for_its_role_and_sends_flow_mods_only_as_master(tmp_path, monkeypatch):
    settings = {"database": "state.db", "cluster": {"rank": 0, "instances": 2, "heartbeat_s": 0.5, "takeover_s": 2}}
    monkeypatch.setattr(app, "CONFIG", config.validate(settings, str(tmp_path / "controller.yaml")))
    controller = app.OTCPController()
    try:
        s1 = FakeDatapath(1)
        controller.switch_features(ofp_event.EventOFPSwitchFeatures(parser.OFPSwitchFeatures(s1)))
        set_async, question = s1.take()
        assert kinds([set_async, question]) == ["OFPSetAsync", "OFPRoleRequest"]
        assert set_async.packet_in_mask[1] & 1 << ofproto.OFPR_NO_MATCH  # a SLAVE learns from packet-ins
        assert (question.role, question.generation_id) == (ofproto.OFPCR_ROLE_NOCHANGE, 0)
        controller.state_change(state_event(s1, MAIN_DISPATCHER))
        controller.port_description(port_description_event(s1))
        s1.take()
        # The switch never had a master: rank 0 asks at once; as SLAVE it sent no flow mod.
        controller.role_reply(ofp_event.EventOFPRoleReply(parser.OFPRoleReply(s1, ofproto.OFPCR_ROLE_EQUAL, 0)))
        [ask] = s1.take()
        assert ask.role == ofproto.OFPCR_ROLE_MASTER and ask.generation_id & 0xFF == 0
        controller._probe()
        assert kinds(s1.take()) == ["OFPEchoRequest"]  # a switch refuses a SLAVE's probes
        controller.role_reply(ofp_event.EventOFPRoleReply(parser.OFPRoleReply(s1, ofproto.OFPCR_ROLE_MASTER,
                                                                              ask.generation_id)))
        assert controller.core.roles.epoch(1) == ask.generation_id
        # MASTER of a switch no one led: cleared, the meter, probes up, table miss.
        assert kinds(s1.take()) == ["OFPFlowMod", "OFPMeterMod", "OFPMeterMod", "OFPFlowMod", "OFPFlowMod"]
        controller._probe()
        assert kinds(s1.take())[:2] == ["OFPEchoRequest", "OFPPacketOut"]
        # Another instance asked with a newer id: this one is SLAVE again and sends nothing but questions.
        controller.error(ofp_event.EventOFPErrorMsg(parser.OFPErrorMsg(
            s1, type_=ofproto.OFPET_ROLE_REQUEST_FAILED, code=ofproto.OFPRRFC_STALE)))
        assert not controller.core.roles.is_master(1)
        assert kinds(s1.take()) == ["OFPRoleRequest"]
        controller._probe()
        assert kinds(s1.take()) == ["OFPEchoRequest"]
    finally:
        controller.store.close()


def test_an_agent_ahead_of_the_controller_is_stored_and_followed(controller):
    arrived = hello(addresses=[H1[0]], applied_generation=12)
    controller._agent_arrived(H1[0], arrived)
    assert controller.store.agents() == {H1[0]: arrived.model_dump(exclude={"type"})}
    assert controller.core.generation == 12 and controller.replan.is_set()


def test_a_failing_loop_step_is_logged_with_its_traceback_and_runs_again(controller, monkeypatch, caplog):
    monkeypatch.setattr(app, "RESTART_BACKOFF_S", 0)
    steps = []

    class Stop(BaseException):
        """Ends the otherwise endless loop from inside the test."""

    def flaky_step():
        steps.append(len(steps))
        if len(steps) == 1:
            raise RuntimeError("probe round broke")
        raise Stop

    with caplog.at_level(logging.ERROR), pytest.raises(Stop):
        controller._supervised(flaky_step, lambda: None)
    assert steps == [0, 1]
    [record] = [r for r in caplog.records if "flaky_step failed; running it again" in r.getMessage()]
    assert record.exc_info[1].args == ("probe round broke",)


def test_start_opens_the_agent_channel_and_starts_the_loops(controller):
    hangup = signal.getsignal(signal.SIGHUP)
    controller.start()
    try:
        assert controller.agent_server.address[1] == controller.config.agents.port
        assert controller.agent_server.publications is controller.core.publications
        # os-ken's event loop, the admin socket, then probe, stats, plan, prune and reload
        assert len(controller.threads) == 7
        assert os.path.exists(controller.config.admin.socket)
        assert signal.getsignal(signal.SIGHUP) == controller._hangup
        hub.sleep(0)
        assert not any(thread.dead for thread in controller.threads)
    finally:
        for thread in controller.threads:
            hub.kill(thread)
        controller.agent_server.stop()
        signal.signal(signal.SIGHUP, hangup)


def test_a_hangup_reloads_the_file_at_the_loops_next_turn_and_a_bad_file_changes_nothing(controller, monkeypatch):
    path = os.path.join(os.path.dirname(controller.config.database), "controller.yaml")
    monkeypatch.setattr(app, "CONFIG_PATH", path)
    with open(path, "w") as handle:
        yaml.safe_dump({"database": "state.db", "agents": {"port": 1, "secret_file": "secret"},
                        "measurement": {"max_link_delay_us": 1_000_000}, "intervals": {"probe_s": 0.5},
                        "bounds": {"initcwnd": [1, 8]}}, handle)
    controller._reload()  # not asked: nothing read
    assert controller.live.reload is None
    controller._hangup(signal.SIGHUP, None)
    controller._reload()
    assert controller.live.reload["refused"] is None and controller.live.reload["needs_restart"] == ["agents.port"]
    assert "intervals.probe_s" in controller.live.reload["applied"] and "bounds.initcwnd" in controller.live.reload["applied"]
    assert controller.config.intervals.probe_s == 0.5 and controller.core.probe_interval_s == 0.5
    assert controller.core.bounds.initcwnd_high == 8 and controller.config.agents.port != 1
    with open(path, "w") as handle:
        handle.write("intervals: {probe_s: .nan}\n")
    controller._hangup(signal.SIGHUP, None)
    controller._reload()
    assert "intervals.probe_s" in controller.live.reload["refused"]
    assert controller.config.intervals.probe_s == 0.5 and controller.core.bounds.initcwnd_high == 8

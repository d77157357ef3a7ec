"""Two controllers, one fabric, without a switch or a kernel: the role state machine
(`otcp.controller.roles`) against a model of Open vSwitch's master election on a fake clock,
and the agents' (epoch, generation) order across controllers (`otcp.wire.paramset`,
`otcp.agent.core`). Failover within its bound, no flapping when the old master comes back,
at most one instance that believes it is MASTER of a switch at any time, and no agent that
takes an older plan from a master that lost its switch."""

import itertools
import random

import pytest
from os_ken.ofproto import ofproto_v1_3

from otcp.controller import delay
from otcp.controller.roles import STEP, RoleChange, RoleRequest, Roles
from otcp.wire.paramset import check_generation, validate_param_set
from otcp.wire.validation import ValidationError
from support.controller_fakes import (
    H1,
    H2,
    H3,
    HOSTS,
    PORTS,
    FakeDatapath,
    ipv4_frame,
    learn_hosts,
    new_core,
    port_infos,
    port_mac,
)
from support.routes import set_for

HEARTBEAT_S, TAKEOVER_S = 1.0, 4.0
TICK_S = HEARTBEAT_S / 4  # the app's role loop: four turns a heartbeat
START = 1_800_000_000.0  # the wall clock the instances read


class Switch:
    """One switch's master election as Open vSwitch does it (ofproto/connmgr.c): a MASTER or
    SLAVE request whose id is older than the switch's, as a signed 64-bit difference, is stale;
    otherwise it sets the id, and a new MASTER makes every other master SLAVE. Every connection
    starts EQUAL; no change answers with the role and the id (all ones when never set)."""

    def __init__(self, dpid):
        self.dpid = dpid
        self.election_id = None
        self.roles = {}  # connection (an instance's name) -> role

    def connect(self, name):
        self.roles[name] = "equal"

    def disconnect(self, name):
        self.roles.pop(name, None)

    def request(self, name, request: RoleRequest):
        """("reply", role, id) or ("stale",)."""
        if request.role != "nochange":
            if self.election_id is not None and (request.generation_id - self.election_id) % 2**64 >= 2**63:
                return ("stale",)
            self.election_id = request.generation_id
            if request.role == "master":
                for other, role in self.roles.items():
                    if role == "master":
                        self.roles[other] = "slave"
            self.roles[name] = request.role
        return ("reply", self.roles[name], 2**64 - 1 if self.election_id is None else self.election_id)


class Fabric:
    """Instances and switches on one fake clock: each instance ticks every TICK_S, and its
    requests reach the switches it can see at once (a partition hides some)."""

    def __init__(self, dpids=(1,)):
        self.now = START
        self.switches = {dpid: Switch(dpid) for dpid in dpids}
        self.instances: dict[str, Roles] = {}
        self.running: set[str] = set()
        self.cut: set[tuple[str, int]] = set()  # (instance, dpid) that cannot reach each other
        self.changes: list[tuple[float, str, RoleChange]] = []
        self.believed_masters: list[set] = []  # per step, per switch: who believed it was MASTER

    def start(self, name, rank, instances=2):
        self.instances[name] = roles = Roles(rank, instances, HEARTBEAT_S, TAKEOVER_S, now=self.now)
        self.running.add(name)
        for dpid, switch in self.switches.items():
            if (name, dpid) not in self.cut:
                switch.connect(name)
                self.carry(name, roles.connected(self.now, dpid))

    def kill(self, name):
        """kill -9: the process is gone, the switches see its connections close."""
        self.running.discard(name)
        for switch in self.switches.values():
            switch.disconnect(name)

    def carry(self, name, actions):
        self.changes += [(self.now, name, change) for change in actions.changes]
        for request in actions.requests:
            if (name, request.dpid) in self.cut or name not in self.switches[request.dpid].roles:
                continue
            answer = self.switches[request.dpid].request(name, request)
            roles = self.instances[name]
            if answer[0] == "stale":
                self.carry(name, roles.refused(self.now, request.dpid))
            else:
                self.carry(name, roles.answered(self.now, request.dpid, answer[1], answer[2]))

    def run(self, seconds, paused=()):
        """Advance seconds; the instances in paused neither tick nor answer (SIGSTOP)."""
        for _ in range(round(seconds / TICK_S)):
            self.now += TICK_S
            for name in sorted(self.running - set(paused)):
                self.carry(name, self.instances[name].tick(self.now))
            for dpid in self.switches:
                self.believed_masters.append({name for name in self.running
                                              if self.instances[name].is_master(dpid, self.now)})

    def master(self, dpid=1):
        masters = [name for name, role in self.switches[dpid].roles.items() if role == "master"]
        assert len(masters) <= 1
        return masters[0] if masters else None


def test_two_instances_agree_on_one_master_and_the_other_stays_slave():
    fabric = Fabric(dpids=(1, 2, 3))
    fabric.start("a", 0)
    fabric.start("b", 1)
    fabric.run(1)
    assert all(fabric.master(dpid) == "a" for dpid in (1, 2, 3))
    assert all(fabric.switches[dpid].roles["b"] == "slave" for dpid in (1, 2, 3))
    fabric.run(60)
    # The master's heartbeats keep the standby back: nothing changes in a minute.
    assert all(fabric.master(dpid) == "a" for dpid in (1, 2, 3))
    assert [change.master for _, name, change in fabric.changes] == [True] * 3
    assert {name for _, name, _ in fabric.changes} == {"a"}
    summary = fabric.instances["a"].summary()
    assert [row["promotions"] for row in summary] == [1, 1, 1] and [row["demotions"] for row in summary] == [0, 0, 0]


def test_a_standby_that_connected_first_leaves_a_fabric_no_one_led_to_rank_0():
    fabric = Fabric(dpids=(1, 2))
    fabric.start("b", 1)
    fabric.run(0.75)  # b read "never set" and waits its heartbeat; a comes meanwhile
    fabric.start("a", 0)
    fabric.run(30)
    assert fabric.master(1) == fabric.master(2) == "a"
    assert {name for _, name, _ in fabric.changes} == {"a"}


def test_a_killed_master_is_replaced_within_the_bound_and_rejoins_as_slave_without_flapping():
    fabric = Fabric(dpids=(1, 2))
    fabric.start("a", 0)
    fabric.start("b", 1)
    fabric.run(10)
    old_epoch = fabric.instances["a"].epoch(1)
    killed_at = fabric.now
    fabric.kill("a")
    fabric.run(20)
    taken = [(at, change) for at, name, change in fabric.changes if name == "b" and change.master]
    assert {change.dpid for _, change in taken} == {1, 2}
    bound = fabric.instances["b"].failover_bound_s()
    assert bound == TAKEOVER_S + 3 * HEARTBEAT_S
    assert all(at - killed_at <= bound for at, _ in taken)
    # A new master's epoch is greater than any id of the old one's: the switch ordered them.
    assert all(change.epoch > old_epoch and change.epoch & 0xFF == 1 for _, change in taken)
    assert not any(change.fresh for _, change in taken)  # the old master's entries stay until replaced
    # The old master comes back: the switches' ids are moving, so it stays SLAVE; nothing flaps.
    before = list(fabric.changes)
    fabric.start("a", 0)
    fabric.run(60)
    assert fabric.master(1) == fabric.master(2) == "b"
    assert fabric.switches[1].roles["a"] == fabric.switches[2].roles["a"] == "slave"
    assert fabric.changes == before


def test_a_stalled_master_steps_down_before_the_standby_steps_up_and_does_not_take_the_switch_back():
    fabric = Fabric()
    fabric.start("a", 0)
    fabric.start("b", 1)
    fabric.run(5)
    fabric.run(15, paused={"a"})  # a's loop stalls, its connection stays up
    fabric.run(30)
    assert fabric.master() == "b" and fabric.switches[1].roles["a"] == "slave"
    # At no step did both instances believe they were MASTER.
    assert all(len(masters) <= 1 for masters in fabric.believed_masters)
    a_changes = [change.master for _, name, change in fabric.changes if name == "a"]
    assert a_changes == [True, False]  # promoted at the start, stepped down once, never again


def test_instances_that_cannot_see_each_other_lead_only_the_switches_they_reach():
    fabric = Fabric(dpids=(1, 2))
    fabric.cut = {("a", 2), ("b", 1)}
    fabric.start("a", 0)
    fabric.start("b", 1)
    fabric.run(20)
    assert fabric.master(1) == "a" and fabric.master(2) == "b"
    # Each switch has one master: a host's agent takes sets from its own switch's master only.
    assert fabric.instances["a"].epoch(2) is None and fabric.instances["b"].epoch(1) is None


def test_a_lone_instance_asks_nothing_and_leads_every_switch_with_one_epoch():
    roles = Roles(now=START)
    first, second = roles.connected(START, 1), roles.connected(START + 5, 2)
    assert first.requests == second.requests == []
    assert [c.master for c in first.changes + second.changes] == [True, True]
    assert roles.epoch(1) == roles.epoch(2) == first.changes[0].epoch > 0
    assert roles.epoch(1, START + 10**6) == roles.epoch(1)  # alone, never in doubt
    assert roles.tick(START + 100).requests == [] and roles.answered(START, 1, "slave", 9).changes == []
    later = Roles(now=START + 60)  # a restart: a greater epoch
    later.connected(START + 60, 1)
    assert later.epoch(1) > roles.epoch(1)


@pytest.mark.parametrize("rank, instances, heartbeat, takeover", [(2, 2, 1, 4), (0, 0, 1, 4), (0, 257, 1, 4),
                                                                  (0, 2, 1, 2.9), (0, 2, 0, 4)])
def test_a_bad_cluster_is_refused(rank, instances, heartbeat, takeover):
    with pytest.raises(ValueError):
        Roles(rank, instances, heartbeat, takeover)


def test_a_takeover_id_passes_the_switch_and_the_clock():
    roles = Roles(1, 2, HEARTBEAT_S, TAKEOVER_S, now=START)
    later = START + TAKEOVER_S + HEARTBEAT_S  # rank 1 waits a heartbeat more
    roles.connected(START, 1)
    far_ahead = (int(START * 1000) + 10**9) << 8  # a switch id from a clock far ahead
    roles.answered(START, 1, "slave", far_ahead)
    assert "master" not in [r.role for r in roles.answered(later - 0.01, 1, "slave", far_ahead).requests]
    [request] = roles.answered(later, 1, "slave", far_ahead).requests  # still for the whole wait: taken
    assert request.role == "master" and request.generation_id == far_ahead + 2 * STEP + 1
    roles.connected(START, 2)
    roles.answered(START, 2, "slave", 5 << 8)  # a switch whose id is behind the clock
    [request] = roles.answered(later, 2, "slave", 5 << 8).requests
    assert request.generation_id == (int(later * 1000) << 8) + 1


# -- the agents' order across controllers -------------------------------------------------------


def test_a_newer_epoch_wins_whatever_its_generation_and_an_older_one_never_does():
    held = validate_param_set(set_for(40, "10.0.0.1/32", cwnd_clamp=4))
    lower = validate_param_set(set_for(12, "10.0.0.1/32", cwnd_clamp=8))
    check_generation(lower, 40, held, epoch=900, applied_epoch=500)  # a new master's own numbering
    with pytest.raises(ValidationError, match="^epoch: 500 is older than the applied set's epoch 900"):
        check_generation(validate_param_set(set_for(41, "10.0.0.1/32")), 12, lower, epoch=500, applied_epoch=900)
    with pytest.raises(ValidationError, match="^generation: 39 is not newer"):
        check_generation(validate_param_set(set_for(39, "10.0.0.1/32")), 40, held, epoch=500, applied_epoch=500)
    check_generation(held, 40, held, epoch=500, applied_epoch=500)  # the same set again
    check_generation(validate_param_set(set_for(41, "10.0.0.1/32")), 40, held, epoch=None, applied_epoch=500)
    with pytest.raises(ValidationError, match="^generation"):  # by hand: generations within the held epoch
        check_generation(validate_param_set(set_for(7, "10.0.0.1/32")), 40, held, epoch=None, applied_epoch=500)


def test_sets_from_two_masters_in_any_order_never_take_an_agent_back():
    """Two controllers push to one agent in every interleaving: the old master (epoch 100) its
    generations 50..53 while it still believes it leads, the new one (epoch 200, numbering past
    what the agent told it it held) 54..56. Whatever the order, what the agent holds only moves
    forward in (epoch, generation), and it ends on the new master's last set."""
    old = [(100, g) for g in range(50, 54)]
    new = [(200, g) for g in range(54, 57)]
    orders = set()
    rng = random.Random(7)
    for _ in range(300):
        merged, a, b = [], list(old), list(new)
        while a or b:  # each master's own sets stay in their order
            merged.append((a if a and (not b or rng.random() < 0.5) else b).pop(0))
        orders.add(tuple(merged))
    for order in orders:
        held_epoch = held_generation = held_set = None
        trail = []
        for epoch, generation in order:
            param_set = validate_param_set(set_for(generation, "10.0.0.1/32", cwnd_clamp=epoch // 100))
            try:
                check_generation(param_set, held_generation, held_set, epoch=epoch, applied_epoch=held_epoch)
            except ValidationError:
                continue
            held_epoch, held_generation, held_set = epoch, generation, param_set
            trail.append((epoch, generation))
        assert trail == sorted(trail) and trail[-1] == (200, 56)
        assert all(pair in new for pair in itertools.dropwhile(lambda pair: pair[0] == 100, trail))


# -- a standby's core -------------------------------------------------------------------------


def standby_core():
    """Rank 1 of two, both switches connected and described, SLAVE of both (the switches'
    ids moving: another instance leads), at time 0."""
    core = new_core(0.0, cluster={"rank": 1, "instances": 2, "heartbeat_s": HEARTBEAT_S, "takeover_s": TAKEOVER_S})
    slave = ofproto_v1_3.OFPCR_ROLE_SLAVE
    for dpid in PORTS:
        core.switch_features(dpid, FakeDatapath(dpid), now=0.0)
        core.switch_ready(dpid)
        core.port_description(0.0, dpid, port_infos(dpid))
        core.role_reply(0.0, dpid, slave, 1000 << 8)
    return core


def learned_standby():
    """A standby core that learned the fabric and the hosts while SLAVE, checking each step."""
    core = standby_core()
    assert not core.roles.is_master(1) and not core.roles.is_master(2)
    # The master's probe out of s1:1 arrives at s2:1: a link, no sample (its time is not ours).
    master_probe = delay.probe_frame(1, 1, port_mac(1, 1), 77)
    core.packet_in(0.5, 2, 1, master_probe)
    core.packet_in(0.5, 1, 1, delay.probe_frame(2, 1, port_mac(2, 1), 78))
    assert core.topology.links == {(1, 1): (2, 1), (2, 1): (1, 1)} and core.delays.delays() == {}
    learn_hosts(core, 0.5, *HOSTS)
    actions = core.replan(10.0)
    assert actions.sends == [] and actions.generation is None and actions.deliver == []
    # Only questions reach a switch from a SLAVE: no probe, no packet-out, no flow mod.
    sends = core.probe_switch(10.0, 1).sends + core.packet_in(10.0, 1, 2, ipv4_frame(H1, H2)).sends
    assert [type(m).__name__ for _, m in sends if core.may_send(1, m)] == ["OFPEchoRequest"]
    assert core.agent_epoch(H1[0]) is None
    # Agents told it what they hold: it numbers past it.
    core.agent_holds(41)
    assert core.generation == 41
    return core


def test_a_standby_learns_the_links_from_the_masters_probes_and_sends_no_flow_mod():
    core = learned_standby()
    core.agent_holds(7)  # behind: nothing to follow
    assert core.generation == 41


def test_a_standby_that_takes_a_switch_sends_its_entries_and_its_hosts_a_greater_generation():
    core = learned_standby()
    # s1's id stands still for the whole wait (its master died): rank 1 asks to be MASTER.
    slave, master = ofproto_v1_3.OFPCR_ROLE_SLAVE, ofproto_v1_3.OFPCR_ROLE_MASTER
    wait = TAKEOVER_S + HEARTBEAT_S
    asked = [m for _, m in core.role_reply(wait, 1, slave, 1000 << 8).sends]
    assert [(m.role, m.generation_id & 0xFF) for m in asked] == [(master, 1)]
    actions = core.role_reply(wait + 0.01, 1, master, asked[0].generation_id)
    kinds = [type(m).__name__ for dpid, m in actions.sends if dpid == 1]
    # No clearing (the old master's entries carry traffic until these replace them): meter, probes,
    # table miss, then every destination entry and punt of s1 at once.
    assert kinds[:4] == ["OFPMeterMod", "OFPMeterMod", "OFPFlowMod", "OFPFlowMod"] and len(kinds) > 4
    assert all(core.may_send(1, m) for _, m in actions.sends) and actions.replan
    assert core.agent_epoch(H1[0]) == asked[0].generation_id and core.agent_epoch(H2[0]) is None  # h2 is on s2
    planned = core.replan(wait + 0.5)
    assert planned.deliver == [H1[0], H3[0]] and planned.generation.number == 42
    assert not any(dpid == 2 for dpid, _ in planned.sends)  # s2 has another master
    # With now, the authority holds only while the switch confirms the heartbeats.
    assert core.agent_epoch(H1[0], wait + TAKEOVER_S - HEARTBEAT_S) is None

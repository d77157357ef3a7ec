"""Parameter leases without a kernel: the lease's clock rules with a fake clock, the safe
state of a set worked by hand, the state file keeping a lease across a restart, and the
agent's decisions (lapse, renew, restore, restart) against a route table that only
records what it was given."""

import math

import pytest
from prometheus_client import generate_latest

from otcp.agent import core
from otcp.agent.core import Agent
from otcp.agent.lease import SAFE_INITCWND, Lease, StoredLease, renewal, safe_state, shown_lease
from otcp.agent.metrics import AgentMetrics
from otcp.agent.state import CorruptState, State
from otcp.wire.messages import RouteResult
from otcp.wire.paramset import ParamSet, validate_param_set
from otcp.wire.validation import ValidationError
from support.routes import route, set_for

# -- the lease's clock -------------------------------------------------------------------------


def test_a_lease_runs_out_unless_renewed():
    lease = Lease.granted(7, 30.0, now=100.0)
    assert lease.remaining_s(100.0) == 30.0 and lease.remaining_s(129.5) == 0.5
    assert not lease.due(129.9)
    assert lease.due(130.0) and lease.expired(130.0) and lease.remaining_s(131.0) == 0.0
    renewed = Lease.granted(7, 30.0, now=125.0)  # a renewal before the end starts it again
    assert not renewed.due(154.9) and renewed.due(155.0)


def test_a_renewal_renews_restores_or_is_ignored():
    held = Lease.granted(7, 30.0, now=0.0)
    assert renewal(held, 7, 7) == "renew"
    assert renewal(Lease(7, 30.0, 30.0, lapsed=True), 7, 7) == "restore"
    assert renewal(held, 7, 8) == "ignore"  # the controller vouches for another set: its next params decide
    assert renewal(held, None, 7) == "ignore"  # reverted: nothing to renew
    assert renewal(None, 7, 7) == "renew"  # a set without a lease gains one


def test_the_stored_lease_is_on_the_wall_clock_and_a_restart_takes_what_is_left():
    # Granted at wall 1000 / monotonic 50 for 30 s; stored at monotonic 60 (wall 1010).
    lease = Lease.granted(7, 30.0, now=50.0)
    stored = lease.stored(now=60.0, now_wall=1010.0)
    assert stored == StoredLease(lease_s=30.0, granted_at=1000.0, expires_at=1030.0, lapsed=False)
    # A new process: its monotonic clock starts anywhere; the wall clock says 12 s are left.
    resumed = Lease.resumed(7, stored, now=3.0, now_wall=1018.0)
    assert resumed.remaining_s(3.0) == 12.0 and not resumed.due(14.9) and resumed.due(15.0)
    # Down past the expiry: it has run out at once.
    assert Lease.resumed(7, stored, now=3.0, now_wall=1031.0).due(3.0)
    # The wall clock went back: never more than one lease, and nothing left when it is behind the grant.
    assert Lease.resumed(7, StoredLease(30.0, 1000.0, 1030.0, False), 0.0, 1000.0).remaining_s(0.0) == 30.0
    assert Lease.resumed(7, StoredLease(30.0, 1000.0, 1900.0, False), 0.0, 1001.0).remaining_s(0.0) == 30.0
    assert Lease.resumed(7, stored, now=3.0, now_wall=999.0).due(3.0)


# -- the safe state ----------------------------------------------------------------------------


def test_the_safe_state_drops_what_throttles_a_lone_flow_and_keeps_the_rest():
    planned = validate_param_set({"generation": 9, "routes": [
        route("10.0.0.1/32", rto_min_ms=14, initcwnd=1, cwnd_clamp=3, advmss=536, pacing_rate=125_000),
        route("10.0.0.2/32", rto_min_ms=7, initcwnd=32, cwnd_clamp=None, quickack=False),
        route("10.1.0.0/16", rto_min_ms=200, initcwnd=10, cwnd_clamp=65535, advmss=1448),
        route("10.2.0.1/32", rto_min_ms=139, initcwnd=64, cwnd_clamp=10453, congctl="otcp_scalable", ssthresh=10362,
              increase=3),
    ], "admit": 52})
    # Worked by hand: rto_min and quickack as planned; initcwnd min(planned, 10); no clamp, advmss or pacing;
    # a long path's congctl and increase kept, its ssthresh (a share of the pipe) not; no admit.
    assert safe_state(planned) == validate_param_set({"generation": 9, "routes": [
        route("10.0.0.1/32", rto_min_ms=14, initcwnd=1, cwnd_clamp=None),
        route("10.0.0.2/32", rto_min_ms=7, initcwnd=10, cwnd_clamp=None, quickack=False),
        route("10.1.0.0/16", rto_min_ms=200, initcwnd=10, cwnd_clamp=None),
        route("10.2.0.1/32", rto_min_ms=139, initcwnd=10, cwnd_clamp=None, congctl="otcp_scalable", increase=3),
    ]})
    assert SAFE_INITCWND == 10
    assert safe_state(safe_state(planned)) == safe_state(planned)


# -- the state file ----------------------------------------------------------------------------


def test_the_state_keeps_a_lease_with_its_set_and_drops_it_on_revert(tmp_path):
    path = str(tmp_path / "state.db")
    state = State(path)
    planned = validate_param_set(set_for(4, "10.0.0.1/32"))
    state.save_applied(planned, [], "controller", StoredLease(30.0, 1000.0, 1030.0, False))
    state.close()
    state = State(path)  # a restart
    assert state.applied().lease == StoredLease(30.0, 1000.0, 1030.0, False)
    state.mark_lapsed(StoredLease(30.0, 1000.0, 1030.0, True), "safe state")
    assert state.lease().lapsed and state.journal(1)[0][3] == "lapsed"
    state.save_applied(validate_param_set(set_for(5, "10.0.0.1/32")), [], "file set.json")  # by hand: no lease
    assert state.applied().lease is None
    state.save_applied(planned.model_copy(update={"generation": 6}), [], "controller",
                       StoredLease(30.0, 1000.0, 1030.0, False))
    state.mark_reverted(1)
    assert state.lease() is None
    state.db.execute("INSERT INTO lease VALUES (1, 0, 1000, 1030, 0)")
    state.db.commit()
    state.close()
    with pytest.raises(CorruptState, match="the stored lease is unreadable"):
        State(path)


# -- the agent's decisions, against a recording route table --------------------------------------


class RecordingTable:
    """Stands in for the kernel's route table: keeps the routes of the set it last applied."""

    netns = None
    last_removed = []  # it never holds a route the set does not list

    def __init__(self):
        self.routes = {}

    def apply(self, param_set):
        self.routes = {r.dst: r for r in param_set.routes}
        return [RouteResult(dst=r.dst, status="applied") for r in param_set.routes]

    def undo_last(self):
        return []

    def close(self):
        pass


class FakeClock:
    """Both of the agent's clocks, moved by the test."""

    def __init__(self, wall=1_000_000.0, monotonic=500.0):
        self.wall, self.mono = wall, monotonic

    def time(self):
        return self.wall

    def monotonic(self):
        return self.mono

    def advance(self, seconds):
        self.wall += seconds
        self.mono += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(core, "time", fake)
    return fake


def started(path, kernel=None):
    """An agent on the state at path whose kernel is a RecordingTable (a fresh one: after a reboot)."""
    agent = Agent(path)
    agent.routes.close()
    agent.routes = kernel or RecordingTable()
    return agent


PLANNED = set_for(3, "10.0.0.1/32", "10.0.0.2/32", rto_min_ms=9, initcwnd=2, cwnd_clamp=4, advmss=600,
                  pacing_rate=50_000)


def routes_of(param_set):
    return {r.dst: r for r in validate_param_set(param_set).routes}


def test_the_agent_lapses_to_the_safe_state_and_a_renewal_restores_the_plan(tmp_path, clock):
    agent = started(str(tmp_path / "state.db"))
    agent.apply(PLANNED, "controller", lease_s=30)
    clock.advance(29)
    assert agent.keep_lease() is None and agent.routes.routes == routes_of(PLANNED)
    assert agent.renew(3, 30) == "renew"
    clock.advance(29)
    assert agent.keep_lease() is None  # renewed 29 s ago
    clock.advance(1)
    results = agent.keep_lease()
    safe = safe_state(validate_param_set(PLANNED))
    assert [r.dst for r in results] == ["10.0.0.1/32", "10.0.0.2/32"]
    assert agent.routes.routes == {r.dst: r for r in safe.routes}
    assert agent.lease.lapsed and agent.keep_lease() is None  # once
    assert agent.state.applied().param_set == validate_param_set(PLANNED)  # the plan stays the stored set
    shown = shown_lease(agent.state.lease(), clock.wall)
    assert shown["safe_state"] and shown["expired"] and shown["remaining_s"] == 0
    assert agent.renew(2, 30) == "ignore" and agent.routes.routes == {r.dst: r for r in safe.routes}
    assert agent.renew(3, 30) == "restore"
    assert agent.routes.routes == routes_of(PLANNED) and not agent.lease.lapsed
    assert shown_lease(agent.state.lease(), clock.wall + 12) == {
        "lease_s": 30.0, "expires_at": clock.wall + 30, "remaining_s": 18.0, "expired": False, "safe_state": False}
    # A newer set from the controller is the normal path back too: lapse again, then a new generation.
    clock.advance(31)
    agent.keep_lease()
    agent.apply(set_for(4, "10.0.0.1/32", cwnd_clamp=5), "controller", lease_s=30)
    assert agent.routes.routes["10.0.0.1/32"].cwnd_clamp == 5 and not agent.lease.lapsed
    agent.close()


def test_a_set_applied_by_hand_has_no_lease_and_never_lapses(tmp_path, clock):
    agent = started(str(tmp_path / "state.db"))
    agent.apply(PLANNED, "file set.json")
    clock.advance(10 ** 6)
    assert agent.lease is None and agent.keep_lease() is None and agent.routes.routes == routes_of(PLANNED)
    assert agent.state.lease() is None and shown_lease(None, clock.wall) is None
    agent.close()


def test_a_restart_after_the_lease_ran_out_applies_the_safe_state_not_the_stale_values(tmp_path, clock):
    path = str(tmp_path / "state.db")
    agent = started(path)
    agent.apply(PLANNED, "controller", lease_s=30)
    agent.close()
    clock.advance(31)  # down for longer than the lease
    clock.mono = 7.0  # a new process's monotonic clock
    agent = started(path)
    results = agent.reapply_stored()
    assert len(results) == 2 and agent.lease.lapsed
    assert agent.routes.routes == {r.dst: r for r in safe_state(validate_param_set(PLANNED)).routes}
    assert agent.state.journal(1)[0][2:4] == ("lease", "lapsed")
    agent.close()
    # Restarted again, still without a controller: still the safe state.
    agent = started(path)
    agent.reapply_stored()
    assert agent.routes.routes == {r.dst: r for r in safe_state(validate_param_set(PLANNED)).routes}
    assert agent.renew(3, 30) == "restore" and agent.routes.routes == routes_of(PLANNED)
    agent.close()


def test_a_restart_within_the_lease_puts_the_plan_back_for_what_is_left_of_it(tmp_path, clock):
    path = str(tmp_path / "state.db")
    agent = started(path)
    agent.apply(PLANNED, "controller", lease_s=30)
    agent.close()
    clock.advance(10)
    agent = started(path)
    agent.reapply_stored()
    assert agent.routes.routes == routes_of(PLANNED)
    assert agent.lease.remaining_s(clock.mono) == 20  # not a fresh lease: a restart is no renewal
    clock.advance(20)
    assert agent.keep_lease() is not None and agent.lease.lapsed
    agent.close()


def test_the_lease_metrics_follow_the_running_agents_lease():
    held = {"lease": None}
    metrics = AgentMetrics()
    metrics.follow_lease(lambda: held["lease"])

    def sample(name):
        for line in generate_latest(metrics.registry).decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not exported")

    assert sample("otcp_agent_lease_expired") == 0 and math.isnan(sample("otcp_agent_lease_remaining_seconds"))
    held["lease"] = Lease.granted(3, 1e6, now=0.0)  # far ahead of this process's monotonic clock
    assert sample("otcp_agent_lease_expired") == 0 and sample("otcp_agent_lease_remaining_seconds") > 0
    held["lease"] = Lease(3, 30.0, 0.0, lapsed=True)
    assert sample("otcp_agent_lease_expired") == 1 and sample("otcp_agent_lease_remaining_seconds") == 0


def test_the_safe_state_is_a_valid_set_of_the_same_generation():
    planned = validate_param_set(PLANNED)
    safe = safe_state(planned)
    assert isinstance(safe, ParamSet) and safe.generation == planned.generation
    assert validate_param_set(safe.model_dump()) == safe


def test_sets_are_taken_in_epoch_order_across_controllers_and_the_epoch_survives_a_restart(tmp_path, clock):
    """A new master's set wins whatever its generation; the old master's sets and renewals, sent
    after, are refused or ignored; a restarted agent still refuses them."""
    path = str(tmp_path / "state.db")
    agent = started(path)
    agent.apply(set_for(40, "10.0.0.1/32", cwnd_clamp=4), "controller", lease_s=30, epoch=500)
    assert agent.held() == (500, 40)
    agent.apply(set_for(12, "10.0.0.1/32", cwnd_clamp=8), "controller", lease_s=30, epoch=900)
    assert agent.held() == (900, 12) and agent.routes.routes["10.0.0.1/32"].cwnd_clamp == 8
    with pytest.raises(ValidationError, match="^epoch: 500 is older"):
        agent.apply(set_for(41, "10.0.0.1/32", cwnd_clamp=4), "controller", lease_s=30, epoch=500)
    clock.advance(20)
    assert agent.renew(12, 30, epoch=500) == "ignore"  # the old master vouches for nothing held
    assert agent.renew(12, 30, epoch=900) == "renew"
    assert agent.state.epoch() == 900
    agent.close()
    again = started(path)
    assert again.held() == (900, 12)
    with pytest.raises(ValidationError, match="^epoch"):
        again.apply(set_for(99, "10.0.0.1/32"), "controller", lease_s=30, epoch=899)
    again.close()

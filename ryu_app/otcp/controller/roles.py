"""Which instance is MASTER of each switch: OpenFlow 1.3 role requests, with the switches as
the arbiters (docs/controller.md, "Two controllers, one fabric").

Several `otcp-controller run` instances, each with its own database, connect to every switch.
They never talk to each other: each switch holds the master election generation id, and
OpenFlow's rule does the arbitration. A MASTER request whose id is older than the switch's
(compared as a signed 64-bit difference) is refused as stale; one that is not makes its sender
MASTER and every other controller of that switch SLAVE.

- The MASTER asks again every `heartbeat_s` with its id one `STEP` higher: the switch's id
  moving is the master's heartbeat, which every other instance reads by asking for no change.
- A SLAVE takes a switch over once its id stood still for `takeover_s` (plus `heartbeat_s` per
  rank, so that two standbys do not ask at once), as seen in the switch's answers to its polls:
  it asks MASTER with an id at least two steps past the one it read, and never below its wall
  clock in milliseconds (so ids keep rising across a switch restart, which forgets the id).
  A heartbeat of the old master (one step past its own last id) is stale by then: it is SLAVE.
- A MASTER whose heartbeat the switch has not confirmed for `takeover_s - heartbeat_s`, counted
  from when the confirmed request left, stops being MASTER on its own, a heartbeat before any
  standby may take over: a master cut off from a switch steps down before another steps up. An
  instance that stepped down counts the switch's id as still only from then: one that stalled
  and runs again finds the switch taken and keeps its hands off it.
  So `takeover_s` must be longer than anything that holds the controller's loop (a plan of a
  large fabric) plus a heartbeat. An instance alone never steps down.
- On a switch that no one leads (id 0: never set), rank r asks MASTER r heartbeats after it
  connected.
- An instance that runs alone (`instances: 1`) asks nothing: it stays EQUAL, with the full
  access OpenFlow gives a controller that never asked, and is the master of every switch from
  its connection, with one epoch for the whole process: its start on the wall clock.

The id with which an instance became MASTER of a switch is its epoch there: the authority its
parameter sets to the hosts of that switch carry, which the agents order (the switch orders the
ids, so a new master's epoch is greater than any of the old one's). The low 8 bits of every id
an instance asks with are its rank, so two instances never ask with the same id.

Plain data and decisions, taking `now` (wall-clock seconds, ``time.time()``); the controller
core turns the `RoleRequest`s into OpenFlow messages and acts on the `RoleChange`s.
"""

import math
from dataclasses import dataclass, field
from typing import Literal

#: What the id of a heartbeat adds to the last one: the low 8 bits hold the rank.
STEP = 1 << 8
#: How many instances ids can tell apart (ranks 0..255).
MAX_INSTANCES = STEP
#: The ids are signed 64-bit numbers on the switches' side.
MAX_ID = 2**63 - 1
#: What a switch answers for an id never set (Open vSwitch: all ones); taken as 0.
UNSET_ID = 2**64 - 1

RoleName = Literal["master", "slave", "equal"]
Asked = Literal["master", "slave", "nochange"]


@dataclass(frozen=True)
class RoleRequest:
    """A role request to send to switch `dpid`: MASTER or SLAVE with `generation_id`, or no change
    (a question: the answer tells the switch's id)."""

    dpid: int
    role: Asked
    generation_id: int


@dataclass(frozen=True)
class RoleChange:
    """This instance became MASTER of switch `dpid` with `epoch`, or stopped being it (epoch None);
    `fresh`: the switch had no master before (its id was never set)."""

    dpid: int
    master: bool
    epoch: int | None
    fresh: bool = False


@dataclass
class RoleActions:
    """What a role decision asks for: requests to send and changes of this instance's role."""

    requests: list[RoleRequest] = field(default_factory=list)
    changes: list[RoleChange] = field(default_factory=list)


@dataclass
class SwitchRole:
    """One switch as this instance sees it."""

    connected_at: float
    role: RoleName = "equal"  # what the switch last said this connection is
    switch_id: int = 0  # the switch's generation id as last read (0: never set)
    id_changed_at: float = -math.inf  # when switch_id was last seen to change
    answered: bool = False  # whether the switch answered since the connection began
    answered_at: float = -math.inf  # when it last answered
    own_id: int = 0  # the id of this instance's last MASTER request
    epoch: int | None = None  # the id this instance became MASTER with, while it is
    master_since: float | None = None
    asked_at: float = -math.inf  # when the last request left
    master_asked_at: float = -math.inf  # when the last MASTER request left
    confirmed_at: float = -math.inf  # when the last MASTER request the switch confirmed left
    promotions: int = 0  # times this instance became MASTER of the switch on this connection
    demotions: int = 0  # and stopped being it


def clock_id(now: float, rank: int) -> int:
    """The lowest id a takeover at now asks with: the wall clock in milliseconds, rank in the low bits."""
    return (int(now * 1000) << 8) | rank


class Roles:
    """The role of this instance (rank `rank` of `instances`) at every switch it is connected to."""

    def __init__(self, rank: int = 0, instances: int = 1, heartbeat_s: float = 1.0, takeover_s: float = 4.0,
                 now: float = 0.0) -> None:
        """now: when the instance started (a lone instance's epoch)."""
        if not 1 <= instances <= MAX_INSTANCES or not 0 <= rank < instances:
            raise ValueError(f"rank {rank} of {instances} instances: ranks are 0..instances-1, "
                             f"at most {MAX_INSTANCES} instances")
        if not heartbeat_s > 0 or not takeover_s >= 3 * heartbeat_s:
            raise ValueError(f"takeover_s {takeover_s} must be at least 3 heartbeats of {heartbeat_s} s")
        self.rank = rank
        self.instances = instances
        self.heartbeat_s = heartbeat_s
        self.takeover_s = takeover_s
        self.switches: dict[int, SwitchRole] = {}
        self.alone_epoch = clock_id(now, 0)

    # -- what the rest of the controller asks -----------------------------------------

    def is_master(self, dpid: int, now: float | None = None) -> bool:
        """Whether this instance is MASTER of the switch; with now, only if the switch confirmed it
        recently enough (`epoch`)."""
        return self.epoch(dpid, now) is not None

    def epoch(self, dpid: int, now: float | None = None) -> int | None:
        """The id this instance became MASTER of the switch with, or None when it is not MASTER.
        With now, also None once the switch has not confirmed it for as long as makes the loop
        step down (`tick`): what a stalled process does first when it runs again, before its role
        loop has had a turn, must not use a role another instance may hold by then."""
        switch = self.switches.get(dpid)
        if switch is None or (now is not None and self._unconfirmed(now, switch)):
            return None
        return switch.epoch

    def failover_bound_s(self) -> float:
        """The longest a switch stays without a MASTER after its master's last heartbeat, for this
        rank: the takeover wait, one poll to see it and one heartbeat to ask and be answered."""
        return self.takeover_s + (self.rank + 2) * self.heartbeat_s

    # -- events -------------------------------------------------------------------------

    def connected(self, now: float, dpid: int) -> RoleActions:
        """A switch connected (again): ask it for its id; this connection starts EQUAL. Alone, this
        instance is its master at once."""
        self.switches[dpid] = switch = SwitchRole(connected_at=now)
        if self.instances == 1:
            switch.epoch, switch.master_since, switch.promotions = self.alone_epoch, now, 1
            return RoleActions(changes=[RoleChange(dpid, True, self.alone_epoch, fresh=True)])
        return RoleActions([self._ask(now, dpid, "nochange", 0)])

    def gone(self, dpid: int) -> RoleActions:
        """The switch disconnected: no role there any more."""
        switch = self.switches.pop(dpid, None)
        if switch is None or switch.epoch is None:
            return RoleActions()
        return RoleActions(changes=[RoleChange(dpid, False, None)])

    def answered(self, now: float, dpid: int, role: RoleName, switch_id: int) -> RoleActions:
        """The switch answered a role request: this connection's role, and its id (0 or UNSET_ID:
        never set). (An instance alone asks nothing: an answer it did not ask for changes nothing.)"""
        switch = self.switches.get(dpid)
        if switch is None or self.instances == 1:
            return RoleActions()
        fresh = switch.switch_id == 0
        switch_id = 0 if switch_id == UNSET_ID else switch_id
        if switch_id != switch.switch_id:
            switch.switch_id, switch.id_changed_at = switch_id, now
        switch.role, switch.answered, switch.answered_at = role, True, now
        actions = RoleActions()
        if role == "master" and switch_id == switch.own_id:
            switch.confirmed_at = switch.master_asked_at
            if switch.epoch is None:
                switch.epoch, switch.master_since = switch_id, now
                switch.promotions += 1
                actions.changes.append(RoleChange(dpid, True, switch_id, fresh))
        elif switch.epoch is not None and role != "master":
            actions.changes += self._step_down(now, dpid, switch)
        self._decide(now, dpid, switch, actions, answer=True)
        return actions

    def refused(self, now: float, dpid: int) -> RoleActions:
        """The switch refused a request as stale: another instance asked with a newer id. This one
        is not MASTER there (any more), and asks for the id at once."""
        switch = self.switches.get(dpid)
        if switch is None or self.instances == 1:
            return RoleActions()
        actions = RoleActions(changes=self._step_down(now, dpid, switch))
        switch.id_changed_at = now  # someone is leading
        if switch.role == "master":
            switch.role = "slave"
        actions.requests.append(self._ask(now, dpid, "nochange", 0))
        return actions

    def tick(self, now: float) -> RoleActions:
        """Heartbeats, polls, step-downs and takeovers due at now."""
        actions = RoleActions()
        if self.instances == 1:
            return actions
        for dpid, switch in self.switches.items():
            if self._unconfirmed(now, switch):
                actions.changes += self._step_down(now, dpid, switch)
            self._decide(now, dpid, switch, actions, answer=False)
        return actions

    # -- decisions ----------------------------------------------------------------------

    def _decide(self, now: float, dpid: int, switch: SwitchRole, actions: RoleActions, answer: bool) -> None:
        """The request this switch needs now, if any: a heartbeat, a takeover, SLAVE, or a poll."""
        due = now - switch.asked_at >= self.heartbeat_s
        if switch.epoch is not None:
            if due:
                actions.requests.append(self._master(now, dpid, switch, switch.own_id + STEP))
        elif not switch.answered:
            if due:
                actions.requests.append(self._ask(now, dpid, "nochange", 0))
        elif answer and self._takeover_due(now, switch):  # decided on the switch's word of a moment ago only
            taken = max(switch.switch_id + 2 * STEP, clock_id(now, self.rank))
            actions.requests.append(self._master(now, dpid, switch, (taken >> 8 << 8) | self.rank))
        elif switch.role == "equal" and (due or answer):
            actions.requests.append(self._ask(now, dpid, "slave", switch.switch_id))
        elif due:
            actions.requests.append(self._ask(now, dpid, "nochange", 0))

    def _unconfirmed(self, now: float, switch: SwitchRole) -> bool:
        """Whether this instance must step down from MASTER of a switch that has not confirmed its
        heartbeat in time (an instance alone asks nothing and is never in doubt)."""
        return (self.instances > 1 and switch.epoch is not None
                and now - switch.confirmed_at >= self.takeover_s - self.heartbeat_s)

    def _takeover_due(self, now: float, switch: SwitchRole) -> bool:
        """Whether this instance should ask to be MASTER of a switch it is not MASTER of."""
        wait = self.rank * self.heartbeat_s
        if switch.switch_id == 0:  # no one ever led it
            return now - switch.connected_at >= wait
        # Seen standing still, by answers of the switch, for the whole wait: not merely unread.
        return switch.answered_at - switch.id_changed_at >= self.takeover_s + wait

    def _master(self, now: float, dpid: int, switch: SwitchRole, generation_id: int) -> RoleRequest:
        if generation_id > MAX_ID:
            raise OverflowError(f"s{dpid}: the master election id would pass {MAX_ID}")
        switch.own_id = generation_id
        switch.master_asked_at = now
        return self._ask(now, dpid, "master", generation_id)

    def _ask(self, now: float, dpid: int, role: Asked, generation_id: int) -> RoleRequest:
        self.switches[dpid].asked_at = now
        return RoleRequest(dpid, role, generation_id)

    def _step_down(self, now: float, dpid: int, switch: SwitchRole) -> list[RoleChange]:
        """This instance is no longer MASTER of the switch (demoted, refused, or unconfirmed). It
        asks where things stand at once, and counts the switch's id still from now: another
        instance that took the switch meanwhile keeps it."""
        if switch.epoch is None:
            return []
        switch.epoch = switch.master_since = None
        switch.demotions += 1
        switch.asked_at = -math.inf
        switch.id_changed_at = now
        return [RoleChange(dpid, False, None)]

    def summary(self) -> list[dict]:
        """Every switch's role as `otcp-controller status` shows it."""
        return [{"dpid": dpid, "role": "master" if switch.epoch is not None else switch.role,
                 "epoch": switch.epoch, "master_since": switch.master_since, "switch_id": switch.switch_id,
                 "promotions": switch.promotions, "demotions": switch.demotions}
                for dpid, switch in sorted(self.switches.items())]

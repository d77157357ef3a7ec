"""Parameter leases: a set the controller pushes holds for its lease, renewed while the
controller is connected; when no controller renews it in time, the host falls back to the
set's safe state (docs/agent.md, "Leases").

Plain data and decisions that take the time, tested with a fake clock; `otcp.agent.core`
and `otcp.agent.client` carry them out. Two clocks:

- within a process a lease's deadline is on ``time.monotonic()``, so a step of the wall
  clock (NTP, an operator) neither shortens nor stretches it;
- the state file keeps the expiry on the wall clock (``time.time()``), the one clock that
  goes on across a restart or a reboot. A restarted agent takes what is left of it, never
  more than one whole lease (a wall clock that went back cannot lengthen it), and none when
  the clock is behind the moment the lease was granted (it went back: how long the agent
  was down is unknown, so it lapses).

The lease is a duration on the agent's own clocks: the two machines' clocks need not agree.
"""

from dataclasses import dataclass, replace
from typing import Any, Literal

from otcp.wire.paramset import ParamSet

#: The Linux default initial window (RFC 6928): the most the safe state lets a connection
#: start with, so a stale, larger planned window cannot burst into a port the plan no longer knows.
SAFE_INITCWND = 10


def safe_state(param_set: ParamSet) -> ParamSet:
    """What a set becomes when its lease lapses: the same destinations and generation, each
    route keeping its rto_min and quickack, its initial window at most SAFE_INITCWND, and no
    window clamp, segment size or pacing rate: the values that throttle a flow that runs
    alone on a path planned for many; and no admit, which counts on those windows. A long fat
    path keeps its congestion control and increase (they follow from its capacity and round
    trip) but not its initial ssthresh (a share of the pipe)."""
    return ParamSet(generation=param_set.generation, admit=None, routes=[
        route.model_copy(update={"initcwnd": min(route.initcwnd, SAFE_INITCWND), "cwnd_clamp": None,
                                 "advmss": None, "pacing_rate": None, "ssthresh": None})
        for route in param_set.routes])


@dataclass(frozen=True)
class StoredLease:
    """A lease as the state file keeps it: wall-clock times (``time.time()``)."""

    lease_s: float
    granted_at: float  # when the set was applied or last renewed
    expires_at: float  # granted_at + lease_s
    lapsed: bool  # whether the kernel holds the set's safe state


@dataclass(frozen=True)
class Lease:
    """The lease of the applied set inside the running agent: `deadline` on ``time.monotonic()``."""

    generation: int
    lease_s: float
    deadline: float
    lapsed: bool = False

    @classmethod
    def granted(cls, generation: int, lease_s: float, now: float) -> "Lease":
        """A lease of lease_s from now: a set applied, or renewed, with it."""
        return cls(generation, lease_s, now + lease_s)

    @classmethod
    def resumed(cls, generation: int, stored: StoredLease, now: float, now_wall: float) -> "Lease":
        """The stored lease of generation's set when the agent starts: what is left of it on the
        wall clock, at most one lease, nothing when the wall clock is behind its grant."""
        left = 0.0 if now_wall < stored.granted_at else min(stored.expires_at - now_wall, stored.lease_s)
        return cls(generation, stored.lease_s, now + max(0.0, left), stored.lapsed)

    def remaining_s(self, now: float) -> float:
        """Seconds left (0 once expired)."""
        return max(0.0, self.deadline - now)

    def expired(self, now: float) -> bool:
        """Whether no controller renewed it in time."""
        return now >= self.deadline

    def due(self, now: float) -> bool:
        """Whether the host must move to the safe state now: expired, and not there yet."""
        return self.expired(now) and not self.lapsed

    def stored(self, now: float, now_wall: float) -> StoredLease:
        """The lease as the state file keeps it, now."""
        left = self.remaining_s(now)
        return StoredLease(self.lease_s, now_wall - (self.lease_s - left), now_wall + left, self.lapsed)


def shown_lease(stored: StoredLease | None, now_wall: float) -> dict[str, Any] | None:
    """A stored lease as ``otcp-agent show --json`` reports it at now_wall (another process than
    the running agent: the wall clock, with `Lease.resumed`'s rules); None without one."""
    if stored is None:
        return None
    left = Lease.resumed(0, stored, 0.0, now_wall)
    return {"lease_s": stored.lease_s, "expires_at": stored.expires_at, "remaining_s": round(left.remaining_s(0.0), 3),
            "expired": left.expired(0.0), "safe_state": stored.lapsed}


Renewal = Literal["renew", "restore", "ignore"]


def renewal(lease: Lease | None, active_generation: int | None, generation: int) -> Renewal:
    """What a controller's renewal of `generation` does to the active applied set (its generation,
    None when none is active) and its lease: renew it; or, when the host holds its safe state,
    restore the planned values; or nothing, when the controller vouches for another generation
    (the set it sends next decides)."""
    if active_generation is None or generation != active_generation:
        return "ignore"
    return "restore" if lease is not None and lease.lapsed else "renew"


def lapsed(lease: Lease) -> Lease:
    """The lease once the host holds the safe state."""
    return replace(lease, lapsed=True)

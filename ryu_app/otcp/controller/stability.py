"""Inputs that hold still: the planner sees a change only when it is real
(docs/design.md, "Measurement").

- `StableDelays`: a link's delay is quantised up to a grid and moves only
  when the new value differs from the held one by more than a tolerance,
  so the jitter of the control path does not churn the parameters.
- `Refresh`: measured delays and round trips are taken into the plan as a
  whole at most once a period, so a fabric of many pairs, each crossing its
  tolerance now and then, still makes at most one such generation a period.
  A key measured for the first time is taken at once: a new path does not
  wait for the period.
- `HeldFlows`: a pair that stops sending still counts as a flow for a hold
  time. A new flow counts at once (more flows means smaller windows: the
  safe side); one that stopped counts until it has been idle for the hold
  time, so the pause between two rounds of a workload does not open every
  window to the single-flow value and shut it again a second later.
"""

import math
from dataclasses import dataclass, field


@dataclass
class StableDelays:
    """Delays per link, quantised up to step_s, moving only past the tolerance."""

    step_s: float
    tolerance: float
    _held: dict = field(default_factory=dict)

    def update(self, measured: dict) -> dict:
        """Take this plan's measured {link: delay_s}; return the delays to plan with."""
        stable = {}
        for link, delay in measured.items():
            quantised = math.ceil(delay / self.step_s - 1e-9) * self.step_s if self.step_s > 0 else delay
            held = self._held.get(link)
            if held is None or abs(quantised - held) > max(self.step_s, self.tolerance * held):
                self._held[link] = held = quantised
            stable[link] = held
        self._held = {link: self._held[link] for link in stable}
        return stable


@dataclass
class Refresh:
    """When measurements are taken into the plan: all at most every period_s, new keys at once."""

    period_s: float
    _taken_at: float = -math.inf

    def inputs(self, now: float, measured: dict, taken: dict) -> dict | None:
        """What to take now, given this plan's measurements and those taken before:
        all of measured when the period is up, else those taken plus the keys new
        in measured, or None when there is nothing to take."""
        if now - self._taken_at >= self.period_s:
            self._taken_at = now
            return measured
        new = {key: value for key, value in measured.items() if key not in taken}
        return {**taken, **new} if new else None


@dataclass
class HeldFlows:
    """Active pairs, each counted until hold_s after it was last seen active."""

    hold_s: float
    _last_active: dict = field(default_factory=dict)  # pair -> (time, count)

    def update(self, now: float, active: dict) -> dict:
        """Take the pairs active in this poll; return {pair: count} of pairs active or held."""
        for pair, count in active.items():
            self._last_active[pair] = (now, count)
        self._last_active = {pair: seen for pair, seen in self._last_active.items() if now - seen[0] <= self.hold_s}
        return {pair: count for pair, (_, count) in self._last_active.items()}

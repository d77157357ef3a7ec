"""Inputs that hold still: the planner sees a change only when it is real
(docs/design.md, "Measurement").

- `StableDelays`: a link's delay is quantised up to a grid and moves only
  when the new value differs from the held one by more than a tolerance,
  so the jitter of the control path does not churn the parameters.
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

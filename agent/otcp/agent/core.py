"""The agent proper: validate a parameter set, apply it, remember it.

Shared by the one-shot commands (``apply``, ``show``, ``revert``) and the
running agent, so a set pushed by the controller and a set given on the
command line go through exactly the same checks and effects.

The generation rule is `otcp.wire.paramset.check_generation`; re-applying the
applied set unchanged puts back any route that went missing.

A set the controller pushes carries the epoch of its sender (its authority over
this host): a set of an older epoch than the one held is refused, whatever its
generation, and one of a newer epoch is taken, whatever its generation
(`check_generation`). A set the controller pushes carries a lease (`otcp.agent.lease`): the running
agent renews it when the controller does, and moves the host to the set's
safe state when it runs out (`keep_lease`); the stored set keeps its lease
across a restart, and one whose lease ran out comes back as its safe state.
"""

import contextlib
import logging
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from otcp.agent import facts
from otcp.agent.enforcement import Enforcement, EnforcementError, shown_enforcement
from otcp.agent.lease import Lease, Renewal, lapsed, renewal, safe_state, shown_lease
from otcp.agent.routes import ApplyError, Route, RouteTable, describe_routes
from otcp.agent.state import Applied, CorruptState, State, StateLock, StateUnwritable, move_aside
from otcp.wire.messages import Hello, RouteResult
from otcp.wire.paramset import (
    ParamSet,
    apply_delta,
    check_generation,
    claimed_generation,
    validate_delta,
    validate_param_set,
)
from otcp.wire.validation import ValidationError

LOG = logging.getLogger("otcp.agent")


class BaseMismatch(Exception):
    """A delta whose base is not the active applied generation; the agent needs the whole set."""

    def __init__(self, generation: int, base: int, applied_generation: int | None) -> None:
        self.generation = generation
        self.base = base
        self.applied_generation = applied_generation
        held = "no active set" if applied_generation is None else f"generation {applied_generation}"
        super().__init__(f"delta to generation {generation} is against generation {base}, and this agent "
                         f"holds {held}")


class Agent:
    """One host's OTCP routes and their state file.

    With recover=True a state file that cannot be used is moved aside (and
    `moved_aside` names where) so the agent starts with an empty state;
    without it, CorruptState is raised. `enforcement` (`otcp.agent.enforcement`)
    is how the running agent enforces besides the routes; one-shot commands
    use routes alone.
    """

    def __init__(self, state_path: str, netns: str | None = None, recover: bool = False,
                 enforcement: Enforcement | None = None) -> None:
        self.state_path = state_path
        self.enforcement = enforcement or Enforcement.one_shot(netns)
        self.moved_aside: str | None = None
        try:
            self.state = self._open_state(recover)
        except BaseException:
            self.enforcement.close()  # the agent owns it from here: nothing stays loaded if it cannot start
            raise
        self.routes = RouteTable(netns)
        self.lease: Lease | None = None  # the active set's lease in this process; None: held until replaced
        self.unknown_removed: list[Route] = []  # OTCP routes the last apply or revert removed unknown to the state

    def _open_state(self, recover: bool) -> State:
        """The state file; one that cannot be used is moved aside with recover (else CorruptState).
        One that cannot be written now raises StateUnwritable: it is not corrupt."""
        try:
            return State(self.state_path)
        except CorruptState as error:
            if not recover:
                raise
            self.moved_aside = move_aside(self.state_path)
            LOG.warning("%s; moved it to %s and starting with an empty state", error, self.moved_aside)
            return State(self.state_path)

    def close(self) -> None:
        """Release the enforcement (its BPF entries go), close the route socket and the state file."""
        self.enforcement.close()
        self.routes.close()
        self.state.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def apply(self, param_set: ParamSet | dict[str, Any], source: str, lease_s: float | None = None,
              epoch: int | None = None) -> tuple[ParamSet, list[RouteResult]]:
        """Validate and apply a set (a parsed JSON object, or a ParamSet) as a whole, with a
        lease of lease_s from now (None: held until replaced), from a controller of epoch (None:
        by hand, ordered by generation within the held epoch).

        Returns the validated set and the per-route results. Raises
        ValidationError (nothing touched) or ApplyError (previous routes
        restored), both journaled, or StateUnwritable (nothing touched: the
        state is written before the kernel).
        """
        with StateLock(self.state_path), _signals_deferred():
            applied = self.state.applied()
            try:
                validated = validate_param_set(param_set)
            except ValidationError as error:
                self.state.record(claimed_generation(param_set), source, "rejected", str(error))
                raise
            return self._apply_locked(validated, applied, source, _granted(validated, lease_s), epoch)

    def apply_delta(self, delta: dict[str, Any], source: str, lease_s: float | None = None,
                    epoch: int | None = None) -> tuple[ParamSet, list[RouteResult]]:
        """Apply a delta (a parsed JSON object) against the active applied set: the
        set it makes is validated and applied as a whole, exactly like `apply`,
        with a lease of lease_s from now.

        Raises BaseMismatch (nothing touched, nothing journaled) when the
        active applied generation is not the delta's base; ValidationError or
        ApplyError as `apply` does.
        """
        with StateLock(self.state_path), _signals_deferred():
            applied = self.state.applied()
            current = applied.generation if applied is not None and applied.active else None
            try:
                checked = validate_delta(delta)
                if applied is None or current is None or checked.base != current:
                    raise BaseMismatch(checked.generation, checked.base, current)
                validated = apply_delta(applied.param_set, checked)
            except ValidationError as error:
                self.state.record(claimed_generation(delta), source, "rejected", str(error))
                raise
            return self._apply_locked(validated, applied, source, _granted(validated, lease_s), epoch)

    def _apply_locked(self, validated: ParamSet, applied: Applied | None, source: str,
                      lease: Lease | None, epoch: int | None = None) -> tuple[ParamSet, list[RouteResult]]:
        """Apply a validated set under lease (None: held until replaced) from a controller of epoch
        (None: the held epoch stays), the state lock held and signals deferred."""
        try:
            check_generation(validated, applied.generation if applied else None,
                             applied.param_set if applied else None, epoch=epoch, applied_epoch=self.state.epoch())
        except ValidationError as error:
            self.state.record(validated.generation, source, "rejected", str(error))
            raise
        known = self._known_routes(applied)
        self.state.begin(validated.generation, [route.dst for route in validated.routes])
        try:
            results, undo_enforcement = self._write_kernel(validated)
        except ApplyError as error:
            self.state.end()
            self.state.record(validated.generation, source, "failed", str(error))
            raise
        try:
            stored = None if lease is None else lease.stored(time.monotonic(), time.time())
            self.state.save_applied(validated, results, source, stored, epoch)
        except (sqlite3.Error, StateUnwritable) as error:
            undo_enforcement()
            problems = self.routes.undo_last()
            detail = f"; rollback incomplete: {'; '.join(problems)}" if problems else "; routes rolled back"
            raise ApplyError(f"could not save the state ({error}){detail}", rolled_back=not problems) from None
        self.lease = lease
        self._report_unknown(self.routes.last_removed, known, source)
        return validated, results

    def _known_routes(self, applied: Applied | None) -> set[tuple[str, int | None]]:
        """(destination, table) of every route the state says the active set put in the kernel."""
        if applied is None or not applied.active:
            return set()
        return {(result.dst, result.table) for result in self.state.applied_results() if result.status == "applied"}

    def _report_unknown(self, removed: Sequence[Route], known: set[tuple[str, int | None]], source: str) -> None:
        """Log and journal the OTCP routes just removed that the state did not know (left by another
        agent, or by hand, with proto 79), and keep them in `unknown_removed` for the command to print."""
        self.unknown_removed = [route for route in removed if (route.dst, route.table) not in known]
        if self.unknown_removed:
            detail = (f"removed {len(self.unknown_removed)} OTCP route(s) its state did not know: "
                      f"{describe_routes(self.unknown_removed)}")
            LOG.warning("%s", detail)
            self.state.record(self.state.applied_generation(), source, "removed unknown routes", detail)

    def _write_kernel(self, param_set: ParamSet) -> tuple[list[RouteResult], Callable[[], object]]:
        """Make the routes and the BPF entries those of a set, as a whole; returns the per-route
        results and what puts the previous BPF entries back. Raises ApplyError with the previous
        routes (and entries) back."""
        results = self.routes.apply(self.enforcement.carried(param_set))
        try:
            undo_enforcement = self.enforcement.apply(param_set.routes, results)
        except EnforcementError as error:
            problems = self.routes.undo_last()
            detail = f"; rollback incomplete: {'; '.join(problems)}" if problems else "; routes rolled back"
            raise ApplyError(f"{error}{detail}", rolled_back=not problems) from None
        return self.enforcement.note_unenforced(param_set.routes, results), undo_enforcement

    def keep_lease(self) -> list[RouteResult] | None:
        """Move the host to the applied set's safe state if its lease ran out and it is not there
        yet; returns the safe state's per-route results, or None when nothing was due."""
        if self.lease is None or not self.lease.due(time.monotonic()):
            return None
        return self.lapse()

    def lapse(self) -> list[RouteResult]:
        """Apply the safe state (`otcp.agent.lease.safe_state`) of the active applied set, which
        stays the stored set (a renewal or a restart brings its planned values back); records the
        lease as lapsed. Raises ApplyError (previous routes back) when the kernel refuses."""
        assert self.lease is not None  # only a set with a lease lapses
        with StateLock(self.state_path), _signals_deferred():
            applied = self.state.applied()
            if applied is None or not applied.active or applied.generation != self.lease.generation:
                self.lease = None  # reverted or replaced by hand meanwhile: not this lease's set
                return []
            self.state.check_writable()
            results, _ = self._write_kernel(safe_state(applied.param_set))
            self.lease = lapsed(self.lease)
            self.state.mark_lapsed(self.lease.stored(time.monotonic(), time.time()),
                                   f"no controller renewed the lease of {self.lease.lease_s:g} s: safe state of "
                                   f"{len(applied.param_set.routes)} route(s)")
            return results

    def renew(self, generation: int, lease_s: float, epoch: int | None = None) -> Renewal:
        """A controller's renewal of generation's lease under epoch (`otcp.agent.lease.renewal`):
        the lease starts again from now, and a host in the safe state gets the planned values back.
        A renewal of another epoch than the held one vouches for another controller's set: ignored.
        Returns what it did. Raises ApplyError as `apply` does (restoring only)."""
        with StateLock(self.state_path), _signals_deferred():
            applied = self.state.applied()
            held = self.state.epoch()
            if epoch is not None and held is not None and epoch != held:
                return "ignore"
            decision = renewal(self.lease, applied.generation if applied and applied.active else None, generation)
            if decision == "renew":
                now = time.monotonic()
                self.lease = Lease.granted(generation, lease_s, now)
                self.state.save_lease(self.lease.stored(now, time.time()))
            elif decision == "restore":
                assert applied is not None  # the decision names the active set
                self._apply_locked(applied.param_set, applied, "controller", Lease.granted(generation, lease_s,
                                                                                        time.monotonic()))
            return decision

    def finish_interrupted(self) -> str | None:
        """Undo what an interrupted apply left in the kernel; returns what it did, or None.

        The intent names the destinations the apply was writing. With an
        active stored generation, re-applying it brings back exactly its
        routes; without one, the intent's routes are removed.
        """
        with StateLock(self.state_path), _signals_deferred():
            intent = self.state.intent()
            if intent is None:
                return None
            generation, destinations = intent
            applied = self.state.applied()
            self.state.end()
            if applied is None or not applied.active:
                removed = self.routes.remove(destinations)
                self.state.record(generation, "restart", "recovered",
                                  f"interrupted apply: {len(removed)} route(s) it left removed")
                return f"removed {len(removed)} route(s) left by the interrupted apply of generation {generation}"
        results = self._reapply(applied)
        return (f"interrupted apply of generation {generation}: generation {applied.generation} "
                f"put back ({len(results)} route(s))")

    def reapply_stored(self) -> list[RouteResult] | None:
        """Put back the stored generation (after a restart): its planned values while its lease
        holds, its safe state once it ran out (`lease.lapsed` then says so). Returns its
        results, or None when nothing active is stored."""
        applied = self.state.applied()
        if applied is None or not applied.active:
            return None
        return self._reapply(applied)

    def _reapply(self, applied: Applied) -> list[RouteResult]:
        """Put back a stored active set under what is left of its stored lease."""
        now = time.monotonic()
        self.lease = None if applied.lease is None else Lease.resumed(applied.generation, applied.lease, now,
                                                                      time.time())
        if self.lease is not None and (self.lease.lapsed or self.lease.expired(now)):
            return self.lapse()
        with StateLock(self.state_path), _signals_deferred():
            return self._apply_locked(applied.param_set, applied, "restart", self.lease)[1]

    def revert(self) -> list[Route]:
        """Remove every OTCP route; the generation is kept (older sets stay refused)."""
        with StateLock(self.state_path), _signals_deferred():
            self.state.check_writable()  # a revert the state could not record would be undone at the next start
            known = self._known_routes(self.state.applied())
            removed = self.routes.revert()
            self.enforcement.remove()
            self.state.end()
            self.state.mark_reverted(len(removed))
            self._report_unknown(removed, known, "revert")
            return removed

    def show(self) -> dict[str, Any]:
        """What is applied, as `otcp-agent show` prints it: the stored generation, the routes
        read back from the kernel, and admit: the most senders this host's applications may ask
        at once (fan-in admission), None when the set gives none or its lease lapsed."""
        applied = self.state.applied()
        names = self.routes.interface_names()
        routes = [self.routes.describe(route, names) for route in self.routes.owned()]
        results = self.state.applied_results() if applied is not None and applied.active else []
        lease = shown_lease(applied.lease, time.time()) if applied is not None and applied.active else None
        admit = (applied.param_set.admit if applied is not None and applied.active
                 and not (lease is not None and lease["safe_state"]) else None)
        return {
            "generation": None if applied is None else applied.generation,
            "epoch": self.state.epoch(),
            "active": None if applied is None else applied.active,
            "applied_at": None if applied is None else applied.applied_at,
            "routes": sorted(routes, key=lambda r: (r["table"], r["dst"])),
            "skipped": [r.model_dump(exclude_unset=True) for r in results if r.status == "skipped"],
            "unenforced": [r.model_dump(exclude_unset=True) for r in results if r.status == "applied" and r.reason],
            "enforcement": shown_enforcement(self.state_path, self.routes.netns),
            "lease": lease,
            "admit": admit,
        }

    def held(self) -> tuple[int | None, int | None]:
        """(epoch, generation) of the applied set, as the agent tells every controller."""
        return self.state.epoch(), self.state.applied_generation()

    def destinations(self) -> list[str]:
        """The prefixes of the active applied set: where the round-trip meter measures."""
        applied = self.state.applied()
        if applied is None or not applied.active:
            return []
        return [route.dst for route in applied.param_set.routes]

    def hello(self) -> Hello:
        """The hello this agent sends the controller: addresses, MTU/MSS, the applied generation
        and how it enforces."""
        host = facts.hello(self.routes.netlink, self.state.applied_generation())
        return Hello.model_validate({"type": "hello", **host, "enforcement": self.enforcement.report()})


def _granted(param_set: ParamSet, lease_s: float | None) -> Lease | None:
    """The lease of a set applied now with a lease of lease_s (None: none)."""
    return None if lease_s is None else Lease.granted(param_set.generation, lease_s, time.monotonic())


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGTERM/SIGINT while routes and state change: an apply is never
    cut in half by a stop request; the signal is delivered right after."""
    blocked = {signal.SIGTERM, signal.SIGINT}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)

"""How the agent enforces a set: with the sock_ops program alongside the
routes (mode ``bpf``), or with the routes alone (mode ``routes``, and why).

Route metrics hold ``rto_min``, ``initcwnd`` and ``advmss`` from the first
connection, but the window clamp (``cwnd lock``) only through the kernel's
tcp_metrics cache, so the first connection after a change runs unclamped.
The sock_ops program (bpf/otcp_sockops.bpf.c, `otcp.bpf.sockops`) sets the
clamp, the initial window, rto_min and a pacing rate on every connection
when it is established (docs/enforcement.md). The routes stay the record
that ``ip route`` shows; the program enforces the same values for the
destinations whose route was applied.

A long fat path's route carries ``congctl`` where this host has that
congestion control (else the route goes without it, and its result says
so) and ``ssthresh lock``; with BPF, routes naming ``otcp_scalable`` also
get an entry in that algorithm's per-destination map (its initial ssthresh
and GridDT's increase, from a connection's first packet: docs/longpaths.md).
The map is opened when a set first needs it, and ``otcp_scalable``
registered by this agent (and held until it exits) where no OTCP process has
registered it. Routes, sock_ops entries and map entries are applied and
undone together.

``otcp-agent run`` enforces with BPF unless told ``--enforce routes``; when
the program cannot be built, loaded or attached, it says so once and uses
the routes alone, and its hello, its acks and ``otcp-agent show`` report
the mode and the reason. One-shot commands (``apply``, ``revert``, ``show``)
never attach the program: ``revert`` removes this namespace's entries from
it, ``show`` reads them back.
"""

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from otcp.agent.routes import ApplyError
from otcp.bpf.errors import BpfUnavailable
from otcp.bpf.objects import process_alive
from otcp.bpf.scalable import CC_NAME as SCALABLE
from otcp.bpf.scalable import RegisteredScalable, ScalableEntry, ScalableTable, register_scalable
from otcp.bpf.sockops import Enforced, SockOpsEnforcer, enforced_for, netns_cookie
from otcp.wire import messages
from otcp.wire.messages import RouteResult
from otcp.wire.paramset import ParamSet, RouteParams

LOG = logging.getLogger("otcp.agent")

Mode = Literal["bpf", "routes"]
MODES: tuple[Mode, ...] = ("bpf", "routes")
#: No namespace: the kernel numbers network namespace cookies from 1.
NO_COOKIE = 0
OFF_REASON = "BPF enforcement turned off (otcp-agent run --enforce routes)"
ONE_SHOT_REASON = "one-shot command: BPF enforcement is held by otcp-agent run"
#: The congestion controls the kernel has (global: the same in every network namespace).
AVAILABLE_CONGESTION_CONTROLS = "/proc/sys/net/ipv4/tcp_available_congestion_control"


def available_congestion_controls() -> list[str]:
    """The congestion controls a route's congctl may name on this host now."""
    try:
        with open(AVAILABLE_CONGESTION_CONTROLS) as handle:
            return handle.read().split()
    except OSError:
        return []


def scalable_entry(route: RouteParams) -> ScalableEntry | None:
    """What otcp_scalable's map holds for a route that names it and carries ssthresh or increase
    (GridDT mode where it carries an increase); None for any other route."""
    if route.congctl != SCALABLE or (route.ssthresh is None and route.increase is None):
        return None
    return ScalableEntry(increase=float(route.increase or 1), initial_ssthresh=route.ssthresh or 0,
                         griddt=route.increase is not None)


class EnforcementError(Exception):
    """The program's map refused the new set; its previous set is live."""


@dataclass(eq=False)
class Enforcement:
    """One agent's enforcement: the mode, the reason for routes alone, and
    the host's entries in the machine's sock_ops program. cookie: the network
    namespace's cookie, which keys its entries in the program's map
    (NO_COOKIE with routes alone). Made, it writes its status for ``show``
    (where status_path is given)."""

    mode: Mode
    reason: str | None
    enforcer: SockOpsEnforcer | None = None
    cookie: int = NO_COOKIE
    netns: str | None = None
    status_path: str | None = None
    # otcp_scalable's map: opened (or registered and held) when a set first names it, or why not.
    scalable: ScalableTable | None = field(default=None, init=False)
    scalable_held: RegisteredScalable | None = field(default=None, init=False)
    scalable_reason: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._write_status()

    @classmethod
    def start(cls, wanted: str, netns: str | None = None, status_path: str | None = None) -> "Enforcement":
        """What ``otcp-agent run`` uses: BPF when ``wanted`` is "bpf" and the
        program can be attached, else routes alone (said once, at warning)."""
        if wanted not in MODES:
            raise ValueError(f"enforcement mode {wanted!r} is not one of {', '.join(MODES)}")
        if wanted == "routes":
            return cls("routes", OFF_REASON, netns=netns, status_path=status_path)
        try:
            cookie = netns_cookie(netns)
            enforcer = SockOpsEnforcer.attach()
        except (BpfUnavailable, OSError) as error:
            reason = f"BPF unavailable: {error}"
            LOG.warning("enforcing with routes alone (the first connection after a change is not clamped): %s",
                        reason)
            return cls("routes", reason, netns=netns, status_path=status_path)
        LOG.info("enforcing with BPF (otcp_sockops on the cgroup-v2 root) alongside the routes")
        return cls("bpf", None, enforcer, cookie, netns, status_path)

    @classmethod
    def one_shot(cls, netns: str | None = None) -> "Enforcement":
        """What one-shot commands use: routes alone, and no status written."""
        return cls("routes", ONE_SHOT_REASON, netns=netns)

    def report(self) -> messages.Enforcement:
        """The ``enforcement`` field of the hello and of every ack."""
        reason = None
        if self.scalable is None:
            reason = (f"routes alone ({self.reason})" if self.enforcer is None else self.scalable_reason
                      or f"{SCALABLE}'s map is opened when a set first names {SCALABLE}")
        long_paths = messages.LongPathsEnforcement(congestion_controls=available_congestion_controls()[:64],
                                                   scalable_map=self.scalable is not None, reason=reason)
        return messages.Enforcement(mode=self.mode, reason=self.reason, long_paths=long_paths)

    def _scalable_table(self) -> ScalableTable | None:
        """otcp_scalable's map: the registered algorithm's, else registered by this agent (tried
        once); None with routes alone, or where it cannot be (scalable_reason says why)."""
        if self.scalable is not None or self.enforcer is None or self.scalable_reason is not None:
            return self.scalable
        try:
            self.scalable = ScalableTable.open_pinned()
        except BpfUnavailable:
            try:
                self.scalable_held = register_scalable()
                self.scalable = self.scalable_held.table
            except (BpfUnavailable, OSError) as error:
                self.scalable_reason = f"{SCALABLE} unavailable: {error}"
                LOG.warning("long fat paths get their routes' congctl and ssthresh only: %s", self.scalable_reason)
        return self.scalable

    def carried(self, param_set: ParamSet) -> ParamSet:
        """The set as this host's routes can carry it: a route whose congctl the kernel does not
        have goes without it (note_unenforced says so). A set naming otcp_scalable opens its
        map first (registering it where needed), which also makes the name available."""
        if any(route.congctl == SCALABLE for route in param_set.routes):
            self._scalable_table()
        available = set(available_congestion_controls())
        if all(route.congctl is None or route.congctl in available for route in param_set.routes):
            return param_set
        routes = [route if route.congctl is None or route.congctl in available
                  else route.model_copy(update={"congctl": None}) for route in param_set.routes]
        return param_set.model_copy(update={"routes": routes})

    def apply(self, routes: Sequence[RouteParams], results: Sequence[RouteResult]) -> Callable[[], object]:
        """Make the program's set for this host the routes that were applied
        (``results`` says which); returns a callable that puts the previous
        set back. Routes alone: nothing to do. Raises EnforcementError when
        the map refuses (the previous set stays live)."""
        if self.enforcer is None:
            return _nothing
        applied = {r.dst for r in results if r.status == "applied"}
        wanted = {route.dst: enforced_for(route) for route in routes if route.dst in applied}
        try:
            undo = self.enforcer.update(self.cookie, wanted)
        except (BpfUnavailable, ValueError) as error:
            raise EnforcementError(f"the sock_ops map refused the set: {error}") from None
        entries = {route.dst: entry for route in routes
                   if route.dst in applied and (entry := scalable_entry(route)) is not None}
        table = self._scalable_table() if entries else self.scalable
        if table is None:
            return undo
        try:
            before = {prefix: entry for prefix, (entry, _) in table.entries(self.cookie).items()}
            table.update(self.cookie, entries)
        except (BpfUnavailable, ValueError) as error:
            undo()
            raise EnforcementError(f"{SCALABLE}'s map refused the set: {error}") from None

        def undo_both() -> None:
            table.update(self.cookie, before)
            undo()

        return undo_both

    def note_unenforced(self, routes: Sequence[RouteParams], results: list[RouteResult]) -> list[RouteResult]:
        """The results, where this host cannot enforce what a route asks, saying so: an applied
        route stays "applied" (its route is) and gains a ``reason``; the ack, the state and
        ``show`` carry it. Routes alone cannot pace (a route has no pacing attribute: only the
        sock_ops program sets SO_MAX_PACING_RATE); a congctl the kernel does not have is left
        off the route; ssthresh and increase reach a connection's first packet only through
        otcp_scalable's map (a route's ssthresh lock only through the tcp_metrics cache)."""
        by_dst = {route.dst: route for route in routes}
        available = set(available_congestion_controls())
        noted = []
        for result in results:
            route = by_dst.get(result.dst)
            if route is not None and result.status == "applied":
                reasons = self._unenforced(route, available)
                if reasons:
                    result = result.model_copy(update={"reason": "; ".join(reasons)})
            noted.append(result)
        return noted

    def _unenforced(self, route: RouteParams, available: set[str]) -> list[str]:
        """What of one applied route this host does not enforce, each said with why."""
        reasons = []
        if route.pacing_rate and self.enforcer is None:
            reasons.append(f"pacing_rate {route.pacing_rate} B/s not enforced: pacing needs the sock_ops program, "
                           f"and this agent enforces with routes alone ({self.reason})")
        if route.congctl is not None and route.congctl not in available:
            reasons.append(f"congctl {route.congctl} not enforced: this host has no such congestion control "
                           f"(it has {' '.join(sorted(available)) or 'none listed'})")
        if scalable_entry(route) is not None and (self.scalable is None or route.congctl not in available):
            why = self.report().long_paths
            reasons.append(f"ssthresh {route.ssthresh} and increase {route.increase} not enforced from the first "
                           f"packet: {why.reason if why is not None and why.reason else 'no ' + SCALABLE}; "
                           "the route's ssthresh lock reaches connections through the tcp_metrics cache only")
        return reasons

    def remove(self) -> None:
        """Remove this host's entries from the program (``revert``): this
        agent's own, or, for a one-shot command, whatever the namespace's
        entries are in a program that is attached (the last user gone, it is
        detached)."""
        try:
            if self.scalable is not None:
                self.scalable.remove(self.cookie)
            elif self.enforcer is None:
                self._remove_scalable_entries()
            if self.enforcer is not None:
                self.enforcer.remove(self.cookie)
                return
            visitor = SockOpsEnforcer.open_pinned()
            if visitor is None:
                return
            try:
                visitor.remove(netns_cookie(self.netns))
            finally:
                visitor.close()
        except (BpfUnavailable, OSError) as error:
            raise ApplyError(f"could not remove the BPF entries: {error}", rolled_back=False) from None

    def _remove_scalable_entries(self) -> None:
        """A one-shot revert: remove the namespace's entries from otcp_scalable's map, if registered."""
        try:
            table = ScalableTable.open_pinned()
        except BpfUnavailable:
            return  # not registered: no entries
        try:
            table.remove(netns_cookie(self.netns))
        finally:
            table.close()

    def close(self) -> None:
        """Remove this agent's entries and release the program (the last user detaches it), and
        otcp_scalable's map (unregistering it where this agent registered it)."""
        if self.scalable is not None:
            try:
                self.scalable.remove(self.cookie)
                if self.scalable_held is not None:
                    self.scalable_held.close()
                else:
                    self.scalable.close()
            except BpfUnavailable as error:
                LOG.error("releasing %s's map: %s", SCALABLE, error)
            self.scalable = self.scalable_held = None
        if self.enforcer is not None:
            try:
                self.enforcer.close()
            except BpfUnavailable as error:
                LOG.error("releasing the sock_ops program: %s", error)
            self.enforcer = None
        if self.status_path is not None:
            try:
                os.unlink(self.status_path)
            except FileNotFoundError:
                pass
            self.status_path = None

    def _write_status(self) -> None:
        """Tell ``otcp-agent show`` (another process) how this agent enforces."""
        if self.status_path is None:
            return
        tmp = f"{self.status_path}.tmp{os.getpid()}"
        with open(tmp, "w") as out:
            json.dump({"mode": self.mode, "reason": self.reason, "pid": os.getpid()}, out)
        os.replace(tmp, self.status_path)


def status_path(state_path: str) -> str:
    """Where a running agent writes its enforcement for ``show``: next to its state."""
    return os.path.abspath(state_path) + ".enforcement.json"


def shown_enforcement(state_path: str, netns: str | None = None) -> dict[str, Any]:
    """What ``otcp-agent show`` reports: the running agent's mode and
    reason, and this namespace's entries in the program read back from the
    kernel, with the program's machine-wide counters."""
    try:
        with open(status_path(state_path)) as handle:
            status = json.load(handle)
    except (OSError, ValueError):
        status = None
    report: dict[str, Any]
    if status is None:
        report = {"mode": "routes", "reason": "no otcp-agent run is enforcing in this namespace"}
    elif not isinstance(status.get("pid"), int) or not process_alive(status["pid"]):
        report = {"mode": "routes",
                  "reason": f"the otcp-agent run that enforced (pid {status.get('pid')}) is gone; "
                            "otcp-agent revert or python -m otcp.bpf cleanup removes what it left"}
    else:
        report = {"mode": status.get("mode"), "reason": status.get("reason")}
    report["entries"] = []
    report["counters"] = None
    # One program at the cgroup-v2 root sees every socket of the machine: its counters are not per namespace.
    report["counters_scope"] = "machine"
    report.update(_shown_scalable(netns))
    try:
        visitor = SockOpsEnforcer.open_pinned()
    except BpfUnavailable as error:
        report["error"] = str(error)
        return report
    if visitor is None:
        return report
    try:
        entries = visitor.entries(netns_cookie(netns))
        report["entries"] = [_entry(prefix, enforced, applied) for prefix, (enforced, applied) in entries.items()]
        report["counters"] = visitor.counters()
    except (BpfUnavailable, OSError) as error:
        report["error"] = str(error)
    finally:
        visitor.close_maps()
    return report


def _shown_scalable(netns: str | None) -> dict[str, Any]:
    """This namespace's entries in otcp_scalable's map read back from the kernel (``scalable_entries``:
    per destination the initial ssthresh, the increase A and whether GridDT mode holds, and the
    connections that took it), none where no OTCP process registered it; ``scalable_error`` where
    they cannot be read."""
    shown: dict[str, Any] = {"scalable_entries": []}
    try:
        table = ScalableTable.open_pinned()
    except BpfUnavailable:
        return shown  # not registered: no entries
    try:
        entries = table.entries(netns_cookie(netns))
        shown["scalable_entries"] = [
            {"dst": prefix, "congctl": SCALABLE, "initial_ssthresh": entry.initial_ssthresh or None,
             "increase": entry.increase, "griddt": entry.griddt, "connections": applied}
            for prefix, (entry, applied) in entries.items()]
    except (BpfUnavailable, OSError) as error:
        shown["scalable_error"] = str(error)
    finally:
        table.close()
    return shown


def _entry(prefix: str, enforced: Enforced, applied: int) -> dict[str, Any]:
    return {"dst": prefix, "cwnd_clamp": enforced.cwnd_clamp or None, "initcwnd": enforced.initcwnd or None,
            "rto_min_us": enforced.rto_min_us or None, "pacing_rate": enforced.pacing_rate or None,
            "connections": applied}


def _nothing() -> None:
    """Undo for routes alone: nothing was written."""

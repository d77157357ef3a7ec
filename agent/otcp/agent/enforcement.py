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
from dataclasses import dataclass
from typing import Any, Literal

from otcp.agent.routes import ApplyError
from otcp.bpf.errors import BpfUnavailable
from otcp.bpf.objects import process_alive
from otcp.bpf.sockops import Enforced, SockOpsEnforcer, enforced_for, netns_cookie
from otcp.wire import messages
from otcp.wire.messages import RouteResult
from otcp.wire.paramset import RouteParams

LOG = logging.getLogger("otcp.agent")

Mode = Literal["bpf", "routes"]
MODES: tuple[Mode, ...] = ("bpf", "routes")
#: No namespace: the kernel numbers network namespace cookies from 1.
NO_COOKIE = 0
OFF_REASON = "BPF enforcement turned off (otcp-agent run --enforce routes)"
ONE_SHOT_REASON = "one-shot command: BPF enforcement is held by otcp-agent run"


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
        return messages.Enforcement(mode=self.mode, reason=self.reason)

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
        return undo

    def note_unenforced(self, routes: Sequence[RouteParams], results: list[RouteResult]) -> list[RouteResult]:
        """The results, where routes alone cannot enforce what a route asks, saying so: an
        applied route that carries a pacing rate (a route has no pacing attribute: only the
        sock_ops program sets SO_MAX_PACING_RATE) stays "applied" (its route is) and gains a
        ``reason``; the ack, the state and ``show`` carry it. With BPF, nothing to say."""
        if self.enforcer is not None:
            return results
        paced = {route.dst: route.pacing_rate for route in routes if route.pacing_rate}
        noted = []
        for result in results:
            rate = paced.get(result.dst)
            if rate is not None and result.status == "applied":
                result = result.model_copy(update={
                    "reason": f"pacing_rate {rate} B/s not enforced: pacing needs the sock_ops program, "
                              f"and this agent enforces with routes alone ({self.reason})"})
            noted.append(result)
        return noted

    def remove(self) -> None:
        """Remove this host's entries from the program (``revert``): this
        agent's own, or, for a one-shot command, whatever the namespace's
        entries are in a program that is attached (the last user gone, it is
        detached)."""
        try:
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

    def close(self) -> None:
        """Remove this agent's entries and release the program (the last user detaches it)."""
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


def _entry(prefix: str, enforced: Enforced, applied: int) -> dict[str, Any]:
    return {"dst": prefix, "cwnd_clamp": enforced.cwnd_clamp or None, "initcwnd": enforced.initcwnd or None,
            "rto_min_us": enforced.rto_min_us or None, "pacing_rate": enforced.pacing_rate or None,
            "connections": applied}


def _nothing() -> None:
    """Undo for routes alone: nothing was written."""

"""The latest parameter set published for each host: the controller's one copy.

The controller core diffs new routes against it to decide whether a host
needs a new generation, and the agent server sends from it when an agent
connects or a set changes (docs/design.md, "Parameter set").
"""

import functools
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from otcp.wire.limits import MAX_FRAME_BYTES
from otcp.wire.messages import peers_bytes, whole_set_bytes
from otcp.wire.paramset import ParamSet, RouteParams, validate_param_set


@functools.lru_cache(maxsize=1 << 16)  # every re-plan publishes for the same hosts
def host_address(address: str) -> str:
    """A host's address in canonical form; ValueError naming host_ip if it is not one."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        raise ValueError(f"host_ip: {address!r} is not an IPv4 or IPv6 address") from None


@dataclass(frozen=True)
class TooLarge:
    """A host's set that the agent channel cannot carry: one frame holds at most
    `otcp.wire.limits.MAX_FRAME_BYTES`, and this set's whole message is `message_bytes`."""

    generation: int
    routes: tuple[RouteParams, ...]
    admit: int | None
    message_bytes: int

    def describe(self, host_ip: str) -> str:
        """One line for the log and the status: which set, how large, what happens instead."""
        return (f"{host_ip}: generation {self.generation} not published: its {len(self.routes)} routes make a "
                f"{self.message_bytes}-byte message, over the agent channel's {MAX_FRAME_BYTES}-byte frame "
                "limit; the host keeps its previous set")


class Publications:
    """{host address: parameter set}, written only with valid sets that one frame carries."""

    def __init__(self, frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.peers: list[str] = []  # every planned host's address, sent along for round-trip probes
        self.frame_bytes = frame_bytes  # the largest message a set may make (the channel's frame limit)
        self.too_large: dict[str, TooLarge] = {}  # host -> its newest set, refused for its size
        self._sets: dict[str, ParamSet] = {}

    def publish(self, generation: int, routes: Mapping[str, Sequence[RouteParams]],
                admissions: Mapping[str, int] | None = None) -> dict[str, TooLarge]:
        """Make {host address: routes} the latest set of each host, as generation `generation`,
        with the host's admit from admissions ({host address: K}; a host not in it gets none).

        The routes are valid already (a `RouteParams` is validated when it is
        made); each set is checked as a whole (its host's address, the
        generation, no destination twice, admit) first, and none is kept unless all
        are valid: a bad set never reaches an agent, nor counts as published.
        ValueError names the host or the field.

        A set whose message (with every peer) is over the frame limit is not
        published: its host keeps its previous set, and the refused set is
        returned (and kept in `too_large`, so the same routes do not count as
        changed again) for the caller to report.
        """
        admissions = admissions or {}
        sets = {host_address(address): validate_param_set({"generation": generation, "routes": list(host_routes),
                                                           "admit": admissions.get(address)})
                for address, host_routes in routes.items()}
        refused: dict[str, TooLarge] = {}
        peers_size = peers_bytes(self.peers)
        for address, param_set in sets.items():
            size = whole_set_bytes(param_set, self.peers, self.frame_bytes, peers_size)
            if size > self.frame_bytes:
                refused[address] = TooLarge(generation, tuple(param_set.routes), param_set.admit, size)
            else:
                self._sets[address] = param_set
                self.too_large.pop(address, None)
        self.too_large.update(refused)
        return refused

    def latest(self, host_ip: str) -> ParamSet | None:
        """The set to send to host_ip's agent, or None."""
        return self._sets.get(host_ip)

    def changed(self, host_ip: str, routes: Sequence[RouteParams], admit: int | None = None) -> bool:
        """True if routes or admit differ from those last published for host_ip (or last refused for their size)."""
        refused = self.too_large.get(host_ip)
        if refused is not None:
            return refused.routes != tuple(routes) or refused.admit != admit
        latest = self._sets.get(host_ip)
        return latest is None or latest.routes != list(routes) or latest.admit != admit

    def forget(self, host_ip: str) -> None:
        """Drop host_ip's set, so its next routes count as changed."""
        self._sets.pop(host_ip, None)
        self.too_large.pop(host_ip, None)

"""The latest parameter set published for each host: the controller's one copy.

The controller core diffs new routes against it to decide whether a host
needs a new generation, and the agent server sends from it when an agent
connects or a set changes (docs/design.md, "Parameter set").
"""

import functools
import ipaddress
from collections.abc import Mapping, Sequence

from otcp.wire.paramset import ParamSet, RouteParams, validate_param_set


@functools.lru_cache(maxsize=1 << 16)  # every re-plan publishes for the same hosts
def host_address(address: str) -> str:
    """A host's address in canonical form; ValueError naming host_ip if it is not one."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        raise ValueError(f"host_ip: {address!r} is not an IPv4 or IPv6 address") from None


class Publications:
    """{host address: parameter set}, written only with valid sets."""

    def __init__(self) -> None:
        self.peers: list[str] = []  # every planned host's address, sent along for round-trip probes
        self._sets: dict[str, ParamSet] = {}

    def publish(self, generation: int, routes: Mapping[str, Sequence[RouteParams]]) -> None:
        """Make {host address: routes} the latest set of each host, as generation `generation`.

        The routes are valid already (a `RouteParams` is validated when it is
        made); each set is checked as a whole (its host's address, the
        generation, no destination twice) first, and none is kept unless all
        are valid: a bad set never reaches an agent, nor counts as published.
        ValueError names the host or the field.
        """
        sets = {host_address(address): validate_param_set({"generation": generation, "routes": list(host_routes)})
                for address, host_routes in routes.items()}
        self._sets.update(sets)

    def latest(self, host_ip: str) -> ParamSet | None:
        """The set to send to host_ip's agent, or None."""
        return self._sets.get(host_ip)

    def changed(self, host_ip: str, routes: Sequence[RouteParams]) -> bool:
        """True if routes differ from the routes last published for host_ip."""
        latest = self._sets.get(host_ip)
        return latest is None or latest.routes != list(routes)

    def forget(self, host_ip: str) -> None:
        """Drop host_ip's set, so its next routes count as changed."""
        self._sets.pop(host_ip, None)

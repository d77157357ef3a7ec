"""The latest parameter set published for each host: the controller's one copy.

The controller core diffs new routes against it to decide whether a host
needs a new generation, and the agent server sends from it when an agent
connects or a set changes (docs/design.md, "Parameter set").
"""

import functools
import ipaddress

from otcp.wire import paramset

#: How many checked route objects Publications keeps per host before it forgets those no set has.
CHECKED_ROUTES_PER_HOST = 256


@functools.lru_cache(maxsize=1 << 16)  # every re-plan publishes for the same hosts
def host_address(address: str) -> str:
    """A host's address in canonical form; ValueError naming host_ip if it is not one."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        raise ValueError(f"host_ip: {address!r} is not an IPv4 or IPv6 address") from None


class Publications:
    """{host ip: validated parameter set}, written only with valid sets."""

    def __init__(self) -> None:
        self.peers: list[str] = []  # every planned host's address, sent along for round-trip probes
        self._sets: dict[str, dict] = {}
        # The route objects of the sets published, by id (kept alive here): checked once, not at every publication.
        self._checked: dict[int, dict] = {}

    def publish(self, sets: dict[str, dict]) -> None:
        """Make each {host ip: parameter set} the latest for its host.

        Every set is validated first (ValueError naming the host or the
        field), and none is kept unless all are valid: a bad set never
        reaches an agent, nor counts as published. Routes the host's
        latest set has already, exactly, are not checked again, nor a route
        object checked before, in this publication or an earlier one: a
        caller never changes a route object it has published (the planner
        makes each once).
        """
        named = {host_address(ip): param_set for ip, param_set in sets.items()}
        self._sets.update(paramset.validate_param_sets(named, self._sets, self._checked))
        if len(self._checked) > CHECKED_ROUTES_PER_HOST * len(self._sets):  # most are routes of sets gone
            self._checked = {id(route): route for param_set in self._sets.values() for route in param_set["routes"]}

    def latest(self, host_ip: str) -> dict | None:
        """The set to send to host_ip's agent, or None."""
        return self._sets.get(host_ip)

    def changed(self, host_ip: str, routes: list[dict]) -> bool:
        """True if routes differ from the routes last published for host_ip."""
        latest = self._sets.get(host_ip)
        return latest is None or latest["routes"] != routes

    def forget(self, host_ip: str) -> None:
        """Drop host_ip's set, so its next routes count as changed."""
        self._sets.pop(host_ip, None)

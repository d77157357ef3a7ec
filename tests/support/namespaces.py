"""Throwaway network namespaces for the tests that need the real kernel (root).

Every namespace is `otcp-test-<pid>-<n>`, created and deleted by name here;
nothing outside it is touched. What the kernel holds is read back with
`ip route show` (iproute2, not the agent's own netlink code).
"""

import contextlib
import itertools
import os
import subprocess

from otcp.agent.routes import OTCP_PROTO

_counter = itertools.count()


class Named:
    """A namespace by name (made elsewhere): ``ip`` in it, what RacedRouteTable and AgentProcess
    need of one."""

    def __init__(self, name):
        self.name = name

    def ip(self, *args):
        return subprocess.run(["ip", "-n", self.name, *args], check=True, capture_output=True, text=True).stdout


@contextlib.contextmanager
def veth_host(name, address):
    """Namespace ``name`` with veth v0 (``address``, e.g. 10.77.0.1/16) whose peer v1 is up: a host for
    an agent under test; yields the name and deletes the namespace on leaving."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for command in (["link", "set", "lo", "up"], ["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                        ["link", "set", "v0", "up"], ["link", "set", "v1", "up"],
                        ["addr", "add", address, "dev", "v0"]):
            subprocess.run(["ip", "-n", name, *command], check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def otcp_route_lines(name):
    """The IPv4 main table's OTCP routes in namespace ``name``, as ``ip route`` prints them."""
    return Named(name).ip("route", "show", "proto", str(OTCP_PROTO))


class Namespace(Named):
    """A throwaway namespace: veth v0 (10.77.0.1/16, 2001:db8::1/64) whose
    peer v1 is up, and a gateway route 10.88.0.0/16 via 10.77.0.254."""

    def __init__(self):
        super().__init__(f"otcp-test-{os.getpid()}-{next(_counter)}")
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        try:
            for command in (
                ["link", "set", "lo", "up"],
                ["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                ["link", "set", "v0", "up"],
                ["link", "set", "v1", "up"],
                ["addr", "add", "10.77.0.1/16", "dev", "v0"],
                ["-6", "addr", "add", "2001:db8::1/64", "dev", "v0", "nodad"],
                ["route", "add", "10.88.0.0/16", "via", "10.77.0.254"],
            ):
                self.ip(*command)
        except BaseException:
            self.delete()
            raise

    def otcp_routes(self):
        """{dst: attributes} of every proto-79 route, both families, all tables."""
        found = {}
        for family in ("-4", "-6"):
            for line in self.ip(family, "route", "show", "table", "all", "proto", str(OTCP_PROTO)).splitlines():
                found.update([parse_route_line(line)])
        return found

    def other_routes(self):
        """Every route that is not OTCP's, as iproute2 prints it."""
        lines = []
        for family in ("-4", "-6"):
            lines += [line.strip() for line in self.ip(family, "route", "show", "table", "all").splitlines()
                      if f"proto {OTCP_PROTO}" not in line and "proto otcp" not in line]
        return sorted(lines)

    def delete(self):
        subprocess.run(["ip", "netns", "del", self.name], check=False)


def parse_route_line(line):
    """'10.77.0.2 dev v0 scope link ... cwnd lock 3 initcwnd 1 rto_min lock 14ms quickack 1'
    -> ('10.77.0.2/32', {'dev': 'v0', 'via': None, 'cwnd_lock': 3, ...})."""
    words = line.split()
    dst = words[0]
    if "/" not in dst:
        dst += "/128" if ":" in dst else "/32"
    attrs = {"dev": None, "via": None, "table": "main", "rto_min_ms": None, "initcwnd": None, "cwnd_lock": None,
             "quickack": None}
    i = 1
    while i < len(words):
        word = words[i]
        if word in ("dev", "via", "table"):
            attrs[word] = words[i + 1]
            i += 2
        elif word == "cwnd" and words[i + 1] == "lock":
            attrs["cwnd_lock"] = int(words[i + 2])
            i += 3
        elif word == "rto_min" and words[i + 1] == "lock":
            assert words[i + 2].endswith("ms"), line
            attrs["rto_min_ms"] = int(words[i + 2][:-2])
            i += 3
        elif word == "rto_min":  # TCP ignores an unlocked rto_min: never equal to an expected value
            attrs["rto_min_ms"] = f"unlocked {words[i + 1]}"
            i += 2
        elif word in ("initcwnd", "quickack"):
            attrs[word] = int(words[i + 1])
            i += 2
        else:
            i += 1
    return dst, attrs


def expected(dev="v0", via=None, rto_min_ms=14, initcwnd=1, cwnd_lock=3, quickack=1, table="main"):
    """What parse_route_line reads back for an OTCP route; the defaults are support.routes.route's."""
    return {"dev": dev, "via": via, "table": table, "rto_min_ms": rto_min_ms, "initcwnd": initcwnd,
            "cwnd_lock": cwnd_lock, "quickack": quickack}

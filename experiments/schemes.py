"""The schemes an incast experiment compares, each a named, documented setting.

Route-attribute schemes change every host's data route(s) in the host's
namespace (``ip route replace ... rto_min``) and, for small packets, the MTU
of the hosts' data interfaces; they put the original routes and MTU back
afterwards. The ``otcp`` scheme is driven by the real controller and agents
(see ``experiments.otcp``); ``dctcp`` needs kernel support this machine does
not have and is reported as unavailable with the reason.
"""

import dataclasses
import json
import os

# Ge et al. (seed 002) compare 750 B packets against 1500 B ones.
SMALL_PACKET_MTU = 750
# HZ=250 here: the retransmission timer ticks in 4 ms, so 1 ms acts as 4 ms.
DEFAULT_FINE_RTO_MS = 1


@dataclasses.dataclass(frozen=True)
class Scheme:
    """One named setting. kind is 'routes', 'otcp' or 'dctcp'."""

    name: str
    kind: str
    description: str
    rto_min_ms: int | None = None
    mtu: int | None = None


def catalogue(fine_rto_ms=DEFAULT_FINE_RTO_MS):
    """Every scheme the runner knows, by name, in the order they are run."""
    schemes = [
        Scheme("default", "routes", "kernel defaults: 200 ms RTOmin, initcwnd 10, delayed ACKs"),
        Scheme("fine-rto", "routes",
               f"one small static RTOmin on every host's routes (rto_min {fine_rto_ms}ms), Vasudevan et al.",
               rto_min_ms=fine_rto_ms),
        Scheme("small-packets", "routes", f"{SMALL_PACKET_MTU} B packets (host MTU) instead of 1500 B, Ge et al.",
               mtu=SMALL_PACKET_MTU),
        Scheme("small-packets-rto", "routes",
               f"{SMALL_PACKET_MTU} B packets and rto_min {fine_rto_ms}ms on every host's routes, Ge et al.",
               rto_min_ms=fine_rto_ms, mtu=SMALL_PACKET_MTU),
        Scheme("otcp", "otcp", "the OTCP controller's per-path rto_min, initcwnd, cwnd lock and quickack, "
               "applied by the real agent in every host"),
        Scheme("dctcp", "dctcp", "DCTCP with ECN marking at the switch"),
    ]
    return {scheme.name: scheme for scheme in schemes}


def dctcp_unavailable_reason():
    """Why DCTCP cannot run here, or None if the kernel has what it needs."""
    available = _read("/proc/sys/net/ipv4/tcp_available_congestion_control").split()
    missing = []
    if "dctcp" not in available:
        missing.append(f"no tcp_dctcp in the kernel (available: {' '.join(available) or 'unknown'})")
    if not _kernel_has_qdisc("red"):
        missing.append("no ECN-marking qdisc (sch_red)")
    if missing:
        return "; ".join(missing)
    return "DCTCP is available in this kernel, but the runner does not implement the dctcp scheme yet"


def _kernel_has_qdisc(kind):
    """Best effort: sch_<kind> built in or loadable, per the kernel's module lists."""
    release = os.uname().release
    for path in (f"/lib/modules/{release}/modules.builtin", f"/lib/modules/{release}/modules.dep"):
        if f"sch_{kind}.ko" in _read(path):
            return True
    return False


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


class RouteSettings:
    """A route-attribute scheme applied to a set of hosts; revert() puts back
    the routes and MTUs found before apply()."""

    def __init__(self, emulation, hosts, scheme):
        self.emulation = emulation
        self.hosts = list(hosts)
        self.scheme = scheme
        self._saved = {}

    def apply(self):
        """Save every host's routes and MTU, then set the scheme's."""
        for host in self.hosts:
            intf = data_interface(self.emulation, host)
            routes = kernel_routes(self.emulation, host, intf)
            self._saved[host] = (intf, routes, interface_mtu(self.emulation, host, intf))
            if self.scheme.mtu is not None:
                self.emulation.run(host, ["ip", "link", "set", "dev", intf, "mtu", str(self.scheme.mtu)])
            if self.scheme.rto_min_ms is not None:
                for route in routes:
                    self.emulation.run(host, route_argv(route, intf) + ["rto_min", f"{self.scheme.rto_min_ms}ms"])

    def revert(self):
        """Put back the routes and MTUs saved by apply()."""
        for host, (intf, routes, mtu) in self._saved.items():
            for route in routes:
                self.emulation.run(host, route_argv(route, intf))
            self.emulation.run(host, ["ip", "link", "set", "dev", intf, "mtu", str(mtu)])
        self._saved.clear()

    def __enter__(self):
        try:
            self.apply()
        except BaseException:
            self.revert()
            raise
        return self

    def __exit__(self, *exc):
        self.revert()


def data_interface(emulation, host):
    """The host's data-plane interface (its first, facing the fabric)."""
    return emulation.host(host).defaultIntf().name


def kernel_routes(emulation, host, intf):
    """The kernel's own routes on intf (the connected data subnet), as ip -j dicts."""
    return json.loads(emulation.run(host, ["ip", "-j", "route", "show", "dev", intf, "proto", "kernel"]) or "[]")


def interface_mtu(emulation, host, intf):
    """The MTU of intf in host's namespace."""
    return json.loads(emulation.run(host, ["ip", "-j", "link", "show", "dev", intf]))[0]["mtu"]


def route_argv(route, intf):
    """`ip route replace` arguments that recreate route (as `ip -j route show dev intf proto kernel` gives it)."""
    argv = ["ip", "route", "replace", route["dst"], "dev", intf, "proto", "kernel"]
    if route.get("scope"):
        argv += ["scope", route["scope"]]
    if route.get("prefsrc"):
        argv += ["src", route["prefsrc"]]
    return argv

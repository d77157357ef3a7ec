"""The schemes an incast experiment compares, each a named, documented setting.

Route-attribute schemes change every host's data route(s) in the host's
namespace (``ip route replace ... rto_min``) and, for small packets, the MTU
of the hosts' data interfaces; they put the original routes and MTU back
afterwards. The OTCP schemes are driven by the real controller and agents
(see ``otcp.experiments.otcp``): ``otcp`` with the published formulas and route
attributes only, ``otcp-lossless`` with the lossless formulas and the
agents' BPF enforcement, ``otcp-paced`` with these and fair-share pacing. The DCTCP schemes use the project's BPF
congestion control (``otcp_dctcp``, registered once per sweep), ECN on in
every host and the ECN marker on the bottleneck port (``EcnSettings``).
"""

import dataclasses
import json

from otcp.bpf import CC_NAME as DCTCP_CC
from otcp.bpf import attach_marker, ecn_sysctls

# Ge et al. (seed 002) compare 750 B packets against 1500 B ones.
SMALL_PACKET_MTU = 750
# HZ=250 here: the retransmission timer ticks in 4 ms, so 1 ms acts as 4 ms.
DEFAULT_FINE_RTO_MS = 1


# The burst the marker models: the binding bucket of `otcp.topo.fabrics`'s HTB class (cburst, docs/dctcp.md).
HTB_CBURST_BYTES = 1600


@dataclasses.dataclass(frozen=True)
class Scheme:
    """One named setting.

    kind: 'routes' (static route attributes and MTU, applied by the runner)
    or 'otcp' (the controller and an agent in every host). formulas: the
    controller's parameter formulas for an otcp scheme, and pacing whether
    it paces every flow at its fair share; enforce: the agents' --enforce.
    congestion_control: every workload socket's; ecn: ECN on in every host
    and CE marking at the bottleneck.
    """

    name: str
    kind: str
    description: str
    rto_min_ms: int | None = None
    mtu: int | None = None
    formulas: str = "published"
    pacing: bool = False
    enforce: str = "routes"
    congestion_control: str = "cubic"
    ecn: bool = False


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
        Scheme("dctcp", "routes", f"DCTCP ({DCTCP_CC}, BPF) senders and receivers, ECN marking at the bottleneck, "
               "kernel-default rto_min", congestion_control=DCTCP_CC, ecn=True),
        Scheme("otcp+dctcp", "otcp", "otcp's route parameters with DCTCP and ECN marking",
               congestion_control=DCTCP_CC, ecn=True),
        Scheme("otcp-lossless", "otcp", "the lossless formulas: windows of the fair share of BDP plus a queue "
               "target, per-path segment size (advmss), enforced from the first packet by the agents' BPF",
               formulas="lossless", enforce="bpf"),
        Scheme("otcp-paced", "otcp", "otcp-lossless's windows, and every connection paced at its fair share of "
               "the path's bottleneck (SO_MAX_PACING_RATE from the agents' BPF)",
               formulas="lossless", pacing=True, enforce="bpf"),
    ]
    return {scheme.name: scheme for scheme in schemes}


class Applied:
    """A setting used as a context manager: apply() on entry (reverted if it
    fails half-way), revert() on exit."""

    def apply(self):
        """Put the setting on the hosts."""
        raise NotImplementedError

    def revert(self):
        """Put back what apply() changed."""
        raise NotImplementedError

    def __enter__(self):
        try:
            self.apply()
        except BaseException:
            self.revert()
            raise
        return self

    def __exit__(self, *exc):
        self.revert()


class EcnSettings(Applied):
    """ECN for one run: tcp_ecn=1 in every host and the CE marker on the
    bottleneck's egress (the receiver's IFB, in the receiver's namespace);
    revert() puts back each host's tcp_ecn and removes the marker."""

    def __init__(self, emulation, hosts, receiver, rate_bps, buffer_bytes):
        self.emulation = emulation
        self.hosts = list(hosts)
        self.receiver = receiver
        self.rate_bps = rate_bps
        self.buffer_bytes = buffer_bytes
        self.marker = None
        self._saved = {}

    def apply(self):
        """Turn ECN on, then attach the marker (raises otcp_bpf.BpfUnavailable with the kernel's words)."""
        for host in self.hosts:
            for key, value in ecn_sysctls().items():
                self._saved.setdefault(host, {})[key] = self.emulation.run(host, ["sysctl", "-n", key]).strip()
                self.emulation.run(host, ["sysctl", "-q", "-w", f"{key}={value}"])
        receiver = self.emulation.host(self.receiver)
        self.marker = attach_marker(receiver.defaultIntf().buffer_device, self.rate_bps,
                                    limit_bytes=self.buffer_bytes, netns=f"/proc/{receiver.pid}/ns/net",
                                    burst_bytes=HTB_CBURST_BYTES)

    def revert(self):
        """Remove the marker and put back every host's sysctls."""
        if self.marker is not None:
            self.marker.close()
            self.marker = None
        for host, saved in self._saved.items():
            for key, value in saved.items():
                self.emulation.run(host, ["sysctl", "-q", "-w", f"{key}={value}"])
        self._saved.clear()



class RouteSettings(Applied):
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

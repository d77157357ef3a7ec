"""Start and tear down the Mininet network an experiment runs on.

``emulate(topo, ...)`` is a context manager around one Mininet network built
the way this machine needs it (docs/experiments.md):

- Open vSwitch switches with the userspace datapath (``datapath='user'``),
  their ports AF_PACKET sockets or, when asked and this machine can,
  AF_XDP sockets (otcp.experiments.runner.datapath: what was asked, what
  the ports really are, and why, on the Emulation),
  OpenFlow 1.3, connected to a RemoteController on 127.0.0.1:<port> (the OTCP
  controller, started separately), or to several (the instances of one
  fabric's controller: every switch connects to each of them), or, for
  loop-free topologies without a controller, standalone learning bridges;
- every link a ``otcp.topo.fabrics.BufferedLink``: HTB rate, the switch's egress
  buffer toward each host as a bfifo on an IFB in the host's namespace,
  tx checksum/TSO/GSO/GRO off on every veth;
- Open vSwitch's send socket and its ports' receive sockets (AF_XDP: their
  send buffers) raised out of reach while the network runs, and restored
  after (otcp.experiments.runner.ovs_sockets);
- cubic pinned in every host before anything opens a socket (the kernel
  default here is bbr);
- optionally an out-of-band management network (Mininet's connectToRootNS
  pattern from examples/sshd.py): a standalone bridge, one extra interface
  per host and an address in the root namespace, so agents in the hosts can
  dial a controller that listens in the root namespace.

On exit (normal, exception, Ctrl-C or SIGTERM) it stops the processes it
started, by PID, then the network, and it never touches bridges or links it
did not create: it refuses to start when a bridge or interface it would
create already exists (Mininet would otherwise delete it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Node, OVSBridge, OVSSwitch, RemoteController

from otcp.experiments.runner import ovs_sockets, placement
from otcp.experiments.runner.datapath import (
    AFXDP,
    Datapath,
    DatapathError,
    DatapathInUse,
    choose,
    log_offset,
    ovs_other_config,
    settle,
)
from otcp.topo.fabrics import BufferedIntf, BufferedLink

CONGESTION_CONTROL = "cubic"
DEFAULT_MANAGEMENT_SUBNET = "192.168.254.0/24"
MANAGEMENT_SWITCH = "otcpm0"
MANAGEMENT_ROOT = "otcpr"
# dpid of the management bridge: far from the data switches' 1, 2, ...
MANAGEMENT_DPID = "00000000000ffff0"


class DatapathPorts:
    """What UserspaceSwitch and UserspaceBridge add to Mininet's OVSSwitch: the Interface
    settings (otcp.experiments.runner.datapath.Datapath.interface_settings) every port gets in
    the ovs-vsctl command that adds it. Set port_settings after the network is built and
    before it starts."""

    port_settings: list[str] = []

    def intfOpts(self, intf: Any) -> str:
        """Mininet's Interface options for intf, and this switch's port settings."""
        options: str = super().intfOpts(intf)  # type: ignore[misc]
        if not self.port_settings:
            return options
        return (options or f" -- set Interface {intf}") + " " + " ".join(self.port_settings)


class UserspaceSwitch(DatapathPorts, OVSSwitch):
    """An OVS switch on the userspace datapath speaking OpenFlow 1.3 to a
    remote controller, forwarding nothing without one (fail mode secure).

    A named class, not mininet.util.specialClass: Mininet sets a class up
    (OVSVersion) once, on the class first instantiated, and a fresh
    specialClass per network lost it from the second network on."""

    def __init__(self, name: str, **params: Any) -> None:
        params.setdefault("datapath", "user")
        params.setdefault("protocols", "OpenFlow13")
        params.setdefault("failMode", "secure")
        OVSSwitch.__init__(self, name, **params)


class UserspaceBridge(DatapathPorts, OVSBridge):
    """A standalone learning bridge on the userspace datapath."""

    def __init__(self, name: str, **params: Any) -> None:
        params.setdefault("datapath", "user")
        OVSBridge.__init__(self, name, **params)


class OpenFlowController(RemoteController):
    """Mininet's RemoteController without its telnet check: Mininet pipes
    ``telnet`` to the port through the node's shell and decodes the answer as
    UTF-8, and the OpenFlow HELLO a controller sends first is binary (the
    check died with UnicodeDecodeError on one network in three). A plain
    TCP connect says the same."""

    def checkListening(self) -> None:
        """Raise EmulationError unless something accepts TCP connections on the port."""
        try:
            socket.create_connection((self.ip, self.port), timeout=2).close()
        except OSError as exc:
            raise EmulationError(f"no controller listens on {self.ip}:{self.port}: {exc}") from None


class EmulationError(RuntimeError):
    """The network could not be started safely (says what and why)."""


class Emulation:
    """A running network: the Mininet object plus what experiments ask of it."""

    def __init__(self, net: Any, topo: Any, management_ips: dict[str, str], management_root_ip: str | None) -> None:
        self.net = net
        self.topo = topo
        self._management_ips = management_ips
        self.management_root_ip = management_root_ip
        # None when cubic is every namespace's default, else why not.
        self.congestion_control_note: str | None = None
        # What the data switches' ports were asked to be and are (emulate sets it once they are up).
        self.datapath = DatapathInUse(Datapath(), Datapath())
        # Where the experiment's processes run, when the datapath pins them apart from the switch.
        self.placement: placement.Placement | None = None
        self._processes: list[subprocess.Popen[bytes]] = []

    def host(self, name: str) -> Any:
        """The Mininet node called name."""
        return self.net.get(name)

    @property
    def hosts(self) -> list[Any]:
        """The network's hosts (Mininet nodes)."""
        return list(self.net.hosts)

    def management_ip(self, host: str) -> str | None:
        """The host's address on the management network (None without one)."""
        return self._management_ips.get(host)

    def run(self, host: str, argv: list[str], check: bool = True) -> str:
        """Run argv in host's namespace, wait, and return its stdout.

        Raises EmulationError with the command and its stderr when it fails
        and check is true.
        """
        process = self.host(host).popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = process.communicate()
        if check and process.returncode != 0:
            raise EmulationError(f"{host}: {shlex.join(argv)} failed ({process.returncode}): "
                                 f"{err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    def start(self, host: str, argv: list[str], stdout: Any = subprocess.DEVNULL, stderr: Any = subprocess.DEVNULL,
              **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start argv in the background in host's namespace; stopped on exit."""
        process = self.host(host).popen(list(argv), stdout=stdout, stderr=stderr, **kwargs)
        self._processes.append(process)
        return process

    def stop(self, process: subprocess.Popen[bytes], timeout: float = 5) -> None:
        """Stop one process this emulation started (its process group: it runs under setsid)."""
        if process.poll() is None:
            waits: tuple[tuple[signal.Signals, float | None], ...] = ((signal.SIGTERM, timeout), (signal.SIGKILL, None))
            for sig, wait in waits:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
                try:
                    process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        with contextlib.suppress(ValueError):
            self._processes.remove(process)

    def wait_listening(self, host: str, port: int, timeout: float = 10.0) -> None:
        """Wait until a TCP socket listens on port in host's namespace."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.run(host, ["ss", "-Hltn", f"sport = :{port}"]).strip():
                return
            time.sleep(0.1)
        raise EmulationError(f"{host}: nothing listens on port {port} after {timeout:.0f} s")

    def stop_all(self) -> None:
        """Stop every process this emulation started."""
        for process in list(self._processes):
            self.stop(process)


#: What emulate(controller=...) takes: called with the root namespace's management address (None
#: without a management network), it starts a controller and returns a context manager whose value
#: is the OpenFlow port it listens on at 127.0.0.1 (otcp.experiments.runner.controller.Controller),
#: or the ports of several instances, each of which every switch connects to.
ControllerStarter = Callable[[str | None], AbstractContextManager[int | list[int]]]


def _check_topology(topo: Any, controller: ControllerStarter | None,
                    subnet: ipaddress.IPv4Network | ipaddress.IPv6Network | None) -> None:
    """Raise EmulationError for a network emulate must not start."""
    if controller is None and topo.has_loop():
        raise EmulationError("this topology has loops: standalone bridges would flood forever; "
                             "run it with a controller")
    if subnet is not None and subnet.num_addresses - 3 < len(topo.hosts()):
        raise EmulationError(f"management subnet {subnet} is too small for {len(topo.hosts())} hosts")


@contextlib.contextmanager
def emulate(topo: Any, controller: ControllerStarter | None = None, management: bool = False,
            management_subnet: str = DEFAULT_MANAGEMENT_SUBNET, connect_timeout: float = 30,
            log_level: str = "warning", raise_ovs_buffers: bool = True,
            datapath: Datapath | None = None) -> Iterator[Emulation]:
    """Build and start topo; yield an Emulation; tear everything down on exit.

    controller: None for standalone learning bridges (only for loop-free
    topologies), or a ControllerStarter: it is called once the root
    namespace's management address exists, and the controller is stopped
    after the network.
    management: add the management network (see the module docstring).
    raise_ovs_buffers: raise OVS's packet sockets while the network runs
    (otcp.experiments.runner.ovs_sockets; False only to measure what happens without).
    datapath: what the data switches' ports should be (default AF_PACKET); where this
    machine or Open vSwitch refuses it, they are AF_PACKET and emulate says why on stderr
    (Emulation.datapath records both). A pinned datapath runs this process and all it starts
    apart from the switch's forwarding threads once the ports are up (runner.placement;
    Emulation.placement says where, or why not). A datapath's settings of the whole
    ovs-vswitchd (a PMD sleep, an output batch wait: Datapath.ovs_settings) hold from when
    the ports are up until after the network (runner.datapath.ovs_other_config).
    """
    setLogLevel(log_level)
    subnet = ipaddress.ip_network(management_subnet) if management else None
    _check_topology(topo, controller, subnet)
    _refuse_existing(topo, management)
    in_use = choose(datapath or Datapath(), topo)
    switch = UserspaceSwitch if controller is not None else UserspaceBridge
    net = Mininet(topo=topo, switch=switch, link=BufferedLink, controller=None, build=False,
                  autoSetMacs=False, autoStaticArp=False, waitConnected=False)
    emulation = None
    root = None
    previous = _terminate_as_interrupt()
    stack = contextlib.ExitStack()
    try:
        net.build()
        data_switches = list(net.switches)
        for data_switch in data_switches:
            data_switch.port_settings = in_use.used.interface_settings()
        management_ips: dict[str, str] = {}
        root_ip = None
        if subnet is not None:
            root, management_ips, root_ip = _add_management(net, subnet)
        ports: list[int] = []
        if controller is not None:
            started = stack.enter_context(controller(root_ip))
            ports = [started] if isinstance(started, int) else list(started)
            for number, port in enumerate(ports):
                net.addController(f"c{number}", controller=OpenFlowController, ip="127.0.0.1", port=port)
        offset = log_offset()
        net.start()
        in_use = _settle_datapath(in_use, data_switches, offset)
        if controller is not None:
            _wait_connected(net, ports, connect_timeout)
        _prepare_switches(net, stack, raise_ovs_buffers, in_use, data_switches, (management_ips, root_ip))
        problems = [_pin_congestion_control(host) for host in net.hosts]
        emulation = Emulation(net, topo, management_ips, root_ip)
        emulation.datapath = in_use
        if in_use.used.ovs_settings():
            stack.enter_context(ovs_other_config(in_use.used.ovs_settings()))
        if in_use.used.pinned:
            emulation.placement = placement.plan(os.sched_getaffinity(0),
                                                 placement.pmd_cores() if in_use.used.kind == AFXDP else [])
            stack.enter_context(placement.pinned(emulation.placement))
        emulation.congestion_control_note = next((p for p in problems if p), None)
        yield emulation
    finally:
        # Teardown must finish even if Ctrl-C is pressed again.
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if emulation is not None:
                emulation.stop_all()
            _stop_network(net)
            if root is not None:
                root.terminate()
            stack.close()
        finally:
            signal.signal(signal.SIGINT, interrupt)
            signal.signal(signal.SIGTERM, previous)


def _settle_datapath(in_use: DatapathInUse, switches: list[Any], offset: int) -> DatapathInUse:
    """The data switches' ports checked against in_use (datapath.settle); a fallback said on stderr."""
    ports = [intf.name for switch in switches for intf in switch.intfList() if intf.name != "lo"]
    try:
        settled = settle(in_use, ports, offset)
    except DatapathError as exc:
        raise EmulationError(str(exc)) from None
    if settled.note:
        print(f"otcp: {settled.note}", file=sys.stderr)
    return settled


def _prepare_switches(net: Any, stack: contextlib.ExitStack, raise_ovs_buffers: bool, in_use: DatapathInUse,
                      data_switches: list[Any], management: tuple[dict[str, str], str | None]) -> None:
    """What the started switches need before traffic: their ports' shaping again, and OVS's
    packet sockets raised (until stack closes): with AF_XDP data ports, their send buffers,
    and the AF_PACKET sockets of the management bridge's ports, where there is one."""
    # OVS's userspace datapath resets a port's qdisc when it adds the port:
    # the rate and buffer of switch ports go on after the switches start.
    for switch in net.switches:
        for intf in switch.intfList():
            if isinstance(intf, BufferedIntf):
                intf.reshape()
    # OVS's packet sockets must never be where a packet is lost (otcp.experiments.runner.ovs_sockets).
    if not raise_ovs_buffers:
        return
    afpacket_switches = [s for s in net.switches if not (in_use.used.is_xdp and s in data_switches)]
    ports = [intf.name for switch in afpacket_switches for intf in switch.intfList() if intf.name != "lo"]
    if ports:
        management_ips, root_ip = management
        # With AF_XDP data ports only the management bridge sends through the AF_PACKET socket.
        addressed = [h for h in net.hosts if h.IP()]
        pings = [(net.get(h), root_ip) for h in management_ips] if in_use.used.is_xdp else \
            [(addressed[0], addressed[1].IP())] if len(addressed) >= 2 else []
        _wait_send_socket(pings[:1])
        stack.enter_context(ovs_sockets.raised_buffers(ports))
    if in_use.used.is_xdp:
        stack.enter_context(ovs_sockets.raised_xdp_send_buffers())


def delay_report(topo: Any) -> tuple[bool, str | None]:
    """Whether the delays topo asks for are enforced, as (enforced, message).

    Call after the network is built: the first link that asks for a delay
    finds out whether the kernel has sch_netem.
    """
    asked = any(info.get("delay_us") for _, _, info in topo.links(withInfo=True))
    if not asked:
        return False, None
    if BufferedIntf.delay_enforced():
        return True, None
    return False, "link delay asked for but not enforced: this kernel has no sch_netem"


def _stop_network(net: Any) -> None:
    """net.stop(), and if Mininet fails halfway, take down by hand what this
    network created: its links, its bridges (by name: _refuse_existing made
    sure no one else's have those names) and its host shells."""
    try:
        net.stop()
        return
    except Exception as exc:  # noqa: BLE001 - whatever broke, the rest must still go
        print(f"otcp: Mininet's teardown failed ({exc}); removing the network by hand", file=sys.stderr)
    for link in net.links:
        with contextlib.suppress(Exception):
            link.delete()
    for switch in net.switches:
        subprocess.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", switch.name], check=False)
        with contextlib.suppress(Exception):
            switch.terminate()
    for host in net.hosts:
        with contextlib.suppress(Exception):
            host.terminate()


def _refuse_existing(topo: Any, management: bool) -> None:
    """Raise if a bridge or root-namespace interface we would create exists.

    Mininet deletes an existing bridge or interface of the same name when it
    creates its own; that must never hit another user's network.
    """
    switches = set(topo.switches()) | ({MANAGEMENT_SWITCH} if management else set())
    prefixes = tuple(f"{name}-" for name in switches | ({MANAGEMENT_ROOT} if management else set()))
    try:
        bridges = set(subprocess.run(["ovs-vsctl", "--timeout=10", "list-br"], capture_output=True, text=True,
                                     check=True).stdout.split())
    except (OSError, subprocess.CalledProcessError) as exc:
        raise EmulationError(f"Open vSwitch is not usable (ovs-vsctl list-br: {exc}); start it first") from None
    taken = sorted(switches & bridges)
    if taken:
        raise EmulationError(f"OVS bridge(s) {', '.join(taken)} already exist and are not ours; "
                             "another Mininet is running or was left behind")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in links.splitlines() if ":" in line]
    clashes = sorted(n for n in names if n.startswith(prefixes))
    if clashes:
        raise EmulationError(f"interface(s) {', '.join(clashes[:5])} already exist in the root namespace and are "
                             "not ours; another Mininet is running or was left behind")


def _add_management(net: Any, subnet: ipaddress.IPv4Network | ipaddress.IPv6Network) -> tuple[Any, dict[str, str], str]:
    """Add the management bridge, the root-namespace node and one link per host."""
    addresses = subnet.hosts()
    root_ip = str(next(addresses))
    # batch=True as Mininet.build() does for the topology's switches: started
    # one by one, the bridge's ovs-vsctl line goes through the node's pty,
    # whose 4 KiB line limit cuts it (silently) past about 40 hosts.
    bridge = net.addSwitch(MANAGEMENT_SWITCH, cls=UserspaceBridge, dpid=MANAGEMENT_DPID, batch=True)
    root = Node(MANAGEMENT_ROOT, inNamespace=False)
    link = net.addLink(root, bridge, cls=BufferedLink)
    root.setIP(f"{root_ip}/{subnet.prefixlen}", intf=link.intf1)
    management_ips = {}
    for host in list(net.hosts):
        link = net.addLink(host, bridge, cls=BufferedLink)
        address = str(next(addresses))
        host.setIP(f"{address}/{subnet.prefixlen}", intf=link.intf1)
        management_ips[host.name] = address
    return root, management_ips, root_ip


def _wait_send_socket(pings: list[tuple[Any, str | None]], timeout: float = 10.0) -> None:
    """Make sure ovs-vswitchd has opened its send socket (it does on its
    first send): a ping (node, address) through an AF_PACKET port makes the switch send."""
    deadline = time.monotonic() + timeout
    while not any(s.port is None for s in ovs_sockets.packet_sockets()):
        if time.monotonic() > deadline:
            raise EmulationError(f"ovs-vswitchd opened no send socket within {timeout:.0f} s")
        if pings and pings[0][1]:
            node, address = pings[0]
            node.cmd(shlex.join(["ping", "-c", "1", "-W", "1", str(address)]))
        else:
            time.sleep(0.2)


def _wait_connected(net: Any, ports: list[int], timeout: float, interval: float = 0.5) -> None:
    """Wait until every data switch is connected to every controller on 127.0.0.1:port of ports."""
    switches = [s for s in net.switches if s.name != MANAGEMENT_SWITCH]
    deadline = time.monotonic() + timeout
    while not all(_connections(s) >= len(ports) for s in switches):
        if time.monotonic() > deadline:
            raise EmulationError(f"switches did not connect to the controller(s) on 127.0.0.1:"
                                 f"{', '.join(map(str, ports))} within {timeout:g} s")
        time.sleep(interval)


def _connections(switch: Any) -> int:
    """How many of its controllers an OVS switch is connected to now (as Mininet's
    OVSSwitch.connected asks, for each of them)."""
    return sum("true" in switch.vsctl("-- get Controller", uuid, "is_connected")
               for uuid in switch.controllerUUIDs(update=True))


def _pin_congestion_control(host: Any) -> str | None:
    """Make cubic host's namespace default; return None, or why it could not.

    A namespace other than the initial one may only choose an algorithm in
    net.ipv4.tcp_allowed_congestion_control (a machine-wide setting this
    runner leaves alone). Where cubic is not allowed, the programs the runner
    starts in hosts set cubic on each socket (TCP_CONGESTION; root may) instead.
    """
    key = "net.ipv4.tcp_congestion_control"
    output = host.cmd(shlex.join(["sysctl", "-q", "-w", f"{key}={CONGESTION_CONTROL}"]) + " 2>&1").strip()
    actual = host.cmd(shlex.join(["sysctl", "-n", key])).strip()
    if actual == CONGESTION_CONTROL:
        return None
    allowed = host.cmd(shlex.join(["sysctl", "-n", "net.ipv4.tcp_allowed_congestion_control"])).strip()
    return (f"could not make {CONGESTION_CONTROL} the namespace default ({output or 'sysctl refused'}; "
            f"net.ipv4.tcp_allowed_congestion_control is '{allowed}', default stays {actual}); "
            f"the experiment programs set {CONGESTION_CONTROL} per socket instead")


def _terminate_as_interrupt() -> Any:
    """Make SIGTERM unwind like Ctrl-C so the finally clause tears down; return the old handler."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_DFL, None):
        previous = signal.SIG_DFL
    signal.signal(signal.SIGTERM, handler)
    return previous

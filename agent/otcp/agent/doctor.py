"""``otcp-agent doctor``: what this host can enforce of what the controller plans, and why not.

The controller plans, per destination, a minimum RTO, an initial window, a
window clamp, an advertised MSS, quick acks and a pacing rate. The agent
enforces them as route metrics (``rto_min lock``, ``initcwnd``, ``cwnd lock``,
``advmss``, ``quickack``) and, with ``otcp-agent run --enforce bpf``, with the
sock_ops program at the cgroup-v2 root (the clamp and initial window from the
first connection, rto_min, and the pacing rate, which no route carries).

The checks gather facts (`gather`, which touches the machine) and decide
from them (the ``*_findings`` functions, pure: typed facts in, `Finding` out),
so every decision is tested on given facts. A finding is ``ok``, a ``note``
(worth knowing, enforcement is whole) or ``short``: enforcement would fall
short of the plan. The exit status is 1 when any finding is short.

What the checks leave behind: nothing. The route check writes its routes in
a scratch namespace it creates and deletes; the sock_ops check attaches
otcp_sockops through `otcp.bpf.sockops` (pinned under ``/sys/fs/bpf/otcp``)
and releases it before returning, unless a running agent holds it already,
which it then only reads; the struct_ops check registers otcp_dctcp and
unregisters it. Nothing is mounted: a missing BPF filesystem or cgroup-v2
mount is reported, and the sock_ops check is then not tried.
"""

import ipaddress
import json
import os
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pyroute2.netlink import NLM_F_CREATE, NLM_F_EXCL
from pyroute2.netlink.rtnl import RTM_NEWROUTE

from otcp.agent.netlink import NetlinkError
from otcp.agent.routes import (
    OTCP_PROTO,
    RT_SCOPE_UNIVERSE,
    RT_TABLE_MAIN,
    Route,
    RouteTable,
    proto_name,
    route_from_message,
    table_name,
)
from otcp.agent.tcp_metrics import TcpMetrics
from otcp.bpf import dctcp, sockops
from otcp.bpf.errors import BpfUnavailable, run
from otcp.bpf.machine import BPF_FS_MAGIC, BPFFS, cgroup2_mounted, fs_type, outer
from otcp.wire.paramset import RouteParams

Status = Literal["ok", "note", "short"]
Outcome = Literal["works", "fails", "untried"]

SYSCTL_ROOT = Path("/proc/sys")
BTF_PATH = Path("/sys/kernel/btf/vmlinux")
#: The kernel's own minimum RTO, TCP_RTO_MIN (HZ/5), which net.ipv4.tcp_rto_min_us defaults to.
DEFAULT_RTO_MIN_US = 200_000
#: The route metrics the agent writes: (what ``ip route`` calls it, the `Route` field).
ROUTE_METRICS = (("rto_min lock", "rto_min_ms"), ("initcwnd", "initcwnd"), ("cwnd lock", "cwnd_clamp"),
                 ("advmss", "advmss"), ("quickack", "quickack"))
SCRATCH_DEVICE = "otcpd0"
#: The scratch namespace's addresses and the test route through them (documentation prefixes).
SCRATCH_ROUTES = (
    (socket.AF_INET, "192.0.2.1/24", "192.0.2.2", "198.51.100.7/32"),
    (socket.AF_INET6, "2001:db8:d0c::1/64", "2001:db8:d0c::2", "2001:db8:d0c:1::7/128"),
)


@dataclass(frozen=True)
class Finding:
    """One thing doctor found: which check, how it stands, what it found and what that means."""

    check: str
    status: Status
    summary: str
    detail: str = ""


@dataclass(frozen=True)
class Probe:
    """What trying something on the machine gave: it works, it fails, or it was not tried (and why)."""

    outcome: Outcome
    detail: str


@dataclass(frozen=True)
class RouteReadback:
    """One family's test route: the route the agent would write, and what the kernel gave back
    (None, with ``refused``, when it refused the route)."""

    family: str
    written: Route
    read: Route | None
    refused: str = ""


@dataclass(frozen=True)
class CgroupProgram:
    """A BPF program attached to the cgroup-v2 root, as the kernel's query lists it."""

    id: int
    name: str
    attach_type: str
    attach_flags: str = ""


@dataclass(frozen=True)
class ForeignRoute:
    """A route of another protocol that carries TCP metrics OTCP also sets."""

    dst: str
    table: int
    proto: int
    metrics: tuple[tuple[str, int | bool], ...]  # (ip route's name, value), only those OTCP sets too


@dataclass(frozen=True)
class SkippedDestination:
    """A destination of the set that apply would skip, with the planner's reason."""

    dst: str
    reason: str


@dataclass(frozen=True)
class Facts:
    """Everything the decisions look at, as gathered on a host (or given by a test)."""

    kernel: str
    btf: bool
    bpffs: str | None  # where the BPF filesystem is mounted, None if not
    cgroup2: str | None  # where the cgroup-v2 root is mounted, None if not
    sockops: Probe
    struct_ops: Probe
    routes: tuple[RouteReadback, ...] | Probe  # per family, or why the scratch namespace could not be made
    tcp_metrics: Probe
    rto_min_us: int | None  # net.ipv4.tcp_rto_min_us, None where the kernel has no such sysctl
    no_metrics_save: int | None  # net.ipv4.tcp_no_metrics_save
    other_sockops: Probe | tuple[CgroupProgram, ...]  # the listing, or why it could not be read
    foreign_routes: tuple[ForeignRoute, ...]
    destinations: tuple[str, ...] = ()  # the set's destinations the plan was made for
    skipped: tuple[SkippedDestination, ...] = ()
    mounts_unreadable: str | None = None  # why the machine's mount table could not be read (cgroup2 unknown)


@dataclass(frozen=True)
class Report:
    """Doctor's answer: every finding, and where it looked."""

    netns: str | None
    findings: tuple[Finding, ...]
    destinations: tuple[str, ...] = field(default=())

    @property
    def short(self) -> list[Finding]:
        """The findings where enforcement falls short of the plan."""
        return [finding for finding in self.findings if finding.status == "short"]

    def exit_status(self) -> int:
        """0 when this host enforces everything the controller plans, 1 when any finding is short."""
        return 1 if self.short else 0

    def as_json(self) -> dict[str, Any]:
        """The report as ``--json`` prints it."""
        return {"netns": self.netns, "destinations": list(self.destinations),
                "findings": [asdict(finding) for finding in self.findings],
                "short": [finding.check for finding in self.short], "exit_status": self.exit_status()}


# -- decisions: facts in, findings out -----------------------------------------


def findings(facts: Facts) -> list[Finding]:
    """Every finding for a host's facts, in the order doctor prints them."""
    bpf_works = facts.sockops.outcome == "works"
    return [
        Finding("kernel", "ok", f"Linux {facts.kernel}"),
        btf_finding(facts.btf),
        mount_finding("bpffs", facts.bpffs, "the BPF filesystem", f"otcp-agent run mounts it at {BPFFS}"),
        mount_finding("cgroup2", facts.cgroup2, "the cgroup-v2 root",
                      "otcp-agent run mounts the hierarchy under /run/otcp-bpf", facts.mounts_unreadable),
        sockops_finding(facts.sockops),
        struct_ops_finding(facts.struct_ops),
        *route_metric_findings(facts.routes),
        tcp_metrics_finding(facts.tcp_metrics, bpf_works),
        pacing_finding(bpf_works),
        rto_min_sysctl_finding(facts.rto_min_us),
        no_metrics_save_finding(facts.no_metrics_save, bpf_works),
        *other_sockops_findings(facts.other_sockops),
        *foreign_route_findings(facts.foreign_routes, facts.destinations),
        *skipped_findings(facts.skipped),
    ]


def btf_finding(present: bool) -> Finding:
    """The kernel's BTF: the sock_ops program is compiled against it and loaded with CO-RE."""
    if present:
        return Finding("btf", "ok", f"{BTF_PATH} present")
    return Finding("btf", "short", f"{BTF_PATH} missing",
                   "the sock_ops program is built against the kernel's BTF and cannot load without it: "
                   "the agent enforces with routes alone (no pacing, the first connection unclamped)")


def mount_finding(check: str, where: str | None, what: str, remedy: str, unreadable: str | None = None) -> Finding:
    """A mount the sock_ops program needs: where it is, that it is missing, or that the machine's mount
    table could not be read (unreadable: why) (not short by itself: the agent mounts it; the sock_ops
    check then says what was not tried)."""
    if where is not None:
        return Finding(check, "ok", f"{what} mounted at {where}")
    if unreadable is not None:
        return Finding(check, "note", f"{what} not looked for: {unreadable}",
                       "doctor reads the machine's mount table from its mount namespace, which needs root "
                       "(CAP_SYS_ADMIN)")
    return Finding(check, "note", f"{what} is not mounted", f"{remedy}; doctor mounts nothing")


def sockops_finding(probe: Probe) -> Finding:
    """Whether the sock_ops program attaches at the cgroup-v2 root; without it, routes alone."""
    if probe.outcome == "works":
        return Finding("sockops", "ok", probe.detail)
    lost = ("the agent enforces with routes alone: no pacing rate, and the first connection to a "
            "destination after a change runs without the window clamp")
    verb = "cannot attach" if probe.outcome == "fails" else "not tried"
    return Finding("sockops", "short", f"sock_ops program {verb}: {probe.detail}", lost)


def struct_ops_finding(probe: Probe) -> Finding:
    """Whether struct_ops congestion controls register (the experiments' otcp-dctcp scheme; the
    agent's enforcement does not use them, so this is never short)."""
    if probe.outcome == "works":
        return Finding("struct_ops", "ok", probe.detail)
    verb = "not registered" if probe.outcome == "fails" else "not tried"
    return Finding("struct_ops", "note", f"{dctcp.CC_NAME} {verb}: {probe.detail}",
                   "the agent does not need it; the experiments' otcp-dctcp scheme is unavailable here")


def route_metric_findings(readbacks: Sequence[RouteReadback] | Probe) -> list[Finding]:
    """Per family and metric: whether the kernel keeps what the agent writes (a metric read back
    with another value, or unlocked where TCP needs the lock, is short; so is a check not made)."""
    if isinstance(readbacks, Probe):
        return [Finding("route", "short", f"route metrics not checked: {readbacks.detail}",
                        "doctor could not make its scratch namespace (it needs root)")]
    found = []
    for readback in readbacks:
        check = f"route {readback.family}"
        if readback.read is None:
            found.append(Finding(check, "short", f"the kernel refused the agent's route: {readback.refused}",
                                 "no route metric can be enforced in this family"))
            continue
        for name, attribute in ROUTE_METRICS:
            wanted, got = getattr(readback.written, attribute), getattr(readback.read, attribute)
            if wanted == got:
                found.append(Finding(check, "ok", f"{name} {_shown(wanted)} written and read back"))
            else:
                found.append(Finding(check, "short", f"{name} {_shown(wanted)} written, {_shown(got)} read back",
                                     "the kernel does not keep this metric as TCP needs it"))
    return found


def tcp_metrics_finding(probe: Probe, bpf_works: bool) -> Finding:
    """The TCP metrics cache, through which a route's ``cwnd lock`` reaches connections and which
    the agent clears after a change."""
    if probe.outcome == "works":
        return Finding("tcp_metrics", "ok", probe.detail)
    return Finding("tcp_metrics", "note" if bpf_works else "short", f"the TCP metrics cache: {probe.detail}",
                   "a route's cwnd lock reaches connections only through it, and the agent clears stale "
                   "entries through it" + ("; the sock_ops program clamps anyway" if bpf_works else ""))


def pacing_finding(bpf_works: bool) -> Finding:
    """Pacing: no route attribute; only the sock_ops program sets it (short with it, as sockops says)."""
    how = "enforced by the sock_ops program alone (SO_MAX_PACING_RATE); a route has no pacing attribute"
    return Finding("pacing", "ok" if bpf_works else "note",
                   how if bpf_works else f"not enforced: {how}, and it cannot attach (see sockops)")


def rto_min_sysctl_finding(value_us: int | None) -> Finding:
    """net.ipv4.tcp_rto_min_us: the namespace's default minimum RTO. A route's locked rto_min
    overrides TCP_BPF_RTO_MIN (the sock_ops program's), which overrides the sysctl; so a set value is
    overridden wherever OTCP has a route, and rules every other destination."""
    name = "net.ipv4.tcp_rto_min_us"
    if value_us is None:
        return Finding("tcp_rto_min_us", "ok", f"{name} absent on this kernel")
    if value_us == DEFAULT_RTO_MIN_US:
        return Finding("tcp_rto_min_us", "ok", f"{name} = {value_us} (the kernel's default)")
    return Finding("tcp_rto_min_us", "note", f"{name} = {value_us}, not the default {DEFAULT_RTO_MIN_US}",
                   "OTCP's locked route rto_min overrides it (and so does the sock_ops program's "
                   "TCP_BPF_RTO_MIN); it still sets the minimum RTO toward every destination OTCP does not "
                   "route, and toward those apply skips")


def no_metrics_save_finding(value: int | None, bpf_works: bool) -> Finding:
    """net.ipv4.tcp_no_metrics_save: set, the TCP metrics cache keeps no entries, so a route's
    ``cwnd lock`` never reaches a connection; the sock_ops program clamps regardless."""
    name = "net.ipv4.tcp_no_metrics_save"
    if not value:
        return Finding("tcp_no_metrics_save", "ok", f"{name} = {0 if value is None else value}")
    return Finding("tcp_no_metrics_save", "note" if bpf_works else "short", f"{name} = {value}",
                   "the TCP metrics cache keeps no entry, so no connection takes a route's cwnd lock"
                   + ("; the sock_ops program clamps every connection instead" if bpf_works
                      else ", and the sock_ops program cannot attach to clamp instead"))


def other_sockops_findings(listing: Probe | Sequence[CgroupProgram]) -> list[Finding]:
    """Sock_ops programs on the cgroup-v2 root besides OTCP's: they see the same connections, and
    what they set with bpf_setsockopt (clamp, initial window, rto_min, pacing) may override OTCP's
    or be overridden, by the order they run."""
    if isinstance(listing, Probe):
        return [Finding("other_sockops", "note", f"could not list the root cgroup's programs: {listing.detail}")]
    others = [p for p in listing if p.attach_type in ("sock_ops", "cgroup_sock_ops") and p.name != sockops.PROGRAM]
    if not others:
        return [Finding("other_sockops", "ok", "no other sock_ops program on the cgroup-v2 root")]
    return [Finding("other_sockops", "note",
                    f"sock_ops program id {p.id} ({p.name or 'unnamed'}"
                    f"{', ' + p.attach_flags if p.attach_flags else ''}) on the cgroup-v2 root",
                    "it sees every connection otcp_sockops sees; what it sets with bpf_setsockopt (window "
                    "clamp, initial window, rto_min, pacing) may override OTCP's values or be overridden")
            for p in others]


def foreign_route_findings(routes: Sequence[ForeignRoute], destinations: Sequence[str]) -> list[Finding]:
    """Routes of other protocols that carry metrics OTCP also sets. Toward a destination of the set
    that such a route covers, OTCP's more specific host route wins; one for exactly a destination's
    prefix makes apply skip it (`skipped_findings` says so, from the planner)."""
    found = []
    for route in routes:
        network = ipaddress.ip_network(route.dst)
        exact = [dst for dst in destinations if ipaddress.ip_network(dst) == network]
        covered = [dst for dst in destinations if _within(dst, network) and dst not in exact]
        metrics = " ".join(f"{name} {_shown(value)}" for name, value in route.metrics)
        where = f"{route.dst} table {table_name(route.table)} proto {proto_name(route.proto)}"
        said = []
        if covered:
            said.append(f"toward {', '.join(covered)} OTCP's host route overrides these values")
        if exact:
            said.append(f"apply skips {', '.join(exact)}, this route's own prefix, and these values hold there")
        if not said:
            said.append("no destination of the set lies under it" if destinations else
                        "where OTCP adds a more specific route its values win; a destination whose prefix is "
                        "exactly this one is skipped by apply (doctor --set FILE checks a set)")
        found.append(Finding("foreign_route", "note", f"{where}: {metrics}", "; ".join(said)))
    return found


def skipped_findings(skipped: Sequence[SkippedDestination]) -> list[Finding]:
    """Destinations of the set apply would skip: nothing of the plan is enforced toward them."""
    return [Finding("destination", "short", f"apply would skip {s.dst}: {s.reason}",
                    "no OTCP parameter is enforced toward it") for s in skipped]


def _within(dst: str, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    inner = ipaddress.ip_network(dst)
    return inner.version == network.version and inner.subnet_of(network)  # type: ignore[arg-type]


def _shown(value: object) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


# -- facts: read from the machine ----------------------------------------------------


def read_sysctl(name: str, root: Path = SYSCTL_ROOT) -> int | None:
    """An integer sysctl (``net.ipv4.tcp_rto_min_us``) read under ``root``; None where it does not exist."""
    try:
        return int((root / name.replace(".", "/")).read_text().split()[0])
    except FileNotFoundError:
        return None


def gather(destinations: Sequence[RouteParams] = (), sysctl_root: Path = SYSCTL_ROOT) -> Facts:
    """The facts of this host, in this process's network namespace. ``destinations``: a set's
    routes to plan for, as apply would; ``sysctl_root``: where the sysctls are read (a test's tree)."""
    bpffs_where = BPFFS if fs_type(outer(BPFFS)) == BPF_FS_MAGIC else None
    try:
        cgroup2, unreadable = cgroup2_mounted(), None
    except BpfUnavailable as error:
        cgroup2, unreadable = None, str(error)
    other = list_root_programs(cgroup2) if cgroup2 is not None else \
        Probe("untried", unreadable or "no cgroup-v2 root mounted")
    btf = BTF_PATH.exists()
    sockops_probe = (probe_sockops() if btf and bpffs_where and cgroup2
                     else Probe("untried", unreadable or _missing(btf, bpffs_where, cgroup2)))
    routes: tuple[RouteReadback, ...] | Probe
    try:
        scratch = ScratchNamespace()
    except OSError as error:
        routes = tcp_metrics = Probe("untried", str(error))
    else:
        try:
            routes = tuple(scratch.route_readback())
            tcp_metrics = scratch.tcp_metrics()
        finally:
            scratch.delete()
    foreign, skipped = _routes_here(destinations)
    return Facts(
        kernel=os.uname().release, btf=btf, bpffs=None if bpffs_where is None else str(bpffs_where),
        cgroup2=None if cgroup2 is None else str(cgroup2), sockops=sockops_probe, struct_ops=probe_struct_ops(),
        routes=routes, tcp_metrics=tcp_metrics,
        rto_min_us=read_sysctl("net.ipv4.tcp_rto_min_us", sysctl_root),
        no_metrics_save=read_sysctl("net.ipv4.tcp_no_metrics_save", sysctl_root),
        other_sockops=other, foreign_routes=foreign, destinations=tuple(r.dst for r in destinations),
        skipped=skipped, mounts_unreadable=unreadable,
    )


def doctor(destinations: Sequence[RouteParams] = (), sysctl_root: Path = SYSCTL_ROOT,
           netns: str | None = None) -> Report:
    """Gather this host's facts and decide: the report ``otcp-agent doctor`` prints."""
    facts = gather(destinations, sysctl_root)
    return Report(netns, tuple(findings(facts)), facts.destinations)


def _missing(btf: bool, bpffs: Path | None, cgroup2: Path | None) -> str:
    missing = [what for what, there in (("the kernel's BTF", btf), ("the BPF filesystem", bpffs),
                                        ("a cgroup-v2 mount", cgroup2)) if not there]
    return f"{' and '.join(missing)} missing"


def list_root_programs(root: Path) -> Probe | tuple[CgroupProgram, ...]:
    """The programs attached to the cgroup-v2 root (the kernel's query, through bpftool), or why not."""
    try:
        shown = run(["bpftool", "-j", "cgroup", "show", str(root)], "listing the root cgroup's programs")
        listed = json.loads(shown.stdout.strip() or "[]")
    except (BpfUnavailable, ValueError) as error:
        return Probe("fails", str(error))
    return tuple(CgroupProgram(int(p["id"]), str(p.get("name", "")), str(p.get("attach_type", "")),
                               str(p.get("attach_flags", ""))) for p in listed)


def probe_sockops() -> Probe:
    """Attach otcp_sockops at the cgroup-v2 root and release it (`otcp.bpf.sockops`); a program a
    running agent holds is only looked at."""
    try:
        if sockops.attached():
            return Probe("works", "otcp_sockops is attached already (an agent holds it; left alone)")
        if outer(sockops.PIN).exists():
            return Probe("fails", f"{sockops.PIN} is pinned but not attached (left by a killed agent; "
                                  "python -m otcp.bpf cleanup removes it)")
        enforcer = sockops.SockOpsEnforcer.attach()
        try:
            attached = sockops.attached()
        finally:
            enforcer.close()
    except (BpfUnavailable, OSError) as error:
        return Probe("fails", str(error))
    if not attached:
        return Probe("fails", "loaded, but not found on the cgroup-v2 root afterwards")
    return Probe("works", "otcp_sockops attached to the cgroup-v2 root, then released")


def probe_struct_ops() -> Probe:
    """Register otcp_dctcp and unregister it (`otcp.bpf.dctcp`); one registered already is left alone."""
    try:
        if dctcp.CC_NAME in dctcp.available_congestion_controls():
            return Probe("works", f"{dctcp.CC_NAME} is registered already (left alone)")
        with dctcp.register_dctcp():
            pass
    except (BpfUnavailable, OSError) as error:
        return Probe("fails", str(error))
    return Probe("works", f"{dctcp.CC_NAME} registered, then unregistered")


def _routes_here(destinations: Sequence[RouteParams]) -> tuple[tuple[ForeignRoute, ...],
                                                                    tuple[SkippedDestination, ...]]:
    """This namespace's routes of other protocols with OTCP's metrics, and the destinations apply
    would skip (the agent's own planner)."""
    with RouteTable() as table:
        foreign = tuple(found for message in table.netlink.dump_routes()
                        if message["proto"] != OTCP_PROTO and message["family"] in (socket.AF_INET, socket.AF_INET6)
                        and (found := foreign_route(message)) is not None)
        if not destinations:
            return foreign, ()
        results = table.plan(destinations).results(table.interface_names())
    return foreign, tuple(SkippedDestination(r.dst, r.reason or "") for r in results if r.status == "skipped")


def foreign_route(message: Any) -> ForeignRoute | None:
    """A kernel route message of another protocol -> ForeignRoute, or None when it carries none of
    the metrics OTCP sets (read as TCP reads them: rto_min and cwnd only when locked)."""
    route = route_from_message(message)
    metrics = tuple((name, getattr(route, attribute)) for name, attribute in ROUTE_METRICS
                    if getattr(route, attribute) not in (None, False))
    if not metrics:
        return None
    return ForeignRoute(route.dst, route.table, message["proto"], metrics)


class ScratchNamespace:
    """A network namespace doctor makes for the route check (``otcp-doctor-PID``) and deletes:
    a veth pair, up, with an address per family."""

    def __init__(self) -> None:
        self.name = f"otcp-doctor-{os.getpid()}"
        self._ip("netns", "add", self.name)
        try:
            self._ip("-n", self.name, "link", "add", SCRATCH_DEVICE, "type", "veth", "peer", "name", "otcpd1")
            for device in (SCRATCH_DEVICE, "otcpd1"):
                self._ip("-n", self.name, "link", "set", device, "up")
            for family, address, _, _ in SCRATCH_ROUTES:
                extra = ["nodad"] if family == socket.AF_INET6 else []
                self._ip("-n", self.name, "addr", "add", address, "dev", SCRATCH_DEVICE, *extra)
        except BaseException:
            self.delete()
            raise

    @staticmethod
    def _ip(*args: str) -> None:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def route_readback(self) -> list[RouteReadback]:
        """Write the agent's route (`Route.fields`, every metric set) per family and read it back."""
        found = []
        with RouteTable(self.name) as table:
            index = {name: i for i, name in table.interface_names().items()}[SCRATCH_DEVICE]
            for family, _, gateway, dst in SCRATCH_ROUTES:
                written = Route(family=family, dst=dst, table=RT_TABLE_MAIN, oif=index, gateway=gateway,
                                prefsrc=None, scope=RT_SCOPE_UNIVERSE, priority=None, rto_min_ms=7, initcwnd=13,
                                cwnd_clamp=17, quickack=True, advmss=1211)
                label = "IPv4" if family == socket.AF_INET else "IPv6"
                code = table.netlink.execute([(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, written.fields())])[0]
                if code != 0:
                    found.append(RouteReadback(label, written, None, os.strerror(code)))
                    continue
                read = [route for route in table.owned() if route.dst == dst]
                found.append(RouteReadback(label, written, read[0] if read else None,
                                           "" if read else "written, but not found in the table afterwards"))
        return found

    def tcp_metrics(self) -> Probe:
        """Whether the TCP metrics cache answers (generic netlink family ``tcp_metrics``)."""
        try:
            cache = TcpMetrics(self.name)
        except (OSError, NetlinkError) as error:
            return Probe("fails", f"cannot be reached: {error}")
        try:
            cache.entries()
        except OSError as error:
            return Probe("fails", f"cannot be read: {error}")
        finally:
            cache.close()
        return Probe("works", "the TCP metrics cache answers (a route's cwnd lock reaches connections through it)")

    def delete(self) -> None:
        """Delete the namespace (its devices and routes go with it)."""
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)


def format_report(report: Report) -> list[str]:
    """The report as text lines: one per finding, its meaning under it when not ok, and the verdict."""
    where = f"namespace {report.netns}" if report.netns else "this namespace"
    lines = [f"otcp-agent doctor: {where}"]
    width = max(len(finding.check) for finding in report.findings)
    for finding in report.findings:
        label = "SHORT" if finding.status == "short" else finding.status
        lines.append(f"  {label:<5}  {finding.check:<{width}}  {finding.summary}")
        if finding.detail and finding.status != "ok":
            lines.append(f"  {'':<5}  {'':<{width}}    {finding.detail}")
    short = report.short
    if short:
        lines.append(f"{len(short)} finding(s) short of what the controller plans: "
                     f"{', '.join(sorted({f.check for f in short}))}")
    else:
        lines.append("this host enforces everything the controller plans")
    return lines

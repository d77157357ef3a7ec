"""Which datapath the emulated switches' ports use, and the one they really got.

Open vSwitch's userspace datapath takes each port's frames in through one of
two kinds of socket (docs/experiments.md, "The switch's datapath"):

- ``afpacket``: an AF_PACKET socket per port (OVS port type ``system``), the
  runner's datapath from the start, with its sockets raised out of reach
  (otcp.experiments.runner.ovs_sockets);
- ``afxdp-nonpmd``: an AF_XDP socket per port (OVS type ``afxdp-nonpmd``),
  polled by the main thread like AF_PACKET, with an XDP program on the
  switch's end of the veth, in ``native`` (the veth driver's) or ``generic``
  XDP;
- ``afxdp``: the same sockets polled by a PMD thread that busy-polls a whole
  core, or, with ``pmd_maxsleep_us``, sleeps up to that long in an iteration
  that found few packets (Open vSwitch's ``other_config:pmd-maxsleep``),
  leaving the rest of its core to the hosts.

On any of them ``tx_flush_us`` lets a forwarded frame wait up to that long in
an output batch before it is sent (``other_config:tx-flush-interval``), for
fewer, larger sends. Both are settings of the whole ovs-vswitchd
(``Datapath.ovs_settings``), set while the network runs and put back after
(``ovs_other_config``).

An AF_XDP port transmits around the port's qdisc (the runner keeps the
switch's buffers on IFBs in the hosts, so nothing it shapes is on a switch
port facing a host), has its send buffer raised like AF_PACKET's, and counts
what its fixed receive ring drops (ovs_sockets.xdp_input_drops, in the loss
account). Switch-to-switch ports hold a buffer on the port itself
(BufferedIntf.reshape), which AF_XDP would bypass: a fabric with them keeps
AF_PACKET.

``choose(asked, topo)`` says before the network starts whether this machine
can have what was asked (Open vSwitch built with AF_XDP, a topology without
switch-to-switch buffers); ``settle(in_use, ports, log_offset)`` reads each
port's type, error and XDP mode in use from Open vSwitch once the ports are
added, and where it refused one (the kernel refused XDP on the veth, say),
turns every data port back to AF_PACKET and says why, with Open vSwitch's
and the kernel's own words from its log. The result, a ``DatapathInUse``,
is what runs record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

AFPACKET = "afpacket"
AFXDP_NONPMD = "afxdp-nonpmd"
AFXDP = "afxdp"
#: The datapaths an experiment may ask for, and the XDP modes of the AF_XDP ones.
DATAPATHS = (AFPACKET, AFXDP_NONPMD, AFXDP)
XDP_MODES = ("native", "generic")
#: What experiments use unless told otherwise: the one that keeps the switch faithful
#: (docs/results/datapath.md has the measurement behind the choice).
DEFAULT_DATAPATH = AFPACKET
DEFAULT_XDP_MODE = "native"
#: The longest sleep Open vSwitch takes for a PMD thread's idle iteration, in microseconds (its own bound).
PMD_MAXSLEEP_US = (0, 10_000)
#: The longest a frame may wait in an output batch, in microseconds (Open vSwitch's own bound).
TX_FLUSH_US = (0, 1_000_000)
#: Open vSwitch's own log, where it writes why a port could not be added.
OVS_LOG = os.environ.get("OVS_LOGDIR", "/var/log/openvswitch") + "/ovs-vswitchd.log"
_DPCTL_PORT = re.compile(r"^\s*port \d+: (?P<name>\S+) \((?P<type>[^:)]+)(?::(?P<options>[^)]*))?\)", re.MULTILINE)


class DatapathError(RuntimeError):
    """Open vSwitch refused the ports even on AF_PACKET."""


@dataclasses.dataclass(frozen=True)
class Datapath:
    """One datapath: kind (one of DATAPATHS) and, for the AF_XDP ones, the XDP mode; pinned:
    the experiment's processes run apart from the switch's forwarding threads
    (otcp.experiments.runner.placement); pmd_maxsleep_us: how long afxdp's PMD thread may
    sleep in an iteration that found few packets (0: it busy-polls); tx_flush_us: how long a
    forwarded frame may wait in an output batch (0: it is sent at once)."""

    kind: str = DEFAULT_DATAPATH
    xdp_mode: str | None = None
    pinned: bool = False
    pmd_maxsleep_us: int = 0
    tx_flush_us: int = 0

    def __post_init__(self) -> None:
        if self.kind not in DATAPATHS:
            raise ValueError(f"datapath {self.kind!r} is not one of {', '.join(DATAPATHS)}")
        if self.kind == AFPACKET and self.xdp_mode is not None:
            raise ValueError("the afpacket datapath has no XDP mode")
        if self.kind != AFPACKET and self.xdp_mode not in XDP_MODES:
            raise ValueError(f"datapath {self.kind}: XDP mode {self.xdp_mode!r} is not one of {', '.join(XDP_MODES)}")
        for what, value, (low, high) in (("PMD sleep", self.pmd_maxsleep_us, PMD_MAXSLEEP_US),
                                         ("output batch wait", self.tx_flush_us, TX_FLUSH_US)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{what} {value!r} us is not a whole number in {low}..{high}")
        if self.pmd_maxsleep_us and self.kind != AFXDP:
            raise ValueError(f"datapath {self.kind} has no PMD thread to sleep (only {AFXDP} has)")

    @classmethod
    def named(cls, kind: str, xdp_mode: str = DEFAULT_XDP_MODE, pinned: bool = False,
              pmd_maxsleep_us: int = 0, tx_flush_us: int = 0) -> Datapath:
        """kind with xdp_mode where it has one (ValueError names a bad one)."""
        return cls(kind, None if kind == AFPACKET else xdp_mode, pinned, pmd_maxsleep_us, tx_flush_us)

    @property
    def is_xdp(self) -> bool:
        """Whether the ports are AF_XDP sockets."""
        return self.kind != AFPACKET

    @property
    def ovs_type(self) -> str:
        """The Interface type Open vSwitch gives such a port."""
        return "system" if self.kind == AFPACKET else self.kind

    @property
    def label(self) -> str:
        """How tables and messages name it: "afpacket", "afxdp-nonpmd native", "afxdp native, pinned",
        "afxdp native, PMD sleeps up to 100 us", "afpacket, output batched up to 50 us"."""
        name = self.kind if self.xdp_mode is None else f"{self.kind} {self.xdp_mode}"
        sleeps = f", PMD sleeps up to {self.pmd_maxsleep_us} us" if self.pmd_maxsleep_us else ""
        batched = f", output batched up to {self.tx_flush_us} us" if self.tx_flush_us else ""
        return f"{name}{', pinned' if self.pinned else ''}{sleeps}{batched}"

    def ovs_settings(self) -> dict[str, int]:
        """The keys of Open vSwitch's other_config this datapath sets while its network runs (none by default)."""
        return {key: value for key, value in (("pmd-maxsleep", self.pmd_maxsleep_us),
                                              ("tx-flush-interval", self.tx_flush_us)) if value}

    def interface_settings(self) -> list[str]:
        """The column settings of ``ovs-vsctl set Interface PORT ...`` that make a port this
        datapath (none for AF_PACKET: a plain add-port is one)."""
        return [] if self.kind == AFPACKET else [f"type={self.kind}", f"options:xdp-mode={self.xdp_mode}"]


@dataclasses.dataclass(frozen=True)
class DatapathInUse:
    """What a network's switch ports were asked to be and what they are: used is asked, or
    AF_PACKET with reason saying why not (this machine's, Open vSwitch's or the kernel's)."""

    asked: Datapath
    used: Datapath
    reason: str | None = None

    @property
    def note(self) -> str | None:
        """The fallback as a run's notes give it (None: no fallback)."""
        if self.reason is None:
            return None
        return f"datapath {self.asked.label} not available, the switch runs on {self.used.label}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        """As summaries and calibration.json record it."""
        return {"asked": self.asked.label, "used": self.used.label, "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class PortState:
    """One switch port as Open vSwitch has it: its Interface type and error (None: none),
    and the XDP mode its datapath says is in use (None: not an AF_XDP port)."""

    name: str
    ovs_type: str
    error: str | None
    xdp_mode_in_use: str | None = None


@contextlib.contextmanager
def ovs_other_config(settings: dict[str, int]) -> Iterator[None]:
    """Open vSwitch's other_config holds settings (Datapath.ovs_settings) while the context runs;
    each key's value before (or its absence) is put back after."""
    before = {key: subprocess.run(["ovs-vsctl", "--timeout=10", "--if-exists", "get", "Open_vSwitch", ".",
                                   f"other_config:{key}"], capture_output=True, text=True, check=True).stdout.strip()
              for key in settings}
    subprocess.run(["ovs-vsctl", "--timeout=10", "set", "Open_vSwitch", ".",
                    *(f"other_config:{key}={value}" for key, value in settings.items())],
                   capture_output=True, text=True, check=True)
    try:
        yield
    finally:
        for key, value in before.items():
            restore = ["set", "Open_vSwitch", ".", f"other_config:{key}={value}"] if value else \
                ["remove", "Open_vSwitch", ".", "other_config", key]
            subprocess.run(["ovs-vsctl", "--timeout=10", *restore], capture_output=True, text=True, check=False)


def choose(asked: Datapath, topo: Any, iface_types: Sequence[str] | None = None) -> DatapathInUse:
    """What the network's ports can be here, decided before it starts: asked, or AF_PACKET with
    the reason. iface_types: Open vSwitch's (read when not given)."""
    if not asked.is_xdp:
        return DatapathInUse(asked, asked)
    fallback = Datapath(pinned=asked.pinned)
    shared = [f"{a}-{b}" for a, b, _ in topo.links(withInfo=True) if topo.isSwitch(a) and topo.isSwitch(b)]
    if shared:
        return DatapathInUse(asked, fallback, f"switch-to-switch links ({', '.join(shared[:3])}) keep their buffer "
                                              "on the switch port, which AF_XDP transmits around")
    types = read_iface_types() if iface_types is None else iface_types
    if asked.kind not in types:
        return DatapathInUse(asked, fallback, f"Open vSwitch here has no {asked.kind} port type "
                                              f"(iface_types: {', '.join(types) or 'none'})")
    return DatapathInUse(asked, asked)


def read_iface_types() -> list[str]:
    """The port types this Open vSwitch supports (``ovs-vsctl get Open_vSwitch . iface_types``)."""
    completed = subprocess.run(["ovs-vsctl", "--timeout=10", "get", "Open_vSwitch", ".", "iface_types"],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        return []
    return [t.strip() for t in completed.stdout.strip().strip("[]").split(",") if t.strip()]


def parse_interfaces(text: str) -> dict[str, tuple[str, str | None]]:
    """{name: (type, error or None)} from ``ovs-vsctl --format=json --columns=name,type,error list
    Interface`` output (an empty type is Open vSwitch's default, ``system``)."""
    document = json.loads(text)
    columns = document["headings"]
    found = {}
    for row in document["data"]:
        values = dict(zip(columns, row, strict=True))
        error = values["error"]
        found[values["name"]] = (values["type"] or "system", error if isinstance(error, str) else None)
    return found


def parse_dpctl_modes(text: str) -> dict[str, str]:
    """{port: XDP mode in use} of the AF_XDP ports in ``ovs-appctl dpctl/show`` output."""
    modes = {}
    for match in _DPCTL_PORT.finditer(text):
        options = dict(part.strip().split("=", 1) for part in (match.group("options") or "").split(",")
                       if "=" in part)
        if "xdp-mode-in-use" in options:
            modes[match.group("name")] = options["xdp-mode-in-use"]
    return modes


def port_states(ports: Iterable[str]) -> dict[str, PortState]:
    """The ports' states as Open vSwitch has them now (a port it does not know is left out)."""
    wanted = list(ports)
    listing = subprocess.run(["ovs-vsctl", "--timeout=10", "--format=json", "--columns=name,type,error", "list",
                              "Interface", *wanted], capture_output=True, text=True, check=False)
    interfaces = parse_interfaces(listing.stdout) if listing.returncode == 0 else {}
    if listing.returncode != 0:
        # One unknown name fails the whole listing: ask for each on its own.
        for port in wanted:
            one = subprocess.run(["ovs-vsctl", "--timeout=10", "--format=json", "--columns=name,type,error", "list",
                                  "Interface", port], capture_output=True, text=True, check=False)
            if one.returncode == 0:
                interfaces.update(parse_interfaces(one.stdout))
    show = subprocess.run(["ovs-appctl", "--timeout=10", "dpctl/show"], capture_output=True, text=True, check=False)
    modes = parse_dpctl_modes(show.stdout) if show.returncode == 0 else {}
    return {name: PortState(name, kind, error, modes.get(name)) for name, (kind, error) in interfaces.items()}


def log_offset() -> int:
    """Where Open vSwitch's log ends now (0 when it cannot be read)."""
    try:
        return os.path.getsize(OVS_LOG)
    except OSError:
        return 0


def log_reasons(offset: int, ports: Iterable[str], limit: int = 4) -> list[str]:
    """The errors Open vSwitch logged since offset about ports or AF_XDP (the kernel's own
    message among them, as libbpf passes it on), without the timestamps; at most limit."""
    names = tuple(ports)
    try:
        with open(OVS_LOG, encoding="utf-8", errors="replace") as handle:
            handle.seek(offset)
            lines = handle.read().splitlines()
    except OSError:
        return []
    return select_reasons(lines, names, limit)


def select_reasons(lines: Iterable[str], ports: Sequence[str], limit: int = 4) -> list[str]:
    """From Open vSwitch log lines: the kernel's error messages first, then the ERR lines of
    AF_XDP or naming a port, each once, without the timestamp and sequence number."""
    kernel, errors = [], []
    for line in lines:
        fields = line.split("|", 4)  # time|sequence|module|level|message
        message = fields[-1].strip()
        if "Kernel error message:" in message:
            kernel.append(message.split("Kernel error message:", 1)[1].strip())
        elif len(fields) == 5 and fields[3] == "ERR" and (fields[2] == "netdev_afxdp"
                                                          or any(port in message for port in ports)):
            errors.append(message)
    return list(dict.fromkeys(kernel + errors))[:limit]


def settle(in_use: DatapathInUse, ports: Sequence[str], offset: int) -> DatapathInUse:
    """Check the ports Open vSwitch added against in_use.used; where it refused one (an error
    on its Interface, or another type), turn every port back to AF_PACKET and return that with
    why (Open vSwitch's error and its log since offset). DatapathError when the ports are not
    usable even then."""
    expected = in_use.used
    states = port_states(ports)
    refused = {p: states.get(p) for p in ports
               if p not in states or states[p].error is not None or states[p].ovs_type != expected.ovs_type}
    if not refused:
        return _with_mode_in_use(in_use, states)
    if not expected.is_xdp:
        raise DatapathError("Open vSwitch refused switch port(s): "
                            + "; ".join(f"{p}: {s.error if s else 'not in its database'}" for p, s in refused.items()))
    port, state = next(iter(refused.items()))
    said = state.error if state is not None and state.error else f"{port} is not an {expected.kind} port"
    details = log_reasons(offset, ports)
    reason = f"Open vSwitch refused {port}"
    reason += f" and {len(refused) - 1} more port(s)" if len(refused) > 1 else ""
    reason += f": {said}" + (f" (its log: {'; '.join(details)})" if details else "")
    to_system = [word for p in ports for word in ("--", "set", "Interface", p, "type=system",
                                                  "--", "remove", "Interface", p, "options", "xdp-mode")]
    subprocess.run(["ovs-vsctl", "--timeout=30", *to_system], capture_output=True, text=True, check=False)
    fallback = DatapathInUse(in_use.asked, Datapath(pinned=expected.pinned), reason)
    states = port_states(ports)
    still = [p for p in ports if p not in states or states[p].error is not None or states[p].ovs_type != "system"]
    if still:
        raise DatapathError(f"{reason}; back on AF_PACKET, Open vSwitch still refuses "
                            + ", ".join(f"{p}: {states[p].error if p in states else 'missing'}" for p in still))
    return fallback


def _with_mode_in_use(in_use: DatapathInUse, states: dict[str, PortState]) -> DatapathInUse:
    """in_use, its XDP mode the one Open vSwitch says its ports use (they all use one)."""
    used = in_use.used
    if not used.is_xdp:
        return in_use
    modes = {s.xdp_mode_in_use for s in states.values() if s.xdp_mode_in_use}
    if len(modes) == 1:
        (mode,) = modes
        if mode != used.xdp_mode and mode in XDP_MODES:
            return DatapathInUse(in_use.asked, dataclasses.replace(used, xdp_mode=mode),
                                 f"Open vSwitch runs the ports in {mode} XDP, not {used.xdp_mode}")
    return in_use

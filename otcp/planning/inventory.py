"""Read and validate an operator's inventory (docs/design.md, "Parameter set" and "Validation").

An inventory declares switches, hosts, links and optionally active flows.
Its shape is checked by the models below; what refers to what (unknown
nodes, duplicates, single-homed hosts) by `_resolve`. Every problem is one
InventoryError naming the file, the entry and what is wrong, before
anything uses the inventory.
"""

import ipaddress
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn

from pydantic import AfterValidator, BeforeValidator, Field

from otcp.planning import formulas
from otcp.planning.fabric import DEFAULT, INVENTORY, INVENTORY_DEFAULTS, Fabric, LinkOrigins
from otcp.wire import validation
from otcp.wire.validation import Strict, int_range


class InventoryError(ValueError):
    """A malformed inventory: names the file, the entry and the problem."""


def _integer_as_name(value: object) -> object:
    """YAML reads a node named 1 as the integer 1: its name is "1" (a boolean is no name)."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _not_empty(value: str) -> str:
    if value == "":
        raise ValueError("a node name may not be empty")
    return value


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None


NodeName = Annotated[str, BeforeValidator(_integer_as_name), AfterValidator(_not_empty)]


class LinkValues(Strict):
    """What a link declares, or the defaults declare for every link."""

    capacity_mbps: Annotated[float, Field(gt=0)] | None = None
    buffer_bytes: Annotated[float, Field(ge=0)] | None = None
    delay_us: Annotated[float, Field(ge=0)] | None = None


class LinkDecl(LinkValues):
    """One undirected link between two declared nodes."""

    a: NodeName
    b: NodeName


class SwitchDecl(Strict):
    """A switch's attributes; the dpid ties it to the live switch."""

    dpid: Annotated[int, int_range(1, 2**64 - 1)] | None = None


class HostDecl(Strict):
    """A host's address."""

    ip: Annotated[str, AfterValidator(_ip)]


class FlowDecl(Strict):
    """Active flows from one host to another."""

    src: NodeName
    dst: NodeName
    count: Annotated[int, int_range(1, 2**31 - 1)] = 1


class InventoryDocument(Strict):
    """The whole inventory file."""

    mss_bytes: Annotated[int, int_range(1, 65535)] = formulas.DEFAULT_MSS_BYTES
    defaults: LinkValues = LinkValues()
    switches: list[NodeName] | dict[NodeName, SwitchDecl | None] = []
    hosts: dict[NodeName, HostDecl] = {}
    links: list[LinkDecl] = []
    flows: list[FlowDecl] = []


@dataclass(frozen=True)
class LinkSpec:
    """One undirected link as declared; values hold for both directions. origins says where
    its capacity, buffer and delay came from (LinkOrigins)."""

    a: str
    b: str
    capacity_mbps: float
    buffer_bytes: float
    delay_us: float
    origins: LinkOrigins = LinkOrigins()


@dataclass
class Inventory:
    """A validated inventory."""

    path: str
    mss_bytes: int
    switches: dict[str, int | None]  # name -> dpid or None
    hosts: dict[str, str]  # name -> IP string
    links: list[LinkSpec]
    flows: dict[tuple[str, str], int]  # (src name, dst name) -> count
    pinned_delays: set[frozenset[str]]  # {a, b} of the links whose delay the file (or its defaults) gives
    mss_origin: str = INVENTORY  # whether the file gives mss_bytes (INVENTORY) or the built-in default does

    def fabric(self) -> Fabric:
        """The Fabric these declarations describe: its hosts are their addresses, named by the inventory."""
        node = {**{name: name for name in self.switches}, **self.hosts}
        fabric = Fabric(switches=list(self.switches), hosts={ip: name for name, ip in self.hosts.items()},
                        flows={(self.hosts[src], self.hosts[dst]): count for (src, dst), count in self.flows.items()})
        for link in self.links:
            fabric.add_link(
                node[link.a],
                node[link.b],
                formulas.capacity_bytes_per_s(link.capacity_mbps),
                link.delay_us * 1e-6,
                link.buffer_bytes,
            )
            for ends in ((node[link.a], node[link.b]), (node[link.b], node[link.a])):
                fabric.origins[ends] = link.origins
        return fabric

    def switch_by_dpid(self) -> dict[int, str]:
        """{dpid: switch name} for switches that declare a dpid."""
        return {dpid: name for name, dpid in self.switches.items() if dpid is not None}

    def host_by_ip(self) -> dict[str, str]:
        """{IP address: host name}."""
        return {ip: name for name, ip in self.hosts.items()}


def load(path: str) -> Inventory:
    """Read and validate the inventory at path; raise InventoryError."""
    try:
        document = validation.load_yaml_file(path)
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read: {exc.strerror}") from None
    except validation.ValidationError as error:
        raise InventoryError(str(error)) from None
    return parse(document, path)


def parse(document: Any, path: str = "<inventory>") -> Inventory:
    """Validate an inventory already parsed from YAML (a mapping, or None for an empty file)."""
    try:
        declared = validation.check(InventoryDocument, {} if document is None else document)
    except validation.ValidationError as error:
        raise InventoryError(f"{path}: {error}") from None
    return _Resolver(path).resolve(declared)


_BUILTIN = {"capacity_mbps": formulas.DEFAULT_CAPACITY_MBPS, "buffer_bytes": formulas.DEFAULT_BUFFER_BYTES,
            "delay_us": formulas.DEFAULT_LINK_DELAY_US}


class _Resolver:
    """Checks what the entries of a well-formed inventory refer to."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, entry: str, problem: str) -> NoReturn:
        """Refuse the inventory, naming the entry."""
        raise InventoryError(f"{self.path}: {entry}: {problem}")

    def resolve(self, declared: InventoryDocument) -> Inventory:
        """The inventory a well-formed document declares, once every reference is checked."""
        declared_defaults = declared.defaults.model_dump(exclude_none=True)
        defaults = {**_BUILTIN, **declared_defaults}
        switches = self.switches(declared.switches)
        hosts = self.hosts(declared.hosts, switches)
        links, pinned = self.links(declared.links, switches, hosts, defaults, declared_defaults)
        flows = self.flows(declared.flows, hosts)
        mss_origin = INVENTORY if "mss_bytes" in declared.model_fields_set else DEFAULT
        return Inventory(self.path, declared.mss_bytes, switches, hosts, links, flows, pinned, mss_origin)

    def switches(self, declared: list[str] | dict[str, SwitchDecl | None]) -> dict[str, int | None]:
        """{name: dpid or None}; a name or dpid declared twice is refused."""
        if isinstance(declared, list):
            items: list[tuple[str, int | None]] = [(name, None) for name in declared]
        else:
            items = [(name, attributes.dpid if attributes else None) for name, attributes in declared.items()]
        switches: dict[str, int | None] = {}
        dpids: dict[int, str] = {}
        for name, dpid in items:
            if name in switches:
                self.fail(f"switches.{name}", "declared twice")
            if dpid is not None and dpid in dpids:
                self.fail(f"switches.{name}.dpid", f"{dpid} is already the dpid of {dpids[dpid]!r}")
            switches[name] = dpid
            if dpid is not None:
                dpids[dpid] = name
        return switches

    def hosts(self, declared: dict[str, HostDecl], switches: dict[str, int | None]) -> dict[str, str]:
        """{name: address}; a name a switch has, or an address two hosts have, is refused."""
        hosts: dict[str, str] = {}
        owners: dict[str, str] = {}
        for name, attributes in declared.items():
            if name in switches:
                self.fail(f"hosts.{name}", "name is already used by a switch")
            if attributes.ip in owners:
                self.fail(f"hosts.{name}.ip", f"{attributes.ip} is already the address of {owners[attributes.ip]!r}")
            hosts[name], owners[attributes.ip] = attributes.ip, name
        return hosts

    def links(self, declared: list[LinkDecl], switches: dict[str, int | None], hosts: dict[str, str],
              defaults: dict[str, float], declared_defaults: dict[str, float]) -> tuple[list[LinkSpec],
                                                                                        set[frozenset[str]]]:
        """The links with every value filled in (defaults: the file's defaults over the built-in
        ones, declared_defaults: the file's), and those whose delay is declared (pinned)."""
        links: list[LinkSpec] = []
        seen: dict[frozenset[str], int] = {}
        pinned: set[frozenset[str]] = set()
        host_links: dict[str, int] = {}
        for i, item in enumerate(declared):
            key = self.link_ends(f"links[{i}]", item, switches, hosts, seen)
            seen[key] = i
            for node in key & hosts.keys():
                if node in host_links:
                    self.fail(f"links[{i}]", f"host {node!r} already has a link (links[{host_links[node]}]); "
                                             "hosts are single-homed")
                host_links[node] = i
            values = item.model_dump(exclude_none=True, exclude={"a", "b"})
            if "delay_us" in declared_defaults or "delay_us" in values:
                pinned.add(key)
            merged = {**defaults, **values}
            origins = LinkOrigins(*(INVENTORY if key in values else INVENTORY_DEFAULTS if key in declared_defaults
                                    else DEFAULT for key in ("capacity_mbps", "buffer_bytes", "delay_us")))
            links.append(LinkSpec(item.a, item.b, merged["capacity_mbps"], merged["buffer_bytes"], merged["delay_us"],
                                  origins))
        for host in hosts:
            if host not in host_links:
                self.fail(f"hosts.{host}", "has no link")
        return links, pinned

    def link_ends(self, entry: str, item: LinkDecl, switches: dict[str, int | None], hosts: dict[str, str],
                  seen: dict[frozenset[str], int]) -> frozenset[str]:
        """A link's two ends, once they are known nodes, not one, not two hosts, not linked before."""
        a, b = item.a, item.b
        for end, node in (("a", a), ("b", b)):
            if node not in switches and node not in hosts:
                self.fail(f"{entry}.{end}", f"unknown node {node!r}")
        if a == b:
            self.fail(entry, f"links {a!r} to itself")
        if a in hosts and b in hosts:
            self.fail(entry, f"links two hosts ({a!r}, {b!r}); hosts connect to switches")
        key = frozenset((a, b))
        if key in seen:
            self.fail(entry, f"duplicate link {a!r} - {b!r} (already links[{seen[key]}])")
        return key

    def flows(self, declared: list[FlowDecl], hosts: dict[str, str]) -> dict[tuple[str, str], int]:
        """{(src name, dst name): count}, flows between the same hosts added up."""
        flows: dict[tuple[str, str], int] = {}
        for i, item in enumerate(declared):
            entry = f"flows[{i}]"
            for end, node in (("src", item.src), ("dst", item.dst)):
                if node not in hosts:
                    self.fail(f"{entry}.{end}", f"unknown host {node!r}")
            if item.src == item.dst:
                self.fail(entry, f"a flow from {item.src!r} to itself")
            flows[(item.src, item.dst)] = flows.get((item.src, item.dst), 0) + item.count
        return flows

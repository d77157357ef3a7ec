"""Read and validate an operator's inventory (design note section 4).

An inventory declares switches, hosts, links and optionally active flows.
Every problem is reported as one InventoryError naming the file, the entry
and what is wrong, before anything uses the inventory.
"""

import ipaddress
from dataclasses import dataclass

import yaml

from ryu_app import formulas
from ryu_app.fabric import Fabric

BUILTIN_DEFAULTS = {"capacity_mbps": 1000, "buffer_bytes": 131072, "delay_us": 10}
_TOP_LEVEL_KEYS = {"mss_bytes", "defaults", "switches", "hosts", "links", "flows"}
_LINK_VALUE_KEYS = set(BUILTIN_DEFAULTS)
_LINK_KEYS = {"a", "b"} | _LINK_VALUE_KEYS


class InventoryError(ValueError):
    """A malformed inventory: names the file, the entry and the problem."""


@dataclass(frozen=True)
class LinkSpec:
    """One undirected link as declared; values hold for both directions.

    delay_us is None when neither the link nor the defaults pin it, so the
    live controller knows to measure it.
    """

    a: str
    b: str
    capacity_mbps: float
    buffer_bytes: float
    delay_us: float


@dataclass
class Inventory:
    """A validated inventory."""

    path: str
    mss_bytes: int
    switches: dict  # name -> dpid or None
    hosts: dict  # name -> IP string
    links: list  # of LinkSpec
    flows: dict  # (src, dst) -> count
    pinned_delays: set  # frozensets {a, b} of links whose delay the file (or its defaults) gives

    def fabric(self):
        """The Fabric these declarations describe."""
        fabric = Fabric(switches=list(self.switches), hosts=dict(self.hosts), flows=dict(self.flows))
        for link in self.links:
            fabric.add_link(
                link.a,
                link.b,
                formulas.capacity_bytes_per_s(link.capacity_mbps),
                link.delay_us * 1e-6,
                link.buffer_bytes,
            )
        return fabric

    def switch_by_dpid(self):
        return {dpid: name for name, dpid in self.switches.items() if dpid is not None}

    def host_by_ip(self):
        return {ip: name for name, ip in self.hosts.items()}


def load(path):
    """Read and validate the inventory at path; raise InventoryError."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except FileNotFoundError:
        raise InventoryError(f"{path}: no such file") from None
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InventoryError(f"{path}: YAML syntax error{where}: {problem}") from None
    return parse(document, path)


def parse(document, path="<inventory>"):
    """Validate an inventory already parsed from YAML (a dict)."""
    return _Parser(path).parse(document)


class _Parser:
    def __init__(self, path):
        self.path = path

    def fail(self, entry, problem):
        raise InventoryError(f"{self.path}: {entry}: {problem}")

    def number(self, entry, value, minimum, strictly=False, integer=False):
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            self.fail(entry, f"expected {'an integer' if integer else 'a number'}, got {value!r}")
        if value != value or value in (float("inf"), float("-inf")):
            self.fail(entry, f"expected a finite number, got {value!r}")
        if strictly and value <= minimum:
            self.fail(entry, f"must be greater than {minimum}, got {value}")
        if not strictly and value < minimum:
            self.fail(entry, f"must not be negative, got {value}")
        return value

    def mapping(self, entry, value, allowed):
        if not isinstance(value, dict):
            self.fail(entry, f"expected a mapping, got {type(value).__name__}")
        unknown = sorted(set(map(str, value)) - allowed)
        if unknown:
            self.fail(entry, f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
        return value

    def link_value(self, entry, key, value):
        if key == "capacity_mbps":
            return self.number(f"{entry}.{key}", value, 0, strictly=True)
        return self.number(f"{entry}.{key}", value, 0)

    def parse(self, document):
        if document is None:
            document = {}
        self.mapping("top level", document, _TOP_LEVEL_KEYS)
        mss = self.number("mss_bytes", document.get("mss_bytes", 1448), 0, strictly=True, integer=True)
        defaults = dict(BUILTIN_DEFAULTS)
        declared_defaults = document.get("defaults") or {}
        self.mapping("defaults", declared_defaults, _LINK_VALUE_KEYS)
        for key, value in declared_defaults.items():
            defaults[key] = self.link_value("defaults", key, value)
        switches = self.parse_switches(document.get("switches") or [])
        hosts = self.parse_hosts(document.get("hosts") or {}, switches)
        links, pinned = self.parse_links(
            document.get("links") or [], switches, hosts, defaults, "delay_us" in declared_defaults
        )
        flows = self.parse_flows(document.get("flows") or [], hosts)
        return Inventory(self.path, mss, switches, hosts, links, flows, pinned)

    def name(self, entry, value):
        if not isinstance(value, (str, int)) or isinstance(value, bool) or str(value) == "":
            self.fail(entry, f"expected a node name, got {value!r}")
        return str(value)

    def parse_switches(self, declared):
        switches = {}
        if isinstance(declared, list):
            items = [(self.name(f"switches[{i}]", name), None) for i, name in enumerate(declared)]
        elif isinstance(declared, dict):
            items = []
            for name, attributes in declared.items():
                entry = f"switches.{name}"
                attributes = self.mapping(entry, attributes or {}, {"dpid"})
                dpid = attributes.get("dpid")
                if dpid is not None:
                    dpid = self.number(f"{entry}.dpid", dpid, 0, strictly=True, integer=True)
                items.append((self.name(entry, name), dpid))
        else:
            self.fail("switches", "expected a list of names or a mapping of name -> {dpid}")
        dpids = {}
        for name, dpid in items:
            if name in switches:
                self.fail(f"switches.{name}", "declared twice")
            if dpid is not None and dpid in dpids:
                self.fail(f"switches.{name}.dpid", f"{dpid} is already the dpid of {dpids[dpid]!r}")
            switches[name] = dpid
            if dpid is not None:
                dpids[dpid] = name
        return switches

    def parse_hosts(self, declared, switches):
        if not isinstance(declared, dict):
            self.fail("hosts", "expected a mapping of name -> {ip}")
        hosts, owners = {}, {}
        for raw_name, attributes in declared.items():
            name = self.name(f"hosts.{raw_name}", raw_name)
            entry = f"hosts.{name}"
            if name in switches:
                self.fail(entry, "name is already used by a switch")
            attributes = self.mapping(entry, attributes or {}, {"ip"})
            if "ip" not in attributes:
                self.fail(entry, "missing 'ip'")
            try:
                ip = str(ipaddress.ip_address(str(attributes["ip"])))
            except ValueError:
                self.fail(f"{entry}.ip", f"{attributes['ip']!r} is not an IP address")
            if ip in owners:
                self.fail(f"{entry}.ip", f"{ip} is already the address of {owners[ip]!r}")
            hosts[name], owners[ip] = ip, name
        return hosts

    def parse_links(self, declared, switches, hosts, defaults, delay_by_default):
        if not isinstance(declared, list):
            self.fail("links", "expected a list")
        links, seen, pinned = [], {}, set()
        host_links = {}
        for i, item in enumerate(declared):
            entry = f"links[{i}]"
            self.mapping(entry, item, _LINK_KEYS)
            for end in ("a", "b"):
                if end not in item:
                    self.fail(entry, f"missing '{end}'")
            a, b = self.name(f"{entry}.a", item["a"]), self.name(f"{entry}.b", item["b"])
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
            seen[key] = i
            for node in (a, b):
                if node in hosts:
                    if node in host_links:
                        self.fail(entry, f"host {node!r} already has a link (links[{host_links[node]}]); hosts are single-homed")
                    host_links[node] = i
            values = {k: self.link_value(entry, k, item[k]) for k in _LINK_VALUE_KEYS if k in item}
            if delay_by_default or "delay_us" in values:
                pinned.add(key)
            merged = {**defaults, **values}
            links.append(LinkSpec(a, b, merged["capacity_mbps"], merged["buffer_bytes"], merged["delay_us"]))
        for host in hosts:
            if host not in host_links:
                self.fail(f"hosts.{host}", "has no link")
        return links, pinned

    def parse_flows(self, declared, hosts):
        if not isinstance(declared, list):
            self.fail("flows", "expected a list")
        flows = {}
        for i, item in enumerate(declared):
            entry = f"flows[{i}]"
            self.mapping(entry, item, {"src", "dst", "count"})
            for end in ("src", "dst"):
                if end not in item:
                    self.fail(entry, f"missing '{end}'")
                if self.name(f"{entry}.{end}", item[end]) not in hosts:
                    self.fail(f"{entry}.{end}", f"unknown host {item[end]!r}")
            src, dst = str(item["src"]), str(item["dst"])
            if src == dst:
                self.fail(entry, f"a flow from {src!r} to itself")
            count = self.number(f"{entry}.count", item.get("count", 1), 0, strictly=True, integer=True)
            flows[(src, dst)] = flows.get((src, dst), 0) + count
        return flows

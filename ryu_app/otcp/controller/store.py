"""The controller's SQLite state (WAL): topology, measurements, generations.

A restarted controller reads its last generation number from here, so the
generations it pushes keep increasing, and `otcp-controller show` prints what
it last computed. `Store.prune` bounds the history (docs/operations.md, "Retention").
"""

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import astuple, dataclass, field, fields
from typing import Any

from otcp.controller.topology import Host
from otcp.wire.messages import Hello, RouteResult

_SCHEMA = """
CREATE TABLE IF NOT EXISTS switches (dpid INTEGER PRIMARY KEY, name TEXT, up INTEGER, seen_at REAL);
CREATE TABLE IF NOT EXISTS links (
    src TEXT, dst TEXT, src_dpid INTEGER, src_port INTEGER, dst_dpid INTEGER, dst_port INTEGER,
    up INTEGER, seen_at REAL, PRIMARY KEY (src, dst));
CREATE TABLE IF NOT EXISTS hosts (
    ip TEXT PRIMARY KEY, name TEXT, mac TEXT, dpid INTEGER, port INTEGER, seen_at REAL);
CREATE TABLE IF NOT EXISTS link_measurements (
    at REAL, src TEXT, dst TEXT, delay_s REAL, delay_source TEXT, samples INTEGER,
    capacity_bytes_per_s REAL, buffer_bytes REAL, flows INTEGER);
CREATE INDEX IF NOT EXISTS link_measurements_link ON link_measurements (src, dst, at);
CREATE TABLE IF NOT EXISTS generations (generation INTEGER PRIMARY KEY, computed_at REAL);
CREATE TABLE IF NOT EXISTS generation_inputs (
    generation INTEGER, src TEXT, dst TEXT, delay_s REAL, delay_source TEXT, samples INTEGER,
    capacity_bytes_per_s REAL, buffer_bytes REAL, flows INTEGER, PRIMARY KEY (generation, src, dst));
CREATE TABLE IF NOT EXISTS generation_flows (generation INTEGER, src TEXT, dst TEXT, count INTEGER);
CREATE TABLE IF NOT EXISTS parameters (
    generation INTEGER, src TEXT, dst TEXT, dst_ip TEXT, hops TEXT, min_rto_us REAL,
    rto_min_ms INTEGER, initcwnd INTEGER, cwnd_clamp INTEGER, quickack INTEGER,
    segment_bytes INTEGER, rtt_prop_us REAL, rtt_spread_us REAL, rtt_source TEXT, pacing_rate INTEGER,
    congctl TEXT, ssthresh INTEGER, increase INTEGER,
    PRIMARY KEY (generation, src, dst));
CREATE TABLE IF NOT EXISTS acks (host_ip TEXT PRIMARY KEY, generation INTEGER, acked_at REAL, results TEXT);
CREATE TABLE IF NOT EXISTS agents (host_ip TEXT PRIMARY KEY, seen_at REAL, hello TEXT);
"""


@dataclass(frozen=True, slots=True)
class LinkMeasurement:
    """What one plan used for one directed link, and how many flows crossed it."""

    src: str
    dst: str
    delay_s: float
    delay_source: str  # "inventory", "measured" or "default"
    samples: int  # probe samples behind a measured delay
    capacity_bytes_per_s: float
    buffer_bytes: float
    flows: int


_MEASUREMENT_COLUMNS = ", ".join(f.name for f in fields(LinkMeasurement))


@dataclass(frozen=True, slots=True)
class LinkRecord:
    """A discovered directed switch link: names and (dpid, port) ends."""

    src: str
    dst: str
    src_dpid: int
    src_port: int
    dst_dpid: int
    dst_port: int


@dataclass(frozen=True, slots=True)
class HostRecord:
    """A learned host with its name and where it is attached."""

    ip: str
    name: str
    mac: str
    dpid: int
    port: int


@dataclass
class Generation:
    """A parameter generation: the plan's records and the inputs it was computed from."""

    number: int
    # One per host pair, as Plan.records gives them: a list, or a planner.PlanRecords that makes
    # them when iterated and gives the store its rows from the plan's columns (`rows(number)`).
    records: Sequence[dict]
    link_rows: Sequence[LinkMeasurement]
    flows: dict[tuple[str, str], int]  # active host-pair flows by host name


@dataclass
class TopologySnapshot:
    """The topology at one plan: switches {dpid: name}, links and hosts."""

    switches: dict[int, str] = field(default_factory=dict)
    links: Sequence[LinkRecord] = field(default_factory=list)
    hosts: Sequence[HostRecord] = field(default_factory=list)


@dataclass(frozen=True)
class Pruned:
    """How many rows one `Store.prune` removed."""

    measurements: int
    generations: int


# Per-path columns added after the first version (segment size, where RTT_prop came from, the pacing rate,
# the long-fat-path settings).
_LATER_PARAMETER_COLUMNS = (("segment_bytes", "INTEGER"), ("rtt_prop_us", "REAL"), ("rtt_spread_us", "REAL"),
                            ("rtt_source", "TEXT"), ("pacing_rate", "INTEGER"), ("congctl", "TEXT"),
                            ("ssthresh", "INTEGER"), ("increase", "INTEGER"))
_PARAMETER_COLUMNS = ("src", "dst", "dst_ip", "hops", "min_rto_us", "rto_min_ms", "initcwnd", "cwnd_clamp",
                      "quickack", "segment_bytes", "rtt_prop_us", "rtt_spread_us", "rtt_source", "pacing_rate",
                      "congctl", "ssthresh", "increase")


class Store:
    """Read and write the controller state in one SQLite file.

    `clock` stamps every row (time.time unless a test simulates time).
    """

    def __init__(self, path: str, readonly: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        if readonly:
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        else:
            self.db = sqlite3.connect(path)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(_SCHEMA)
            self._add_missing_columns()
            self.db.commit()

    def _add_missing_columns(self) -> None:
        """A database made by an earlier version gets the per-path columns added since."""
        present = {row[1] for row in self.db.execute("PRAGMA table_info(parameters)")}
        for name, kind in _LATER_PARAMETER_COLUMNS:
            if name not in present:
                self.db.execute(f"ALTER TABLE parameters ADD COLUMN {name} {kind}")

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    # -- topology ------------------------------------------------------------

    def save_topology(self, snapshot: TopologySnapshot, measurements: Iterable[LinkMeasurement] = ()) -> None:
        """Record the current topology (what is gone is kept, marked down) and
        the link measurements a plan of it used."""
        now = self.clock()
        self.save_link_measurements(measurements)
        with self.db:
            self.db.execute("UPDATE switches SET up = 0")
            self.db.executemany(
                "INSERT OR REPLACE INTO switches VALUES (?, ?, 1, ?)",
                [(dpid, name, now) for dpid, name in snapshot.switches.items()],
            )
            self.db.execute("UPDATE links SET up = 0")
            self.db.executemany(
                "INSERT OR REPLACE INTO links VALUES (?, ?, ?, ?, ?, ?, 1, ?)",
                [(*astuple(link), now) for link in snapshot.links],
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO hosts VALUES (?, ?, ?, ?, ?, ?)",
                [(*astuple(host), now) for host in snapshot.hosts],
            )

    def known_hosts(self) -> list[Host]:
        """Every host ever learned, at its latest place."""
        return [Host(*row) for row in self.db.execute("SELECT ip, mac, dpid, port FROM hosts")]

    def save_link_measurements(self, rows: Iterable[LinkMeasurement]) -> None:
        """Append one row per directed link, stamped now."""
        now = self.clock()
        with self.db:
            self.db.executemany(
                f"INSERT INTO link_measurements (at, {_MEASUREMENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(now, *astuple(row)) for row in rows],
            )

    def latest_link_measurements(self) -> dict[tuple[str, str], dict[str, Any]]:
        """{(src, dst): row dict} with the newest measurement of each link."""
        cursor = self.db.execute(
            "SELECT src, dst, delay_s, delay_source, samples, capacity_bytes_per_s, buffer_bytes, flows, "
            "MAX(at) FROM link_measurements GROUP BY src, dst"
        )
        keys = ("delay_s", "delay_source", "samples", "capacity_bytes_per_s", "buffer_bytes", "flows", "at")
        return {(row[0], row[1]): dict(zip(keys, row[2:])) for row in cursor}

    # -- parameters ----------------------------------------------------------

    def last_generation_number(self) -> int:
        """The newest stored generation number, 0 if none."""
        row = self.db.execute("SELECT MAX(generation) FROM generations").fetchone()
        return row[0] or 0

    def save_generation(self, generation: Generation) -> None:
        """Store a full parameter generation with the inputs it was computed from."""
        number = generation.number
        with self.db:
            self.db.execute("INSERT INTO generations VALUES (?, ?)", (number, self.clock()))
            self.db.executemany(
                f"INSERT INTO generation_inputs (generation, {_MEASUREMENT_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(number, *astuple(row)) for row in generation.link_rows],
            )
            self.db.executemany(
                "INSERT INTO generation_flows VALUES (?, ?, ?, ?)",
                [(number, src, dst, count) for (src, dst), count in generation.flows.items()],
            )
            rows = getattr(generation.records, "rows", lambda number: None)(number)
            if rows is None:
                rows = (
                    (
                        number, r["src"], r["dst"], r["dst_ip"], json.dumps(r["hops"]), r["min_rto_us"],
                        r["rto_min_ms"], r["initcwnd"], r["cwnd_clamp"], int(r["quickack"]), r.get("segment_bytes"),
                        r.get("rtt_prop_us"), r.get("rtt_spread_us"), r.get("rtt_source"), r.get("pacing_rate"),
                        r.get("congctl"), r.get("ssthresh"), r.get("increase"),
                    )
                    for r in generation.records
                )
            self.db.executemany(
                f"INSERT INTO parameters (generation, {', '.join(_PARAMETER_COLUMNS)}) "
                f"VALUES (?{', ?' * len(_PARAMETER_COLUMNS)})", rows)

    def generations_between(self, start: float, end: float) -> int:
        """How many generations were computed in [start, end] (seconds since the epoch)."""
        return len(self.generations_made(start, end))

    def generations_made(self, start: float, end: float) -> list[tuple[int, float]]:
        """(generation, computed_at) of each generation computed in [start, end], oldest first."""
        return self.db.execute("SELECT generation, computed_at FROM generations WHERE computed_at BETWEEN ? AND ? "
                               "ORDER BY generation", (start, end)).fetchall()

    def generation_parameters(self, generation: int, columns: Iterable[str]) -> dict[tuple[str, str], tuple]:
        """{(src, dst): the values of columns (of the stored parameter columns)} of one generation."""
        columns = list(columns)
        unknown = [name for name in columns if name not in _PARAMETER_COLUMNS]
        if unknown:
            raise ValueError(f"columns: {', '.join(unknown)} not among the stored parameters")
        return {(src, dst): tuple(values) for src, dst, *values in self.db.execute(
            f"SELECT src, dst, {', '.join(columns)} FROM parameters WHERE generation = ?", (generation,))}

    def latest_generation(self) -> tuple[int, float, list[dict[str, Any]]] | None:
        """(generation, computed_at, records) of the newest generation, or None."""
        row = self.db.execute(
            "SELECT generation, computed_at FROM generations ORDER BY generation DESC LIMIT 1").fetchone()
        if row is None:
            return None
        cursor = self.db.execute(
            f"SELECT {', '.join(_PARAMETER_COLUMNS)} FROM parameters WHERE generation = ? ORDER BY src, dst",
            (row[0],),
        )
        records = []
        for values in cursor:
            record = dict(zip(_PARAMETER_COLUMNS, values))
            record["hops"], record["quickack"] = json.loads(record["hops"]), bool(record["quickack"])
            records.append(record)
        return row[0], row[1], records

    def generation_inputs(self, generation: int) -> tuple[dict[tuple[str, str], dict[str, Any]],
                                                          dict[tuple[str, str], int]]:
        """({(src, dst): row dict}, {(src, dst): flows}) a generation used."""
        keys = ("delay_s", "delay_source", "samples", "capacity_bytes_per_s", "buffer_bytes", "flows")
        links = {
            (row[0], row[1]): dict(zip(keys, row[2:]))
            for row in self.db.execute(
                "SELECT src, dst, delay_s, delay_source, samples, capacity_bytes_per_s, buffer_bytes, flows "
                "FROM generation_inputs WHERE generation = ?",
                (generation,),
            )
        }
        flows = {
            (src, dst): count
            for src, dst, count in self.db.execute(
                "SELECT src, dst, count FROM generation_flows WHERE generation = ?", (generation,)
            )
        }
        return links, flows

    # -- retention -------------------------------------------------------------

    def prune(self, measurements_s: float, generations: int) -> Pruned:
        """Delete link measurements older than measurements_s seconds and every
        generation but the newest `generations` (with their inputs, flows and parameters)."""
        with self.db:
            measurements = self.db.execute(
                "DELETE FROM link_measurements WHERE at < ?", (self.clock() - measurements_s,)).rowcount
            oldest_kept = self.db.execute(
                "SELECT generation FROM generations ORDER BY generation DESC LIMIT 1 OFFSET ?", (generations - 1,)
            ).fetchone()
            removed = 0
            if oldest_kept is not None:
                removed = self.db.execute("DELETE FROM generations WHERE generation < ?", oldest_kept).rowcount
                for table in ("generation_inputs", "generation_flows", "parameters"):
                    self.db.execute(f"DELETE FROM {table} WHERE generation < ?", oldest_kept)
        return Pruned(measurements, removed)

    # -- agents --------------------------------------------------------------

    def save_ack(self, host_ip: str, generation: int, results: Sequence[RouteResult]) -> None:
        """An agent's acknowledgement of a generation, with its per-route results (as the agent sent them)."""
        rows = [result.model_dump(exclude_unset=True) for result in results]
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO acks VALUES (?, ?, ?, ?)",
                (host_ip, generation, self.clock(), json.dumps(rows)),
            )

    def save_agent(self, host_ip: str, hello: Hello) -> None:
        """What an agent reported about its host (addresses, MSS, congestion controls...)."""
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO agents VALUES (?, ?, ?)",
                            (host_ip, self.clock(), json.dumps(hello.model_dump(exclude={"type"}))))

    def agents(self) -> dict[str, dict[str, Any]]:
        """{host_ip: the agent's last hello, as stored}."""
        return {ip: json.loads(hello) for ip, hello in self.db.execute("SELECT host_ip, hello FROM agents")}

    def acks(self) -> dict[str, int]:
        """{host_ip: acknowledged generation}."""
        return dict(self.db.execute("SELECT host_ip, generation FROM acks"))

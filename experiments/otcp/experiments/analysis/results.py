"""Where an experiment's results go: OUT/summary.json, SQLite (OUT/results.db) and OUT/routes/.

An experiment collects what it measured in an ``Outcome`` (ceiling samples,
run records, failures, notes, schemes that could not run here) and
``write_summary`` writes it, checked against the schema first, with the
command line that made it and the code it ran. The run records are the
synchronized-read workload's (``RunRecord``, ``RUN_FIELDS``: the incast
experiment's, and a simulator's that writes the same summary); another
workload passes its own record fields.

The summary's schema::

    {"ceiling_mbps": float,                   # median single-flow ceiling, 1500 B packets
     "ceilings": [{"packet_bytes", "median", "min", "max", "spread_pct", "samples",
                   "networks": [{"senders", "buffer_bytes", "median", "min", "max", "samples"}]}],
     "runs": [{"scheme", "senders", "buffer_bytes", "sru_bytes", "goodput_mbps",
               "fct_mean_ms", "fct_p50_ms", "fct_p95_ms", "fct_p99_ms", "drops",
               "timeouts", "probe_rtt_avg_ms", "probe_rtt_max_ms",
               "packet_bytes", "ceiling_mbps",          # the run's packet size and its network's ceiling at it
               "full_ceiling_mbps",                     # its network's ceiling at 1500 B packets, the line
                                                        # a user compares with (null: not measured)
               "sent", "delivered", "drops_other_buffers", "sender_queue_drops",
               "unexplained",                           # the loss account (runner.counters.LossAccount)
               "peak_backlog_bytes", "cpu_busy_pct", "cpu_busiest_pct",
               "cpu_softirq_pct", "cpu_steal_pct",      # parts of both cores' time: the kernel's network
                                                        # processing, and time the hypervisor took
               "switch_cpu_pct",                        # ovs-vswitchd's forwarding threads, % of a core
                                                        # (null without ovs-vswitchd)
               "switch_pmd_busy_pct",                   # its PMD threads' cycles spent on packets, % of a
                                                        # core (null without PMD threads)
               "ce_marks",                              # CE marks at the bottleneck (null without ECN)
               "generations",                           # generations the controller made during the
                                                        # measured rounds (null for static schemes)
               "backlog_empty_pct", "backlog_empty_tail_pct",  # the bottleneck's queue found empty:
               "round_tail_pct",                        # stats.queue_emptiness (null: no sample taken)
               "connections_unfinished_pct",            # stats.unfinished_connections
               "switch_input_mean_bytes", "switch_input_busy_pct"}],  # stats.switch_input (null: not sampled)
     "unexplained_losses": [{"scheme", "senders", "buffer_bytes", "unexplained"}],  # runs that lost packets
                                                                                   # no counter names
     "unavailable": [{"scheme", "reason"}],   # schemes that could not run here
     "datapaths": [{"asked", "used", "reason"}],  # the switches' port datapath asked for and used on
                                              # each network (runner.datapath; reason: why not the
                                              # one asked, null when it is), each distinct one once
     "notes": [str],                          # what the emulation could not enforce, and each
                                              # failure as "failed: LABEL: ERROR"
     "failures": [{"scheme", "senders", "buffer_bytes", "error"}],  # runs that failed, and why
     "command": str,                          # the command line that made the summary
     "code": {"commit", "modified",           # the checkout the sweep started from (null outside git) and
              "changed_during_sweep"}}        # whether it changed before the sweep ended (controllers
                                              # restarted per scheme load the code then on disk)

The database (``OUT/results.db``) holds the same runs plus everything behind
them: every round, every flow's completion time, per-host TCP counters,
the probe's RTT samples, packet and drop counters of every interface,
and the ceiling measurements.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shlex
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from otcp.experiments.analysis import stats

RUN_FIELDS = {
    "scheme": str,
    "senders": int,
    "buffer_bytes": int,
    "sru_bytes": int,
    "goodput_mbps": float,
    "fct_mean_ms": float,
    "fct_p50_ms": float,
    "fct_p95_ms": float,
    "fct_p99_ms": float,
    "drops": int,
    "timeouts": int,
    "probe_rtt_avg_ms": (float, type(None)),
    "probe_rtt_max_ms": (float, type(None)),
    "packet_bytes": int,
    "ceiling_mbps": float,
    "full_ceiling_mbps": (float, type(None)),
    "sent": int,
    "delivered": int,
    "drops_other_buffers": int,
    "sender_queue_drops": int,
    "unexplained": int,
    "peak_backlog_bytes": int,
    "cpu_busy_pct": float,
    "cpu_busiest_pct": float,
    "cpu_softirq_pct": (float, type(None)),
    "cpu_steal_pct": (float, type(None)),
    "switch_cpu_pct": (float, type(None)),
    "switch_pmd_busy_pct": (float, type(None)),
    "ce_marks": (int, type(None)),
    "generations": (int, type(None)),
    "backlog_empty_pct": (float, type(None)),
    "backlog_empty_tail_pct": (float, type(None)),
    "round_tail_pct": (float, type(None)),
    "connections_unfinished_pct": (float, type(None)),
    "switch_input_mean_bytes": (float, type(None)),
    "switch_input_busy_pct": (float, type(None)),
}
# May be negative: more packets delivered than sent (copies, or a packet counted at one end only).
SIGNED_FIELDS = {"unexplained"}


@dataclasses.dataclass
class RunRecord:
    """One scheme's run on one network: what the summary and the table show."""

    scheme: str
    senders: int
    buffer_bytes: int
    sru_bytes: int
    rounds: int
    persistent: int
    packet_bytes: int
    ceiling_mbps: float
    goodput_mbps: float
    fct_mean_ms: float
    fct_p50_ms: float
    fct_p95_ms: float
    fct_p99_ms: float
    drops: int
    sent: int
    delivered: int
    drops_other_buffers: int
    sender_queue_drops: int
    unexplained: int
    peak_backlog_bytes: int
    timeouts: int
    retransmissions: int
    probe_rtt_avg_ms: float | None
    probe_rtt_max_ms: float | None
    probe_rtt_std_ms: float | None
    probe_lost: float | None
    cpu_busy_pct: float
    cpu_busiest_pct: float
    switch_cpu_pct: float | None = None  # counters.switch_thread_time's busy share over the rounds (None: no OVS)
    switch_pmd_busy_pct: float | None = None  # counters.pmd_busy over the rounds (None: no PMD thread)
    # stats.cpu_parts over the rounds: softirq (the kernel's network processing) and steal, % of all CPUs' time
    cpu_softirq_pct: float | None = None
    cpu_steal_pct: float | None = None
    ce_marks: int | None = None  # packets the bottleneck's ECN marker marked CE (None: no marker)
    generations: int | None = None  # the controller's new generations during the measured rounds (None: no OTCP)
    # stats.queue_emptiness of the bottleneck's backlog samples (None: no sample taken there)
    backlog_empty_pct: float | None = None
    backlog_empty_tail_pct: float | None = None
    round_tail_pct: float | None = None
    connections_unfinished_pct: float | None = None  # stats.unfinished_connections (None: no round)
    # stats.switch_input: the switch's input sockets during rounds (None: not sampled)
    switch_input_mean_bytes: float | None = None
    switch_input_busy_pct: float | None = None
    # Frames the switch's AF_XDP ports dropped on input, their rings full (LossAccount; 0 on AF_PACKET)
    switch_input_drops: int | None = None
    # The network's single-flow ceiling at full-size (1500 B) packets (None: not measured)
    full_ceiling_mbps: float | None = None

    @classmethod
    def build(cls, head: Mapping[str, Any], rounds_summary: Mapping[str, Any], account: Any,
              probe_summary: Mapping[str, Any], **rest: Any) -> RunRecord:
        """From the run's identity (head), stats.summarize_rounds, a LossAccount
        (runner.counters), stats.summarize_probe and the rest."""
        loss = account.as_dict()
        return cls(**head, **rounds_summary, drops=loss["drops"], sent=loss["sent"], delivered=loss["delivered"],
                   drops_other_buffers=loss["drops_other_buffers"], sender_queue_drops=loss["sender_queue_drops"],
                   unexplained=loss["unexplained"], switch_input_drops=loss["switch_input_drops"],
                   **probe_summary, **rest)

    @property
    def share_of_ceiling(self) -> float:
        """Goodput as a fraction of the ceiling the run is judged against."""
        return self.goodput_mbps / self.ceiling_mbps if self.ceiling_mbps else 0.0

    @property
    def share_of_full_ceiling(self) -> float | None:
        """Goodput as a fraction of the network's full-size (1500 B) ceiling (None where not measured)."""
        return self.goodput_mbps / self.full_ceiling_mbps if self.full_ceiling_mbps else None

    def label(self) -> str:
        """scheme n=senders buf=buffer, as the progress bar and messages name a run."""
        return run_label(self.scheme, self.senders, self.buffer_bytes)


@dataclasses.dataclass
class RunDetail:
    """What the database keeps of a run beyond its record: the client's rounds (each with
    round, start_s, duration_s, bytes and flows_s, every server's completion), the servers in
    flows_s's order, per-host TCP counter changes, the probe's RTTs (ms), packet and drop
    counter changes per place {"node:device": {counter: delta}}, and the IPv4 queues' changes
    {host: {"egress"|"buffer": {"sent_packets", "drops"}}}."""

    rounds: list[dict[str, Any]]
    servers: list[str]
    host_counters: dict[str, dict[str, int]]
    probe_rtts: list[float]
    path_counters: dict[str, dict[str, int]]
    queues: dict[str, dict[str, dict[str, int]]]


def run_label(scheme: str, senders: int, buffer_bytes: int) -> str:
    """scheme n=senders buf=buffer: how the progress bar, messages and notes name a run."""
    return f"{scheme} n={senders} buf={buffer_bytes}"


@dataclasses.dataclass(frozen=True)
class Failure:
    """A run that failed: which (the scheme, the network's senders and buffer) and its error."""

    scheme: str
    senders: int
    buffer_bytes: int
    error: str

    def label(self) -> str:
        """The run's name, as run_label gives it."""
        return run_label(self.scheme, self.senders, self.buffer_bytes)

    def note(self) -> str:
        """The failure as the summary's notes and the log give it."""
        return f"failed: {self.label()}: {self.error}"

    def brief(self, limit: int = 100) -> str:
        """The error's first line, cut to limit characters: what a table row shows of it."""
        line = self.error.splitlines()[0] if self.error.strip() else "(no message)"
        return line if len(line) <= limit else line[:limit - 3] + "..."


@dataclasses.dataclass(frozen=True)
class CeilingSample:
    """One single-flow ceiling measurement on one network."""

    senders: int
    buffer_bytes: int
    packet_bytes: int
    mbps: float
    cpu_busy_pct: float
    switch_cpu_pct: float | None = None  # ovs-vswitchd's forwarding threads, % of a core
    switch_pmd_busy_pct: float | None = None  # its PMD threads' cycles spent on packets, % of a core


def ceiling_summary(samples: Sequence[CeilingSample]) -> list[dict[str, Any]]:
    """The summary's "ceilings": per packet size, the spread of every sample and of each network's."""
    summary = []
    for packet_bytes in sorted({s.packet_bytes for s in samples}, reverse=True):
        chosen = [s for s in samples if s.packet_bytes == packet_bytes]
        networks = []
        for key in dict.fromkeys((s.senders, s.buffer_bytes) for s in chosen):
            values = tuple(s.mbps for s in chosen if (s.senders, s.buffer_bytes) == key)
            spread = stats.Spread(values).as_dict()
            networks.append({"senders": key[0], "buffer_bytes": key[1], **spread})
        summary.append({"packet_bytes": packet_bytes, **stats.Spread(tuple(s.mbps for s in chosen)).as_dict(),
                        "networks": networks})
    return summary


def network_ceiling(samples: Sequence[CeilingSample], senders: int, buffer_bytes: int,
                    packet_bytes: int) -> float | None:
    """The median ceiling of one network at one packet size (None if not measured)."""
    values = tuple(s.mbps for s in samples
                   if (s.senders, s.buffer_bytes, s.packet_bytes) == (senders, buffer_bytes, packet_bytes))
    return stats.Spread(values).median if values else None


@dataclasses.dataclass(frozen=True)
class Unavailable:
    """A scheme that could not run here, and why (the kernel's or the setup's words)."""

    scheme: str
    reason: str


@dataclasses.dataclass
class Outcome:
    """What an experiment has produced so far: ceiling samples, run records, failures,
    notes (each once) and the schemes that could not run here."""

    ceilings: list[CeilingSample] = dataclasses.field(default_factory=list)
    runs: list[Any] = dataclasses.field(default_factory=list)
    failures: list[Failure] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    unavailable: list[Unavailable] = dataclasses.field(default_factory=list)
    # The switches' datapath per network (runner.datapath.DatapathInUse), each distinct one once.
    datapaths: list[Any] = dataclasses.field(default_factory=list)

    def note(self, progress: Any, note: str | None) -> None:
        """Keep note once and show it (progress: runner.progress.Progress)."""
        if note and note not in self.notes:
            self.notes.append(note)
            progress.message(f"note: {note}")

    def datapath(self, in_use: Any) -> None:
        """Keep the datapath a network ran on (runner.datapath.DatapathInUse), once."""
        if in_use not in self.datapaths:
            self.datapaths.append(in_use)

    def ceiling(self, packet_bytes: int = 1500) -> float | None:
        """The median of every ceiling sample at packet_bytes (None before any)."""
        values = tuple(c.mbps for c in self.ceilings if c.packet_bytes == packet_bytes)
        return stats.Spread(values).median if values else None


SCHEMA = """
CREATE TABLE IF NOT EXISTS invocation (
    id INTEGER PRIMARY KEY, started REAL, arguments TEXT, ceiling_mbps REAL);
CREATE TABLE IF NOT EXISTS ceiling (
    invocation INTEGER, senders INTEGER, buffer_bytes INTEGER, mbps REAL, packet_bytes INTEGER,
    cpu_busy_pct REAL, switch_cpu_pct REAL, switch_pmd_busy_pct REAL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, invocation INTEGER, scheme TEXT, senders INTEGER, buffer_bytes INTEGER,
    sru_bytes INTEGER, rounds INTEGER, persistent INTEGER, goodput_mbps REAL,
    fct_mean_ms REAL, fct_p50_ms REAL, fct_p95_ms REAL, fct_p99_ms REAL,
    drops INTEGER, peak_backlog_bytes INTEGER,
    timeouts INTEGER, retransmissions INTEGER,
    probe_rtt_avg_ms REAL, probe_rtt_max_ms REAL, probe_rtt_std_ms REAL, probe_lost REAL,
    packet_bytes INTEGER, ceiling_mbps REAL, sent INTEGER, delivered INTEGER, drops_other_buffers INTEGER,
    sender_queue_drops INTEGER, unexplained INTEGER, cpu_busy_pct REAL, cpu_busiest_pct REAL);
CREATE TABLE IF NOT EXISTS queues (
    run INTEGER, host TEXT, queue TEXT, sent_packets INTEGER, drops INTEGER);
CREATE TABLE IF NOT EXISTS rounds (
    run INTEGER, round INTEGER, start_s REAL, duration_s REAL, bytes INTEGER);
CREATE TABLE IF NOT EXISTS flows (
    run INTEGER, round INTEGER, server TEXT, duration_s REAL);
CREATE TABLE IF NOT EXISTS host_counters (
    run INTEGER, host TEXT, counter TEXT, delta INTEGER);
CREATE TABLE IF NOT EXISTS path_counters (
    run INTEGER, place TEXT, counter TEXT, delta INTEGER);
CREATE TABLE IF NOT EXISTS probe_rtts (
    run INTEGER, rtt_ms REAL);
CREATE TABLE IF NOT EXISTS unavailable (
    invocation INTEGER, scheme TEXT, reason TEXT);
"""


class SchemaError(ValueError):
    """A summary that does not follow the schema; names the run and the field."""


def check_run(run: Mapping[str, Any], where: str = "run", fields: Mapping[str, Any] | None = None) -> None:
    """Raise SchemaError unless run has every key of fields (default RUN_FIELDS) with a sane value."""
    for field, kinds in (RUN_FIELDS if fields is None else fields).items():
        if field not in run:
            raise SchemaError(f"{where}: missing {field}")
        value = run[field]
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise SchemaError(f"{where}: {field} is {value!r}, expected {' or '.join(k.__name__ for k in kinds)}")
        if isinstance(value, (int, float)) and value < 0 and field not in SIGNED_FIELDS:
            raise SchemaError(f"{where}: {field} is negative ({value})")
    if run.get("senders", 1) < 1 or run.get("sru_bytes", 1) < 1:
        raise SchemaError(f"{where}: senders and sru_bytes must be at least 1")
    if {"fct_p50_ms", "fct_p95_ms", "fct_p99_ms"} <= set(run) and \
            not run["fct_p50_ms"] <= run["fct_p95_ms"] <= run["fct_p99_ms"]:
        raise SchemaError(f"{where}: percentiles out of order (p50 {run['fct_p50_ms']}, p95 {run['fct_p95_ms']}, "
                          f"p99 {run['fct_p99_ms']})")


#: The summary's lists besides runs (each optional): its key, what makes an entry valid, and what is expected.
SUMMARY_LISTS: tuple[tuple[str, Callable[[dict[str, Any]], bool], str], ...] = (
    ("unexplained_losses", lambda entry: isinstance(entry.get("unexplained"), int) and bool(entry["unexplained"]),
     "{scheme, senders, buffer_bytes, unexplained} with unexplained not 0"),
    ("unavailable", lambda entry: isinstance(entry.get("scheme"), str) and isinstance(entry.get("reason"), str)
     and bool(entry["reason"]), "{scheme, reason}"),
    ("failures", lambda entry: isinstance(entry.get("scheme"), str) and isinstance(entry.get("senders"), int)
     and isinstance(entry.get("buffer_bytes"), int) and isinstance(entry.get("error"), str),
     "{scheme, senders, buffer_bytes, error}"),
    ("datapaths", lambda entry: isinstance(entry.get("asked"), str) and isinstance(entry.get("used"), str)
     and isinstance(entry.get("reason"), (str, type(None))), "{asked, used, reason}"),
)


def check_summary(document: Any, fields: Mapping[str, Any] | None = None) -> None:
    """Raise SchemaError unless document follows the summary schema (runs with fields, default RUN_FIELDS)."""
    if not isinstance(document, dict):
        raise SchemaError("summary: expected an object")
    ceiling = document.get("ceiling_mbps")
    if isinstance(ceiling, bool) or not isinstance(ceiling, (int, float)) or ceiling <= 0:
        raise SchemaError(f"summary: ceiling_mbps is {ceiling!r}, expected a positive number")
    runs = document.get("runs")
    if not isinstance(runs, list):
        raise SchemaError("summary: runs must be a list")
    for index, run in enumerate(runs):
        if not isinstance(run, dict):
            raise SchemaError(f"runs[{index}]: expected an object")
        check_run(run, f"runs[{index}] ({run.get('scheme')}, {run.get('senders')} senders)", fields)
    for key, valid, expected in SUMMARY_LISTS:
        for index, entry in enumerate(document.get(key, [])):
            if not (isinstance(entry, dict) and valid(entry)):
                raise SchemaError(f"{key}[{index}]: expected {expected}")
    if not isinstance(document.get("command", ""), str):
        raise SchemaError(f"summary: command is {document['command']!r}, expected the command line as a string")
    code = document.get("code")
    if not (isinstance(code, dict) and isinstance(code.get("commit"), (str, type(None)))
            and isinstance(code.get("modified"), (bool, type(None)))
            and isinstance(code.get("changed_during_sweep"), bool)):
        raise SchemaError(f"summary: code is {code!r}, expected {{commit, modified, changed_during_sweep}}")


def summary_run(run: Any, fields: Iterable[str] | None = None) -> dict[str, Any]:
    """The summary's view of a run record (only fields, default RUN_FIELDS)."""
    return {field: getattr(run, field) for field in (RUN_FIELDS if fields is None else fields)}


def unexplained_losses(runs: Iterable[Any]) -> list[dict[str, Any]]:
    """The runs that lost packets no kernel counter names, for the summary's flag."""
    return [{"scheme": r.scheme, "senders": r.senders, "buffer_bytes": r.buffer_bytes, "unexplained": r.unexplained}
            for r in runs if r.unexplained]


class ResultStore:
    """The SQLite database of one output directory (appends; one invocation per experiment).
    Its runs table has a column per field of record_type (RunRecord unless another is given)."""

    def __init__(self, path: str, arguments: Mapping[str, Any], record_type: type = RunRecord) -> None:
        self.db = sqlite3.connect(path)
        self.db.executescript(SCHEMA)
        _add_missing_columns(self.db, record_type)
        cursor = self.db.execute("INSERT INTO invocation (started, arguments) VALUES (?, ?)",
                                 (time.time(), json.dumps(arguments, sort_keys=True)))
        self.invocation = cursor.lastrowid
        self.db.commit()

    def add_ceiling(self, sample: CeilingSample, ceiling_mbps: float | None) -> None:
        """Store one CeilingSample; ceiling_mbps: the invocation's ceiling so far (1500 B median)."""
        self.db.execute("INSERT INTO ceiling (invocation, senders, buffer_bytes, mbps, packet_bytes, cpu_busy_pct, "
                        "switch_cpu_pct, switch_pmd_busy_pct) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (self.invocation, sample.senders, sample.buffer_bytes, sample.mbps, sample.packet_bytes,
                         sample.cpu_busy_pct, sample.switch_cpu_pct, sample.switch_pmd_busy_pct))
        self.db.execute("UPDATE invocation SET ceiling_mbps = ? WHERE id = ?", (ceiling_mbps, self.invocation))
        self.db.commit()

    def add_unavailable(self, unavailable: Unavailable) -> None:
        """Store a scheme that could not run here and why."""
        self.db.execute("INSERT INTO unavailable VALUES (?, ?, ?)",
                        (self.invocation, unavailable.scheme, unavailable.reason))
        self.db.commit()

    def add_run(self, run: Any, detail: RunDetail) -> int:
        """Store one run: its record and its RunDetail."""
        record = dataclasses.asdict(run)
        columns = list(record)
        cursor = self.db.execute(
            f"INSERT INTO runs (invocation, {', '.join(columns)}) VALUES (?{', ?' * len(columns)})",
            [self.invocation] + [record[c] for c in columns])
        run_id = cursor.lastrowid
        assert run_id is not None
        rounds = detail.rounds
        self.db.executemany("INSERT INTO rounds VALUES (?, ?, ?, ?, ?)",
                            [(run_id, r["round"], r["start_s"], r["duration_s"], r["bytes"]) for r in rounds])
        self.db.executemany("INSERT INTO flows VALUES (?, ?, ?, ?)",
                            [(run_id, r["round"], detail.servers[i], d) for r in rounds
                             for i, d in enumerate(r["flows_s"])])
        self.db.executemany("INSERT INTO host_counters VALUES (?, ?, ?, ?)",
                            [(run_id, host, name, delta) for host, deltas in detail.host_counters.items()
                             for name, delta in deltas.items()])
        self.db.executemany("INSERT INTO probe_rtts VALUES (?, ?)", [(run_id, rtt) for rtt in detail.probe_rtts])
        self.db.executemany("INSERT INTO path_counters VALUES (?, ?, ?, ?)",
                            [(run_id, place, name, delta) for place, deltas in detail.path_counters.items()
                             for name, delta in deltas.items()])
        self.db.executemany("INSERT INTO queues VALUES (?, ?, ?, ?, ?)",
                            [(run_id, host, queue, counts["sent_packets"], counts["drops"])
                             for host, queues in detail.queues.items() for queue, counts in queues.items()])
        self.db.commit()
        return run_id

    def close(self) -> None:
        """Close the database."""
        self.db.close()


def _add_missing_columns(db: sqlite3.Connection, record_type: Any) -> None:
    """Columns a database from an older version of this runner lacks (it appends to OUT/results.db)."""
    wanted = {"runs": [f.name for f in dataclasses.fields(record_type)],
              "ceiling": ["packet_bytes", "cpu_busy_pct", "switch_cpu_pct", "switch_pmd_busy_pct"]}
    for table, columns in wanted.items():
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column in columns:
            if column not in present:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
    db.commit()


#: The checkout this runner belongs to (experiments/otcp/experiments/analysis/ is in it).
REPOSITORY = str(pathlib.Path(__file__).resolve().parents[4])


def code_version(root: str = REPOSITORY) -> dict[str, Any]:
    """{"commit", "modified"}: the commit the git checkout at root is at, and whether
    its tracked files differ from it; both None outside a checkout or without git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        return {"commit": commit, "modified": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "modified": None}


def write_json(path: str, document: Any, indent: int = 2) -> str:
    """Write document to path as JSON, atomically (a reader never sees half of it); return path."""
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=indent)
        handle.write("\n")
    os.replace(path + ".tmp", path)
    return path


def provenance(code_at_start: dict[str, Any], command: Sequence[str]) -> dict[str, Any]:
    """{"command", "code"}: the command line that made a result, and the code it ran: the commit
    it started from, whether tracked files differed from it, and whether it changed before the
    experiment ended (controllers restarted per scheme load the code then on disk)."""
    return {"command": shlex.join(command),
            "code": {**code_at_start, "changed_during_sweep": code_version() != code_at_start}}


def write_summary(out_dir: str, outcome: Outcome, code_at_start: dict[str, Any], command: Sequence[str],
                  fields: Mapping[str, Any] | None = None) -> str:
    """Write OUT/summary.json (checked against the schema first) and return its path.

    outcome: the experiment's (ceilings, runs, failures, notes, unavailable), at least one
    ceiling sample; code_at_start: code_version() when it started (compared with now);
    command: the command line that started it; fields: the run records' (default RUN_FIELDS)."""
    ceilings = ceiling_summary(outcome.ceilings)
    main = next((c for c in ceilings if c["packet_bytes"] == 1500), ceilings[0])
    document = {"ceiling_mbps": main["median"], "ceilings": ceilings,
                "runs": [summary_run(r, fields) for r in outcome.runs],
                "unexplained_losses": unexplained_losses(outcome.runs),
                "unavailable": [dataclasses.asdict(u) for u in outcome.unavailable],
                "datapaths": [d.as_dict() for d in outcome.datapaths],
                "notes": outcome.notes + [failure.note() for failure in outcome.failures],
                "failures": [dataclasses.asdict(failure) for failure in outcome.failures],
                **provenance(code_at_start, command)}
    check_summary(document, fields)
    return write_json(os.path.join(out_dir, "summary.json"), document)


OutcomeT = TypeVar("OutcomeT", bound=Outcome)


def write_summary_and_plots(out_dir: str, outcome: OutcomeT, code_at_start: dict[str, Any], command: Sequence[str],
                            draw_plots: Callable[[str, OutcomeT], None],
                            fields: Mapping[str, Any] | None = None) -> str | None:
    """Where anything was measured (a ceiling sample): write_summary, then draw_plots(out_dir,
    outcome); return the summary's path, else None."""
    if not outcome.ceilings:
        return None
    summary = write_summary(out_dir, outcome, code_at_start, command, fields)
    draw_plots(out_dir, outcome)
    return summary


def write_routes(out_dir: str, scheme: str, host: str, heading: str, text: str) -> str:
    """Append one network's routes of host under scheme to OUT/routes/<scheme>/<host>.txt.

    A sweep builds one network per sender count and buffer: each gets its
    own section, headed by heading (a comment line)."""
    directory = os.path.join(out_dir, "routes", scheme)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{host}.txt")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"# {heading}\n{text.rstrip()}\n\n")
    return path

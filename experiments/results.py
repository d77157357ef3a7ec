"""Where an incast sweep's results go: SQLite, OUT/summary.json and OUT/routes/.

The summary's schema (issue 4)::

    {"ceiling_mbps": float,
     "runs": [{"scheme", "senders", "buffer_bytes", "sru_bytes", "goodput_mbps",
               "fct_mean_ms", "fct_p50_ms", "fct_p95_ms", "fct_p99_ms", "drops",
               "timeouts", "probe_rtt_avg_ms", "probe_rtt_max_ms"}],
     "unavailable": [{"scheme", "reason"}],   # schemes that could not run here
     "notes": [str]}                          # what the emulation could not enforce

The database (``OUT/results.db``) holds the same runs plus everything behind
them: every round, every flow's completion time, per-host TCP counters,
the probe's RTT samples, packet and drop counters of every interface,
and the ceiling measurements.
"""

import json
import os
import sqlite3
import time

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
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS invocation (
    id INTEGER PRIMARY KEY, started REAL, arguments TEXT, ceiling_mbps REAL);
CREATE TABLE IF NOT EXISTS ceiling (
    invocation INTEGER, senders INTEGER, buffer_bytes INTEGER, mbps REAL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, invocation INTEGER, scheme TEXT, senders INTEGER, buffer_bytes INTEGER,
    sru_bytes INTEGER, rounds INTEGER, persistent INTEGER, goodput_mbps REAL,
    fct_mean_ms REAL, fct_p50_ms REAL, fct_p95_ms REAL, fct_p99_ms REAL,
    drops INTEGER, drops_elsewhere INTEGER, lost_in_switch INTEGER, peak_backlog_bytes INTEGER,
    timeouts INTEGER, retransmissions INTEGER,
    probe_rtt_avg_ms REAL, probe_rtt_max_ms REAL, probe_rtt_std_ms REAL, probe_lost REAL);
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


def check_run(run, where="run"):
    """Raise SchemaError unless run has every RUN_FIELDS key with a sane value."""
    for field, kinds in RUN_FIELDS.items():
        if field not in run:
            raise SchemaError(f"{where}: missing {field}")
        value = run[field]
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise SchemaError(f"{where}: {field} is {value!r}, expected {' or '.join(k.__name__ for k in kinds)}")
        if isinstance(value, (int, float)) and value < 0:
            raise SchemaError(f"{where}: {field} is negative ({value})")
    if run["senders"] < 1 or run["sru_bytes"] < 1:
        raise SchemaError(f"{where}: senders and sru_bytes must be at least 1")
    if not run["fct_p50_ms"] <= run["fct_p95_ms"] <= run["fct_p99_ms"]:
        raise SchemaError(f"{where}: percentiles out of order (p50 {run['fct_p50_ms']}, p95 {run['fct_p95_ms']}, "
                          f"p99 {run['fct_p99_ms']})")


def check_summary(document):
    """Raise SchemaError unless document follows the summary schema."""
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
        check_run(run, f"runs[{index}] ({run.get('scheme')}, {run.get('senders')} senders)")
    for index, entry in enumerate(document.get("unavailable", [])):
        if not (isinstance(entry, dict) and isinstance(entry.get("scheme"), str)
                and isinstance(entry.get("reason"), str) and entry["reason"]):
            raise SchemaError(f"unavailable[{index}]: expected {{scheme, reason}}")


def summary_run(run):
    """The summary's view of a full run record (only RUN_FIELDS)."""
    return {field: run[field] for field in RUN_FIELDS}


class ResultStore:
    """The SQLite database of one output directory (appends; one invocation per sweep)."""

    def __init__(self, path, arguments):
        self.db = sqlite3.connect(path)
        self.db.executescript(SCHEMA)
        cursor = self.db.execute("INSERT INTO invocation (started, arguments) VALUES (?, ?)",
                                 (time.time(), json.dumps(arguments, sort_keys=True)))
        self.invocation = cursor.lastrowid
        self.db.commit()

    def add_ceiling(self, senders, buffer_bytes, mbps):
        self.db.execute("INSERT INTO ceiling VALUES (?, ?, ?, ?)", (self.invocation, senders, buffer_bytes, mbps))
        self.db.execute("UPDATE invocation SET ceiling_mbps = ? WHERE id = ?", (mbps, self.invocation))
        self.db.commit()

    def add_unavailable(self, scheme, reason):
        self.db.execute("INSERT INTO unavailable VALUES (?, ?, ?)", (self.invocation, scheme, reason))
        self.db.commit()

    def add_run(self, run, rounds, servers, host_counters, probe_rtts, drops):
        """Store one run: its summary record, rounds, flows, TCP counters per
        host, probe samples and packet/drop counters per place ({"node:device": {counter: delta}})."""
        columns = ["scheme", "senders", "buffer_bytes", "sru_bytes", "rounds", "persistent", "goodput_mbps",
                   "fct_mean_ms", "fct_p50_ms", "fct_p95_ms", "fct_p99_ms", "drops", "drops_elsewhere",
                   "lost_in_switch", "peak_backlog_bytes",
                   "timeouts", "retransmissions", "probe_rtt_avg_ms", "probe_rtt_max_ms", "probe_rtt_std_ms",
                   "probe_lost"]
        cursor = self.db.execute(
            f"INSERT INTO runs (invocation, {', '.join(columns)}) VALUES (?{', ?' * len(columns)})",
            [self.invocation] + [run[c] for c in columns])
        run_id = cursor.lastrowid
        self.db.executemany("INSERT INTO rounds VALUES (?, ?, ?, ?, ?)",
                            [(run_id, r["round"], r["start_s"], r["duration_s"], r["bytes"]) for r in rounds])
        self.db.executemany("INSERT INTO flows VALUES (?, ?, ?, ?)",
                            [(run_id, r["round"], servers[i], d) for r in rounds for i, d in enumerate(r["flows_s"])])
        self.db.executemany("INSERT INTO host_counters VALUES (?, ?, ?, ?)",
                            [(run_id, host, name, delta) for host, deltas in host_counters.items()
                             for name, delta in deltas.items()])
        self.db.executemany("INSERT INTO probe_rtts VALUES (?, ?)", [(run_id, rtt) for rtt in probe_rtts])
        self.db.executemany("INSERT INTO path_counters VALUES (?, ?, ?, ?)",
                            [(run_id, place, name, delta) for place, deltas in drops.items()
                             for name, delta in deltas.items()])
        self.db.commit()
        return run_id

    def close(self):
        self.db.close()


def write_summary(out_dir, ceiling_mbps, runs, unavailable, notes):
    """Write OUT/summary.json (checked against the schema first) and return its path."""
    document = {"ceiling_mbps": ceiling_mbps, "runs": [summary_run(r) for r in runs],
                "unavailable": [{"scheme": s, "reason": r} for s, r in unavailable],
                "notes": list(notes)}
    check_summary(document)
    path = os.path.join(out_dir, "summary.json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2)
        handle.write("\n")
    os.replace(path + ".tmp", path)
    return path


def write_routes(out_dir, scheme, host, heading, text):
    """Append one network's routes of host under scheme to OUT/routes/<scheme>/<host>.txt.

    A sweep builds one network per sender count and buffer: each gets its
    own section, headed by heading (a comment line)."""
    directory = os.path.join(out_dir, "routes", scheme)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{host}.txt")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"# {heading}\n{text.rstrip()}\n\n")
    return path

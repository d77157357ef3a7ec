"""The agent's local state: the generation it applied, in SQLite.

One row holds the last applied set (its generation, the validated routes,
the per-route results) and whether it is still active (``revert`` keeps
the generation, so an older set is still refused, but marks it inactive so
a restart does not put the routes back). Another holds the set's lease when
the controller gave it one (`otcp.agent.lease.StoredLease`: wall-clock times,
and whether the kernel holds the set's safe state); a set without one (applied
by hand) holds until it is replaced. Another holds the epoch of the controller
the applied set came from (its authority, docs/design.md, "Two controllers"):
no set of an older epoch is taken, across restarts too; a set applied by hand
keeps the epoch held. A small journal records every apply,
rejection, lapse and revert for the operator.

Before the kernel is touched, an apply records its *intent*: the
destinations it is about to write. A successful apply clears it in the same
transaction that records the new generation, so an intent found later means
an apply was interrupted (``kill -9``, power loss) and names what it may
have left in the kernel.

A state file that cannot be read (truncated, garbage, another schema, bad
JSON, a directory) raises `CorruptState` with one line saying why;
`move_aside` puts it out of the way so the agent can start afresh.

A state file that cannot be written (read-only, immutable, locked by another
process) raises `StateUnwritable` with one line saying why; every command
that changes routes writes the state first (the intent, or `check_writable`),
so such a file stops it before the kernel is touched.

`StateLock` serialises every command that changes routes (a running agent,
``apply``, ``revert``) on one host through an flock next to the database;
`RunLock` lets one ``otcp-agent run`` use a state file at a time.
"""

import contextlib
import fcntl
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from otcp.agent.lease import StoredLease
from otcp.wire import framing, paramset, validation
from otcp.wire.limits import EPOCH
from otcp.wire.messages import RouteResult
from otcp.wire.paramset import ParamSet

SCHEMA = """
CREATE TABLE IF NOT EXISTS applied (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL,
    param_set TEXT NOT NULL,
    results TEXT NOT NULL,
    applied_at REAL NOT NULL,
    active INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS journal (
    at REAL NOT NULL,
    generation INTEGER,
    source TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS intent (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL,
    destinations TEXT NOT NULL,
    started_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS authority (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    lease_s REAL NOT NULL,
    granted_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    lapsed INTEGER NOT NULL
);
"""
COLUMNS = {
    "applied": ["id", "generation", "param_set", "results", "applied_at", "active"],
    "journal": ["at", "generation", "source", "outcome", "detail"],
    "intent": ["id", "generation", "destinations", "started_at"],
    "lease": ["id", "lease_s", "granted_at", "expires_at", "lapsed"],
    "authority": ["id", "epoch"],
}
JOURNAL_ROWS = 1000
#: A journal entry keeps at most this much of what it was sent, so one
#: hostile set cannot grow the state file.
DETAIL_BYTES = 2048


#: How long a write waits for another process that holds the database's write lock. Agent
#: commands take turns through `StateLock`, so only an outsider holds it longer than a write.
BUSY_TIMEOUT_S = 5.0


class CorruptState(Exception):
    """The state file cannot be used; the message says why, in one line."""


class StateUnwritable(Exception):
    """The state file cannot be written now (read-only, immutable, locked); the message says why,
    in one line. Nothing was changed in the kernel because of the write that failed."""


def _unwritable(path: str, error: sqlite3.Error) -> StateUnwritable:
    """The one line for a write the database refused."""
    text = str(error)
    if "readonly" in text or "read-only" in text:
        why = "the file is read-only (its permissions, an immutable attribute, or a read-only mount)"
    elif "locked" in text or "busy" in text:
        why = f"another process has held its write lock for more than {BUSY_TIMEOUT_S:g} s"
    else:
        why = text
    return StateUnwritable(f"{path}: cannot write the state: {why}")


def _is_unwritable(error: sqlite3.Error) -> bool:
    text = str(error)
    return any(word in text for word in ("readonly", "read-only", "locked", "busy"))


@dataclass(frozen=True)
class Applied:
    """The last applied generation as stored (its per-route results: `State.applied_results`),
    with its lease (None: held until replaced)."""

    generation: int
    param_set: ParamSet
    applied_at: float
    active: bool
    lease: StoredLease | None = None


class State:
    """The agent's SQLite file."""

    def __init__(self, path: str) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        try:
            # Several controller connections use it, one at a time (otcp.agent.client.SharedAgent).
            self.db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        except sqlite3.Error as error:
            raise CorruptState(f"{path}: cannot open the state: {error}") from None
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(SCHEMA)
            self._check()
        except (sqlite3.Error, CorruptState) as error:
            self.db.close()
            if isinstance(error, CorruptState):
                raise
            if isinstance(error, sqlite3.OperationalError) and _is_unwritable(error):
                raise _unwritable(path, error) from None  # a good file that cannot be written now: not corrupt
            raise CorruptState(f"{path}: not a usable state database: {error}") from None

    def _check(self) -> None:
        """Refuse a file whose tables or stored set are not what this agent writes."""
        for table, columns in COLUMNS.items():
            found = [row[1] for row in self.db.execute(f"PRAGMA table_info({table})")]
            if found != columns:
                raise CorruptState(f"{self.path}: table {table} has columns {found}, expected {columns}")
        self.applied()
        self.applied_results()
        self.intent()
        self.lease()
        self.epoch()

    def close(self) -> None:
        """Close the state database."""
        self.db.close()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction; a database that refuses it raises StateUnwritable."""
        try:
            with self.db:
                yield
        except sqlite3.OperationalError as error:
            if _is_unwritable(error):
                raise _unwritable(self.path, error) from None
            raise

    def check_writable(self) -> None:
        """Raise StateUnwritable unless the state can be written now (takes the write lock and
        changes nothing): what a command checks before it touches the kernel."""
        with self._writing():
            self.db.execute("UPDATE applied SET id = id WHERE 0")

    def applied(self) -> Applied | None:
        """The last applied generation, or None if nothing was ever applied."""
        row = self.db.execute("SELECT generation, param_set, applied_at, active FROM applied WHERE id = 1").fetchone()
        if row is None:
            return None
        try:
            stored = paramset.validate_param_set(validation.load_json(row[1].encode(), "stored set"))
        except (AttributeError, ValueError) as error:
            raise CorruptState(f"{self.path}: the stored generation is unreadable: {error}") from None
        if stored.generation != row[0]:
            raise CorruptState(f"{self.path}: the stored generation does not match its set")
        return Applied(row[0], stored, row[2], bool(row[3]), self.lease())

    def lease(self) -> StoredLease | None:
        """The applied set's lease, or None when it has none."""
        row = self.db.execute("SELECT lease_s, granted_at, expires_at, lapsed FROM lease WHERE id = 1").fetchone()
        if row is None:
            return None
        if not all(isinstance(value, (int, float)) and math.isfinite(value) for value in row[:3]) or row[0] <= 0:
            raise CorruptState(f"{self.path}: the stored lease is unreadable: {row!r}")
        return StoredLease(float(row[0]), float(row[1]), float(row[2]), bool(row[3]))

    def epoch(self) -> int | None:
        """The epoch of the controller the applied set came from (None: none ever held)."""
        row = self.db.execute("SELECT epoch FROM authority WHERE id = 1").fetchone()
        if row is None:
            return None
        if not isinstance(row[0], int) or isinstance(row[0], bool) or not 0 <= row[0] <= EPOCH[1]:
            raise CorruptState(f"{self.path}: the stored epoch is unreadable: {row[0]!r}")
        return row[0]

    def applied_results(self) -> list[RouteResult]:
        """What became of each route of the last applied set, as the ack reported it ([] if none)."""
        row = self.db.execute("SELECT results FROM applied WHERE id = 1").fetchone()
        if row is None:
            return []
        try:
            results = validation.load_json(row[0].encode(), "stored results")
            if not isinstance(results, list):
                raise ValueError("stored results: not a list")
            return [validation.check(RouteResult, result, f"stored results[{i}]") for i, result in enumerate(results)]
        except (AttributeError, ValueError) as error:
            raise CorruptState(f"{self.path}: the stored results are unreadable: {error}") from None

    def applied_generation(self) -> int | None:
        """The applied generation number, or None."""
        applied = self.applied()
        return None if applied is None else applied.generation

    def save_applied(self, param_set: ParamSet, results: Sequence[RouteResult], source: str,
                     lease: StoredLease | None = None, epoch: int | None = None) -> None:
        """Record a set as applied, with its per-route results, its lease (None: held until
        replaced) and its sender's epoch (None: the held epoch stays); the intent is done."""
        stored_results = [result.model_dump(exclude_unset=True) for result in results]
        with self._writing():
            self.db.execute(
                "INSERT OR REPLACE INTO applied VALUES (1, ?, ?, ?, ?, 1)",
                (param_set.generation, framing.encode_json(param_set).decode(), json.dumps(stored_results),
                 time.time()),
            )
            self.db.execute("DELETE FROM intent")
            self._write_lease(lease)
            if epoch is not None:
                self.db.execute("INSERT OR REPLACE INTO authority VALUES (1, ?)", (epoch,))
            held = "" if epoch is None else f" of epoch {epoch}"
            self._journal(param_set.generation, source, "applied", f"{len(param_set.routes)} route(s){held}")

    def save_lease(self, lease: StoredLease) -> None:
        """Record the applied set's lease as renewed (not journaled: it comes every few seconds)."""
        with self._writing():
            self._write_lease(lease)

    def mark_lapsed(self, lease: StoredLease, detail: str) -> None:
        """Record that the applied set's lease lapsed and the kernel holds its safe state."""
        with self._writing():
            self._write_lease(lease)
            self._journal(self.applied_generation(), "lease", "lapsed", detail)

    def _write_lease(self, lease: StoredLease | None) -> None:
        if lease is None:
            self.db.execute("DELETE FROM lease")
        else:
            self.db.execute("INSERT OR REPLACE INTO lease VALUES (1, ?, ?, ?, ?)",
                            (lease.lease_s, lease.granted_at, lease.expires_at, int(lease.lapsed)))

    def begin(self, generation: int, destinations: Sequence[str]) -> None:
        """Record, durably and before the kernel is touched, what an apply is about to write."""
        with self._writing():
            self.db.execute("INSERT OR REPLACE INTO intent VALUES (1, ?, ?, ?)",
                            (generation, json.dumps(sorted(destinations)), time.time()))

    def end(self) -> None:
        """Forget the intent of an apply that ended without a new generation (refused, rolled back)."""
        with self._writing():
            self.db.execute("DELETE FROM intent")

    def intent(self) -> tuple[int, list[str]] | None:
        """(generation, destinations) of an apply that started and never ended, or None."""
        row = self.db.execute("SELECT generation, destinations FROM intent WHERE id = 1").fetchone()
        if row is None:
            return None
        try:
            destinations = validation.load_json(row[1].encode(), "stored intent")
        except (AttributeError, ValueError) as error:
            raise CorruptState(f"{self.path}: the stored intent is unreadable: {error}") from None
        if not isinstance(destinations, list) or not all(isinstance(d, str) for d in destinations):
            raise CorruptState(f"{self.path}: the stored intent is not a list of destinations")
        return row[0], destinations

    def mark_reverted(self, removed: int) -> None:
        """Record that every OTCP route was removed."""
        with self._writing():
            self.db.execute("UPDATE applied SET active = 0 WHERE id = 1")
            self.db.execute("DELETE FROM lease")
            self._journal(self.applied_generation(), "revert", "reverted", f"{removed} route(s) removed")

    def record(self, generation: int | None, source: str, outcome: str, detail: str) -> None:
        """Journal an event that changed nothing (a rejection, a failed apply)."""
        with self._writing():
            self._journal(generation, source, outcome, detail)

    def journal(self, limit: int = 20) -> list[tuple[Any, ...]]:
        """The newest journal entries: what was applied, rejected or failed."""
        query = "SELECT at, generation, source, outcome, detail FROM journal ORDER BY rowid DESC LIMIT ?"
        return self.db.execute(query, (limit,)).fetchall()

    def _journal(self, generation: int | None, source: str, outcome: str, detail: str) -> None:
        if len(detail.encode()) > DETAIL_BYTES:
            detail = detail.encode()[: DETAIL_BYTES - 20].decode(errors="ignore") + " ... (cut)"
        row = (time.time(), generation, source, outcome, detail)
        self.db.execute("INSERT INTO journal VALUES (?, ?, ?, ?, ?)", row)
        self.db.execute(
            "DELETE FROM journal WHERE rowid <= (SELECT MAX(rowid) FROM journal) - ?", (JOURNAL_ROWS,)
        )


def move_aside(path: str) -> str:
    """Rename a state file (and its WAL files) that cannot be used; returns the new name."""
    aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
    os.rename(path, aside)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.rename(path + suffix, aside + suffix)
    return aside


class StateLock:
    """An exclusive flock on ``<state>.lock``: one route writer at a time."""

    def __init__(self, state_path: str) -> None:
        self.path = os.path.abspath(state_path) + ".lock"
        self._handle: IO[str] | None = None

    def __enter__(self) -> "StateLock":
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._handle = open(self.path, "a")
        fcntl.flock(self._handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._handle is not None  # entered
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None


class RunLock:
    """An exclusive flock on ``<state>.run``, held while ``otcp-agent run`` runs: two agents on one
    state file would each undo the other's routes, and the controller would swap between them.

    `acquire` raises StateUnwritable naming the process that holds it."""

    def __init__(self, state_path: str) -> None:
        self.path = os.path.abspath(state_path) + ".run"
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock and write this process's id into the file, or raise StateUnwritable."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise StateUnwritable(f"{self.path[:-len('.run')]}: another otcp-agent run (pid {holder}) uses this "
                                  "state file; one agent runs per state file") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Let the next agent run (the file stays; its lock is what counts)."""
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

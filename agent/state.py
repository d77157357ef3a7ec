"""The agent's local state: the generation it applied, in SQLite.

One row holds the last applied set (its generation, the validated routes,
the per-route results) and whether it is still active (``revert`` keeps
the generation, so an older set is still refused, but marks it inactive so
a restart does not put the routes back). A small journal records every
apply, rejection and revert for the operator.

`StateLock` serialises every command that changes routes (a running agent,
``apply``, ``revert``) on one host through an flock next to the database.
"""

import fcntl
import json
import os
import sqlite3
import time

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
"""
JOURNAL_ROWS = 1000


class Applied:
    """The last applied generation as stored."""

    def __init__(self, generation, param_set, results, applied_at, active):
        self.generation = generation
        self.param_set = param_set
        self.results = results
        self.applied_at = applied_at
        self.active = active


class State:
    """The agent's SQLite file."""

    def __init__(self, path):
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)

    def close(self):
        """Close the state database."""
        self.db.close()

    def applied(self):
        """The last applied generation, or None if nothing was ever applied."""
        row = self.db.execute(
            "SELECT generation, param_set, results, applied_at, active FROM applied WHERE id = 1"
        ).fetchone()
        if row is None:
            return None
        return Applied(row[0], json.loads(row[1]), json.loads(row[2]), row[3], bool(row[4]))

    def applied_generation(self):
        """The applied generation number, or None."""
        applied = self.applied()
        return None if applied is None else applied.generation

    def save_applied(self, param_set, results, source):
        """Record a set as applied, with its per-route results."""
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO applied VALUES (1, ?, ?, ?, ?, 1)",
                (param_set["generation"], json.dumps(param_set), json.dumps(results), time.time()),
            )
            self._journal(param_set["generation"], source, "applied", f"{len(param_set['routes'])} route(s)")

    def mark_reverted(self, removed):
        """Record that every OTCP route was removed."""
        with self.db:
            self.db.execute("UPDATE applied SET active = 0 WHERE id = 1")
            self._journal(self.applied_generation(), "revert", "reverted", f"{removed} route(s) removed")

    def record(self, generation, source, outcome, detail):
        """Journal an event that changed nothing (a rejection, a failed apply)."""
        with self.db:
            self._journal(generation, source, outcome, detail)

    def journal(self, limit=20):
        """The newest journal entries: what was applied, rejected or failed."""
        query = "SELECT at, generation, source, outcome, detail FROM journal ORDER BY rowid DESC LIMIT ?"
        return self.db.execute(query, (limit,)).fetchall()

    def _journal(self, generation, source, outcome, detail):
        self.db.execute("INSERT INTO journal VALUES (?, ?, ?, ?, ?)", (time.time(), generation, source, outcome, detail))
        self.db.execute(
            "DELETE FROM journal WHERE rowid <= (SELECT MAX(rowid) FROM journal) - ?", (JOURNAL_ROWS,)
        )


class StateLock:
    """An exclusive flock on ``<state>.lock``: one route writer at a time."""

    def __init__(self, state_path):
        self.path = os.path.abspath(state_path) + ".lock"
        self._handle = None

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._handle = open(self.path, "a")
        fcntl.flock(self._handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None

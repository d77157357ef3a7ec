"""What an incast run waits for after its warm-up (otcp.experiments.runner.controller.Controller.flows_applied), on a
controller database written by hand (no controller, no network), and how long the agents' first
probes take."""

import sqlite3
import types

from otcp.controller import store
from otcp.experiments.runner.agents import first_probes_s
from otcp.experiments.runner.controller import Controller

PAIRS = [("h2", "h1"), ("h3", "h1")]


class RecordedController(Controller):
    """A Controller whose live view and database are given."""

    def __init__(self, database, status):
        self._process = types.SimpleNamespace(database=database)
        self._status = status

    def status(self):
        return self._status


def controller_with(tmp_path, generations, acknowledged=2):
    """generations: {number: [(src, dst, flows, rtt_source)]}; every agent acknowledged `acknowledged`."""
    path = str(tmp_path / "controller.db")
    store.Store(path).close()  # the controller's tables
    with sqlite3.connect(path) as db:
        for number, rows in generations.items():
            db.executemany("INSERT INTO generation_flows VALUES (?, ?, ?, ?)",
                           [(number, src, dst, flows) for src, dst, flows, _ in rows if flows])
            db.executemany("INSERT INTO parameters (generation, src, dst, rtt_source) VALUES (?, ?, ?, ?)",
                           [(number, src, dst, source) for src, dst, _, source in rows])
    agents = [{"acknowledged_generation": acknowledged, "lag_generations": max(generations) - acknowledged}]
    return RecordedController(path, {"generation": max(generations), "agents": agents})


def test_a_run_waits_for_the_round_trips_the_hosts_measured_when_asked(tmp_path):
    defaults = [("h2", "h1", 1, "default"), ("h3", "h1", 1, "default")]
    controller = controller_with(tmp_path, {1: [("h2", "h1", 0, "default"), ("h3", "h1", 0, "default")],
                                            2: defaults})
    assert controller.flows_applied(PAIRS, since=1)
    assert not controller.flows_applied(PAIRS, since=1, measured=PAIRS)
    (tmp_path / "controller.db").unlink()
    one_measured = [("h2", "h1", 1, "host"), ("h3", "h1", 1, "default")]
    assert not controller_with(tmp_path, {2: one_measured}).flows_applied(PAIRS, since=1, measured=PAIRS)
    (tmp_path / "controller.db").unlink()
    both = [("h2", "h1", 1, "host"), ("h3", "h1", 1, "host")]
    assert controller_with(tmp_path, {2: both}).flows_applied(PAIRS, since=1, measured=PAIRS)
    # The probe's flow must be counted too, but its pair carries no TCP for the hosts to measure.
    (tmp_path / "controller.db").unlink()
    probed = controller_with(tmp_path, {2: [*both, ("h4", "h1", 1, "default")]})
    assert probed.flows_applied([*PAIRS, ("h4", "h1")], since=1, measured=PAIRS)
    assert not probed.flows_applied([*PAIRS, ("h4", "h1")], since=1, measured=[*PAIRS, ("h4", "h1")])
    (tmp_path / "controller.db").unlink()
    assert not controller_with(tmp_path, {2: both}).flows_applied([*PAIRS, ("h4", "h1")], since=1, measured=PAIRS)


def test_the_measured_generation_must_be_acknowledged_too(tmp_path):
    both = [("h2", "h1", 1, "host"), ("h3", "h1", 1, "host")]
    controller = controller_with(tmp_path, {2: [("h2", "h1", 1, "default"), ("h3", "h1", 1, "default")], 3: both},
                                 acknowledged=2)
    assert not controller.flows_applied(PAIRS, since=2, measured=PAIRS)
    (tmp_path / "controller.db").unlink()
    assert controller_with(tmp_path, {2: both, 3: both}, acknowledged=3).flows_applied(PAIRS, since=2, measured=PAIRS)


def test_an_older_matching_generation_every_agent_holds_counts_while_a_newer_one_is_on_its_way(tmp_path):
    """Round trips to the peers keep coming at first, and with them generations: the newest
    matching one is seldom acknowledged by every agent yet, the one before it is."""
    both = [("h2", "h1", 1, "host"), ("h3", "h1", 1, "host")]
    assert controller_with(tmp_path, {2: both, 3: both}, acknowledged=2).flows_applied(PAIRS, since=2,
                                                                                        measured=PAIRS)
    (tmp_path / "controller.db").unlink()
    # What every agent holds was planned on the defaults: not yet, however the newer one was planned.
    older_default = {2: [("h2", "h1", 1, "default"), ("h3", "h1", 1, "host")], 3: both}
    assert not controller_with(tmp_path, older_default, acknowledged=2).flows_applied(PAIRS, since=2, measured=PAIRS)
    (tmp_path / "controller.db").unlink()
    # No matching generation any agent set holds yet.
    assert not controller_with(tmp_path, {2: [("h2", "h1", 0, "host")], 3: both},
                               acknowledged=2).flows_applied(PAIRS, since=2)


def test_the_agents_first_probes_take_a_round_per_eight_peers_and_one_to_report():
    assert first_probes_s(34) == 30.0  # 33 peers: 5 rounds of 8 probes, 5 s apart, and the report after
    assert first_probes_s(9) == 10.0
    assert first_probes_s(66) == 50.0

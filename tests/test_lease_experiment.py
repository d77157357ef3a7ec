"""The lease experiment's decisions without a network (otcp.experiments.lease): what a host's kernel
holds against its agent's set and that set's safe state, when its lease ran out, the two targets
and their reasons on hand-made timelines, and the command's bad options."""

import pytest

from otcp.bpf.sockops import Enforced
from otcp.experiments import cli, lease
from otcp.experiments.lease import HostReading, holds, last_expiry, reached_safe, reading, targets
from otcp.wire.paramset import validate_param_set
from support.routes import route

PLANNED = validate_param_set({"generation": 3, "routes": [
    route("10.0.0.1/32", rto_min_ms=9, initcwnd=1, cwnd_clamp=2, advmss=749),
    route("10.0.0.3/32", rto_min_ms=9, initcwnd=12, cwnd_clamp=40, advmss=1448, pacing_rate=125_000),
]})
# The kernel's values, worked by hand: (rto_min, initcwnd, cwnd lock, advmss, quickack).
PLANNED_ROUTES = {"10.0.0.1/32": (9, 1, 2, 749, True), "10.0.0.3/32": (9, 12, 40, 1448, True)}
PLANNED_ENTRIES = {"10.0.0.1/32": Enforced(2, 1, 9000, 0), "10.0.0.3/32": Enforced(40, 12, 9000, 125_000)}
# The safe state: rto_min and quickack kept, initcwnd at most 10, no clamp, segment or pacing.
SAFE_ROUTES = {"10.0.0.1/32": (9, 1, None, None, True), "10.0.0.3/32": (9, 10, None, None, True)}
SAFE_ENTRIES = {"10.0.0.1/32": Enforced(0, 1, 9000, 0), "10.0.0.3/32": Enforced(0, 10, 9000, 0)}


def test_a_host_holds_the_plan_or_its_safe_state_routes_and_entries_alike():
    assert reading("h1", 1.0, PLANNED, False, 20.0, PLANNED_ROUTES, PLANNED_ENTRIES).state == "planned"
    assert reading("h1", 1.0, PLANNED, True, 20.0, SAFE_ROUTES, SAFE_ENTRIES).state == "safe"
    # Routes at the safe state while the program still clamps: neither (a change half-way).
    assert reading("h1", 1.0, PLANNED, True, 20.0, SAFE_ROUTES, PLANNED_ENTRIES).state == "other"
    # Routes alone (no entries to read): the routes decide.
    assert reading("h1", 1.0, PLANNED, True, 20.0, SAFE_ROUTES, None).state == "safe"
    # A route the set does not list, an entry without its route, no routes at all: not the set.
    assert not holds(PLANNED, {**PLANNED_ROUTES, "10.0.0.9/32": (9, 1, 2, 749, True)}, None)
    assert not holds(PLANNED, {"10.0.0.1/32": PLANNED_ROUTES["10.0.0.1/32"]}, PLANNED_ENTRIES)
    assert not holds(PLANNED, {}, {})
    # A destination the agent skipped has neither route nor entry: the rest still holds.
    assert holds(PLANNED, {"10.0.0.1/32": (9, 1, 2, 749, True)}, {"10.0.0.1/32": Enforced(2, 1, 9000, 0)})
    # No active set: nothing to compare with.
    assert reading("h1", 1.0, None, None, None, PLANNED_ROUTES, PLANNED_ENTRIES).state == "none"


def test_a_plan_whose_values_are_safe_ones_is_both():
    unclamped = validate_param_set({"generation": 4, "routes": [route("10.0.0.1/32", rto_min_ms=9, initcwnd=4, cwnd_clamp=None)]})
    found = reading("h1", 1.0, unclamped, False, 20.0, {"10.0.0.1/32": (9, 4, None, None, True)},
                    {"10.0.0.1/32": Enforced(0, 4, 9000, 0)})
    assert found.state == "both" and found.planned and found.safe


def test_the_lease_ran_out_at_the_expiry_last_read_before_the_safe_state():
    readings = [HostReading("h1", 1.0, True, False, 3, False, 10.0),
                HostReading("h1", 2.0, True, False, 3, False, 12.0),  # renewed
                HostReading("h2", 2.5, True, False, 3, False, 99.0),  # another host
                HostReading("h1", 12.3, False, True, 3, True, 12.3),  # lapsed: the agent rewrote it
                HostReading("h1", 40.0, True, False, 4, False, 55.0)]  # a returning controller's lease
    assert last_expiry(readings, "h1", safe_at=12.3) == 12.0
    assert last_expiry(readings, "h3", safe_at=12.3) is None


def test_a_host_reached_the_safe_state_when_its_agent_says_if_the_polls_agree():
    # The agent's journal between the last poll that saw the plan and the first that saw the safe state.
    assert reached_safe(15.4, 15.75, 16.05) == 15.75
    # A journal the polls contradict (the plan seen after it, the safe state seen before it), or none:
    # the first poll that saw it.
    assert reached_safe(15.8, 15.75, 16.05) == 16.05
    assert reached_safe(15.4, 16.2, 16.05) == 16.05
    assert reached_safe(15.4, None, 16.05) == 16.05
    assert reached_safe(None, 15.75, 16.05) == 15.75  # never seen planned after the kill


def document(seen_safe, mbps, stale=None):
    """A timeline as run_lease writes it: two hosts, a 15 s lease, a 24 Mb/s ceiling; each host's agent
    applied the safe state 0.3 s before a poll saw it, 0.3 s after the last poll that saw the plan."""
    hosts = [{"host": name, "generation_before": 3, "lease_expired_s": 14.0, "last_seen_planned_s": round(seen - 0.6, 3),
              "safe_applied_s": round(seen - 0.3, 3), "seen_safe_s": seen, "reached_safe_s": round(seen - 0.3, 3),
              "restored_s": 40.0, "generation_restored": 4} for name, seen in seen_safe.items()]
    flows = {"safe": {"mbps": mbps, "start": 17.0, "end": 21.0, "cpu_busy_pct": 55.0}}
    if stale is not None:
        flows["stale"] = {"mbps": stale, "start": 2.5, "end": 6.5, "cpu_busy_pct": 50.0}
    return {"config": {"lease_s": 15.0}, "deadline_s": 16.0, "ceiling_mbps": 24.0, "hosts": hosts, "flows": flows,
            "events": [{"t": 0.0, "event": "controller killed"}]}


def test_both_targets_met():
    timeline = document({"h1": 14.2, "h2": 16.2}, 23.5, stale=6.1)
    found = targets(timeline)
    assert found["safe_state"]["met"] and found["safe_state"]["slowest_host"] == "h2"
    assert found["safe_state"]["slowest_reached_safe_s"] == 15.9 and found["safe_state"]["last_seen_safe_s"] == 16.2
    assert found["safe_state"]["reason"] is None
    assert found["single_flow"] == {"met": True, "target": 0.9, "share": round(23.5 / 24.0, 4), "reason": None}
    text = lease.summary_text({**timeline, "targets": found})
    assert "safe state within 16 s: met (slowest: h2 at 15.90 s; the last host seen there at 16.20 s)" in text
    assert "23.5 Mb/s, 98 % of the ceiling (target 90 %): met (under the dead controller's plan: 6.1 Mb/s)" in text


def test_a_missed_target_says_what_was_measured():
    found = targets(document({"h1": 14.2, "h2": 16.5}, 20.0, stale=6.1))
    assert not found["safe_state"]["met"]
    assert found["safe_state"]["reason"] == ("h2 at the safe state 16.20 s after the kill (its lease ran out at "
                                             "14.00 s, its agent applied the safe state at 16.20 s; polls saw the "
                                             "plan at 15.90 s and the safe state at 16.50 s)")
    assert not found["single_flow"]["met"] and found["single_flow"]["share"] == round(20 / 24, 4)
    assert found["single_flow"]["reason"] == ("20.0 Mb/s against a ceiling of 24.0 Mb/s, both cores 55 % busy "
                                              "during the flow; under the dead controller's plan the same flow "
                                              "made 6.1 Mb/s")


@pytest.mark.parametrize("argv, message", [
    (["--lease-s", "0.5"], "--lease-s: 0.5 is out of range"),
    (["--lease-s", "nan"], "--lease-s: nan is out of range"),
    (["--senders", "1"], "--senders: 1 is out of range"),
    (["--poll-s", "0"], "--poll-s: 0.0 is out of range"),
    (["--kill-after-s", "-1"], "--kill-after-s: -1.0 is out of range"),
])
def test_bad_options_are_refused_with_the_option_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["lease", *argv])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_the_options_make_the_configuration():
    config = cli.lease_config_from_args(cli.build_parser().parse_args(
        ["lease", "--senders", "8", "--lease-s", "6", "--no-restart", "--out", "somewhere"]), cli.build_parser())
    assert (config.senders, config.lease_s, config.restart, config.schemes) == ([8], 6.0, False, ["otcp-lossless"])
    assert config.deadline_s == 7.0 and config.bw_mbps == 25.0 and config.buffers == [85000]

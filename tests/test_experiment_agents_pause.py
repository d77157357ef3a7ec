"""The agents stopped while a run's loss account is read (otcp.experiments.runner.agents.Agents.paused), on
real processes standing in for them (no network)."""

import subprocess

import pytest

from otcp.experiments.runner.agents import Agents


def state(process):
    """The process's state letter from /proc (T: stopped)."""
    with open(f"/proc/{process.pid}/stat", encoding="ascii") as handle:
        text = handle.read()
    return text[text.rindex(")") + 2]


@pytest.fixture
def agents():
    """An Agents whose processes are two sleepers, each in its own session as the emulation's are,
    and one that has already exited."""
    sleepers = {host: subprocess.Popen(["sleep", "60"], start_new_session=True) for host in ("h1", "h2")}
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    standing = Agents.__new__(Agents)
    standing.processes = {**sleepers, "h3": gone}
    yield standing
    for process in sleepers.values():
        process.kill()
        process.wait()


def test_the_agents_are_stopped_while_the_counters_are_read_and_go_on_after(agents):
    sleepers = [agents.processes["h1"], agents.processes["h2"]]
    assert "T" not in [state(p) for p in sleepers]
    with agents.paused(settle_s=0.0):
        assert [state(p) for p in sleepers] == ["T", "T"]
    assert "T" not in [state(p) for p in sleepers]


def test_the_agents_go_on_when_reading_the_counters_fails(agents):
    sleepers = [agents.processes["h1"], agents.processes["h2"]]
    with pytest.raises(RuntimeError, match="tc failed"), agents.paused(settle_s=0.0):
        raise RuntimeError("tc failed")
    assert "T" not in [state(p) for p in sleepers]

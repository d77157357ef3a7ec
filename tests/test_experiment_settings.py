"""A scheme's settings as commands (otcp.experiments.runner.settings): what each scheme would run in
each host and how it is undone, checked without a network, and the one place that runs them."""

import contextlib

import pytest

from otcp.experiments.runner import settings
from otcp.experiments.runner.emulation import EmulationError
from otcp.experiments.runner.schemes import catalogue, plan

ROUTE = settings.KernelRoute("10.0.0.0/8", scope="link", prefsrc="10.0.0.2")


def facts(*hosts, ecn="2"):
    """What two hosts hold: their data interface at MTU 1500 with the kernel's connected route."""
    return {host: settings.HostFacts(f"{host}-eth0", 1500, (settings.KernelRoute("10.0.0.0/8", "link",
                                                                                   f"10.0.0.{index + 1}"),),
                                     {"net.ipv4.tcp_ecn": ecn})
            for index, host in enumerate(hosts)}


def test_the_kernel_defaults_change_nothing_and_otcp_leaves_routes_to_its_agents():
    schemes = catalogue()
    assert settings.scheme_commands(schemes["default"], facts("h1", "h2")) == {}
    assert settings.scheme_commands(schemes["otcp"], facts("h1", "h2")) == {}
    assert settings.scheme_commands(schemes["otcp-lossless"], facts("h1")) == {}


def test_fine_rto_replaces_each_kernel_route_with_rto_min_and_puts_it_back():
    commands = settings.scheme_commands(catalogue(fine_rto_ms=2)["fine-rto"], facts("h1", "h2"))
    assert commands["h2"] == settings.HostCommands(
        apply=[["ip", "route", "replace", "10.0.0.0/8", "dev", "h2-eth0", "proto", "kernel", "scope", "link",
                "src", "10.0.0.2", "rto_min", "2ms"]],
        undo=[["ip", "route", "replace", "10.0.0.0/8", "dev", "h2-eth0", "proto", "kernel", "scope", "link",
               "src", "10.0.0.2"]])
    assert list(commands) == ["h1", "h2"]


def test_small_packets_set_the_mtu_and_put_back_the_one_found():
    commands = settings.scheme_commands(catalogue()["small-packets"], facts("h1"))
    assert commands == {"h1": settings.HostCommands(apply=[["ip", "link", "set", "dev", "h1-eth0", "mtu", "750"]],
                                                    undo=[["ip", "link", "set", "dev", "h1-eth0", "mtu", "1500"]])}


def test_small_packets_with_rto_set_the_mtu_first_and_undo_the_routes_first():
    (commands,) = settings.scheme_commands(catalogue()["small-packets-rto"], facts("h1")).values()
    assert [argv[:3] for argv in commands.apply] == [["ip", "link", "set"], ["ip", "route", "replace"]]
    assert commands.apply[1][-2:] == ["rto_min", "1ms"]
    assert [argv[:3] for argv in commands.undo] == [["ip", "route", "replace"], ["ip", "link", "set"]]


def test_ecn_schemes_set_the_sysctls_and_put_back_what_each_host_had():
    schemes = catalogue()
    dctcp = settings.scheme_commands(schemes["dctcp"], facts("h1", ecn="0"))
    assert dctcp == {"h1": settings.HostCommands(apply=[["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"]],
                                                 undo=[["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=0"]])}
    # otcp+dctcp: the agents own the routes, the runner only ECN.
    assert settings.scheme_commands(schemes["otcp+dctcp"], facts("h1")) == \
        {"h1": settings.HostCommands(apply=[["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"]],
                                     undo=[["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=2"]])}
    assert settings.scheme_sysctls(schemes["dctcp"]) == {"net.ipv4.tcp_ecn": "1"}
    assert settings.scheme_sysctls(schemes["fine-rto"]) == {}


def test_a_route_is_recreated_with_only_what_it_had():
    assert settings.KernelRoute("10.0.0.0/8").replace_argv("h1-eth0") == \
        ["ip", "route", "replace", "10.0.0.0/8", "dev", "h1-eth0", "proto", "kernel"]
    assert ROUTE.replace_argv("x")[-4:] == ["scope", "link", "src", "10.0.0.2"]


class RecordingEmulation:
    """Runs nothing: records (host, argv), and fails the command fail_on names."""

    def __init__(self, fail_on=None):
        self.ran = []
        self.fail_on = fail_on

    def run(self, host, argv, check=True):
        self.ran.append((host, argv))
        if argv == self.fail_on:
            raise EmulationError(f"{host}: {' '.join(argv)} failed")
        return ""


def test_the_commands_are_run_in_order_and_undone_on_exit():
    commands = settings.scheme_commands(catalogue()["small-packets-rto"], facts("h1", "h2"))
    emulation = RecordingEmulation()
    with settings.applied_commands(emulation, commands):
        assert [host for host, _ in emulation.ran] == ["h1", "h1", "h2", "h2"]
    undone = emulation.ran[4:]
    assert undone == [("h1", argv) for argv in commands["h1"].undo] + [("h2", argv) for argv in commands["h2"].undo]


def test_a_command_that_fails_half_way_undoes_every_host_begun_and_says_which():
    commands = settings.scheme_commands(catalogue()["small-packets-rto"], facts("h1", "h2", "h3"))
    emulation = RecordingEmulation(fail_on=commands["h2"].apply[1])
    with pytest.raises(EmulationError, match="h2"), settings.applied_commands(emulation, commands):
        pass
    undone_hosts = [host for host, argv in emulation.ran[4:]]
    assert undone_hosts == ["h1", "h1", "h2", "h2"]  # h3 was never touched


def test_admission_runs_only_where_the_receiving_program_admits():
    """otcp-admit's controller counts at most the admitted senders on a receiver's downlink, so a
    workload whose receivers ask everyone at once would overflow it: only the incast experiment
    (admits) runs it; the others report it unavailable, naming why."""
    with contextlib.ExitStack() as stack:
        runnable, unavailable = plan(["otcp-admit", "default"], "standalone", catalogue(), stack)
    assert [s.name for s in runnable] == ["default"]
    assert [u.scheme for u in unavailable] == ["otcp-admit"]
    assert "admits its senders in turns" in unavailable[0].reason
    with contextlib.ExitStack() as stack:
        _, unavailable = plan(["otcp-admit"], "standalone", catalogue(), stack, admits=True)
    assert "needs the OTCP controller" in unavailable[0].reason  # the admission itself is no reason there
    assert catalogue()["otcp-admit"].admission and settings.scheme_commands(catalogue()["otcp-admit"],
                                                                          facts("h1")) == {}

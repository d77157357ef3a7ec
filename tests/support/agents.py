"""The agent as the root-namespace tests drive it: its one-shot command line
in a namespace, and a route table that loses a race on purpose."""

import os
import sys

from eventlet.green import subprocess as green_subprocess

from otcp.agent.routes import RouteTable

#: The checkout the tests run from: the working directory of the agent processes they start.
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def otcp_agent(ns, *args, stdin=None):
    """`otcp-agent --netns NS ARGS` run to completion (a CompletedProcess with its text output)."""
    return _agent_command(ns.name, args, stdin)


def agent_show(netns, state, *options):
    """``otcp-agent --netns NETNS show OPTIONS --state STATE`` in a process of its own (it enters the
    namespace, a name), which must succeed: its output."""
    done = _agent_command(netns, ["show", *options, "--state", state])
    assert done.returncode == 0, done.stderr
    return done.stdout


def _agent_command(netns, args, stdin=None):
    """`otcp-agent --netns NETNS ARGS` run to completion. Green: a controller on os-ken's hub in this
    process goes on renewing its leases while the command runs."""
    return green_subprocess.run([sys.executable, "-m", "otcp.agent.cli", "--netns", netns, *args], cwd=REPOSITORY,
                                capture_output=True, text=True, input=stdin)


class RacedRouteTable(RouteTable):
    """Another program adds a route for one destination between the agent's
    planning and its writing; the kernel then refuses the agent's route."""

    def __init__(self, netns, racer, prefix):
        super().__init__(netns)
        self.racer = racer
        self.prefix = prefix

    def plan(self, routes):
        plan = super().plan(routes)
        self.racer.ip("route", "add", self.prefix, "dev", "v0", "proto", "static")
        return plan

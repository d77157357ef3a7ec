"""Where the experiment's own processes run: with the switch's forwarding threads, or apart.

Unpinned, the scheduler puts any process of the emulation (a host's server or
client, an agent, the controller, Mininet's shells, the runner) on any core,
the one Open vSwitch's forwarding thread polls on included, which then waits
for its turn while frames queue at its ports. Pinned, every process of the
experiment (the runner and all it started, and all they start later) runs on
the cores the switch's forwarding threads do not use:

- a PMD thread's core (``afxdp``: ``ovs-appctl dpif-netdev/pmd-rxq-show``);
- with no PMD thread (``afpacket``, ``afxdp-nonpmd``) the last core, which the
  scheduler then leaves to ovs-vswitchd's main thread.

Open vSwitch itself is not touched: it is not the experiment's process. On a
machine of one core, or where the switch's threads poll on every core the
experiment may use, nothing is pinned and the placement says why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
from collections.abc import Iterable, Iterator
from typing import Any

_PMD_CORE = re.compile(r"^pmd thread numa_id \d+ core_id (\d+):", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Placement:
    """The cores the experiment's processes run on (host_cpus) and those left to the switch's
    forwarding threads (switch_cpus); reason, when nothing was pinned, why not."""

    host_cpus: tuple[int, ...]
    switch_cpus: tuple[int, ...]
    reason: str | None = None

    @property
    def pinned(self) -> bool:
        """Whether the experiment's processes were kept off the switch's cores."""
        return self.reason is None

    @property
    def note(self) -> str:
        """The placement as a run's notes give it."""
        if not self.pinned:
            return f"hosts not pinned apart from the switch: {self.reason}"
        return (f"hosts pinned apart from the switch: every process of the experiment on CPU(s) "
                f"{cpu_list(self.host_cpus)}, the switch's forwarding thread(s) alone on {cpu_list(self.switch_cpus)}")

    def as_dict(self) -> dict[str, Any]:
        """As summaries record it."""
        return {"host_cpus": list(self.host_cpus), "switch_cpus": list(self.switch_cpus), "reason": self.reason}


def cpu_list(cpus: Iterable[int]) -> str:
    """CPUs as taskset writes a list: "0", "0,2", "0-3"."""
    ordered = sorted(set(cpus))
    runs: list[list[int]] = []
    for cpu in ordered:
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def parse_pmd_cores(text: str) -> list[int]:
    """The cores of the PMD threads in ``ovs-appctl dpif-netdev/pmd-rxq-show`` output, in order."""
    return sorted({int(core) for core in _PMD_CORE.findall(text)})


def pmd_cores() -> list[int]:
    """The cores Open vSwitch's PMD threads poll on now ([] without any, or without a userspace datapath)."""
    shown = subprocess.run(["ovs-appctl", "--timeout=10", "dpif-netdev/pmd-rxq-show"], capture_output=True,
                           text=True, check=False)
    return parse_pmd_cores(shown.stdout) if shown.returncode == 0 else []


def plan(allowed: Iterable[int], pmd: Iterable[int]) -> Placement:
    """Where the experiment's processes go, given the CPUs they may use (allowed) and the PMD
    threads' cores (pmd; none: the switch's main thread forwards, and gets the last allowed CPU)."""
    cpus = sorted(set(allowed))
    switch = sorted(set(pmd)) or cpus[-1:]
    hosts = tuple(cpu for cpu in cpus if cpu not in switch)
    if len(cpus) < 2:
        return Placement(tuple(cpus), tuple(switch), f"the experiment may use one CPU only ({cpu_list(cpus)})")
    if not hosts:
        return Placement(tuple(cpus), tuple(switch), f"the PMD threads poll on every CPU the experiment may use "
                                                     f"({cpu_list(switch)})")
    return Placement(hosts, tuple(switch))


def own_processes(root: int) -> list[int]:
    """root and every living process descended from it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the fields follow its last ")".
        parent = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


@contextlib.contextmanager
def pinned(placement: Placement) -> Iterator[None]:
    """Run this process and all it has started on placement.host_cpus while the context lasts
    (what they start meanwhile inherits it); this process's CPUs are put back on exit. Nothing
    happens when the placement pins nothing. A process that ended meanwhile is passed over."""
    if not placement.pinned:
        yield
        return
    before = os.sched_getaffinity(0)
    for pid in own_processes(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(pid, placement.host_cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)

"""The first agent of a machine, as the experiments start it: ``otcp-agent run
--enforce bpf`` popen'd in a Mininet host (``mnexec -n``: its own network
and mount namespaces, ``/sys`` covered by a sysfs of its own). Run on a fresh
machine (`support.fresh_machine`); prints, as JSON, what the agent reported
and what the kernel shows while it runs and after SIGTERM.

``python first_agent.py WORKDIR``. No controller listens: the agent decides
how it enforces before it connects, and keeps retrying meanwhile.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mininet.node import Host

from otcp.agent.enforcement import status_path

STATUS_WAIT_S = 90.0


def cgroup2_programs() -> list[str]:
    """Names of the programs attached to the root cgroup of every cgroup-v2 mount of this namespace."""
    names = []
    with open("/proc/self/mountinfo") as table:
        for line in table:
            before, _, after = line.partition(" - ")
            if after.split()[0] == "cgroup2" and before.split()[3] == "/":
                shown = subprocess.run(["bpftool", "-j", "cgroup", "show", before.split()[4]], capture_output=True,
                                       text=True, check=True).stdout
                names += [entry.get("name", "") for entry in json.loads(shown.strip() or "[]")]
    return names


def main() -> int:
    """Start the agent in a Mininet host, report, stop it, report again."""
    workdir = Path(sys.argv[1])
    secret, state, log_path = workdir / "agent.secret", workdir / "agent.db", workdir / "agent.log"
    secret.write_text("fresh-machine-secret-0123456789abcdef\n")
    agent = os.path.join(os.path.dirname(sys.executable), "otcp-agent")
    host = Host("fresh1")
    report: dict[str, object] = {"attached_before": cgroup2_programs()}
    try:
        with open(log_path, "ab") as log:
            process = host.popen([agent, "run", "--controller", "127.0.0.1:9", "--secret-file", str(secret),
                                  "--state", str(state), "--enforce", "bpf", "--backoff-max", "1"],
                                 stdout=log, stderr=log)
        deadline = time.monotonic() + STATUS_WAIT_S
        status = Path(status_path(str(state)))
        while not status.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        report["status"] = json.loads(status.read_text()) if status.exists() else None
        report["attached_while_running"] = cgroup2_programs()
        report["host_sys_fs_bpf"] = host.cmd("stat -f -c %T /sys/fs/bpf").strip()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # as the runner stops it (mnexec -d: its own group)
        report["returncode"] = process.wait(timeout=30)
        report["attached_after"] = cgroup2_programs()
        report["pinned_after"] = os.path.exists("/sys/fs/bpf/otcp/sockops")
    finally:
        report["log"] = log_path.read_text()[-4000:]
        host.terminate()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

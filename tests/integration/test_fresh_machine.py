"""The main job's otcp-lossless on a fresh machine: no BPF filesystem (this
machine's is unmounted for the test, `support.fresh_machine.unmounted_bpffs`,
and put back after), cgroup v2 where this machine has it. The very first run
must have every agent enforce with BPF. Agents run in Mininet hosts, whose
own sysfs hides /sys/fs/bpf and the cgroup-v2 root; on a machine set up by
earlier runs, the BPF filesystem those runs mounted let this pass by chance."""

import json
import subprocess
import sys

from support.fresh_machine import mounts, unmounted_bpffs

SENDERS = 4


def test_the_first_otcp_lossless_run_on_a_fresh_machine_enforces_with_bpf(tmp_path):
    out = tmp_path / "fresh"
    with unmounted_bpffs():
        assert not [m for m in mounts() if m[1] == "bpf"]
        completed = subprocess.run(
            [sys.executable, "-m", "otcp.experiments.cli", "incast", "--senders", str(SENDERS), "--buffer-bytes",
             "85000", "--sru-bytes", "65536", "--rounds", "2", "--warmup-seconds", "0.5", "--schemes", "otcp-lossless",
             "--ceiling-seconds", "1", "--ceiling-repeats", "1", "--out", str(out)],
            capture_output=True, text=True, timeout=600)
        # The BPF filesystem was mounted once, in the machine's mount namespace (this one).
        mounted = [m[:2] for m in mounts() if m[1] == "bpf"]
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert mounted == [("/sys/fs/bpf", "bpf")]
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["scheme"], r["senders"]) for r in summary["runs"]] == [("otcp-lossless", SENDERS)]
    assert summary["unavailable"] == []
    assert not [note for note in summary["notes"] if note.startswith("failed")]
    logs = sorted((out / "work" / f"buffer85000-senders{SENDERS}" / "agents" / "otcp-lossless").glob("agent-*.log"))
    assert len(logs) >= SENDERS + 1  # the senders and the receiver
    for log in logs:
        text = log.read_text()
        assert "enforcing with BPF" in text and "routes alone" not in text, (log.name, text[-2000:])

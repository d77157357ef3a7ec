"""The first connection after an agent applies a set: is it held to the
window, and does it use the smaller segment? For docs/enforcement.md and
tests/test_bpf_sockops.py.

``python -m otcp.experiments.kernel.firstconn [--rate-mbit 20] [--buffer 85000] [--clamp 3] [--advmss 1000]
    [--seconds 3]
[--pacing-rate 1000000] [--json FILE]``

On a :class:`~otcp.experiments.kernel.testbed.Testbed` (namespaces ``otcps<pid>s<n>`` and
``otcps<pid>r<n>``, the bottleneck shaped by HTB), for each enforcement mode
(``routes``, then ``bpf``): an agent in each namespace (``otcp.agent.core.Agent``
with ``Enforcement.start(mode)``, what ``otcp-agent run --enforce MODE``
uses) applies a set: the sender's route toward the receiver carries
``cwnd lock CLAMP``, ``initcwnd CLAMP``, ``rto_min``; the receiver's route
toward the sender carries ``advmss ADVMSS``. Then the very first connection
sends for a few seconds while ``ss -tin`` in the sender's namespace is
sampled; then a second one; with BPF, one more with a pacing rate added to
the sender's entry (``--pacing-rate``); then the sender's agent
reverts and a last one runs. Reported per connection: the largest ``cwnd``
and ``unacked`` seen, the ``mss``, ``max_pacing_rate``, the goodput, the
samples taken; and the program's counters.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from otcp.experiments.kernel.testbed import Testbed, finish

PORT = 5401
PREFIX = "otcps"
_FIELDS = {"cwnd": re.compile(r"\bcwnd:(\d+)"), "unacked": re.compile(r"\bunacked:(\d+)"),
           "mss": re.compile(r"\bmss:(\d+)"), "ssthresh": re.compile(r"\bssthresh:(\d+)")}


# ss prints "pacing_rate RATE/MAX" when a maximum pacing rate is set.
_MAX_PACING = re.compile(r"\bpacing_rate [0-9.]+[KMG]?bps/([0-9.]+)([KMG]?)bps")
_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}


def ss_sample(ns: str, peer: str, port: int) -> dict[str, int] | None:
    """One ``ss -tin`` reading in ``ns`` of the established connection to
    peer:port: its cwnd, unacked, mss and ssthresh, and max_pacing_rate in
    bit/s (those shown), or None."""
    shown = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "ss", "-tinH", "state", "established",
                            "dst", f"{peer}:{port}"], capture_output=True, text=True, check=True).stdout
    lines = [line for line in shown.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if f"{peer}:{port}" in line:
            info = lines[i + 1]
            found = {name: int(m.group(1)) for name, pattern in _FIELDS.items() if (m := pattern.search(info))}
            pacing = _MAX_PACING.search(info)
            if pacing:
                found["max_pacing_rate_bps"] = round(float(pacing.group(1)) * _UNITS[pacing.group(2)])
            return found or None
    return None


def one_connection(bed: Testbed, seconds: float, port: int = PORT) -> dict[str, Any]:
    """One connection from the sender to the receiver for ``seconds``,
    sampled with ``ss -tin`` as fast as it runs; returns the largest cwnd and
    unacked seen, the mss values seen, the sample count and the bytes sent."""
    sink = bed.sink(port, "cubic", flows=1)
    source = bed.source(port, "cubic", seconds)
    samples: list[dict[str, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set() and source.poll() is None:
            reading = ss_sample(bed.sender, bed.receiver_ip, port)
            if reading:
                samples.append(reading)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        sent = finish(source, timeout=seconds + 60)
        received = finish(sink, timeout=60)
    finally:
        stop.set()
        sampler.join()
    return {
        "samples": len(samples),
        "max_cwnd": max((s["cwnd"] for s in samples if "cwnd" in s), default=None),
        "max_unacked": max((s.get("unacked", 0) for s in samples), default=None),
        "mss": sorted({s["mss"] for s in samples if "mss" in s}),
        "max_ssthresh": max((s["ssthresh"] for s in samples if "ssthresh" in s), default=None),
        "max_pacing_rate_bps": sorted({s["max_pacing_rate_bps"] for s in samples if "max_pacing_rate_bps" in s}),
        "bytes": received["flows"][0]["bytes"],
        "goodput_mbps": _goodput(received["flows"][0]),
        "sent": sent["sent"],
    }


def _goodput(flow: dict[str, Any]) -> float | None:
    if not flow["first"] or not flow["last"] or flow["last"] <= flow["first"]:
        return None
    return round(flow["bytes"] * 8 / (flow["last"] - flow["first"]) / 1e6, 2)


def sender_set(bed: Testbed, generation: int, clamp: int, rto_min_ms: int = 10) -> dict:
    """The sender's set: its route toward the receiver, clamped, the initial window the clamp."""
    return {"generation": generation, "routes": [
        {"dst": f"{bed.receiver_ip}/32", "rto_min_ms": rto_min_ms, "initcwnd": clamp, "cwnd_clamp": clamp,
         "advmss": None, "pacing_rate": None, "quickack": True}]}


def receiver_set(bed: Testbed, generation: int, advmss: int) -> dict:
    """The receiver's set: its route toward the sender advertises ``advmss``."""
    return {"generation": generation, "routes": [
        {"dst": f"{bed.sender_ip}/32", "rto_min_ms": 10, "initcwnd": 10, "cwnd_clamp": None,
         "advmss": advmss, "pacing_rate": None, "quickack": True}]}


def measure(rate_mbit: float, buffer_bytes: int, clamp: int, advmss: int, seconds: float,
            pacing_rate: int) -> dict[str, Any]:
    """Both modes on fresh testbeds; every figure. With BPF, a connection
    paced at ``pacing_rate`` bytes/s (in the same entry) is measured too."""
    from otcp.agent.core import Agent
    from otcp.agent.enforcement import Enforcement

    report: dict[str, Any] = {"rate_mbit": rate_mbit, "buffer_bytes": buffer_bytes, "clamp": clamp,
                              "advmss": advmss, "seconds": seconds}
    for mode in ("routes", "bpf"):
        bed = Testbed(rate_mbit, buffer_bytes, prefix=PREFIX)
        try:
            with tempfile.TemporaryDirectory(prefix="otcp-firstconn-") as tmp:
                sender = Agent(str(Path(tmp) / "s.db"), netns=bed.sender,
                               enforcement=Enforcement.start(mode, netns=bed.sender))
                receiver = Agent(str(Path(tmp) / "r.db"), netns=bed.receiver,
                                 enforcement=Enforcement.start(mode, netns=bed.receiver))
                try:
                    receiver.apply(receiver_set(bed, 1, advmss), "firstconn")
                    sender.apply(sender_set(bed, 1, clamp), "firstconn")
                    result: dict[str, Any] = {"enforcement": sender.enforcement.report()}
                    result["first"] = one_connection(bed, seconds)
                    result["second"] = one_connection(bed, seconds)
                    enforcer = sender.enforcement.enforcer
                    if enforcer is not None:
                        # A pacing rate in the same entry, written as the agent will.
                        entries = {p: e for p, (e, _) in enforcer.entries(sender.enforcement.cookie).items()}
                        paced = {p: dataclasses.replace(e, pacing_rate=pacing_rate) for p, e in entries.items()}
                        undo = enforcer.update(sender.enforcement.cookie, paced)
                        result["paced"] = dict(one_connection(bed, seconds), pacing_rate_bytes=pacing_rate)
                        undo()
                        result["counters"] = enforcer.counters()
                        result["entries"] = {prefix: [dataclasses.asdict(enforced), applied]
                                             for prefix, (enforced, applied)
                                             in enforcer.entries(sender.enforcement.cookie).items()}
                    sender.revert()
                    result["after_revert"] = one_connection(bed, seconds)
                    report[mode] = result
                finally:
                    sender.close()
                    receiver.close()
        finally:
            bed.delete()
    return report


def main(argv: list[str] | None = None) -> int:
    """Run measure() and print its figures (and write them as JSON)."""
    parser = argparse.ArgumentParser(prog="python -m otcp.experiments.kernel.firstconn", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate-mbit", type=float, default=20.0)
    parser.add_argument("--buffer", type=int, default=85000, help="bottleneck buffer (bytes)")
    parser.add_argument("--clamp", type=int, default=3, help="cwnd clamp and initial window (segments)")
    parser.add_argument("--advmss", type=int, default=1000, help="advmss on the receiver's route (bytes)")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each connection sends")
    parser.add_argument("--pacing-rate", type=int, default=1_000_000,
                        help="bytes/s for the paced connection of the BPF run (default 8 Mb/s)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    report = measure(args.rate_mbit, args.buffer, args.clamp, args.advmss, args.seconds, args.pacing_rate)
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

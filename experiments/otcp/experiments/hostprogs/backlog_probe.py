"""Sample one qdisc's backlog as fast as netlink answers; runs in the queue's namespace.

    python -m otcp.experiments.hostprogs.backlog_probe --dev h1-eth0-ifb --handle 10: [--interval 0.0005] [--series]
        [--switch-inputs IFINDEX,...]

Prints "ready", samples the backlog (bytes) of the qdisc with that handle on
dev until its standard input is closed, then prints {"peak": bytes,
"samples": n, "mean": bytes} and, with --series, "series": [[CLOCK_MONOTONIC
seconds, bytes], ...]. A netlink dump (pyroute2) takes about half a millisecond, a
``tc`` process ten times more: a queue that is full only between two
batches of the switch is seen full only by fast sampling.

With --switch-inputs, each sample also reads what the userspace switch has
not yet taken in: the memory held by the root namespace's packet sockets
bound to those interfaces (the ``Rmem`` of ``/proc/1/net/packet``, skb
truesize), where ovs-vswitchd's userspace datapath receives every port's
frames. No qdisc counts that queue: it grows when the switch's forwarding
thread falls behind. Each series entry then has a third value, those bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from otcp.experiments.hostprogs.common import stop_when_stdin_closes


def parse_handle(text: str) -> int:
    """tc's "major:" or "major:minor" (hex) as the kernel's 32-bit handle."""
    major, _, minor = text.partition(":")
    try:
        return (int(major, 16) << 16) | (int(minor, 16) if minor else 0)
    except ValueError:
        raise ValueError(f"not a tc handle: {text!r}") from None


def backlog_of(messages: list, handle: int) -> int | None:
    """The backlog in bytes of the qdisc with handle among netlink qdisc messages (None if absent)."""
    for message in messages:
        if message["handle"] != handle:
            continue
        for name, value in message["attrs"]:
            if name == "TCA_STATS2":
                for inner, stats in value["attrs"]:
                    if inner == "TCA_STATS_QUEUE":
                        return stats["backlog"]
    return None


#: The packet-socket table of the root network namespace (pid 1's), readable from a host's namespace.
ROOT_PACKET_SOCKETS = "/proc/1/net/packet"
ETH_P_ALL = "0003"


def switch_input_bytes(table: str, ifindexes: set[int]) -> int:
    """Bytes queued (Rmem) on the ETH_P_ALL packet sockets bound to ifindexes, from the
    text of /proc/net/packet (columns: sk RefCnt Type Proto Iface R Rmem User Inode)."""
    total = 0
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 7 and fields[3] == ETH_P_ALL and int(fields[4]) in ifindexes:
            total += int(fields[6])
    return total


def parse_ifindexes(text: str) -> set[int]:
    """--switch-inputs: comma-separated positive interface indexes."""
    try:
        indexes = {int(part) for part in text.split(",")}
    except ValueError:
        raise ValueError(f"not a list of interface indexes: {text!r}") from None
    if not indexes or min(indexes) <= 0:
        raise ValueError(f"interface indexes must be positive: {text!r}")
    return indexes


def main(argv: list[str] | None = None) -> int:
    """Sample until standard input closes; print the peak."""
    parser = argparse.ArgumentParser(prog="backlog_probe", description=__doc__.split("\n")[0])
    parser.add_argument("--dev", required=True)
    parser.add_argument("--handle", required=True)
    parser.add_argument("--interval", type=float, default=0.0005)
    parser.add_argument("--series", action="store_true", help="also print every sample with its time")
    parser.add_argument("--switch-inputs", help="ifindexes (root namespace) of the switch ports whose input "
                        "sockets are sampled too, into the series")
    args = parser.parse_args(argv)
    try:
        handle = parse_handle(args.handle)
    except ValueError as exc:
        parser.error(f"--handle: {exc}")
    try:
        inputs = parse_ifindexes(args.switch_inputs) if args.switch_inputs else None
    except ValueError as exc:
        parser.error(f"--switch-inputs: {exc}")
    if inputs and not args.series:
        parser.error("--switch-inputs: only sampled into the --series")
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=args.dev)
        if not found:
            print(f"backlog_probe: no device {args.dev}", file=sys.stderr)
            return 2
        index = found[0]
        stop = stop_when_stdin_closes()
        peak = samples = total = 0
        series: list[list[float]] = []
        print("ready", flush=True)
        while not stop.is_set():
            backlog = backlog_of(ipr.get_qdiscs(index), handle)
            if backlog is None:
                print(f"backlog_probe: no qdisc {args.handle} on {args.dev}", file=sys.stderr)
                return 2
            peak = max(peak, backlog)
            samples += 1
            total += backlog
            if args.series:
                sample = [round(time.monotonic(), 4), backlog]
                if inputs:
                    with open(ROOT_PACKET_SOCKETS, encoding="ascii") as table:
                        sample.append(switch_input_bytes(table.read(), inputs))
                series.append(sample)
            time.sleep(args.interval)
    result: dict[str, object] = {"peak": peak, "samples": samples, "mean": total / samples if samples else 0.0}
    if args.series:
        result["series"] = series
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A two-namespace bottleneck for checking the BPF programs for real (the
tests and ``python -m otcp.experiments.kernel.measure`` use it).

Sender namespace ``otcpt<pid>s`` and receiver namespace ``otcpt<pid>r``
(another prefix than ``otcpt`` may be given),
joined by a veth pair (offloads off, as on the experiment fabrics). The
bottleneck is laid out as ```otcp.topo.fabrics``` lays out a switch's egress
toward a host: what the receiver's interface receives is redirected into an
IFB (``otcpt-ifb``, in the receiver's namespace) shaped by HTB (15 kB burst,
one-packet quantum) with a bfifo of ``buffer_bytes`` under it. The marker
goes on that IFB's egress. ECN is on in both namespaces.

Subcommands (run inside a namespace by the Testbed's methods): ``sink``,
``source``, ``sample``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from otcp.bpf.dctcp import ecn_sysctl_commands

_counter = itertools.count()
_RTM_GETQDISC, _NLMSG_DONE, _NLM_F_REQUEST, _NLM_F_DUMP = 38, 3, 0x1, 0x300
# struct tcp_info (UAPI, append-only): tcpi_delivered and tcpi_delivered_ce
# (segments delivered, and of them those acknowledged with an ECN-Echo).
_TCPI_DELIVERED, _TCP_INFO_SIZE = 192, 232
IFB = "otcpt-ifb"
SENDER_IF = "otcpt-s"
RECEIVER_IF = "otcpt-r"
HTB_BURST = "15k"


def _ip_run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")


class Testbed:
    """Sender and receiver namespaces through a shaped, buffered bottleneck."""

    __test__ = False  # not a pytest test class

    def __init__(self, rate_mbit: float, buffer_bytes: int, prefix: str = "otcpt") -> None:
        n = next(_counter)
        self.sender = f"{prefix}{os.getpid()}s{n}"
        self.receiver = f"{prefix}{os.getpid()}r{n}"
        self.sender_ip, self.receiver_ip = "10.199.0.1", "10.199.0.2"
        self.rate_mbit = rate_mbit
        self.buffer_bytes = buffer_bytes
        self.processes: list[subprocess.Popen[str]] = []
        try:
            self._create()
        except BaseException:
            self.delete()
            raise

    def _create(self) -> None:
        s, r = self.sender, self.receiver
        rate = f"{self.rate_mbit}mbit"
        for ns in (s, r):
            _ip_run(["ip", "netns", "add", ns])
        commands = [
            ["ip", "-n", s, "link", "add", SENDER_IF, "type", "veth", "peer", "name", RECEIVER_IF, "netns", r],
            ["ip", "-n", s, "addr", "add", f"{self.sender_ip}/24", "dev", SENDER_IF],
            ["ip", "-n", r, "addr", "add", f"{self.receiver_ip}/24", "dev", RECEIVER_IF],
            ["ip", "-n", r, "link", "add", IFB, "type", "ifb"],
        ]
        for ns, dev in ((s, "lo"), (s, SENDER_IF), (r, "lo"), (r, RECEIVER_IF), (r, IFB)):
            commands.append(["ip", "-n", ns, "link", "set", dev, "up"])
        for ns, dev in ((s, SENDER_IF), (r, RECEIVER_IF)):
            commands.append(["ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off",
                             "gro", "off", "tx", "off"])
        tc_r = ["ip", "netns", "exec", r, "tc"]
        commands += [
            [*tc_r, "qdisc", "add", "dev", IFB, "root", "handle", "5:", "htb", "default", "10"],
            [*tc_r, "class", "add", "dev", IFB, "parent", "5:", "classid", "5:10", "htb", "rate", rate, "ceil", rate,
             "burst", HTB_BURST, "quantum", "1514"],
            [*tc_r, "qdisc", "add", "dev", IFB, "parent", "5:10", "handle", "10:", "bfifo",
             "limit", str(self.buffer_bytes)],
            [*tc_r, "qdisc", "add", "dev", RECEIVER_IF, "clsact"],
            [*tc_r, "filter", "add", "dev", RECEIVER_IF, "ingress", "protocol", "all", "prio", "1", "u32",
             "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", IFB],
        ]
        for ns in (s, r):
            commands += [["ip", "netns", "exec", ns, *argv] for argv in ecn_sysctl_commands()]
        for argv in commands:
            _ip_run(argv)

    @property
    def bottleneck(self) -> tuple[str, str]:
        """(interface, namespace) where the marker goes."""
        return IFB, self.receiver

    def python(self, ns: str, *args: str) -> subprocess.Popen[str]:
        """Start ``python -m otcp.experiments.kernel.testbed ARGS`` in ``ns`` (kept, ended by delete())."""
        process = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", sys.executable, "-m",
                                    "otcp.experiments.kernel.testbed", *args],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.processes.append(process)
        return process

    def sink(self, port: int, cc: str, flows: int) -> subprocess.Popen[str]:
        """A receiver for ``flows`` connections; prints 'ready', then their JSON."""
        process = self.python(self.receiver, "sink", "--port", str(port), "--cc", cc, "--flows", str(flows))
        assert process.stdout is not None
        line = process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"sink did not start: {line}{process.stderr.read() if process.stderr else ''}")
        return process

    def source(self, port: int, cc: str, seconds: float, delay: float = 0.0) -> subprocess.Popen[str]:
        """A sender that connects after ``delay`` s and sends for ``seconds``."""
        return self.python(self.sender, "source", "--dst", self.receiver_ip, "--port", str(port), "--cc", cc,
                           "--seconds", str(seconds), "--delay", str(delay))

    def ss(self, ns: str) -> str:
        """``ss -tine`` in ``ns``: the TCP connections and their internals."""
        return subprocess.run(["ip", "netns", "exec", ns, "ss", "-tine"], capture_output=True, text=True,
                              check=True).stdout

    def qdisc_drops(self) -> int:
        """Packets the bottleneck's qdiscs dropped so far (the bfifo's overflows)."""
        dev, ns = self.bottleneck
        shown = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "-j", "qdisc", "show", "dev", dev],
                               capture_output=True, text=True, check=True).stdout
        return sum(int(q.get("drops", 0)) for q in json.loads(shown) if q.get("root"))

    def delete(self) -> None:
        """End the processes started here and delete both namespaces (idempotent)."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.communicate()
        self.processes = []
        for ns in (self.sender, self.receiver):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def finish(process: subprocess.Popen[str], timeout: float = 60.0) -> dict:
    """Wait for a testbed process and return the JSON it printed last."""
    out, err = process.communicate(timeout=timeout)
    if process.returncode != 0:
        raise RuntimeError(f"testbed process failed ({process.returncode}): {err.strip()}")
    return json.loads(out.strip().splitlines()[-1])


def _set_cc(sock: socket.socket, cc: str) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())


def _sink(args: argparse.Namespace) -> int:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _set_cc(listener, args.cc)  # accepted sockets inherit it: the receiver's ECN echo is DCTCP's
    listener.bind(("0.0.0.0", args.port))
    listener.listen(args.flows)
    print("ready", flush=True)
    results: list[dict] = []

    def drain(conn: socket.socket) -> None:
        received, first, last = 0, None, None
        cc = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
        while True:
            data = conn.recv(1 << 16)
            if not data:
                break
            last = time.monotonic()
            first = first or last
            received += len(data)
        conn.close()
        results.append({"bytes": received, "first": first, "last": last, "cc": cc})

    threads = []
    for _ in range(args.flows):
        conn, _ = listener.accept()
        thread = threading.Thread(target=drain, args=(conn,))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    print(json.dumps({"flows": results}), flush=True)
    return 0


def _source(args: argparse.Namespace) -> int:
    time.sleep(args.delay)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    _set_cc(sock, args.cc)
    sock.connect((args.dst, args.port))
    chunk = b"\0" * (1 << 16)
    sent, end = 0, time.monotonic() + args.seconds
    while time.monotonic() < end:
        sent += sock.send(chunk)
    # Wait until the receiver has everything and closes, so the counts are final.
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    delivered, delivered_ce = struct.unpack_from("=II", info, _TCPI_DELIVERED)
    sock.close()
    print(json.dumps({"sent": sent, "delivered": delivered, "delivered_ce": delivered_ce}), flush=True)
    return 0


def _dump_qdiscs(sock: socket.socket, seq: int, ifindex: int) -> list[bytes]:
    """One RTM_GETQDISC dump of ``ifindex``: the raw messages. Sent and received
    here so the caller can time the kernel's snapshot to ~0.1 ms (pyroute2's
    own request path takes ~1 ms, 15 kB of queue at 100 Mb/s); pyroute2
    parses the messages afterwards."""
    body = struct.pack("=BxxxiIII", 0, ifindex, 0, 0, 0)
    sock.send(struct.pack("=IHHII", 16 + len(body), _RTM_GETQDISC, _NLM_F_REQUEST | _NLM_F_DUMP, seq, 0) + body)
    messages: list[bytes] = []
    while True:
        data = sock.recv(1 << 16)
        offset = 0
        while offset < len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            if kind == _NLMSG_DONE:
                return messages
            messages.append(data[offset:offset + length])
            offset += (length + 3) & ~3


def _sample(args: argparse.Namespace) -> int:
    """Pairs (qdisc backlog, virtual queue) read within ~0.1 ms of each other."""
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    from otcp.bpf.marker import QUEUE, MarkerCounters
    from otcp.bpf.objects import BPF_F_LOCK, PinnedMap

    queue = PinnedMap(Path(args.map), QUEUE.size)
    rate = args.rate_bps / 8 / 1e9
    ifindex = socket.if_nametoindex(args.dev)
    raw = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        end = time.monotonic() + args.seconds
        seq = 0
        while time.monotonic() < end:
            seq += 1
            before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            messages = _dump_qdiscs(sock, seq, ifindex)
            after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            counters = MarkerCounters.unpack(queue.lookup(flags=BPF_F_LOCK))
            raw.append((before, after, messages, counters))
            time.sleep(args.interval)
    samples = []
    for before, after, messages, counters in raw:
        backlog = None
        for data in messages:
            message = tcmsg(data)
            message.decode()
            if message["index"] == ifindex and message["parent"] == 0xFFFFFFFF:  # root: the whole tree
                backlog = message.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["backlog"]
        at = (before + after) // 2
        virtual = max(0.0, counters.backlog_bytes - max(0, at - counters.last_ns) * rate)
        samples.append([at, backlog, round(virtual), after - before])
    print(json.dumps({"samples": samples}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the processes a Testbed starts in its namespaces."""
    parser = argparse.ArgumentParser(prog="python -m otcp.experiments.kernel.testbed")
    # The options more than one command takes, as argparse parent parsers.
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--port", type=int, required=True)
    connection.add_argument("--cc", required=True)
    timed = argparse.ArgumentParser(add_help=False)
    timed.add_argument("--seconds", type=float, required=True)
    commands = parser.add_subparsers(dest="command", required=True)
    sink = commands.add_parser("sink", parents=[connection])
    sink.add_argument("--flows", type=int, default=1)
    source = commands.add_parser("source", parents=[connection, timed])
    source.add_argument("--dst", required=True)
    source.add_argument("--delay", type=float, default=0.0)
    sample = commands.add_parser("sample", parents=[timed])
    sample.add_argument("--map", required=True)
    sample.add_argument("--rate-bps", type=float, required=True)
    sample.add_argument("--dev", required=True)
    sample.add_argument("--interval", type=float, default=0.005)
    args = parser.parse_args(argv)
    return {"sink": _sink, "source": _source, "sample": _sample}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

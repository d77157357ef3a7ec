"""The tc ECN marker (``otcp/bpf/src/otcp_mark.bpf.c``): load, configure, attach to
an interface's egress in a namespace, read, detach.

One marker instance per bottleneck port: its virtual queue is that port's.
Pins live in ``/sys/fs/bpf/otcp/mark-<namespace>-<interface>-pid<PID>/``; the filter
is added at clsact egress with preference :data:`TC_PREF` and removed by the
program id it carries, and a clsact qdisc is deleted only if this marker
added it. Nothing else on the interface is touched.
"""

from __future__ import annotations

import json
import math
import re
import struct
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType

from otcp.bpf.build import build, object_path
from otcp.bpf.errors import BpfUnavailable, run
from otcp.bpf.objects import BPF_F_LOCK, PinnedMap, close_at_exit, closed, load_pinned, netns_prefix

OBJECT = "otcp_mark"
PROGRAM = "otcp_mark"
TC_PREF = 79  # OTCP's number, as route protocol 79
MAX_RATE_BYTES = 1 << 34  # the program's drain arithmetic holds below this (137 Gb/s)

# The DCTCP paper's marking thresholds at the two rates it deployed (section
# 4.1): 20 packets at 1 Gb/s and 65 packets at 10 Gb/s.
_K_1G, _K_10G = 20, 65

CONFIG = struct.Struct("<QQQQ")  # struct otcp_mark_config
QUEUE = struct.Struct("<II13Q")  # struct otcp_mark_queue (bpf_spin_lock, pad, counters)


def default_k_bytes(rate_bps: float, rtt_s: float | None = None, mtu: int = 1500) -> int:
    """DCTCP's marking threshold K for a port of ``rate_bps``.

    The paper's deployed thresholds (20 packets at 1 Gb/s, 65 at 10 Gb/s)
    interpolated as a power of the rate (K = 20 (C / 1 Gb/s)^0.512 packets,
    which passes through both), never below the paper's lower bound
    K > C x RTT / 7 when the round trip is given, and at least one packet.
    At 100 Mb/s this is 6.15 packets (9 231 B).
    """
    if not rate_bps > 0:
        raise ValueError(f"rate must be positive, not {rate_bps}")
    exponent = math.log10(_K_10G / _K_1G)
    packets = _K_1G * (rate_bps / 1e9) ** exponent
    k = max(packets * mtu, float(mtu))
    if rtt_s is not None:
        k = max(k, rate_bps / 8 * rtt_s / 7)
    return math.ceil(round(k, 6))  # 20 x 10^0.512 is 65 up to rounding


@dataclass(frozen=True)
class MarkerConfig:
    """What the marker needs: the port's shaped rate, K, the buffer, and
    the shaper's burst (HTB's ``burst``; 0 for a plain phantom queue)."""

    rate_bps: float
    k_bytes: int
    limit_bytes: int = 0
    burst_bytes: int = 0

    def pack(self) -> bytes:
        """``struct otcp_mark_config``, checked."""
        rate = int(self.rate_bps) // 8
        if not 0 < rate < MAX_RATE_BYTES:
            raise ValueError(f"rate {self.rate_bps} b/s is outside 8 b/s .. 137 Gb/s")
        if min(self.k_bytes, self.limit_bytes, self.burst_bytes) < 0:
            raise ValueError("K, the limit and the burst are byte counts, not negative")
        return CONFIG.pack(rate, int(self.k_bytes), int(self.limit_bytes), int(self.burst_bytes))


@dataclass(frozen=True)
class MarkerCounters:
    """A consistent snapshot of ``struct otcp_mark_queue`` (read under its lock).

    Categories (ect, marked, ce_arrived, not_ect_over_k) count packets the
    buffer admitted; packets and wire_bytes count all.
    """

    backlog_bytes: int
    last_ns: int
    credit_bytes: int
    backlog_max: int
    backlog_sum: int
    packets: int
    wire_bytes: int
    ect: int
    marked: int
    ce_arrived: int
    not_ect_over_k: int
    over_limit: int
    mark_errors: int

    @classmethod
    def unpack(cls, raw: bytes) -> MarkerCounters:
        """From the map value's bytes."""
        return cls(*QUEUE.unpack(raw)[2:])

    def mean_backlog_seen(self) -> float:
        """The virtual queue an arriving packet found, on average (bytes)."""
        return self.backlog_sum / self.packets if self.packets else 0.0

    def as_dict(self) -> dict[str, int]:
        """Field name -> value, for JSON."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _tag(netns: str | None, ifname: str) -> str:
    where = "root" if netns is None else netns.strip("/").replace("/", "_")
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"mark-{where}-{ifname}")


class Marker:
    """One loaded marker: its pins, its maps, and where it is attached."""

    def __init__(self, config: MarkerConfig, name: str) -> None:
        build()
        self.config = config
        self.loaded = load_pinned(object_path(OBJECT), name, "classifier")
        close_at_exit(self)
        self.ifname: str | None = None
        self.netns: str | None = None
        self.created_clsact = False
        try:
            self.prog_path = self.loaded.programs[PROGRAM]
            self.prog_id = self.loaded.program_id(PROGRAM)
            self.cfg_map = PinnedMap(self.loaded.maps["otcp_mark_cfg"], CONFIG.size)
            self.queue_map = PinnedMap(self.loaded.maps["otcp_mark_q"], QUEUE.size)
            self.configure(config)
        except BaseException:
            self.close()
            raise

    def configure(self, config: MarkerConfig) -> None:
        """Set rate, K, limit and burst (from the next packet on)."""
        self.cfg_map.update(config.pack())
        self.config = config

    def counters(self) -> MarkerCounters:
        """The queue state and counters now."""
        return MarkerCounters.unpack(self.queue_map.lookup(flags=BPF_F_LOCK))

    def virtual_backlog(self, counters: MarkerCounters | None = None, now_ns: int | None = None) -> float:
        """The virtual queue at ``now_ns`` (CLOCK_MONOTONIC, the clock of
        bpf_ktime_get_ns): the last arrival's backlog, drained since."""
        counters = counters or self.counters()
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) if now_ns is None else now_ns
        drained = max(0, now - counters.last_ns) * (self.config.rate_bps / 8) / 1e9
        return max(0.0, counters.backlog_bytes - drained)

    def reset(self) -> None:
        """Empty the virtual queue and zero the counters."""
        self.queue_map.update(bytes(QUEUE.size), flags=BPF_F_LOCK)

    def test_run(self, packet: bytes) -> tuple[int, bytes]:
        """Run the program once on ``packet`` (an Ethernet frame) with
        BPF_PROG_TEST_RUN; return its verdict and the packet it leaves."""
        with tempfile.TemporaryDirectory(prefix="otcp-mark-") as tmp:
            data_in, data_out = Path(tmp) / "in", Path(tmp) / "out"
            data_in.write_bytes(packet)
            out = run(["bpftool", "-j", "prog", "run", "pinned", str(self.prog_path), "data_in", str(data_in),
                       "data_out", str(data_out)], "BPF_PROG_TEST_RUN of otcp_mark").stdout
            return int(json.loads(out)["retval"]), data_out.read_bytes()

    def _tc(self, *args: str, what: str) -> str:
        return run([*netns_prefix(self.netns), "tc", *args], what).stdout

    def attach(self, ifname: str, netns: str | None = None) -> None:
        """Attach at ``ifname``'s clsact egress in ``netns`` (None: this
        namespace; a name from ``ip netns``; or a path like /proc/PID/ns/net)."""
        if self.ifname is not None:
            raise RuntimeError(f"already attached to {self.ifname}")
        self.ifname, self.netns = ifname, netns
        qdiscs = json.loads(self._tc("-j", "qdisc", "show", "dev", ifname, what=f"reading qdiscs of {ifname}") or "[]")
        if not any(q.get("kind") == "clsact" for q in qdiscs):
            self._tc("qdisc", "add", "dev", ifname, "clsact", what=f"adding clsact to {ifname}")
            self.created_clsact = True
        try:
            self._tc("filter", "add", "dev", ifname, "egress", "pref", str(TC_PREF), "handle", "1", "bpf",
                     "object-pinned", str(self.prog_path), "direct-action", what=f"attaching otcp_mark to {ifname}")
        except BaseException:
            self._drop_clsact()
            self.ifname = self.netns = None
            raise

    def _filters(self, direction: str) -> list[dict]:
        assert self.ifname is not None
        shown = self._tc("-j", "filter", "show", "dev", self.ifname, direction,
                         what=f"reading filters of {self.ifname}")
        return [f for f in json.loads(shown or "[]") if "options" in f]

    def _drop_clsact(self) -> None:
        if self.created_clsact and self.ifname is not None:
            if not self._filters("egress") and not self._filters("ingress"):
                self._tc("qdisc", "del", "dev", self.ifname, "clsact", what=f"removing clsact from {self.ifname}")
            self.created_clsact = False

    def _device_gone(self) -> bool:
        assert self.ifname is not None
        if self.netns is not None and not Path(netns_prefix(self.netns)[1].removeprefix("--net=")).exists():
            return True
        try:
            run([*netns_prefix(self.netns), "ip", "link", "show", "dev", self.ifname], "looking up the device")
        except BpfUnavailable:
            return True
        return False

    def detach(self) -> None:
        """Remove our filter (found by program id) and the clsact qdisc if we
        added it. A device or namespace that is already gone took both with it."""
        if self.ifname is None:
            return
        if not self._device_gone():
            for entry in self._filters("egress"):
                if entry["options"].get("prog", {}).get("id") == self.prog_id:
                    self._tc("filter", "del", "dev", self.ifname, "egress", "pref", str(entry["pref"]),
                             "handle", str(entry["options"]["handle"]), "bpf",
                             what=f"detaching otcp_mark from {self.ifname}")
            self._drop_clsact()
        self.ifname = self.netns = None
        self.created_clsact = False

    def close(self) -> None:
        """Detach, close the maps and unpin everything (idempotent; also runs at exit)."""
        try:
            self.detach()
        finally:
            for name in ("cfg_map", "queue_map"):
                if hasattr(self, name):
                    getattr(self, name).close()
            self.loaded.unpin()
            closed(self)

    def __enter__(self) -> Marker:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def attach_marker(ifname: str, rate_bps: float, k_bytes: int | None = None, limit_bytes: int = 0,
                  netns: str | None = None, burst_bytes: int = 0) -> Marker:
    """Load a marker for the port ``ifname`` (in ``netns``) shaped to ``rate_bps``
    and attach it; K defaults to :func:`default_k_bytes`. ``close()`` the
    result (or use it as a context manager) to detach and unpin."""
    config = MarkerConfig(rate_bps, default_k_bytes(rate_bps) if k_bytes is None else k_bytes, limit_bytes,
                          burst_bytes)
    marker = Marker(config, _tag(netns, ifname))
    try:
        marker.attach(ifname, netns)
    except BaseException:
        marker.close()
        raise
    return marker

"""Register the ``otcp_dctcp`` congestion control, and the sysctls ECN needs.

Registration is machine-wide: once registered, any socket in any namespace
can choose it with ``setsockopt(IPPROTO_TCP, TCP_CONGESTION, b"otcp_dctcp")``
(root may choose a congestion control that
``net.ipv4.tcp_allowed_congestion_control`` does not list). It is never made
a default and never substituted: a caller that cannot register it gets
:class:`BpfUnavailable` with the kernel's words.
"""

from __future__ import annotations

import json

from otcp.bpf import congestion
from otcp.bpf.congestion import RegisteredStructOps, available_congestion_controls
from otcp.bpf.errors import BpfUnavailable, run
from otcp.bpf.objects import netns_prefix

CC_NAME = "otcp_dctcp"
STATS_MAP = "otcp_dctcp_st"
LOCK_PATH = congestion.lock_path(CC_NAME)

__all__ = ["CC_NAME", "LOCK_PATH", "RegisteredCC", "available_congestion_controls", "ecn_sysctl_commands",
           "ecn_sysctls", "register_dctcp", "unregister_leftover"]


class RegisteredCC(RegisteredStructOps):
    """The ``otcp_dctcp`` struct_ops map this process registered (by its id).

    ``close()`` unregisters exactly that map and releases the lock that keeps
    other OTCP processes from registering meanwhile; it also runs at exit.
    Sockets still using the algorithm keep it alive until they close.
    """

    def stats(self) -> dict[str, int]:
        """The algorithm's counters (``struct otcp_dctcp_stats``), summed over
        its connections since registration: window cuts for ECN and for loss,
        and the repairs it made for hooks the kernel skipped (docs/dctcp.md)."""
        map_id = self.map_ids().get(STATS_MAP)
        if map_id is None:
            raise BpfUnavailable(f"{CC_NAME}: no {STATS_MAP} map among its programs' maps")
        entries = json.loads(run(["bpftool", "-j", "map", "dump", "id", str(map_id)], "reading a map").stdout)
        return {key: int(value) for key, value in entries[0]["formatted"]["value"].items()}


def register_dctcp(wait_s: float = 0.0) -> RegisteredCC:
    """Build if needed and register ``otcp_dctcp``; return the handle to unregister it.

    The name is machine-wide, so OTCP processes take turns (a lock under
    /run): another one holding it is waited for up to ``wait_s`` seconds.
    Raises :class:`BpfUnavailable` when the toolchain, the kernel's BTF, the
    verifier or the kernel refuses, when the wait runs out, or when something
    outside OTCP registered the name (``bpftool struct_ops show``).
    """
    map_id, lock = congestion.register(CC_NAME, wait_s)
    return RegisteredCC(CC_NAME, map_id, lock)


def unregister_leftover() -> list[int]:
    """Unregister an ``otcp_dctcp`` that no OTCP process holds (one killed
    before its clean-up left it registered); return the struct_ops ids.
    Does nothing while another OTCP process holds the name."""
    return congestion.unregister_leftover(CC_NAME)


def ecn_sysctls() -> dict[str, str]:
    """What a namespace needs for DCTCP: ECN requested and accepted by TCP."""
    return {"net.ipv4.tcp_ecn": "1"}


def ecn_sysctl_commands(netns: str | None = None) -> list[list[str]]:
    """The commands that set :func:`ecn_sysctls` in ``netns`` (see
    :func:`otcp.bpf.objects.netns_prefix`), as argument lists to run as they are."""
    return [[*netns_prefix(netns), "sysctl", "-q", "-w", f"{key}={value}"] for key, value in ecn_sysctls().items()]

"""The one place that builds and loads OTCP's BPF programs (sources in ``src/``).

- :func:`build` compiles every ``otcp/bpf/src/*.bpf.c`` with clang against the running
  kernel's BTF into ``build/bpf/``;
- :mod:`otcp.bpf.dctcp` registers and unregisters the ``otcp_dctcp``
  congestion control (struct_ops) and says which sysctls ECN needs;
- :mod:`otcp.bpf.scalable` registers the ``otcp_scalable`` congestion
  control (Scalable TCP with GridDT's per-destination additive increase,
  for long fat paths), pins its per-destination map and fills it;
- :mod:`otcp.bpf.marker` loads the tc ECN marker, attaches it to an
  interface's egress in a namespace, and reads its counters;
- :mod:`otcp.bpf.sockops` holds the machine's sock_ops program (one,
  shared by every agent, at the cgroup-v2 root) and switches a host's
  per-destination window clamp, initial window, rto_min and pacing rate;
- :mod:`otcp.bpf.objects` loads an object with its maps pinned under
  ``/sys/fs/bpf/otcp/`` and unpins it, for every program type.

Every refusal (no toolchain, no BTF, the verifier, the kernel) is raised as
:class:`BpfUnavailable` carrying the tool's and the kernel's own words.
"""

from otcp.bpf.build import build, object_path
from otcp.bpf.dctcp import CC_NAME, RegisteredCC, ecn_sysctl_commands, ecn_sysctls, register_dctcp
from otcp.bpf.errors import BpfUnavailable
from otcp.bpf.marker import Marker, MarkerConfig, MarkerCounters, attach_marker, default_k_bytes
from otcp.bpf.scalable import RegisteredScalable, ScalableEntry, ScalableTable, register_scalable
from otcp.bpf.sockops import Enforced, SockOpsEnforcer, netns_cookie

__all__ = [
    "CC_NAME",
    "BpfUnavailable",
    "Enforced",
    "Marker",
    "MarkerConfig",
    "MarkerCounters",
    "RegisteredCC",
    "RegisteredScalable",
    "ScalableEntry",
    "ScalableTable",
    "SockOpsEnforcer",
    "attach_marker",
    "build",
    "default_k_bytes",
    "ecn_sysctl_commands",
    "ecn_sysctls",
    "object_path",
    "netns_cookie",
    "register_dctcp",
    "register_scalable",
]

"""Start a rendered systemd service unit's ``ExecStart=`` under that unit's own
restrictions, where PID 1 is not systemd (``systemd-run`` needs a running
manager). What is applied is read from the unit file, never typed again here:

- ``ExecStartPre=`` lines first (``+``: with full privileges, as systemd runs them; ``-``: failure ignored);
- a private mount namespace built as systemd's namespace.c builds it: ``ProtectSystem=``
  (read-only ``/``; ``strict`` leaves ``/proc``, ``/sys``, ``/dev`` to the options below),
  ``ProtectHome=yes``, ``PrivateTmp=``, ``PrivateDevices=`` (a ``/dev`` with the pseudo-devices
  alone), ``ProtectKernelTunables=`` (``/sys`` and ``/proc/sys`` and the rest of its table
  read-only, ``/proc/kallsyms`` and ``/proc/kcore`` inaccessible), ``ProtectControlGroups=``,
  ``ProtectKernelModules=``, ``ProtectKernelLogs=``, ``ReadWritePaths=``, ``StateDirectory=``
  (a scratch directory mounted at ``/var/lib/NAME`` on an otherwise empty read-only ``/var/lib``)
  and ``RuntimeDirectory=`` (the machine's ``/run/NAME``, made and given to the unit's user);
  where two options name one path, the more restrictive wins, as in systemd;
- ``ProtectHostname=``: a UTS namespace; ``NetworkNamespacePath=``: that network namespace;
- ``User=``/``Group=``, ``CapabilityBoundingSet=``, ``AmbientCapabilities=`` and
  ``NoNewPrivileges=`` with util-linux's ``setpriv``;
- seccomp filters loaded with libseccomp, one per option as systemd loads them:
  ``SystemCallFilter=`` (an allow-list, with ``@default`` and its groups expanded by
  ``systemd-analyze syscall-filter``; anything else kills the process, systemd's default
  action), ``SystemCallArchitectures=native``, ``RestrictAddressFamilies=``,
  ``RestrictNamespaces=yes``, ``RestrictRealtime=``, ``RestrictSUIDSGID=``, ``LockPersonality=``,
  and the system calls ``ProtectClock=``, ``ProtectKernelModules=``, ``ProtectKernelLogs=``,
  ``ProtectHostname=`` and ``PrivateDevices=`` take away;
- ``Environment=``, ``EnvironmentFile=``, ``UMask=``, ``WorkingDirectory=``, ``LimitNOFILE=``,
  and the specifiers ``%u %g %S %t %%`` (of the system manager: ``%u`` is root, not ``User=``).

``--expose PATH`` binds a path back, read-only, at its own place after the
mounts above: the test's scratch installation lives in its checkout, which
may sit under ``/tmp`` or ``/home`` where the unit's ``PrivateTmp=`` and
``ProtectHome=`` would hide it (an installed system has it under ``/opt``).

A directive it does not know is refused (:class:`UnitError`), so that a new
restriction in a unit cannot go untested. What it cannot do is said:
``DevicePolicy=closed`` (the device cgroup ``PrivateDevices=`` adds) needs a
cgroup of the service's own; ``/var/lib`` shows the state directory alone.

Run as root: ``python unit_sandbox.py UNIT --state-root DIR``; the process
started becomes the service's main process (same pid), so SIGTERM stops it
as ``systemctl stop`` would.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import grp
import json
import os
import pwd
import re
import resource
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: Directives that say when and how often to start, not what the process may do.
LIFECYCLE = {"Type", "Restart", "RestartSec", "ExecReload"}
BOOLEANS = {"yes": True, "true": True, "on": True, "1": True, "no": False, "false": False, "off": False, "0": False}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
#: Runs the seccomp stage: Debian's, outside the paths the unit may hide (ProtectHome=).
STAGE_PYTHON = "/usr/bin/python3"

# systemd's namespace.c tables (systemd 252), what each option makes read-only or inaccessible.
PROTECT_KERNEL_TUNABLES_RO = ["/proc/acpi", "/proc/apm", "/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq",
                              "/proc/latency_stats", "/proc/mtrr", "/proc/scsi", "/proc/sys", "/proc/sysrq-trigger",
                              "/proc/timer_stats", "/sys", "/sys/fs/bpf", "/sys/kernel/debug", "/sys/kernel/tracing"]
PROTECT_KERNEL_TUNABLES_GONE = ["/proc/kallsyms", "/proc/kcore"]
PROTECT_SYSTEM_RO = {"yes": ["/usr", "/boot", "/efi"], "full": ["/usr", "/boot", "/efi", "/etc"], "strict": ["/"]}
PROTECT_HOME_GONE = ["/home", "/run/user", "/root"]
PRIVATE_DEVICES = ["null", "zero", "full", "random", "urandom", "tty"]
#: Priority when two entries name one path (lower wins), as systemd's MountMode order.
INACCESSIBLE, READONLY, READWRITE, READWRITE_IMPLICIT = 0, 1, 2, 3

# System calls options take away besides SystemCallFilter= (systemd's execute.c).
TAKEN_AWAY = {"ProtectClock": ["@clock"], "ProtectKernelModules": ["@module"], "ProtectKernelLogs": ["syslog"],
              "ProtectHostname": ["sethostname", "setdomainname"], "PrivateDevices": ["@raw-io"]}
# ... and capabilities.
CAPS_TAKEN_AWAY = {"ProtectClock": ["CAP_SYS_TIME", "CAP_WAKE_ALARM"], "ProtectKernelModules": ["CAP_SYS_MODULE"],
                   "ProtectKernelLogs": ["CAP_SYSLOG"], "PrivateDevices": ["CAP_MKNOD", "CAP_SYS_RAWIO"]}

KNOWN = LIFECYCLE | {
    "User", "Group", "Environment", "EnvironmentFile", "ExecStartPre", "ExecStart", "WorkingDirectory", "UMask",
    "LimitNOFILE", "StateDirectory", "StateDirectoryMode", "RuntimeDirectory", "RuntimeDirectoryPreserve",
    "ReadWritePaths", "CapabilityBoundingSet", "AmbientCapabilities", "NoNewPrivileges", "ProtectSystem",
    "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables", "ProtectKernelModules",
    "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock", "ProtectHostname", "RestrictAddressFamilies",
    "RestrictNamespaces", "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality", "SystemCallArchitectures",
    "SystemCallFilter", "NetworkNamespacePath",
}

# libseccomp (seccomp.h).
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_NE, SCMP_CMP_EQ, SCMP_CMP_GE, SCMP_CMP_MASKED_EQ = 1, 4, 5, 7
NAMESPACE_FLAGS = {"cgroup": 0x02000000, "ipc": 0x08000000, "net": 0x40000000, "mnt": 0x00020000,
                   "pid": 0x20000000, "user": 0x10000000, "uts": 0x04000000}
ADDRESS_FAMILIES = {"AF_UNIX": 1, "AF_LOCAL": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17}
AF_MAX = 46
S_ISUID, S_ISGID, O_CREAT = 0o4000, 0o2000, 0o100
MS_RDONLY, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 1, 4096, 8192, 16384, 1 << 18
MOUNT_ATTR_RDONLY, AT_RECURSIVE, SYS_MOUNT_SETATTR = 1, 0x8000, 442
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWNET = 0x00020000, 0x04000000, 0x40000000


class UnitError(Exception):
    """The unit asks for something this sandbox cannot apply as systemd would."""


@dataclass
class Unit:
    """A unit file's [Service] section: directive -> its values in order (a directive may repeat)."""

    path: Path
    service: dict[str, list[str]] = field(default_factory=dict)

    def values(self, key: str) -> list[str]:
        """Every value given to ``key`` (space-separated lists flattened; an empty value resets, as systemd)."""
        found: list[str] = []
        for value in self.service.get(key, []):
            found = [] if not value else found + value.split()
        return found

    def one(self, key: str, default: str | None = None) -> str | None:
        """The last value given to ``key``."""
        given = self.service.get(key)
        return given[-1] if given else default

    def flag(self, key: str) -> bool:
        """A boolean directive."""
        value = self.one(key, "no")
        assert value is not None
        if value.lower() not in BOOLEANS:
            raise UnitError(f"{self.path}: {key}={value}: not a boolean")
        return BOOLEANS[value.lower()]


def parse_unit(path: Path) -> Unit:
    """The [Service] section of a unit file; unknown directives there are refused."""
    unit = Unit(path)
    section = None
    lines = path.read_text().splitlines()
    joined: list[str] = []
    for line in lines:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line.strip())
    for line in joined:
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        if section != "Service":
            continue
        key = key.strip()
        if key not in KNOWN:
            raise UnitError(f"{path}: {key}= is not applied by this sandbox: teach it before testing the unit")
        unit.service.setdefault(key, []).append(value.strip())
    return unit


# -- what to apply ---------------------------------------------------------------


def syscall_groups() -> dict[str, list[str]]:
    """systemd's system call groups, @name -> members (groups nested), from systemd-analyze."""
    shown = subprocess.run(["systemd-analyze", "syscall-filter"], check=True, capture_output=True, text=True).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in shown.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    """System call names with their groups expanded."""
    found: set[str] = set()
    for name in names:
        if name.startswith("@"):
            if name not in groups:
                raise UnitError(f"unknown system call group {name}")
            found |= expand(groups[name], groups)
        else:
            found.add(name)
    return found


def seccomp_filters(unit: Unit) -> list[dict]:
    """The seccomp filters the unit asks for, one per option, as data for the seccomp stage."""
    architectures = unit.values("SystemCallArchitectures")
    if architectures not in ([], ["native"]):
        raise UnitError(f"SystemCallArchitectures={' '.join(architectures)}: only native is applied")
    filters = _address_family_filter(unit)
    deny = errno_action(errno.EPERM)
    if unit.flag("RestrictNamespaces"):
        rules = [[deny, "setns", []], [errno_action(errno.ENOSYS), "clone3", []]]
        for flag in NAMESPACE_FLAGS.values():
            rules += [[deny, call, [[0, SCMP_CMP_MASKED_EQ, flag, flag]]] for call in ("unshare", "clone")]
        filters.append({"what": "RestrictNamespaces", "default": SCMP_ACT_ALLOW, "rules": rules})
    if unit.flag("RestrictRealtime"):
        rules = [[deny, "sched_setscheduler", [[1, SCMP_CMP_MASKED_EQ, 0xFF, policy]]] for policy in (1, 2, 6)]
        filters.append({"what": "RestrictRealtime", "default": SCMP_ACT_ALLOW, "rules": rules})
    if unit.flag("RestrictSUIDSGID"):
        filters.append({"what": "RestrictSUIDSGID", "default": SCMP_ACT_ALLOW, "rules": _suid_sgid_rules(deny)})
    if unit.flag("LockPersonality"):
        filters.append({"what": "LockPersonality", "default": SCMP_ACT_ALLOW,
                        "rules": [[deny, "personality", [[0, SCMP_CMP_NE, 0, 0]]]]})
    # Last: loading a filter is a system call the allow-list may not hold.
    allow_list = _system_call_filter(unit)
    if not allow_list and architectures:
        allow_list.append({"what": "SystemCallArchitectures", "default": SCMP_ACT_ALLOW, "rules": []})
    return filters + allow_list


def _system_call_filter(unit: Unit) -> list[dict]:
    """SystemCallFilter= (an allow-list with @default, as systemd adds it), less what Protect*= take away."""
    groups = syscall_groups()
    taken = expand([name for option, names in TAKEN_AWAY.items() if unit.flag(option) for name in names], groups)
    allowed = unit.values("SystemCallFilter")
    if allowed and allowed[0].startswith("~"):
        raise UnitError("SystemCallFilter=~...: a deny-list is not applied by this sandbox")
    if allowed:
        names = expand(["@default", *allowed], groups) - taken
        return [{"what": "SystemCallFilter", "default": SCMP_ACT_KILL_PROCESS,
                 "rules": [[SCMP_ACT_ALLOW, name, []] for name in sorted(names)]}]
    if taken:
        return [{"what": "Protect*", "default": SCMP_ACT_ALLOW,
                 "rules": [[errno_action(errno.EPERM), name, []] for name in sorted(taken)]}]
    return []


def _address_family_filter(unit: Unit) -> list[dict]:
    """RestrictAddressFamilies=: socket() of any other family fails with EAFNOSUPPORT."""
    families = unit.values("RestrictAddressFamilies")
    if not families:
        return []
    if families[0].startswith("~"):
        raise UnitError("RestrictAddressFamilies=~...: a deny-list is not applied by this sandbox")
    keep = {ADDRESS_FAMILIES[name] for name in families}
    refuse = errno_action(errno.EAFNOSUPPORT)
    rules = [[refuse, "socket", [[0, SCMP_CMP_EQ, family, 0]]] for family in range(AF_MAX) if family not in keep]
    rules.append([refuse, "socket", [[0, SCMP_CMP_GE, AF_MAX, 0]]])
    return [{"what": "RestrictAddressFamilies", "default": SCMP_ACT_ALLOW, "rules": rules}]


def _suid_sgid_rules(deny: int) -> list[list]:
    """RestrictSUIDSGID=: no mode with the set-user-ID or set-group-ID bit."""
    rules: list[list] = []
    for bit in (S_ISUID, S_ISGID):
        rules += [[deny, "chmod", [[1, SCMP_CMP_MASKED_EQ, bit, bit]]],
                  [deny, "fchmod", [[1, SCMP_CMP_MASKED_EQ, bit, bit]]],
                  [deny, "fchmodat", [[2, SCMP_CMP_MASKED_EQ, bit, bit]]],
                  [deny, "creat", [[1, SCMP_CMP_MASKED_EQ, bit, bit]]],
                  [deny, "open", [[1, SCMP_CMP_MASKED_EQ, O_CREAT, O_CREAT], [2, SCMP_CMP_MASKED_EQ, bit, bit]]],
                  [deny, "openat", [[2, SCMP_CMP_MASKED_EQ, O_CREAT, O_CREAT], [3, SCMP_CMP_MASKED_EQ, bit, bit]]]]
    return rules


def errno_action(number: int) -> int:
    """SCMP_ACT_ERRNO(number)."""
    return 0x00050000 | (number & 0xFFFF)


def capabilities(unit: Unit) -> tuple[list[str], list[str]]:
    """(bounding set, ambient set), as setpriv's lowercase names; None-given bounding: all."""
    taken = {cap for option, caps in CAPS_TAKEN_AWAY.items() if unit.flag(option) for cap in caps}
    if "CapabilityBoundingSet" in unit.service:
        bounding = [cap for cap in unit.values("CapabilityBoundingSet") if cap not in taken]
    else:
        raise UnitError("no CapabilityBoundingSet=: this sandbox applies an explicit bounding set only")
    ambient = [cap for cap in unit.values("AmbientCapabilities") if cap in bounding]
    return [setpriv_cap(cap) for cap in bounding], [setpriv_cap(cap) for cap in ambient]


def setpriv_cap(name: str) -> str:
    """CAP_NET_ADMIN -> net_admin."""
    if not re.fullmatch(r"CAP_[A-Z_]+", name):
        raise UnitError(f"bad capability {name!r}")
    return name.removeprefix("CAP_").lower()


@dataclass
class MountPlan:
    """Paths and what each becomes, as systemd's list of MountEntry."""

    entries: dict[str, int] = field(default_factory=dict)
    tmpfs: dict[str, str] = field(default_factory=dict)  # path -> mode: PrivateTmp=, and /var/lib
    binds: dict[str, str] = field(default_factory=dict)  # target -> source

    def expose(self, path: str) -> None:
        """Bind path back at its own place, read-only, over whatever the unit made of it."""
        self.binds[path] = path
        self.entries[path] = READONLY

    def add(self, path: str, mode: int) -> None:
        """Name a path; where two entries name it, the more restrictive wins."""
        self.entries[path] = min(mode, self.entries.get(path, READWRITE_IMPLICIT))


def mount_plan(unit: Unit, state_root: Path) -> MountPlan:
    """The mounts the unit asks for (see the module)."""
    plan = MountPlan()
    system = unit.one("ProtectSystem", "no") or "no"
    if system not in ("no", *PROTECT_SYSTEM_RO):
        raise UnitError(f"ProtectSystem={system}: not applied by this sandbox")
    for path in PROTECT_SYSTEM_RO.get(system, []):
        plan.add(path, READONLY)
    if system == "strict":
        for path in ("/proc", "/sys", "/dev"):
            plan.add(path, READWRITE_IMPLICIT)
    home = unit.one("ProtectHome", "no")
    if home not in ("no", "yes"):
        raise UnitError(f"ProtectHome={home}: only yes and no are applied by this sandbox")
    tables = [
        (home == "yes", PROTECT_HOME_GONE, INACCESSIBLE),
        (unit.flag("ProtectKernelTunables"), PROTECT_KERNEL_TUNABLES_RO, READONLY),
        (unit.flag("ProtectKernelTunables"), PROTECT_KERNEL_TUNABLES_GONE, INACCESSIBLE),
        (unit.flag("ProtectKernelTunables"), ["/sys/fs/cgroup"], READWRITE_IMPLICIT),
        (unit.flag("ProtectControlGroups"), ["/sys/fs/cgroup"], READONLY),
        (unit.flag("ProtectKernelModules"), ["/usr/lib/modules"], INACCESSIBLE),
        (unit.flag("ProtectKernelLogs"), ["/proc/kmsg", "/dev/kmsg"], INACCESSIBLE),
    ]
    for wanted, paths, mode in tables:
        for path in paths if wanted else []:
            plan.add(path, mode)
    if unit.flag("PrivateTmp"):
        for path in ("/tmp", "/var/tmp"):
            plan.tmpfs[path] = "1777"
            plan.add(path, READWRITE)
    _writable_paths(unit, state_root, plan)
    return plan


def _writable_paths(unit: Unit, state_root: Path, plan: MountPlan) -> None:
    """ReadWritePaths=, StateDirectory= and RuntimeDirectory= into the plan."""
    for given in unit.values("ReadWritePaths"):
        path = given.lstrip("-")
        if not os.path.exists(path):
            if given.startswith("-"):
                continue
            raise UnitError(f"ReadWritePaths={path}: does not exist (systemd fails the unit)")
        plan.add(path, READWRITE)
    states = unit.values("StateDirectory")
    if states:
        plan.tmpfs["/var/lib"] = "0755"
        plan.add("/var/lib", READONLY)
    for name in states:
        plan.binds[f"/var/lib/{name}"] = str(state_root / name)
        plan.add(f"/var/lib/{name}", READWRITE)
    for name in unit.values("RuntimeDirectory"):
        plan.add(f"/run/{name}", READWRITE)


# -- applying it (as root, in the child that becomes the service) ------------------------------


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2)."""
    libc = _libc()
    _check(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), ctypes.c_ulong(flags),
                      data and data.encode()), f"mount {source} on {target}")


def set_read_only(path: str, read_only: bool) -> None:
    """mount_setattr(2) on the mount tree at path: read-only or writable, recursively."""

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                    ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    libc = _libc()
    _check(libc.syscall(SYS_MOUNT_SETATTR, -100, path.encode(), AT_RECURSIVE, ctypes.byref(attr),
                        ctypes.sizeof(attr)), f"mount_setattr {path}")


def build_namespace(plan: MountPlan, private_devices: bool, scratch: Path) -> None:
    """Unshare the mount namespace and make it what the plan says. Sources are held open before
    anything is mounted: the tmpfs mounts (PrivateTmp=) may cover where they are."""
    gone_dir, gone_file = scratch / "inaccessible-dir", scratch / "inaccessible-file"
    gone_dir.mkdir(mode=0, exist_ok=True)
    gone_file.touch(mode=0, exist_ok=True)
    _check(_libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    held = {str(path): os.open(path, os.O_PATH | os.O_CLOEXEC) for path in (gone_dir, gone_file, scratch)}
    held.update({source: os.open(source, os.O_PATH | os.O_CLOEXEC) for source in plan.binds.values()})

    def reach(path: Path | str) -> str:
        return f"/proc/self/fd/{held[str(path)]}"

    if private_devices:
        _private_dev(Path(reach(scratch)) / "dev")
    for path, mode in plan.tmpfs.items():
        mount("tmpfs", path, "tmpfs", 0, f"mode={mode}")
    for target, source in plan.binds.items():
        os.makedirs(target, exist_ok=True)
        mount(reach(source), target, None, MS_BIND | MS_REC)
    entries = sorted(plan.entries.items(), key=lambda item: (item[0].count("/") if item[0] != "/" else 0, item[0]))
    for path, mode in entries:
        if not os.path.lexists(path):
            continue
        if mode == INACCESSIBLE:
            mount(reach(gone_dir if os.path.isdir(path) else gone_file), path, None, MS_BIND)
        elif path != "/" and path not in plan.tmpfs and path not in plan.binds:
            mount(path, path, None, MS_BIND | MS_REC)  # a mount of its own, so that its flags are its own
        set_read_only(path, mode in (READONLY, INACCESSIBLE))
    for fd in held.values():
        os.close(fd)


def _private_dev(dev: Path) -> None:
    """PrivateDevices=: a /dev with the pseudo-devices alone (made at dev, then moved over /dev)."""
    dev.mkdir(exist_ok=True)
    mount("tmpfs", str(dev), "tmpfs", 0, "mode=0755")
    for name in PRIVATE_DEVICES:
        (dev / name).touch()
        mount(f"/dev/{name}", str(dev / name), None, MS_BIND)
    (dev / "shm").mkdir()
    mount("tmpfs", str(dev / "shm"), "tmpfs", 0, "mode=1777")
    mount(str(dev), "/dev", None, MS_MOVE)


# -- the seccomp stage (runs as the unit's user, just before the service's program) --------------------


def load_seccomp(filters: list[dict]) -> None:
    """Load each filter (libseccomp); the kernel applies the most restrictive verdict of all."""

    class ArgCmp(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                    ("datum_b", ctypes.c_uint64)]

    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    for spec in filters:
        context = lib.seccomp_init(spec["default"])
        if not context:
            raise OSError(f"seccomp_init failed for {spec['what']}")
        try:
            for action, name, args in spec["rules"]:
                number = lib.seccomp_syscall_resolve_name(name.encode())
                if number < 0:
                    continue  # not a system call of this architecture (systemd skips those too)
                compares = (ArgCmp * max(1, len(args)))(*[ArgCmp(*arg) for arg in args])
                result = lib.seccomp_rule_add_array(context, action, number, len(args), compares)
                if result < 0:
                    raise OSError(-result, f"seccomp rule {name} of {spec['what']}: {os.strerror(-result)}")
            result = lib.seccomp_load(context)
            if result < 0:
                raise OSError(-result, f"loading the {spec['what']} filter: {os.strerror(-result)}")
        finally:
            lib.seccomp_release(context)


# -- the command line ------------------------------------------------------------------


def specifiers(text: str) -> str:
    """systemd's %-specifiers of the system manager (%u and %g name the manager's user, root: not User=)."""
    table = {"u": "root", "g": "root", "S": "/var/lib", "t": "/run", "%": "%"}

    def one(found: re.Match[str]) -> str:
        if found.group(1) not in table:
            raise UnitError(f"specifier %{found.group(1)} is not applied by this sandbox")
        return table[found.group(1)]

    return re.sub(r"%(.)", one, text)


def command_line(line: str, environment: dict[str, str]) -> list[str]:
    """An Exec line's words, ${VAR} replaced as one word and $VAR split on whitespace (systemd.service)."""
    words = []
    for word in shlex.split(line):
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:
            words += environment.get(whole.group(1), "").split()
            continue
        words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: environment.get(m.group(1), ""), word))
    return words


def read_environment_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines of an EnvironmentFile= (comments and blank lines skipped)."""
    optional = path.startswith("-")
    path = path.lstrip("-")
    if not os.path.exists(path) and optional:
        return {}
    found = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip().strip('"')
    return found


def start(unit_path: Path, state_root: Path, exposed: list[Path]) -> None:
    """Run the unit's ExecStartPre= lines, then become its ExecStart= under its restrictions (never returns);
    exposed: paths bound back read-only (see the module)."""
    unit = parse_unit(unit_path)
    user = pwd.getpwnam(unit.one("User", "root") or "root")
    group = unit.one("Group", user.pw_name) or user.pw_name
    environment = _environment(unit, user, group)
    _exec_start_pre(unit, environment)
    environment.update(_exec_directories(unit, state_root, user, group))
    argv = command_line(specifiers(unit.one("ExecStart", "") or ""), environment)
    bounding, ambient = capabilities(unit)
    filters = seccomp_filters(unit)
    plan = mount_plan(unit, state_root)
    for path in exposed:
        plan.expose(str(path.resolve()))
    scratch = state_root / ".sandbox"
    scratch.mkdir(exist_ok=True)
    netns = unit.one("NetworkNamespacePath")
    if netns:
        fd = os.open(netns, os.O_RDONLY)
        _check(_libc().setns(fd, CLONE_NEWNET), f"setns {netns}")
        os.close(fd)
    if unit.flag("ProtectHostname"):
        _check(_libc().unshare(CLONE_NEWUTS), "unshare(CLONE_NEWUTS)")
    build_namespace(plan, unit.flag("PrivateDevices"), scratch)
    os.umask(int(unit.one("UMask", "0022") or "0022", 8))
    os.chdir(unit.one("WorkingDirectory", "/") or "/")
    limit = unit.one("LimitNOFILE")
    if limit:
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(limit), int(limit)))
    drop = ["setpriv"]
    if user.pw_uid != 0:
        drop += [f"--reuid={user.pw_uid}", f"--regid={grp.getgrnam(group).gr_gid}", "--init-groups"]
    drop += [f"--bounding-set=-all{''.join(',+' + cap for cap in bounding)}",
             f"--inh-caps=-all{''.join(',+' + cap for cap in ambient)}",
             f"--ambient-caps=-all{''.join(',+' + cap for cap in ambient)}"]
    if unit.flag("NoNewPrivileges"):
        drop.append("--no-new-privs")
    stage = [STAGE_PYTHON, "-I", "-S", str(Path(__file__).resolve()), "--seccomp", json.dumps(filters), "--", *argv]
    os.execvpe("setpriv", [*drop, "--", *stage], environment)


def _environment(unit: Unit, user: pwd.struct_passwd, group: str) -> dict[str, str]:
    """What systemd gives a service: a fixed PATH, the user's names, Environment= and EnvironmentFile=."""
    environment = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "HOME": user.pw_dir, "USER": user.pw_name,
                   "LOGNAME": user.pw_name, "SHELL": user.pw_shell}
    for path in unit.service.get("EnvironmentFile", []):
        environment.update(read_environment_file(specifiers(path)))
    for assignment in unit.service.get("Environment", []):
        for word in shlex.split(specifiers(assignment)):
            key, _, value = word.partition("=")
            environment[key] = value
    return environment


def _exec_start_pre(unit: Unit, environment: dict[str, str]) -> None:
    """ExecStartPre= lines: privileged ones (+) run as root outside the sandbox, as systemd runs them."""
    for line in unit.service.get("ExecStartPre", []):
        prefix = re.match(r"[-+@:!]*", line).group(0)  # type: ignore[union-attr]
        if "+" not in prefix:
            raise UnitError(f"ExecStartPre={line}: only privileged (+) lines are applied by this sandbox")
        done = subprocess.run(command_line(specifiers(line[len(prefix):]), environment), check=False)
        if done.returncode != 0 and "-" not in prefix:
            raise UnitError(f"ExecStartPre={line} failed (exit {done.returncode}): the unit does not start")


def _exec_directories(unit: Unit, state_root: Path, user: pwd.struct_passwd, group: str) -> dict[str, str]:
    """StateDirectory= (under state_root) and RuntimeDirectory= (the machine's /run) made and given to
    the unit's user; returns their environment variables."""
    gid = grp.getgrnam(group).gr_gid
    environment = {}
    mode = int(unit.one("StateDirectoryMode", "0755") or "0755", 8)
    for name in unit.values("StateDirectory"):
        path = state_root / name
        path.mkdir(parents=True, exist_ok=True)
        _chown_tree(path, user.pw_uid, gid)
        path.chmod(mode)
        environment["STATE_DIRECTORY"] = f"/var/lib/{name}"
    for name in unit.values("RuntimeDirectory"):
        if not unit.flag("RuntimeDirectoryPreserve"):
            raise UnitError(f"RuntimeDirectory={name} without RuntimeDirectoryPreserve=yes: the sandbox cannot "
                            f"remove it when the service stops")
        path = Path("/run") / name
        path.mkdir(mode=0o755, exist_ok=True)
        _chown_tree(path, user.pw_uid, gid)
        environment["RUNTIME_DIRECTORY"] = str(path)
    return environment


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    """What systemd does to an exec directory whose owner is not the unit's user."""
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, gid)
    os.chown(path, uid, gid)


def main(argv: list[str] | None = None) -> None:
    """``UNIT --state-root DIR``: start the unit; ``--seccomp JSON -- ARGV``: the last stage."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--seccomp"]:
        filters = json.loads(args[1])
        command = args[3:]
        load_seccomp(filters)
        os.execvp(command[0], command)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("unit", type=Path)
    parser.add_argument("--state-root", type=Path, required=True,
                        help="where StateDirectory= directories live (mounted at /var/lib/NAME)")
    parser.add_argument("--expose", type=Path, action="append", default=[], metavar="PATH",
                        help="bind PATH back read-only where the unit's mounts would hide it (repeatable)")
    options = parser.parse_args(args)
    try:
        start(options.unit, options.state_root, options.expose)
    except (UnitError, OSError) as error:
        print(f"unit_sandbox: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

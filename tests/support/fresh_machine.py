"""A fresh machine, for tests of what the first OTCP process on one must do.

:func:`run_fresh`: a PID namespace and a mount namespace of their own
(``unshare --pid --mount``), whose PID 1 is this module. Inside, nothing
earlier runs mounted is left: no BPF filesystem anywhere, an empty
``/run/otcp-bpf`` (a tmpfs), cgroup v2 only where this machine has it (or
nowhere, when asked), and everything else as on this machine. OTCP resolves
the machine's mounts in the outermost mount namespace among its ancestors,
which inside is this one: it sees exactly that. The real machine's mounts are
never touched: the namespace's go with it, and :func:`run_fresh` checks that
this machine's mount table is the same after. A sock_ops program left
attached to the root cgroup by a failed run inside (its pins went with the
namespace) is detached by id afterwards; no other program is touched.

:func:`unmounted_bpffs`: this machine itself without its BPF filesystem, for
what cannot run in a PID namespace of its own (the incast runner reads Open
vSwitch's processes in /proc). It removes what OTCP processes that are gone
left pinned, unmounts the BPF filesystem only when it then holds nothing but
the kernel's own entries and empty directories, and puts the machine's
mounts back as they were afterwards.

Both run under the network-namespace lock like every test that makes
namespaces or loads BPF (the suite does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

RUNTIME_DIR = Path("/run/otcp-bpf")
SOCKOPS_PROGRAM = "otcp_sockops"
#: What the kernel puts in every new BPF filesystem (its bpf_preload iterators).
KERNEL_ENTRIES = {"maps.debug", "progs.debug"}


def mounts(path: str = "/proc/self/mountinfo") -> list[tuple[str, str, str]]:
    """(mount point, file system type, source) of every mount, in order."""
    table = []
    with open(path) as lines:
        for line in lines:
            before, _, after = line.partition(" - ")
            kind, source = after.split()[:2]
            table.append((before.split()[4], kind, source))
    return table


def _unmount_every(kinds: set[str]) -> None:
    """Unmount every mount of these file system types in this (private) namespace, stacked ones too."""
    while True:
        found = [point for point, kind, _ in mounts() if kind in kinds]
        if not found:
            return
        for point in sorted(found, key=len, reverse=True):
            subprocess.run(["umount", point], check=True)


def _inside(argv: list[str], report: Path, keep_cgroup2: bool) -> int:
    """PID 1 of the fresh machine: make it fresh, run argv, report its mounts before and after."""
    assert os.getpid() == 1, "run by run_fresh, as PID 1 of a PID namespace of its own"
    _unmount_every({"bpf"} if keep_cgroup2 else {"bpf", "cgroup2"})
    RUNTIME_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "otcp-fresh", str(RUNTIME_DIR)], check=True)
    fresh = mounts()
    returncode = subprocess.run(argv, check=False).returncode
    report.write_text(json.dumps({"fresh": fresh, "after": mounts(), "returncode": returncode}))
    return returncode


@dataclass
class Fresh:
    """What a program run on a fresh machine did, and the machine's mounts around it."""

    completed: subprocess.CompletedProcess[str]
    fresh: list[tuple[str, str, str]]  # the fresh machine's mounts when the program started
    after: list[tuple[str, str, str]]  # and when it had finished


def _attached_sockops(cgroup_root: str) -> set[int]:
    shown = subprocess.run(["bpftool", "-j", "cgroup", "show", cgroup_root], capture_output=True, text=True,
                           check=True).stdout
    return {entry["id"] for entry in json.loads(shown.strip() or "[]") if entry.get("name") == SOCKOPS_PROGRAM}


def real_cgroup2_root() -> str:
    """Where this machine has the cgroup-v2 hierarchy's root mounted."""
    for point, kind, _ in mounts():
        if kind == "cgroup2":
            return point
    raise AssertionError("this machine has no cgroup-v2 hierarchy mounted (the tests' machine must have one)")


def run_fresh(argv: list[str], report_dir: Path, keep_cgroup2: bool = True, timeout: float = 300.0,
              env: dict[str, str] | None = None) -> Fresh:
    """Run ``argv`` as the first program of a fresh machine (see the module);
    check that this machine's mounts are the same after."""
    report = report_dir / "fresh-machine.json"
    cgroup_root = real_cgroup2_root()
    attached_before = _attached_sockops(cgroup_root)
    mounts_before = mounts()
    try:
        completed = subprocess.run(
            ["unshare", "--pid", "--mount", "--kill-child", "--mount-proc", "--propagation", "private", "--",
             sys.executable, __file__, "--report", str(report), *([] if keep_cgroup2 else ["--without-cgroup2"]),
             "--", *argv],
            capture_output=True, text=True, timeout=timeout, check=False, env=env)
    finally:
        for left in _attached_sockops(cgroup_root) - attached_before:
            subprocess.run(["bpftool", "cgroup", "detach", cgroup_root, "sock_ops", "id", str(left)], check=False)
    assert mounts() == mounts_before, "this machine's mounts changed while a fresh machine ran"
    assert report.exists(), f"the fresh machine did not report: {completed.stderr[-2000:]}"
    shown = json.loads(report.read_text())
    return Fresh(completed, [tuple(m) for m in shown["fresh"]], [tuple(m) for m in shown["after"]])


def _contents(point: str) -> tuple[list[str], list[str]]:
    """(empty directories, anything else) in a BPF filesystem, the kernel's own entries left out."""
    empty, held = [], []
    for path in sorted(Path(point).rglob("*")):
        relative = str(path.relative_to(point))
        if relative in KERNEL_ENTRIES:
            continue
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                empty.append(relative)
        else:
            held.append(relative)
    return empty, held


def _bpf_points() -> list[str]:
    return [point for point, kind, _ in mounts() if kind == "bpf"]


@contextlib.contextmanager
def unmounted_bpffs() -> Iterator[None]:
    """This machine without a BPF filesystem while the context lasts (see the
    module); afterwards the BPF filesystems mounted meanwhile are unmounted if
    they hold nothing, and those it had are mounted again, with their empty
    directories. What OTCP processes that are gone left pinned is removed
    first (``python -m otcp.bpf cleanup``); fails, unmounting nothing, where
    anything else is pinned."""
    subprocess.run([sys.executable, "-m", "otcp.bpf", "cleanup"], check=True)
    before = mounts()
    had = {}
    for point in dict.fromkeys(_bpf_points()):
        empty, held = _contents(point)
        assert not held, f"the BPF filesystem at {point} holds pins ({', '.join(held[:5])}): not unmounting it"
        had[point] = empty
    _unmount_every({"bpf"})
    try:
        yield
    finally:
        for point in dict.fromkeys(_bpf_points()):
            if point not in had:
                empty, held = _contents(point)
                assert not held, f"the run left pins in {point}: {', '.join(held[:5])}"
                _unmount_every({"bpf"})
        for point, empty in had.items():
            if point not in _bpf_points():
                subprocess.run(["mount", "-t", "bpf", "bpf", point], check=True)
            for directory in empty:
                (Path(point) / directory).mkdir(parents=True, exist_ok=True)
    assert sorted(m[:2] for m in mounts()) == sorted(m[:2] for m in before), "this machine's mounts were not restored"


def main() -> int:
    """``python fresh_machine.py --report FILE [--without-cgroup2] -- ARGV``, as PID 1 (see run_fresh)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--without-cgroup2", action="store_true")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    return _inside(argv, args.report, keep_cgroup2=not args.without_cgroup2)


if __name__ == "__main__":
    sys.exit(main())

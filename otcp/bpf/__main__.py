"""``python -m otcp.bpf build [--force]``: compile the project's BPF programs
into build/bpf/ (what scripts/bootstrap.sh runs at set-up).
``python -m otcp.bpf cleanup``: unpin what killed OTCP processes left under
/sys/fs/bpf/otcp/, unregister an otcp_dctcp or otcp_scalable that no OTCP
process holds (with otcp_scalable's pinned maps), and remove the sock_ops
entries of killed agents (detaching the program when no live agent uses it)."""

from __future__ import annotations

import argparse
import sys

from otcp.bpf.build import build
from otcp.bpf.dctcp import CC_NAME, unregister_leftover
from otcp.bpf.errors import BpfUnavailable
from otcp.bpf.machine import outer
from otcp.bpf.objects import unpin_stale
from otcp.bpf.scalable import CC_NAME as SCALABLE_NAME
from otcp.bpf.scalable import PIN as SCALABLE_PIN
from otcp.bpf.scalable import cleanup_leftover as cleanup_scalable
from otcp.bpf.sockops import PIN as SOCKOPS_PIN
from otcp.bpf.sockops import cleanup_leftover as cleanup_sockops


def _cleanup() -> None:
    """Release what OTCP processes that are gone left behind, saying each thing released."""
    for path in unpin_stale():
        print(f"unpinned {path}")
    for map_id in unregister_leftover():
        print(f"unregistered {CC_NAME} (struct_ops id {map_id})")
    pinned = outer(SCALABLE_PIN).exists()
    for map_id in cleanup_scalable():
        print(f"unregistered {SCALABLE_NAME} (struct_ops id {map_id})")
    if pinned and not outer(SCALABLE_PIN).exists():
        print(f"unpinned {SCALABLE_PIN}")
    pinned = outer(SOCKOPS_PIN).exists()
    for user in cleanup_sockops():
        print(f"removed the sock_ops entries of agent {user} (gone)")
    if pinned and not outer(SOCKOPS_PIN).exists():
        print(f"detached otcp_sockops and unpinned {SOCKOPS_PIN}")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and build; exit 1 with the reason when refused."""
    parser = argparse.ArgumentParser(prog="python -m otcp.bpf", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="compile bpf/*.bpf.c (skipped when up to date)")
    build_parser.add_argument("--force", action="store_true", help="rebuild everything")
    commands.add_parser("cleanup", help="unpin what processes that are gone left under /sys/fs/bpf/otcp, "
                        f"unregister a {CC_NAME} or {SCALABLE_NAME} no OTCP process holds, and release otcp_sockops "
                        "from agents that are gone")
    args = parser.parse_args(argv)
    if args.command == "cleanup":
        try:
            _cleanup()
        except BpfUnavailable as error:
            print(f"otcp.bpf: {error}", file=sys.stderr)
            return 1
        return 0
    try:
        for path in build(force=args.force):
            print(path)
    except BpfUnavailable as error:
        print(f"otcp.bpf: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

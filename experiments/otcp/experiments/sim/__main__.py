"""``python -m otcp.experiments.sim build [--force]``: compile the ns-3 scenario program into
build/sim/ (what scripts/bootstrap.sh runs at set-up; skipped when up to date)."""

from __future__ import annotations

import argparse
import sys

from otcp.experiments.sim.build import SimulatorUnavailable, build


def main(argv: list[str] | None = None) -> int:
    """Build; exit 1 with what is missing when it cannot."""
    parser = argparse.ArgumentParser(prog="python -m otcp.experiments.sim", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="compile the scenario program (skipped when up to date)")
    build_parser.add_argument("--force", action="store_true", help="rebuild")
    args = parser.parse_args(argv)
    try:
        print(build(force=args.force))
    except SimulatorUnavailable as error:
        print(f"otcp.experiments.sim: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

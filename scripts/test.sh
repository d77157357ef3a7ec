#!/usr/bin/env bash
# Installs what the tests need (see bootstrap.sh), then runs the whole suite:
# unit tests, and the integration tests with real Open vSwitch and Mininet.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest -rs "$@"

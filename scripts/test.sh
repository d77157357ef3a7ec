#!/usr/bin/env bash
# Installs what the tests need (see bootstrap.sh), then checks the code and
# runs the whole suite: ruff (lint and docstrings), mypy (types), then the
# unit tests and the integration tests with real Open vSwitch and Mininet.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
echo "[otcp-test] ruff"
"$ROOT/.venv/bin/ruff" check .
echo "[otcp-test] mypy"
"$ROOT/.venv/bin/mypy"
exec "$ROOT/.venv/bin/python" -m pytest -rs --hypothesis-show-statistics "$@"

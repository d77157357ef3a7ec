#!/usr/bin/env bash
# Installs what OTCP needs (see bootstrap.sh), then runs the main job: a quick
# incast experiment (every scheme, shallow buffer) and its plots in results/quick.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/otcp-experiment" incast --quick --out "$ROOT/results/quick" "$@"

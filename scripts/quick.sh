#!/usr/bin/env bash
# Installs what the main job needs (see bootstrap.sh; not ns-3), then runs the main job in results/quick: a quick
# incast sweep (goodput on synchronized reads), a quick workload run (the web-search mix and
# queries: FCT slowdown), and the trade-off per scheme between them (table and plot).
# Options are passed to the incast sweep. Exits with the first failure's status (130: interrupted).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh" --without-simulator || exit $?
cd "$ROOT"
OUT="$ROOT/results/quick"
status=0
step() {
    "$@"
    local code=$?
    if [ "$code" -eq 130 ]; then exit 130; fi
    if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then status=$code; fi
}
step "$ROOT/.venv/bin/otcp-experiment" incast --quick --out "$OUT/incast" "$@"
step "$ROOT/.venv/bin/otcp-experiment" workload --quick --out "$OUT/workload"
step "$ROOT/.venv/bin/otcp-experiment" report "$OUT/incast" "$OUT/workload" --tradeoff \
    --tradeoff-plot "$OUT/tradeoff.png"
exit "$status"

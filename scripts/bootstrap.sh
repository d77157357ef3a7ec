#!/usr/bin/env bash
# Installs everything OTCP needs on Debian 12 and starts Open vSwitch.
# Safe to run again: every step checks before it acts.
# --without-simulator: leave out ns-3 and the scenario program (the main job does not use them).
set -euo pipefail
with_simulator=1
for arg in "$@"; do
    case "$arg" in
        --without-simulator) with_simulator=0 ;;
        *) echo "otcp: bootstrap.sh: unknown option $arg (known: --without-simulator)" >&2; exit 2 ;;
    esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
APT_PACKAGES=(openvswitch-switch mininet iperf3 ethtool iproute2 iputils-ping python3-venv python3-dev procps
              clang libbpf-dev bpftool)
SIMULATOR_APT_PACKAGES=(g++ nlohmann-json3-dev)
# ns-3 for `otcp-experiment simulate`: the ns3 wheel used as a C++ SDK (its headers and libraries),
# without its Python bindings' dependencies (cppyy builds from source for minutes and is not used).
NS3_WHEEL="ns3==3.44.post0"

log() { printf '[otcp-setup] %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "otcp: run as root (Mininet, Open vSwitch and route changes need it)" >&2
    exit 1
fi

missing=()
wanted=("${APT_PACKAGES[@]}")
if [ "$with_simulator" -eq 1 ]; then wanted+=("${SIMULATOR_APT_PACKAGES[@]}"); fi
for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The virtualenv is made from Debian's python3 so that it sees Debian's Mininet.
if [ ! -x "$VENV/bin/python" ]; then
    log "creating virtualenv $VENV"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
# The editable install maps each package of the `otcp` namespace to its folder,
# so it is redone when setup.py or the set of packages changes.
stamp="$VENV/.otcp-installed"
layout="$(cd "$ROOT" && cat setup.py pyproject.toml && find otcp ryu_app agent topo experiments -name __init__.py | sort)"
layout_hash="$(printf '%s' "$layout" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$layout_hash" ]; then
    log "installing OTCP and its Python dependencies into $VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e "$ROOT[experiments,test]"
    printf '%s\n' "$layout_hash" > "$stamp"
fi
if [ "$with_simulator" -eq 1 ] && ! "$VENV/bin/pip" show -q ns3 >/dev/null 2>&1; then
    log "installing ns-3 ($NS3_WHEEL, as a C++ SDK) into $VENV"
    "$VENV/bin/pip" install -q --no-deps "$NS3_WHEEL"
fi

# Runs "$@" with no descriptor open but standard input, output and error.
# The Open vSwitch daemons live on after this script: whatever else they
# inherited would stay open in them for ever (a `flock` held by the caller,
# as in `flock /tmp/otcp-mininet.lock bash scripts/quick.sh`, would stay held
# by ovsdb-server and ovs-vswitchd, and every later flock would wait).
without_inherited_fds() {
    (
        for entry in /proc/self/fd/*; do
            fd="${entry##*/}"
            if [ "$fd" -gt 2 ]; then
                eval "exec $fd>&-" 2>/dev/null || true
            fi
        done
        exec "$@"
    )
}

# Userspace datapath: this kernel has no openvswitch module.
if ! ovs-vsctl --timeout=5 show >/dev/null 2>&1; then
    log "starting Open vSwitch (userspace datapath)"
    without_inherited_fds /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random --no-monitor >/dev/null \
        || without_inherited_fds /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random
fi
ovs-vsctl --timeout=5 show >/dev/null
log "ready: $VENV"

# BPF programs (bpf/: DCTCP congestion control, ECN marker), compiled against
# this kernel's BTF into build/bpf/; skipped when up to date. A kernel that
# refuses leaves the DCTCP schemes unavailable, with the reason, not the set-up.
# The ns-3 scenario program (experiments/otcp/experiments/sim/src), compiled into build/sim/;
# skipped when up to date.
if [ "$with_simulator" -eq 1 ]; then
    "$VENV/bin/python" -m otcp.experiments.sim build >/dev/null
    log "ns-3 scenario program built in $ROOT/build/sim"
else
    log "ns-3 left out (scripts/bootstrap.sh without options installs it for otcp-experiment simulate)"
fi

if "$VENV/bin/python" -m otcp.bpf build >/dev/null; then
    log "BPF programs built in $ROOT/build/bpf"
else
    log "BPF programs not built (see above): the dctcp schemes will be reported unavailable"
fi

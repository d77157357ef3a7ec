#!/usr/bin/env bash
# Install OTCP as system services (docs/operations.md, "Install"). As root:
#
#   bash scripts/install.sh                 install, or update the code in place
#   bash scripts/install.sh render-units BINDIR CONFDIR OUTDIR
#                                           only write the two units, for these paths
#
# Installs with apt what the agent needs on a server and nothing more (python3-venv,
# and clang, bpftool and libbpf-dev to build its BPF program against the running
# kernel: no Mininet, Open vSwitch or matplotlib; experiments are the package's
# `experiments` extra, scripts/bootstrap.sh sets them up). Puts a virtualenv at
# $PREFIX (Debian's /usr/bin/python3, --system-site-packages) with this project in
# it, builds the BPF programs into the agent's state directory, links the console
# scripts into $BINDIR, renders the systemd units into $UNITDIR, and creates the
# `otcp` system user, a default $CONFDIR/controller.yaml, $CONFDIR/agent.env and a
# random $CONFDIR/agent.secret. Safe to run again: a configuration, environment or
# secret file that exists is never overwritten. It does not enable or start anything.
set -euo pipefail

PREFIX=${PREFIX:-/opt/otcp}
BINDIR=${BINDIR:-/usr/local/bin}
CONFDIR=${CONFDIR:-/etc/otcp}
UNITDIR=${UNITDIR:-/etc/systemd/system}
PYTHON=${PYTHON:-/usr/bin/python3}
SERVICE_USER=otcp
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPTS=(otcp-controller otcp-agent otcp-experiment)
# What the agent needs on a server: a virtualenv, and the BPF toolchain (otcp.bpf.build).
APT_PACKAGES=(python3-venv clang bpftool libbpf-dev)
AGENT_STATE=${AGENT_STATE:-/var/lib/otcp-agent}  # the unit's StateDirectory=

say() { printf 'install: %s\n' "$*"; }

# render_units BINDIR CONFDIR OUTDIR: the unit templates with their paths filled in.
render_units() {
    local bindir=$1 confdir=$2 outdir=$3 template
    mkdir -p "$outdir"
    for template in "$REPO"/packaging/systemd/*.service.in; do
        sed -e "s|@BINDIR@|$bindir|g" -e "s|@CONFDIR@|$confdir|g" "$template" \
            >"$outdir/$(basename "$template" .in)"
        chmod 0644 "$outdir/$(basename "$template" .in)"
    done
}

# install_once PATH MODE GROUP: stdin becomes PATH unless PATH exists already.
install_once() {
    local path=$1 mode=$2 group=$3
    if [[ -e $path ]]; then
        say "kept $path (exists)"
        cat >/dev/null
        return
    fi
    install -m "$mode" -o root -g "$group" /dev/stdin "$path"
    say "wrote $path"
}

default_controller_config() {
    cat <<'EOF'
# OTCP controller (docs/controller.md, docs/operations.md). Relative paths are
# relative to this file. Every key is optional; these are the defaults, except
# where the comment says otherwise.
openflow:  {host: 127.0.0.1, port: 6653}     # where switches connect: an address they can reach
agents:
  host: 127.0.0.1                            # where agents connect: an address they can reach
  port: 6700
  secret_file: agent.secret                  # installed: random; copy it to every agent host
  tls: null                                  # {cert_file: controller.crt, key_file: controller.key}
inventory: null                              # capacities, buffers, pinned delays
database: /var/lib/otcp-controller/otcp-controller.db
admin:     {socket: /var/lib/otcp-controller/admin.sock}   # otcp-controller status reads it
intervals: {probe_s: 1.0, flow_stats_s: 1.0, recompute_s: 2.0}
retention: {measurements_s: 3600, generations: 100, prune_interval_s: 60}
metrics:   null                              # {host: 127.0.0.1, port: 9640} for Prometheus
log_level: info
EOF
}

default_agent_env() {
    cat <<'EOF'
# Environment of otcp-agent.service (docs/operations.md).
# The controller's agent channel, HOST:PORT.
OTCP_CONTROLLER=127.0.0.1:6700
# More options of `otcp-agent run`, for example:
#   --metrics 127.0.0.1:9641 --tls-ca /etc/otcp/ca.crt --tls-server-name otcp-controller
OTCP_AGENT_OPTIONS=
EOF
}

# install_packages: the Debian packages of APT_PACKAGES that are missing.
install_packages() {
    local pkg missing=()
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if [[ ${#missing[@]} == 0 ]]; then
        say "Debian packages present: ${APT_PACKAGES[*]}"
        return
    fi
    say "installing Debian packages: ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# build_bpf: the agent's BPF programs, built where its unit builds them (a refusal is said, not fatal:
# the agent then enforces with routes alone and says why).
build_bpf() {
    install -d -m 0750 -o "$SERVICE_USER" -g "$SERVICE_USER" "$AGENT_STATE"
    if OTCP_BPF_BUILD_DIR=$AGENT_STATE/bpf "$PREFIX/bin/python" -m otcp.bpf build >/dev/null; then
        chown -R "$SERVICE_USER:$SERVICE_USER" "$AGENT_STATE/bpf"
        say "built the BPF programs into $AGENT_STATE/bpf"
    else
        say "the BPF programs do not build here (above); the agent will enforce with routes alone"
    fi
}

install_all() {
    [[ $(id -u) == 0 ]] || { echo "install: run as root" >&2; exit 2; }
    install_packages
    [[ -x $PYTHON ]] || { echo "install: $PYTHON: not found" >&2; exit 2; }
    if ! id -u "$SERVICE_USER" >/dev/null 2>&1; then
        useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
            "$SERVICE_USER"
        say "created system user $SERVICE_USER"
    fi
    if [[ ! -x $PREFIX/bin/python ]]; then
        "$PYTHON" -m venv --system-site-packages "$PREFIX"
        say "created virtualenv $PREFIX"
    fi
    "$PREFIX/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "$REPO"
    say "installed $(cd "$REPO" && git describe --always --dirty 2>/dev/null || echo otcp) into $PREFIX"
    build_bpf
    mkdir -p "$BINDIR"
    local script
    for script in "${SCRIPTS[@]}"; do
        ln -sfn "$PREFIX/bin/$script" "$BINDIR/$script"
    done
    say "linked ${SCRIPTS[*]} into $BINDIR"
    install -d -m 0755 "$CONFDIR"
    default_controller_config | install_once "$CONFDIR/controller.yaml" 0644 root
    default_agent_env | install_once "$CONFDIR/agent.env" 0644 root
    head -c 32 /dev/urandom | base64 | install_once "$CONFDIR/agent.secret" 0640 "$SERVICE_USER"
    render_units "$BINDIR" "$CONFDIR" "$UNITDIR"
    say "wrote otcp-controller.service and otcp-agent.service into $UNITDIR"
    if [[ -d /run/systemd/system ]]; then
        systemctl daemon-reload
    fi
    say "next: edit $CONFDIR/controller.yaml (or agent.env), then systemctl enable --now otcp-controller"
}

case ${1:-install} in
    install) install_all ;;
    render-units)
        [[ $# == 4 ]] || { echo "usage: $0 render-units BINDIR CONFDIR OUTDIR" >&2; exit 2; }
        render_units "$2" "$3" "$4" ;;
    *) echo "usage: $0 [install | render-units BINDIR CONFDIR OUTDIR]" >&2; exit 2 ;;
esac

"""An agent installed with pip into a scratch prefix and started by its
rendered systemd unit, under that unit's own restrictions
(support.unit_sandbox: the seccomp filters, capabilities, user and read-only
mounts the unit file asks for), enforces with BPF; the same unit without the
``bpf`` system call or one of the capabilities it grants falls back to routes
alone and says so in ``otcp-agent show`` and in its metrics.

The scratch prefix sits under the checkout's build/, and the sandbox binds the
checkout back read-only (``--expose``): where the checkout is under /tmp, the
unit's PrivateTmp= would hide it from the agent. It is a virtualenv on Debian's Python
with this checkout's tracked files installed by pip as a clone would be; the
dependencies come from the development environment (a .pth file names its
site-packages; that directory's own .pth files, among them the editable
install's, are not read), so nothing is downloaded.
"""

import grp
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support.channel import SECRET, Controller, metric, scrape, wait_for
from support.routes import set_for

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = ROOT / "tests" / "support" / "unit_sandbox.py"
SERVICE_USER = "otcp"
BPFFS_OTCP = Path("/sys/fs/bpf/otcp")
RUNTIME = Path("/run/otcp-bpf")
METRICS_PORT = 9471
DESTINATION = "10.88.0.5/32"


class Installed:
    """The scratch installation: prefix, rendered units, configuration."""

    def __init__(self, base):
        self.base = base
        self.source = base / "source"
        self.prefix = base / "prefix"
        self.confdir = base / "etc"
        self.units = base / "units"


def _copy_tracked_files(destination):
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def _site_packages(python):
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def service_user():
    """The unit's User= (scripts/install.sh makes it); made here if missing, and removed again."""
    try:
        pwd.getpwnam(SERVICE_USER)
        made = False
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", SERVICE_USER], check=True)
        made = True
    yield SERVICE_USER
    if made:
        subprocess.run(["userdel", SERVICE_USER], check=False)


@pytest.fixture(scope="module")
def installed(service_user):
    """pip install of this checkout into a scratch prefix, its units rendered by scripts/install.sh."""
    (ROOT / "build").mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="installed-agent-", dir=ROOT / "build"))
    base.chmod(0o755)
    try:
        where = Installed(base)
        _copy_tracked_files(where.source)
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip", str(where.prefix)],
                       check=True)
        Path(_site_packages(str(where.prefix / "bin" / "python")), "otcp-test-dependencies.pth").write_text(
            _site_packages(sys.executable) + "\n")
        subprocess.run([sys.executable, "-m", "pip", "--python", str(where.prefix / "bin" / "python"), "install",
                        "--quiet", "--no-deps", "--no-build-isolation", "--no-index", str(where.source)], check=True)
        subprocess.run(["bash", str(where.source / "scripts" / "install.sh"), "render-units",
                        str(where.prefix / "bin"), str(where.confdir), str(where.units)], check=True)
        where.confdir.mkdir(exist_ok=True)
        secret = where.confdir / "agent.secret"
        secret.write_bytes(SECRET + b"\n")
        os.chown(secret, 0, grp.getgrnam(service_user).gr_gid)
        secret.chmod(0o640)
        yield where
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def machine_dirs():
    """Give back what the unit's RuntimeDirectory= and ExecStartPre= hand to its user, and remove the
    pin directory if the run left it empty."""
    before = {path: (path.stat().st_uid, path.stat().st_gid) if path.exists() else None
              for path in (RUNTIME, BPFFS_OTCP)}
    yield
    for path, owner in before.items():
        if owner is None:
            continue
        for root, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), *owner)
        if path.exists():
            os.chown(path, *owner)
    if before[BPFFS_OTCP] is None and BPFFS_OTCP.is_dir() and not any(BPFFS_OTCP.iterdir()):
        BPFFS_OTCP.rmdir()


def unit_for(installed, ns, port, tmp_path, edit=None):
    """The rendered agent unit, in the namespace ns (NetworkNamespacePath=, so that its routes stay
    there), its controller at 127.0.0.1:port, edited by edit(text) when given."""
    (installed.confdir / "agent.env").write_text(
        f"OTCP_CONTROLLER=127.0.0.1:{port}\n"
        f"OTCP_AGENT_OPTIONS=--metrics 127.0.0.1:{METRICS_PORT} --backoff-max 1\n")
    text = (installed.units / "otcp-agent.service").read_text()
    if edit is not None:
        edited = edit(text)
        assert edited != text, "the edit changed nothing"
        text = edited
    text = text.replace("[Service]\n", f"[Service]\nNetworkNamespacePath=/run/netns/{ns.name}\n", 1)
    unit = tmp_path / "otcp-agent.service"
    unit.write_text(text)
    return unit


class Service:
    """The unit's main process, started by the sandbox."""

    def __init__(self, unit, state_root, log_path):
        self.log_path = log_path
        self.state = state_root / "otcp-agent" / "state.db"
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen([sys.executable, str(SANDBOX), str(unit), "--state-root", str(state_root),
                                             "--expose", str(ROOT)],
                                            stdout=log, stderr=log)

    def log(self):
        return self.log_path.read_text()

    def status(self):
        """/proc/PID/status of the running service, as a dict."""
        lines = Path(f"/proc/{self.process.pid}/status").read_text().splitlines()
        return dict(line.split(":\t", 1) for line in lines if ":\t" in line)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def show(installed, ns, service):
    """`otcp-agent show` of the installed package, run by root beside the service."""
    done = subprocess.run([str(installed.prefix / "bin" / "otcp-agent"), "--netns", ns.name, "show", "--state",
                           str(service.state)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def capability_mask(*names):
    numbers = {"CAP_NET_ADMIN": 12, "CAP_PERFMON": 38, "CAP_BPF": 39}
    return sum(1 << numbers[name] for name in names)


def test_the_installed_package_ships_the_bpf_sources_and_builds_outside_itself(installed):
    site = Path(_site_packages(str(installed.prefix / "bin" / "python")))
    shipped = sorted(path.name for path in (site / "otcp" / "bpf" / "src").glob("*.bpf.c"))
    assert shipped == sorted(path.name for path in (ROOT / "otcp" / "bpf" / "src").glob("*.bpf.c"))
    where = subprocess.run([str(installed.prefix / "bin" / "python"), "-c",
                            "import otcp.bpf; from otcp.bpf.build import build_dir; print(otcp.bpf.__file__, build_dir())"],
                           capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]}, cwd="/").stdout
    module, built = where.split()
    assert module.startswith(str(site)) and built == "/var/lib/otcp-agent/bpf"


def test_the_unit_enforces_with_bpf_under_its_own_restrictions(installed, ns, tmp_path, cleanup, machine_dirs):
    controller = Controller(netns=ns.name)
    cleanup.append(controller)
    controller.publish("10.77.0.1", set_for(1, DESTINATION, cwnd_clamp=5, initcwnd=2))
    service = Service(unit_for(installed, ns, controller.port, tmp_path), tmp_path / "state", tmp_path / "agent.log")
    cleanup.append(service)
    wait_for(lambda: controller.acked(1) or service.process.poll() is not None, "the agent's ack")
    assert service.process.poll() is None, service.log()
    status = service.status()
    assert pwd.getpwuid(int(status["Uid"].split()[0])).pw_name == SERVICE_USER
    wanted = capability_mask("CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON")
    assert int(status["CapEff"], 16) == wanted and int(status["CapBnd"], 16) == wanted, status
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2" and int(status["Seccomp_filters"]) >= 5
    shown = show(installed, ns, service)
    assert "enforcement: bpf\n" in shown, shown + service.log()
    assert any(line.startswith(DESTINATION) and line.split()[1:3] == ["5", "2"] for line in shown.splitlines()), shown
    page = scrape(ns, METRICS_PORT)
    assert 'otcp_agent_enforcement{mode="bpf"} 1.0' in page and 'otcp_agent_enforcement{mode="routes"} 0.0' in page
    built = tmp_path / "state" / "otcp-agent" / "bpf"
    assert (built / "otcp_sockops.bpf.o").is_file() and (built / "vmlinux.h").is_file()
    assert not list(installed.prefix.rglob("*.bpf.o"))
    assert service.stop() == 0, service.log()
    assert metric(page, "otcp_agent_connected") == 1


def _without_syscall(text):
    return text.replace("SystemCallFilter=@system-service bpf\n", "SystemCallFilter=@system-service\n")


def _without(capability):
    def edit(text):
        lines = []
        for line in text.split("\n"):
            key, _, value = line.partition("=")
            if key in ("CapabilityBoundingSet", "AmbientCapabilities"):
                line = f"{key}={' '.join(word for word in value.split() if word != capability)}"
            lines.append(line)
        return "\n".join(lines)
    return edit


@pytest.mark.parametrize("edit, reason", [
    (_without_syscall, "killed by SIGSYS"),  # bpftool, by the unit's filter
    (_without("CAP_BPF"), "Operation not permitted"),
    (_without("CAP_PERFMON"), "pointer arithmetic with it prohibited for !root"),
    (_without("CAP_NET_ADMIN"), "Operation not permitted"),
], ids=["no-bpf-syscall", "no-CAP_BPF", "no-CAP_PERFMON", "no-CAP_NET_ADMIN"])
def test_a_unit_that_grants_less_falls_back_to_routes_and_says_so(installed, ns, tmp_path, cleanup, machine_dirs,
                                                                   edit, reason):
    unit = unit_for(installed, ns, 9, tmp_path, edit)
    service = Service(unit, tmp_path / "state", tmp_path / "agent.log")
    cleanup.append(service)
    wait_for(lambda: "enforcing with routes alone" in service.log() or service.process.poll() is not None,
             "the agent to choose its enforcement")
    assert service.process.poll() is None, service.log()
    shown = show(installed, ns, service)
    assert "enforcement: routes (BPF unavailable: " in shown and reason in shown, shown
    wait_for(lambda: 'otcp_agent_enforcement{mode="routes"} 1.0' in scrape(ns, METRICS_PORT), "the metric")
    assert service.stop() == 0, service.log()

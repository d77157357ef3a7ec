"""The systemd units as scripts/install.sh renders them pass `systemd-analyze
verify`, pointing at this checkout's console scripts; the default
configuration the installer writes is one the controller accepts; BPF
programs are built where an installed agent can write; the sandbox that
tests/test_installed_agent.py starts the agent's unit in reads its grants
from the unit file."""

import importlib
import pathlib
import subprocess

import pytest
import yaml

from otcp.bpf.errors import BpfUnavailable, run
from otcp.controller import config
from support import unit_sandbox

ROOT = pathlib.Path(__file__).resolve().parents[1]
build = importlib.import_module("otcp.bpf.build")  # the module: otcp.bpf.build is also the package's function
INSTALL = ROOT / "scripts" / "install.sh"
UNITS = ("otcp-controller.service", "otcp-agent.service")


def render(bindir, confdir, outdir):
    subprocess.run(["bash", str(INSTALL), "render-units", str(bindir), str(confdir), str(outdir)], check=True)
    return [outdir / unit for unit in UNITS]


def verify(units):
    return subprocess.run(["systemd-analyze", "verify", *map(str, units)], capture_output=True, text=True)


def test_rendered_units_pass_systemd_analyze_verify(tmp_path):
    units = render(ROOT / ".venv" / "bin", tmp_path / "etc", tmp_path / "units")
    for unit in units:
        text = unit.read_text()
        assert "@BINDIR@" not in text and "@CONFDIR@" not in text and f"{ROOT}/.venv/bin/" in text and f"{tmp_path}/etc/" in text
    done = verify(units)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_verify_would_catch_a_unit_whose_program_is_missing(tmp_path):
    done = verify(render(tmp_path / "nowhere", tmp_path / "etc", tmp_path / "units"))
    assert done.returncode != 0 and "otcp-agent is not executable" in done.stderr


def test_the_default_configuration_is_valid(tmp_path):
    script = INSTALL.read_text()
    document = script.split("default_controller_config() {\n    cat <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    (tmp_path / "agent.secret").write_text("0123456789abcdef0123456789abcdef\n")
    (tmp_path / "controller.yaml").write_text(document)
    loaded = config.load(str(tmp_path / "controller.yaml"))
    assert loaded.database == "/var/lib/otcp-controller/otcp-controller.db"
    assert loaded.admin.socket == "/var/lib/otcp-controller/admin.sock"
    assert loaded.agents.secret_file == str(tmp_path / "agent.secret")
    assert yaml.safe_load(document)["metrics"] is None  # metrics stay off until asked for


def test_bpf_builds_where_the_environment_says_else_in_the_checkout_else_in_the_agents_state(monkeypatch, tmp_path):
    monkeypatch.setenv(build.BUILD_DIR_VARIABLE, str(tmp_path / "given"))
    assert build.build_dir() == tmp_path / "given" and build.object_path("x") == tmp_path / "given" / "x.bpf.o"
    monkeypatch.delenv(build.BUILD_DIR_VARIABLE)
    assert build.build_dir() == ROOT / "build" / "bpf"  # this checkout (an editable install)
    monkeypatch.setattr(build, "ROOT", tmp_path / "lib" / "python3.11")  # an installed package's site
    assert build.build_dir() == build.INSTALLED_BUILD_DIR == pathlib.Path("/var/lib/otcp-agent/bpf")


def test_an_unwritable_build_directory_is_a_reason_not_a_traceback(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(build.BUILD_DIR_VARIABLE, str(tmp_path / "file" / "bpf"))
    with pytest.raises(BpfUnavailable, match=r"build directory .*/file/bpf is not writable.*OTCP_BPF_BUILD_DIR"):
        build.build()


def test_the_sandbox_reads_the_agents_grants_from_the_unit(tmp_path):
    agent = unit_sandbox.parse_unit(render(ROOT / ".venv" / "bin", tmp_path / "etc", tmp_path / "units")[1])
    allow_list = unit_sandbox.seccomp_filters(agent)[-1]
    assert allow_list["what"] == "SystemCallFilter" and allow_list["default"] == unit_sandbox.SCMP_ACT_KILL_PROCESS
    allowed = {name for _, name, _ in allow_list["rules"]}
    assert "bpf" in allowed and "mount" not in allowed and "execve" in allowed  # @default comes with an allow-list
    assert unit_sandbox.capabilities(agent) == (["net_admin", "bpf", "perfmon"], ["net_admin", "bpf", "perfmon"])
    plan = unit_sandbox.mount_plan(agent, tmp_path / "state")
    assert plan.entries["/"] == unit_sandbox.READONLY and plan.entries["/sys/fs/bpf"] == unit_sandbox.READONLY
    assert plan.entries["/var/lib/otcp-agent"] == unit_sandbox.READWRITE
    assert plan.entries["/run/otcp-bpf"] == unit_sandbox.READWRITE


def test_the_sandbox_lets_protectkerneltunables_win_over_readwritepaths_on_one_path_as_systemd(tmp_path):
    unit = tmp_path / "x.service"
    unit.write_text("[Service]\nExecStart=/bin/true\nProtectKernelTunables=yes\nReadWritePaths=/sys/fs/bpf\n")
    assert unit_sandbox.mount_plan(unit_sandbox.parse_unit(unit), tmp_path).entries["/sys/fs/bpf"] == \
        unit_sandbox.READONLY


def test_the_sandbox_refuses_a_directive_it_does_not_apply(tmp_path):
    unit = tmp_path / "x.service"
    unit.write_text("[Service]\nExecStart=/bin/true\nPrivateNetwork=yes\n")
    with pytest.raises(unit_sandbox.UnitError, match="PrivateNetwork= is not applied by this sandbox"):
        unit_sandbox.parse_unit(unit)


def test_a_tool_killed_by_a_seccomp_filter_is_named_as_such():
    with pytest.raises(BpfUnavailable, match=r"probing failed \(killed by SIGSYS: a seccomp filter refused"):
        run(["sh", "-c", "kill -SYS $$"], "probing")

"""The systemd units as scripts/install.sh renders them pass `systemd-analyze
verify`, pointing at this checkout's console scripts; the default
configuration the installer writes is one the controller accepts."""

import pathlib
import subprocess

import yaml

from otcp.controller import config

ROOT = pathlib.Path(__file__).resolve().parents[1]
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

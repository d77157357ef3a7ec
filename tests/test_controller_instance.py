"""One controller per database and per OpenFlow address.
Real `otcp-controller run` processes on loopback, no switch."""

import subprocess
import sys

import yaml

from otcp.experiments.runner.controller import ControllerProcess, free_port


def run_again(config_path, tmp_path):
    return subprocess.run([sys.executable, "-m", "otcp.service.cli", "run", "--config", str(config_path)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_a_second_controller_on_the_same_database_refuses_and_names_the_first(tmp_path):
    with ControllerProcess(tmp_path / "first") as first:
        second = run_again(first.config_path, tmp_path)
        assert second.returncode == 2
        assert f"already used by another otcp-controller (pid {first.process.pid})" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        assert first.process.poll() is None


def test_a_second_controller_on_the_same_openflow_port_refuses(tmp_path):
    with ControllerProcess(tmp_path / "first") as first:
        settings = {"openflow": {"host": "127.0.0.1", "port": first.openflow_port},
                    "database": str(tmp_path / "other.db")}
        path = tmp_path / "other.yaml"
        path.write_text(yaml.safe_dump(settings))
        second = run_again(path, tmp_path)
        assert second.returncode == 2
        assert f"openflow 127.0.0.1:{first.openflow_port}: already in use" in second.stderr
        assert first.process.poll() is None


def test_the_lock_goes_with_the_controller(tmp_path):
    port = free_port()
    with ControllerProcess(tmp_path / "one", openflow={"host": "127.0.0.1", "port": port}) as first:
        database = first.database
    with ControllerProcess(tmp_path / "one", openflow={"host": "127.0.0.1", "port": port}, database=database):
        pass

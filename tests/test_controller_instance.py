"""One controller per database and per OpenFlow address.
Real `otcp-controller run` processes on loopback, no switch."""

import re
import subprocess
import sys

import yaml

from otcp.experiments.runner.controller import ControllerProcess, free_port, wait_for


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


def test_sigterm_is_logged_with_timestamps_and_removes_the_admin_socket(tmp_path):
    controller = ControllerProcess(tmp_path / "one", admin={"socket": str(tmp_path / "admin.sock")},
                                   log_file=str(tmp_path / "controller-file.log"))
    with controller:
        wait_for(lambda: (tmp_path / "admin.sock").exists(), 30, what="the admin socket")
    assert controller.process.returncode == 0
    assert not (tmp_path / "admin.sock").exists()
    for log in (controller.log(), (tmp_path / "controller-file.log").read_text()):
        lines = log.strip().splitlines()
        assert lines and all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \S+ (DEBUG|INFO|WARNING|ERROR) ", line)
                             for line in lines), [line for line in lines if not re.match(r"\d{4}-", line)]
        assert "otcp.controller INFO SIGTERM received: stopping" in log
        assert "stopping: generation 0 is the last" in log and "otcp.controller INFO stopped (pid" in log


def test_every_command_has_a_version():
    for module in ("otcp.service.cli", "otcp.agent.cli", "otcp.experiments.cli"):
        done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0
        assert re.fullmatch(r"otcp-(controller|agent|experiment) \S+ \(agent channel protocol \d+, Python [\d.]+\)\n",
                            done.stdout), done.stdout

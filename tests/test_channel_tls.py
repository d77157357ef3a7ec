"""TLS on the agent channel (docs/operations.md, "TLS on the agent channel").

The server (`otcp.service.agent_server`, `server_tls`) on os-ken's hub in this
process, listening in a throwaway namespace, and the real agent
(`otcp-agent run --tls-ca`) in it. Certificates are made with openssl the
way the operations guide says. An agent that does not trust the
controller's certificate refuses it, a plain-TCP agent is refused, a
trusting agent gets its set applied and acknowledged; HMAC authentication
still runs on top.
"""

import subprocess

import pytest

from otcp.service.agent_server import server_tls
from support.channel import AgentProcess, Controller, wait_for
from support.namespaces import expected
from support.routes import set_for

pytestmark = pytest.mark.root


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(directory, name):
    """A self-signed CA: name.key, name.crt."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "30", "-subj", f"/CN={name}", cwd=directory)
    return directory / f"{name}.crt"


@pytest.fixture
def certificates(tmp_path):
    """(trusted CA, controller certificate, controller key, an unrelated CA)."""
    trusted = make_ca(tmp_path, "otcp-ca")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "controller.key", "-out", "controller.crt", "-days", "30", "-subj", "/CN=otcp-controller",
            "-CA", "otcp-ca.crt", "-CAkey", "otcp-ca.key",
            "-addext", "subjectAltName=DNS:otcp-controller,IP:127.0.0.1",
            "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth", cwd=tmp_path)
    return trusted, tmp_path / "controller.crt", tmp_path / "controller.key", make_ca(tmp_path, "other-ca")


def test_only_an_agent_that_trusts_the_controller_over_tls_is_served(ns, tmp_path, cleanup, certificates):
    trusted, cert, key, other = certificates
    controller = Controller(netns=ns.name, tls=server_tls(str(cert), str(key)), handshake_timeout=2.0)
    cleanup.append(controller)
    controller.publish("10.77.0.1", set_for(1, "10.77.0.2/32"))

    distrusting = AgentProcess(ns, controller.port, tmp_path, name="distrusting", extra=["--tls-ca", str(other)])
    cleanup.append(distrusting)
    wait_for(lambda: "certificate verify failed" in distrusting.log(), "the agent to refuse the certificate")
    wait_for(lambda: controller.server.refused["tls"] >= 1, "the server to count the failed TLS handshake")
    distrusting.stop()

    plain = AgentProcess(ns, controller.port, tmp_path, name="plain")
    cleanup.append(plain)
    wait_for(lambda: controller.log.has("no TLS handshake within 2 s (a plain-TCP agent?)"),
             "the server to refuse the plain-TCP agent")
    wait_for(lambda: "connection closed: waiting for the challenge" in plain.log(),
             "the plain agent to see it was refused")
    plain.stop()
    assert controller.acks == [] and controller.agents == [] and ns.otcp_routes() == {}
    assert controller.server.refused["authentication"] == 0

    trusting = AgentProcess(ns, controller.port, tmp_path, name="trusting", extra=["--tls-ca", str(trusted)])
    cleanup.append(trusting)
    wait_for(lambda: controller.acked(1), "the ack of generation 1 over TLS")
    assert ns.otcp_routes() == {"10.77.0.2/32": expected()}
    assert controller.server.agents()[0]["host_ip"] == "10.77.0.1"


def test_tls_does_not_replace_the_secret(ns, tmp_path, cleanup, certificates):
    trusted, cert, key, _ = certificates
    controller = Controller(netns=ns.name, tls=server_tls(str(cert), str(key)))
    cleanup.append(controller)
    controller.publish("10.77.0.1", set_for(1, "10.77.0.2/32"))
    agent = AgentProcess(ns, controller.port, tmp_path, secret=b"not-the-secret-at-all", extra=["--tls-ca", str(trusted)])
    cleanup.append(agent)
    wait_for(lambda: controller.server.refused["authentication"] >= 1, "the wrong secret to be refused over TLS")
    assert controller.server.refused["tls"] == 0 and controller.acks == [] and ns.otcp_routes() == {}

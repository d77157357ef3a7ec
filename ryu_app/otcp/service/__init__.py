"""The controller service: the os-ken app that feeds the core its events and
carries out what it returns, the agent channel, the admin socket, the
Prometheus metrics, the launcher and the ``otcp-controller`` command."""

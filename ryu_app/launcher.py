"""Start os-ken's manager with the OTCP app and its validated configuration."""

import logging
import warnings

from ryu_app import config as controller_config


def run(config_path):
    """Validate the configuration, then run os-ken until it is stopped."""
    config = controller_config.load(config_path)
    # os-ken needs eventlet; its deprecation banner says nothing to operators.
    warnings.filterwarnings("ignore", message=".*Eventlet is deprecated")
    logging.getLogger().setLevel(getattr(logging, config["log_level"].upper()))
    # os-ken's topology service registers --observe-links when imported.
    import os_ken.topology.switches  # noqa: F401
    from os_ken.cmd import manager

    from ryu_app import app

    app.CONFIG = config
    openflow = config["openflow"]
    manager.main(
        args=[
            "--ofp-listen-host", openflow["host"],
            "--ofp-tcp-listen-port", str(openflow["port"]),
            "--observe-links",
            "ryu_app.app",
        ],
        prog="otcp-controller",
    )
    return 0

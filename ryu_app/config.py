"""Controller configuration: a YAML file, every value with a documented default.

    openflow:  {host: 127.0.0.1, port: 6653}      # where switches connect
    agents:    {host: 127.0.0.1, port: 6700, secret_file: null}
                                                  # agent channel; off without a secret
    inventory: null                               # optional inventory YAML
    database:  otcp-controller.db                 # SQLite state (WAL)
    intervals: {probe_s: 1.0, flow_stats_s: 1.0, recompute_s: 2.0}
    delay_window: 10                              # probe samples kept per link
    defaults:  {capacity_mbps: 1000, buffer_bytes: 131072, host_link_delay_us: 10}
    bounds:    {mss_bytes: 1448, rto_min_ms: [1, 200], initcwnd: [1, 64], cwnd: [1, 65535]}
    log_level: info

Relative paths are taken relative to the configuration file.
"""

import copy
import os

import yaml

from ryu_app.formulas import Bounds
from wire.limits import CWND_CLAMP, INITCWND, RTO_MIN_MS

DEFAULTS = {
    "openflow": {"host": "127.0.0.1", "port": 6653},
    "agents": {"host": "127.0.0.1", "port": 6700, "secret_file": None},
    "inventory": None,
    "database": "otcp-controller.db",
    "intervals": {"probe_s": 1.0, "flow_stats_s": 1.0, "recompute_s": 2.0},
    "delay_window": 10,
    "defaults": {"capacity_mbps": 1000, "buffer_bytes": 131072, "host_link_delay_us": 10},
    "bounds": {"mss_bytes": 1448, "rto_min_ms": [1, 200], "initcwnd": [1, 64], "cwnd": [1, 65535]},
    "log_level": "info",
}
_LOG_LEVELS = ("debug", "info", "warning", "error")
# Bounds beyond what agents accept could never be applied.
AGENT_LIMITS = {"rto_min_ms": RTO_MIN_MS[1], "initcwnd": INITCWND[1], "cwnd": CWND_CLAMP[1]}


class ConfigError(ValueError):
    """A bad configuration value: names the file and the key."""


def load(path):
    """Read the configuration at path, fill in defaults and validate it."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML syntax error: {exc}") from None
    return validate(document, path)


def validate(document, path="<config>"):
    """Merge document over DEFAULTS and check every value; return a dict."""

    def fail(key, problem):
        raise ConfigError(f"{path}: {key}: {problem}")

    if not isinstance(document, dict):
        fail("top level", "expected a mapping")
    config = copy.deepcopy(DEFAULTS)
    for key, value in document.items():
        if key not in DEFAULTS:
            fail(key, f"unknown key (allowed: {', '.join(DEFAULTS)})")
        if isinstance(DEFAULTS[key], dict):
            if not isinstance(value, dict):
                fail(key, "expected a mapping")
            for sub, subvalue in value.items():
                if sub not in DEFAULTS[key]:
                    fail(f"{key}.{sub}", f"unknown key (allowed: {', '.join(DEFAULTS[key])})")
                config[key][sub] = subvalue
        else:
            config[key] = value

    def number(key, value, minimum, integer=False):
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:
            fail(key, f"expected {'an integer' if integer else 'a number'} >= {minimum}, got {value!r}")

    for section in ("openflow", "agents"):
        if not isinstance(config[section]["host"], str):
            fail(f"{section}.host", "expected an address")
        number(f"{section}.port", config[section]["port"], 1, integer=True)
        if config[section]["port"] > 65535:
            fail(f"{section}.port", f"{config[section]['port']} is not a TCP port")
    for key, value in config["intervals"].items():
        number(f"intervals.{key}", value, 0.05)
    number("delay_window", config["delay_window"], 1, integer=True)
    number("defaults.capacity_mbps", config["defaults"]["capacity_mbps"], 1e-9)
    number("defaults.buffer_bytes", config["defaults"]["buffer_bytes"], 0)
    number("defaults.host_link_delay_us", config["defaults"]["host_link_delay_us"], 0)
    if config["log_level"] not in _LOG_LEVELS:
        fail("log_level", f"expected one of {', '.join(_LOG_LEVELS)}")
    config["bounds"] = _bounds(config["bounds"], fail)
    base = os.path.dirname(os.path.abspath(path)) if path != "<config>" else os.getcwd()
    for key in ("inventory", "database"):
        if config[key] is not None:
            if not isinstance(config[key], str):
                fail(key, "expected a path")
            config[key] = os.path.join(base, config[key])
    secret = config["agents"]["secret_file"]
    if secret is not None:
        config["agents"]["secret_file"] = os.path.join(base, secret)
        if not os.path.isfile(config["agents"]["secret_file"]):
            fail("agents.secret_file", f"{config['agents']['secret_file']}: no such file")
    if config["inventory"] is not None and not os.path.isfile(config["inventory"]):
        fail("inventory", f"{config['inventory']}: no such file")
    return config


def _bounds(section, fail):
    values = {"mss_bytes": section["mss_bytes"]}
    for name in ("rto_min_ms", "initcwnd", "cwnd"):
        pair = section[name]
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, int) for v in pair)):
            fail(f"bounds.{name}", f"expected [low, high] integers, got {pair!r}")
        values[name + "_low"], values[name + "_high"] = pair
        if pair[1] > AGENT_LIMITS[name]:
            fail(f"bounds.{name}", f"high bound {pair[1]} is above what agents accept ({AGENT_LIMITS[name]})")
    try:
        return Bounds(**values)
    except (TypeError, ValueError) as exc:
        fail("bounds", str(exc))

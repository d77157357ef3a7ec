"""Controller configuration: a YAML file, every value with a default (docs/design.md, "Validation").

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

The defaults are the models' own (`ControllerConfig`); relative paths are
taken relative to the configuration file.
"""

import os
from typing import Annotated, Any, Literal

from pydantic import Field

import validation
from ryu_app import formulas
from ryu_app.formulas import Bounds
from validation import Strict, int_range, number_at_least, positive_number
from wire.limits import CWND_CLAMP, INITCWND, RTO_MIN_MS

# Bounds beyond what agents accept could never be applied.
AGENT_LIMITS = {"rto_min_ms": RTO_MIN_MS[1], "initcwnd": INITCWND[1], "cwnd": CWND_CLAMP[1]}

Port = int_range(1, 65535)
Interval = number_at_least(0.05)
BoundPair = Annotated[list[int], Field(min_length=2, max_length=2)]


class OpenFlowSection(Strict):
    """Where switches connect."""

    host: str = "127.0.0.1"
    port: Port = 6653  # type: ignore[valid-type]


class AgentsSection(Strict):
    """The agent channel; off without a secret file."""

    host: str = "127.0.0.1"
    port: Port = 6700  # type: ignore[valid-type]
    secret_file: str | None = None


class IntervalsSection(Strict):
    """How often to probe delays, poll flow statistics and re-plan, in seconds."""

    probe_s: Interval = 1.0  # type: ignore[valid-type]
    flow_stats_s: Interval = 1.0  # type: ignore[valid-type]
    recompute_s: Interval = 2.0  # type: ignore[valid-type]


class DefaultsSection(Strict):
    """Facts of links that neither the inventory nor a measurement describes."""

    capacity_mbps: positive_number() = formulas.DEFAULT_CAPACITY_MBPS  # type: ignore[valid-type]
    buffer_bytes: number_at_least(0) = formulas.DEFAULT_BUFFER_BYTES  # type: ignore[valid-type]
    host_link_delay_us: number_at_least(0) = formulas.DEFAULT_LINK_DELAY_US  # type: ignore[valid-type]


class BoundsSection(Strict):
    """The segment size and the [low, high] limits every parameter is clamped to."""

    mss_bytes: int_range(1, 65535) = formulas.DEFAULT_MSS_BYTES  # type: ignore[valid-type]
    rto_min_ms: BoundPair = [1, 200]
    initcwnd: BoundPair = [1, 64]
    cwnd: BoundPair = [1, 65535]


class ControllerConfig(Strict):
    """The whole configuration file."""

    openflow: OpenFlowSection = OpenFlowSection()
    agents: AgentsSection = AgentsSection()
    inventory: str | None = None
    database: str = "otcp-controller.db"
    intervals: IntervalsSection = IntervalsSection()
    delay_window: int_range(1, 100_000) = 10  # type: ignore[valid-type]
    defaults: DefaultsSection = DefaultsSection()
    bounds: BoundsSection = BoundsSection()
    log_level: Literal["debug", "info", "warning", "error"] = "info"


class ConfigError(ValueError):
    """A bad configuration value: names the file and the key."""


def load(path: str) -> dict:
    """Read the configuration at path, fill in defaults and validate it."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = validation.load_yaml(handle.read(), path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except validation.ValidationError as error:
        raise ConfigError(str(error)) from None
    return validate(document or {}, path)


def validate(document: Any, path: str = "<config>") -> dict:
    """Check document against ControllerConfig; return the filled-in configuration as a dict.

    `bounds` becomes a formulas.Bounds; paths become absolute.
    """
    try:
        config = validation.check(ControllerConfig, document).model_dump()
        config["bounds"] = _bounds(config["bounds"])
    except validation.ValidationError as error:
        raise ConfigError(f"{path}: {error}") from None
    base = os.path.dirname(os.path.abspath(path)) if path != "<config>" else os.getcwd()
    for key in ("inventory", "database"):
        if config[key] is not None:
            config[key] = os.path.join(base, config[key])
    agents = config["agents"]
    if agents["secret_file"] is not None:
        agents["secret_file"] = os.path.join(base, agents["secret_file"])
        if not os.path.isfile(agents["secret_file"]):
            raise ConfigError(f"{path}: agents.secret_file: {agents['secret_file']}: no such file")
    if config["inventory"] is not None and not os.path.isfile(config["inventory"]):
        raise ConfigError(f"{path}: inventory: {config['inventory']}: no such file")
    return config


def _bounds(section: dict) -> Bounds:
    values = {"mss_bytes": section["mss_bytes"]}
    for name in ("rto_min_ms", "initcwnd", "cwnd"):
        low, high = section[name]
        values[name + "_low"], values[name + "_high"] = low, high
        if high > AGENT_LIMITS[name]:
            raise validation.ValidationError(
                f"bounds.{name}", f"high bound {high} is above what agents accept ({AGENT_LIMITS[name]})")
    try:
        return Bounds(**values)
    except ValueError as error:
        raise validation.ValidationError("bounds", str(error)) from None

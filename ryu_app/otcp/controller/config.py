"""Controller configuration: a YAML file, every value with a default (docs/design.md, "Validation").

    openflow:  {host: 127.0.0.1, port: 6653}      # where switches connect
    agents:    {host: 127.0.0.1, port: 6700, secret_file: null, tls: null}
                                                  # agent channel; off without a secret
                                                  # tls: {cert_file: ..., key_file: ...}
    inventory: null                               # optional inventory YAML
    database:  otcp-controller.db                 # SQLite state (WAL)
    intervals: {probe_s: 1.0, flow_stats_s: 1.0, recompute_s: 2.0}
    delay_window: 10                              # probe samples kept per link
    defaults:  {capacity_mbps: 1000, buffer_bytes: 131072, host_link_delay_us: 10}
    bounds:    {mss_bytes: 1448, rto_min_ms: [1, 200], initcwnd: [1, 64], cwnd: [1, 65535]}
    parameters: {formulas: published, queue_target_fraction: 0.25, mss_floor_bytes: 256,
                 pacing: false, pacing_headroom: 0.05}
                                                  # or formulas: lossless (otcp-lossless);
                                                  # pacing: true adds each pair's fair-share
                                                  # pacing rate (otcp-paced)
    stability: {delay_step_us: 20, delay_tolerance: 0.5, refresh_s: 60,
                flow_hold_s: 5.0, min_flow_packets: 3}
    measurement: {max_link_delay_us: 100, host_rtt_max_age_s: 60, host_rtt_min_samples: 3}
    log_level: info
    metrics:   null                               # {host: 127.0.0.1, port: 9640}: Prometheus
    admin:     {socket: otcp-controller.sock}     # `otcp-controller status` asks here
    retention: {measurements_s: 3600, generations: 100, prune_interval_s: 60}

The defaults are the models' own (`ControllerConfig`); relative paths are
taken relative to the configuration file.
"""

import os
import ssl
from typing import Annotated, Any, Literal

from pydantic import Field

from otcp.planning import formulas
from otcp.planning.formulas import Bounds, Lossless, Pacing
from otcp.wire import validation
from otcp.wire.limits import CWND_CLAMP, INITCWND, RTO_MIN_MS
from otcp.wire.validation import Strict, int_range, number_at_least, positive_number

# Bounds beyond what agents accept could never be applied.
AGENT_LIMITS = {"rto_min_ms": RTO_MIN_MS[1], "initcwnd": INITCWND[1], "cwnd": CWND_CLAMP[1]}

Port = int_range(1, 65535)
Interval = number_at_least(0.05)
BoundPair = Annotated[list[int], Field(min_length=2, max_length=2)]
MAX_UNIX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL


class OpenFlowSection(Strict):
    """Where switches connect."""

    host: str = "127.0.0.1"
    port: Port = 6653  # type: ignore[valid-type]


class TlsSection(Strict):
    """The controller's certificate (chain) and private key, PEM files, for TLS on the agent channel."""

    cert_file: str
    key_file: str


class AgentsSection(Strict):
    """The agent channel; off without a secret file. TLS when `tls` is given."""

    host: str = "127.0.0.1"
    port: Port = 6700  # type: ignore[valid-type]
    secret_file: str | None = None
    tls: TlsSection | None = None


class MetricsSection(Strict):
    """Where to answer Prometheus scrapes (/metrics over HTTP)."""

    host: str = "127.0.0.1"
    port: Port  # type: ignore[valid-type]


class AdminSection(Strict):
    """The local admin socket `otcp-controller status` reads the live state from."""

    socket: Annotated[str, Field(min_length=1)] = "otcp-controller.sock"


class RetentionSection(Strict):
    """How much history the database keeps: link measurements younger than
    `measurements_s`, the newest `generations` generations; pruned every `prune_interval_s`."""

    measurements_s: number_at_least(1) = 3600.0  # type: ignore[valid-type]
    generations: int_range(1, 1_000_000) = 100  # type: ignore[valid-type]
    prune_interval_s: Interval = 60.0  # type: ignore[valid-type]


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


class ParametersSection(Strict):
    """Which formulas the controller evaluates: the published ones, or otcp-lossless's;
    and whether each route also carries a fair-share pacing rate (otcp-paced), with which headroom."""

    formulas: Literal["published", "lossless"] = "published"
    queue_target_fraction: Annotated[float, Field(gt=0, le=1)] = Lossless.queue_target_fraction
    mss_floor_bytes: int_range(64, 65535) = Lossless.mss_floor_bytes  # type: ignore[valid-type]
    pacing: bool = False
    pacing_headroom: Annotated[float, Field(ge=0, le=1)] = Pacing.headroom


class StabilitySection(Strict):
    """How the measured inputs are held still (docs/design.md, "Measurement")."""

    delay_step_us: number_at_least(0) = 20  # type: ignore[valid-type]
    delay_tolerance: Annotated[float, Field(ge=0, le=10)] = 0.5
    refresh_s: number_at_least(0) = 60  # type: ignore[valid-type]  # measured delays taken at most this often
    flow_hold_s: number_at_least(0) = 5.0  # type: ignore[valid-type]
    min_flow_packets: int_range(1, 1_000_000) = 3  # type: ignore[valid-type]


class MeasurementSection(Strict):
    """Bounds on what counts as a measurement (docs/design.md, "Measurement")."""

    max_link_delay_us: positive_number() = 100  # type: ignore[valid-type]
    host_rtt_max_age_s: positive_number() = 60  # type: ignore[valid-type]
    host_rtt_min_samples: int_range(1, 1_000_000) = 3  # type: ignore[valid-type]  # samples a probe-minimum report needs


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
    parameters: ParametersSection = ParametersSection()
    stability: StabilitySection = StabilitySection()
    measurement: MeasurementSection = MeasurementSection()
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    metrics: MetricsSection | None = None
    admin: AdminSection = AdminSection()
    retention: RetentionSection = RetentionSection()


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
        parameters = config["parameters"]
        config["lossless"] = (Lossless(parameters["queue_target_fraction"], parameters["mss_floor_bytes"])
                              if parameters["formulas"] == "lossless" else None)
        config["pacing"] = Pacing(parameters["pacing_headroom"]) if parameters["pacing"] else None
    except validation.ValidationError as error:
        raise ConfigError(f"{path}: {error}") from None
    base = os.path.dirname(os.path.abspath(path)) if path != "<config>" else os.getcwd()
    for key in ("inventory", "database"):
        if config[key] is not None:
            config[key] = os.path.join(base, config[key])
    config["admin"]["socket"] = os.path.join(base, config["admin"]["socket"])
    if len(os.fsencode(config["admin"]["socket"])) > MAX_UNIX_SOCKET_PATH:
        raise ConfigError(f"{path}: admin.socket: {config['admin']['socket']}: longer than "
                          f"{MAX_UNIX_SOCKET_PATH} bytes, the limit of a unix socket's path")
    agents = config["agents"]
    files = [("agents.secret_file", agents, "secret_file")]
    if agents["tls"] is not None:
        files += [(f"agents.tls.{name}", agents["tls"], name) for name in ("cert_file", "key_file")]
    for key, section, name in files:
        if section[name] is not None:
            section[name] = os.path.join(base, section[name])
            if not os.path.isfile(section[name]):
                raise ConfigError(f"{path}: {key}: {section[name]}: no such file")
    if agents["tls"] is not None:
        try:  # a certificate that does not load, or a key that does not match it, is named now
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(agents["tls"]["cert_file"],
                                                                    agents["tls"]["key_file"])
        except ssl.SSLError as error:
            detail = f" ({error.reason})" if error.reason else ""
            raise ConfigError(f"{path}: agents.tls: cert_file and key_file are not a PEM certificate chain and its "
                              f"private key{detail}") from None
        except OSError as error:
            raise ConfigError(f"{path}: agents.tls: {error.strerror or error}") from None
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

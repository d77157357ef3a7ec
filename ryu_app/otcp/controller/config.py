"""Controller configuration: a YAML file, every value with a default (docs/design.md, "Validation").

    openflow:  {host: 127.0.0.1, port: 6653}      # where switches connect
    agents:    {host: 127.0.0.1, port: 6700, secret_file: null, tls: null, lease_s: 120}
                                                  # agent channel; off without a secret
                                                  # tls: {cert_file: ..., key_file: ...}
                                                  # lease_s: how long a set holds unrenewed
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
    forwarding: {multipath: true}                 # spread destinations over equal-cost paths
    long_paths: {enabled: true, bdp_threshold_bytes: 1250000, congctl: otcp_scalable,
                 griddt: false, reference_rtt_ms: 100, reference_increase: 2}
                                                  # paths whose BDP exceeds the threshold get
                                                  # congctl, an initial ssthresh and (griddt)
                                                  # GridDT's increase (docs/longpaths.md)
    stability: {delay_step_us: 20, delay_tolerance: 0.5, refresh_s: 60,
                flow_hold_s: 5.0, min_flow_packets: 3}
    measurement: {max_link_delay_us: 100, host_rtt_max_age_s: 60, host_rtt_min_samples: 3,
                  connection_report_max_age_s: 15}
    log_level: info
    log_file:  null                               # also log here (stderr always), e.g. /var/log/otcp/controller.log
    metrics:   null                               # {host: 127.0.0.1, port: 9640}: Prometheus
    admin:     {socket: otcp-controller.sock}     # `otcp-controller status` asks here
    retention: {measurements_s: 3600, generations: 100, prune_interval_s: 60}
    cluster:   {rank: 0, instances: 1, heartbeat_s: 1.0, takeover_s: 4.0}
                                                  # one of several instances (docs/controller.md)

The defaults are the models' own (`ControllerConfig`), the only defaults
the controller has: `load` and `validate` return the validated model, which
the app, the services and `otcp.controller.core.ControllerCore` take as it
is. Relative paths are taken relative to the configuration file. The file
speaks the units operators write (microseconds, Mb/s); each section turns
them into the seconds and bytes the process works in, in one place
(`delay_step_s`, `host_link_delay_s`, ...).
"""

import os
import ssl
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from otcp.controller.roles import MAX_INSTANCES
from otcp.planning import formulas
from otcp.planning.formulas import Bounds, LongPaths, Lossless, Pacing
from otcp.wire import validation
from otcp.wire.limits import CONGCTL_PATTERN, CWND_CLAMP, INITCWND, LEASE_S, RTO_MIN_MS
from otcp.wire.validation import Strict, int_range

# Bounds beyond what agents accept could never be applied.
AGENT_LIMITS = {"rto_min_ms": RTO_MIN_MS[1], "initcwnd": INITCWND[1], "cwnd": CWND_CLAMP[1]}

Port = Annotated[int, int_range(1, 65535)]
Interval = Annotated[float, Field(ge=0.05)]
BoundPair = Annotated[list[int], Field(min_length=2, max_length=2)]
MAX_UNIX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL


class OpenFlowSection(Strict):
    """Where switches connect."""

    host: str = "127.0.0.1"
    port: Port = 6653


class TlsSection(Strict):
    """The controller's certificate (chain) and private key, PEM files, for TLS on the agent channel."""

    cert_file: str
    key_file: str


#: How long a parameter set holds on its host without a renewal (docs/agent.md, "Leases"): four
#: times the agent's longest reconnection wait (30 s), so a controller restart of normal length
#: (start, switches back, the first plan: tens of seconds) renews every set before it lapses.
DEFAULT_LEASE_S = 120.0


class AgentsSection(Strict):
    """The agent channel; off without a secret file. TLS when `tls` is given. `lease_s`: how long
    each set an agent applies holds unless renewed (a third of it apart, while connected)."""

    host: str = "127.0.0.1"
    port: Port = 6700
    secret_file: str | None = None
    tls: TlsSection | None = None
    lease_s: Annotated[float, Field(ge=LEASE_S[0], le=LEASE_S[1])] = DEFAULT_LEASE_S


class MetricsSection(Strict):
    """Where to answer Prometheus scrapes (/metrics over HTTP)."""

    host: str = "127.0.0.1"
    port: Port


class AdminSection(Strict):
    """The local admin socket `otcp-controller status` reads the live state from."""

    socket: Annotated[str, Field(min_length=1)] = "otcp-controller.sock"


class RetentionSection(Strict):
    """How much history the database keeps: link measurements younger than
    `measurements_s`, the newest `generations` generations; pruned every `prune_interval_s`."""

    measurements_s: Annotated[float, Field(ge=1)] = 3600.0
    generations: Annotated[int, int_range(1, 1_000_000)] = 100
    prune_interval_s: Interval = 60.0


class IntervalsSection(Strict):
    """How often to probe delays, poll flow statistics and re-plan, in seconds."""

    probe_s: Interval = 1.0
    flow_stats_s: Interval = 1.0
    recompute_s: Interval = 2.0


class DefaultsSection(Strict):
    """Facts of links that neither the inventory nor a measurement describes."""

    capacity_mbps: Annotated[float, Field(gt=0)] = formulas.DEFAULT_CAPACITY_MBPS
    buffer_bytes: Annotated[float, Field(ge=0)] = formulas.DEFAULT_BUFFER_BYTES
    host_link_delay_us: Annotated[float, Field(ge=0)] = formulas.DEFAULT_LINK_DELAY_US

    @property
    def capacity_bytes_per_s(self) -> float:
        """The default capacity in bytes/s."""
        return formulas.capacity_bytes_per_s(self.capacity_mbps)

    @property
    def host_link_delay_s(self) -> float:
        """The default one-way delay of a link, in seconds."""
        return self.host_link_delay_us * 1e-6


class BoundsSection(Strict):
    """The segment size and the [low, high] limits every parameter is clamped to."""

    # The formulas' own defaults (Bounds), as [low, high].
    mss_bytes: Annotated[int, int_range(1, 65535)] = Bounds.mss_bytes
    rto_min_ms: BoundPair = [Bounds.rto_min_ms_low, Bounds.rto_min_ms_high]
    initcwnd: BoundPair = [Bounds.initcwnd_low, Bounds.initcwnd_high]
    cwnd: BoundPair = [Bounds.cwnd_low, Bounds.cwnd_high]

    @field_validator("rto_min_ms", "initcwnd", "cwnd")
    @classmethod
    def _accepted_by_agents(cls, pair: list[int], info: ValidationInfo) -> list[int]:
        limit = AGENT_LIMITS[str(info.field_name)]
        if pair[1] > limit:
            raise ValueError(f"high bound {pair[1]} is above what agents accept ({limit})")
        return pair

    @model_validator(mode="after")
    def _consistent(self) -> "BoundsSection":
        self.limits()  # Bounds refuses low > high, naming the parameter
        return self

    def limits(self) -> Bounds:
        """The bounds as the formulas take them."""
        return Bounds(mss_bytes=self.mss_bytes, rto_min_ms_low=self.rto_min_ms[0], rto_min_ms_high=self.rto_min_ms[1],
                      initcwnd_low=self.initcwnd[0], initcwnd_high=self.initcwnd[1], cwnd_low=self.cwnd[0],
                      cwnd_high=self.cwnd[1])


class ParametersSection(Strict):
    """Which formulas the controller evaluates: the published ones, or otcp-lossless's;
    and whether each route also carries a fair-share pacing rate (otcp-paced), with which headroom."""

    formulas: Literal["published", "lossless"] = "published"
    queue_target_fraction: Annotated[float, Field(gt=0, le=1)] = Lossless.queue_target_fraction
    mss_floor_bytes: Annotated[int, int_range(64, 65535)] = Lossless.mss_floor_bytes
    fan_in_queue_fraction: Annotated[float, Field(ge=0, le=1)] = Lossless.fan_in_queue_fraction
    fan_in_admission: bool = Lossless.fan_in_admission
    pacing: bool = False
    pacing_headroom: Annotated[float, Field(ge=0, le=1)] = Pacing.headroom

    def lossless(self) -> Lossless | None:
        """otcp-lossless's settings, or None for the published formulas."""
        if self.formulas != "lossless":
            return None
        return Lossless(self.queue_target_fraction, self.mss_floor_bytes, self.fan_in_queue_fraction,
                        self.fan_in_admission)

    def paced(self) -> Pacing | None:
        """otcp-paced's setting, or None when routes carry no pacing rate."""
        return Pacing(self.pacing_headroom) if self.pacing else None


class ForwardingSection(Strict):
    """How switches forward: multipath spreads the destinations over the equal-cost paths
    (ECMP-like, per destination host; otcp.planning.paths.HostPaths), else one path per switch pair."""

    multipath: bool = True


class LongPathsSection(Strict):
    """Which paths are long fat ones and what they get (docs/design.md, "Long fat paths"):
    off, or a BDP threshold, the congestion control, and GridDT's increase with its reference."""

    enabled: bool = True
    bdp_threshold_bytes: Annotated[float, Field(gt=0)] = LongPaths.bdp_threshold_bytes
    congctl: Annotated[str, Field(pattern=CONGCTL_PATTERN)] = LongPaths.congctl
    griddt: bool = LongPaths.griddt
    reference_rtt_ms: Annotated[float, Field(gt=0, le=10_000)] = LongPaths.reference_rtt_s * 1e3
    reference_increase: Annotated[float, Field(gt=0, le=64)] = LongPaths.reference_increase

    def settings(self) -> LongPaths | None:
        """The planner's long-path setting, or None when turned off."""
        if not self.enabled:
            return None
        return LongPaths(self.bdp_threshold_bytes, self.congctl, self.griddt, self.reference_rtt_ms * 1e-3,
                         self.reference_increase)


class StabilitySection(Strict):
    """How the measured inputs are held still (docs/design.md, "Measurement")."""

    delay_step_us: Annotated[float, Field(ge=0)] = 20
    delay_tolerance: Annotated[float, Field(ge=0, le=10)] = 0.5
    refresh_s: Annotated[float, Field(ge=0)] = 60  # measured delays taken at most this often
    flow_hold_s: Annotated[float, Field(ge=0)] = 5.0
    min_flow_packets: Annotated[int, int_range(1, 1_000_000)] = 3

    @property
    def delay_step_s(self) -> float:
        """The grid delays and round trips are quantised to, in seconds."""
        return self.delay_step_us * 1e-6


class MeasurementSection(Strict):
    """Bounds on what counts as a measurement (docs/design.md, "Measurement")."""

    max_link_delay_us: Annotated[float, Field(gt=0)] = 100
    host_rtt_max_age_s: Annotated[float, Field(gt=0)] = 60
    host_rtt_min_samples: Annotated[int, int_range(1, 1_000_000)] = 3  # samples a probe-minimum report needs
    connection_report_max_age_s: Annotated[float, Field(gt=0)] = 15  # an agent's count of sending connections

    @property
    def max_link_delay_s(self) -> float:
        """The physical bound of one link's delay, in seconds."""
        return self.max_link_delay_us * 1e-6


class ClusterSection(Strict):
    """This instance among the instances that drive one fabric (`otcp.controller.roles`): its rank
    (0 is preferred when no one leads a switch), how many there are, how often a master beats and
    how long a switch's id must stand still before a standby takes it over."""

    rank: Annotated[int, int_range(0, MAX_INSTANCES - 1)] = 0
    instances: Annotated[int, int_range(1, MAX_INSTANCES)] = 1
    heartbeat_s: Annotated[float, Field(ge=0.1, le=60)] = 1.0
    takeover_s: Annotated[float, Field(ge=0.3, le=600)] = 4.0

    @model_validator(mode="after")
    def _consistent(self) -> "ClusterSection":
        if self.rank >= self.instances:
            raise ValueError(f"rank {self.rank} is not below instances {self.instances} (ranks count from 0)")
        if self.takeover_s < 3 * self.heartbeat_s:
            raise ValueError(f"takeover_s {self.takeover_s:g} is less than 3 heartbeats of {self.heartbeat_s:g} s")
        return self


class ControllerConfig(Strict):
    """The whole configuration file."""

    openflow: OpenFlowSection = OpenFlowSection()
    agents: AgentsSection = AgentsSection()
    inventory: str | None = None
    database: str = "otcp-controller.db"
    intervals: IntervalsSection = IntervalsSection()
    delay_window: Annotated[int, int_range(1, 100_000)] = 10
    defaults: DefaultsSection = DefaultsSection()
    bounds: BoundsSection = BoundsSection()
    parameters: ParametersSection = ParametersSection()
    forwarding: ForwardingSection = ForwardingSection()
    long_paths: LongPathsSection = LongPathsSection()
    stability: StabilitySection = StabilitySection()
    measurement: MeasurementSection = MeasurementSection()
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_file: str | None = None  # the log goes here as well as to stderr
    metrics: MetricsSection | None = None
    admin: AdminSection = AdminSection()
    retention: RetentionSection = RetentionSection()
    cluster: ClusterSection = ClusterSection()


class ConfigError(ValueError):
    """A bad configuration value: names the file and the key."""


def load(path: str) -> ControllerConfig:
    """Read the configuration at path, fill in defaults and validate it."""
    try:
        document = validation.load_yaml_file(path)
    except validation.ValidationError as error:
        raise ConfigError(str(error)) from None
    return validate(document or {}, path)


def validate(document: Any, path: str = "<config>") -> ControllerConfig:
    """Check document against ControllerConfig; return it with every path made absolute
    (relative to the file's directory) and the files it names checked."""
    try:
        config = validation.check(ControllerConfig, document)
    except validation.ValidationError as error:
        raise ConfigError(f"{path}: {error}") from None
    base = os.path.dirname(os.path.abspath(path)) if path != "<config>" else os.getcwd()
    config = _absolute(config, base)
    if len(os.fsencode(config.admin.socket)) > MAX_UNIX_SOCKET_PATH:
        raise ConfigError(f"{path}: admin.socket: {config.admin.socket}: longer than "
                          f"{MAX_UNIX_SOCKET_PATH} bytes, the limit of a unix socket's path")
    agents = config.agents
    files = [("agents.secret_file", agents.secret_file), ("inventory", config.inventory)]
    if agents.tls is not None:
        files += [("agents.tls.cert_file", agents.tls.cert_file), ("agents.tls.key_file", agents.tls.key_file)]
    for key, name in files:
        if name is not None and not os.path.isfile(name):
            raise ConfigError(f"{path}: {key}: {name}: no such file")
    if agents.tls is not None:
        _check_certificate(path, agents.tls)
    return config


def _absolute(config: ControllerConfig, base: str) -> ControllerConfig:
    """The configuration with its file paths taken relative to base."""

    def at(name: str | None) -> str | None:
        return None if name is None else os.path.join(base, name)

    tls = config.agents.tls
    if tls is not None:
        tls = tls.model_copy(update={"cert_file": at(tls.cert_file), "key_file": at(tls.key_file)})
    return config.model_copy(update={
        "inventory": at(config.inventory), "database": at(config.database), "log_file": at(config.log_file),
        "admin": config.admin.model_copy(update={"socket": at(config.admin.socket)}),
        "agents": config.agents.model_copy(update={"secret_file": at(config.agents.secret_file), "tls": tls}),
    })


def _check_certificate(path: str, tls: TlsSection) -> None:
    """A certificate that does not load, or a key that does not match it, is named now."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as error:
        detail = f" ({error.reason})" if error.reason else ""
        raise ConfigError(f"{path}: agents.tls: cert_file and key_file are not a PEM certificate chain and its "
                          f"private key{detail}") from None
    except OSError as error:
        raise ConfigError(f"{path}: agents.tls: {error.strerror or error}") from None

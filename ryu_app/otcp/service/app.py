"""The OTCP os-ken app, glue only (docs/design.md, "Architecture"): each handler passes an event's
plain data and the time to one `ControllerCore` method and `_carry_out`s the Actions it returns;
supervised loops probe delays, poll flow statistics, re-plan and prune the history. The live view
(``otcp.service.live``) behind the admin socket and the metrics is fed here too."""

import signal
import time
from collections.abc import Callable
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from otcp.controller import reload, store
from otcp.controller.config import ControllerConfig
from otcp.controller.core import Actions, ControllerCore, PortInfo
from otcp.planning import inventory
from otcp.service.agent_server import AgentServer
from otcp.service.live import LiveView
from otcp.service.services import Services, start_services
from otcp.wire.messages import Hello

RESTART_BACKOFF_S = 1.0  # a loop whose step raised waits this long before running again
RELOAD_POLL_S = 0.2  # how soon a SIGHUP is acted on (the signal handler only raises a flag)
ROLE_TURNS_PER_HEARTBEAT = 4  # the role loop's turns per cluster.heartbeat_s: how late a heartbeat or takeover may be
# Set by otcp.service.launcher before os-ken loads this app: the configuration and its file.
CONFIG: ControllerConfig | None = None
CONFIG_PATH: str | None = None


class OTCPController(app_manager.OSKenApp):
    """Forwarding, measurement and per-path TCP parameters for one fabric."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if CONFIG is None:
            raise RuntimeError("start the OTCP app with `otcp-controller run --config FILE`")
        self.config = config = CONFIG
        self.logger.setLevel(config.log_level.upper())
        self.store = store.Store(config.database)
        self.inventory = inventory.load(config.inventory) if config.inventory else None
        self.core = ControllerCore(
            config, now=time.time(), logger=self.logger, inventory=self.inventory,
            known_hosts=self.store.known_hosts(), generation=self.store.last_generation_number())
        self.reload_requested = False
        self.datapaths: dict[int, Any] = {}  # dpid -> connected os-ken Datapath
        self.replan = hub.Event()
        self.agent_server: AgentServer | None = None
        self.services: Services | None = None  # started by start()
        latest = self.store.latest_generation()
        self.live = LiveView(self.core, *((latest[2], latest[0]) if latest else ()))

    def start(self) -> None:
        """os-ken's start hook: the agent channel, the admin socket, the metrics and the loops."""
        super().start()
        services = self.services = start_services(self.config, self.core, self.store, self.live, self.logger,
                                                  self._agent_arrived)
        self.agent_server = services.agent_server
        self.threads.extend(services.threads)
        # The waits read the configuration at every turn: a reload changes them.
        if self.config.cluster.instances > 1:  # alone, the instance asks no role (otcp.controller.roles)
            role_turn_s = self.config.cluster.heartbeat_s / ROLE_TURNS_PER_HEARTBEAT
            self.threads.append(hub.spawn(self._supervised, self._roles, lambda: hub.sleep(role_turn_s)))
        for step, wait in ((self._probe, lambda: hub.sleep(self.config.intervals.probe_s)),
                           (self._poll_stats, lambda: hub.sleep(self.config.intervals.flow_stats_s)),
                           (self._replan, lambda: self.replan.wait(timeout=self.config.intervals.recompute_s)),
                           (self._prune, lambda: hub.sleep(self.config.retention.prune_interval_s)),
                           (self._reload, lambda: hub.sleep(RELOAD_POLL_S))):
            self.threads.append(hub.spawn(self._supervised, step, wait))
        signal.signal(signal.SIGHUP, self._hangup)

    def stop(self) -> None:
        """os-ken's stop hook (SIGTERM, SIGINT): say so, let the agents go, remove the admin socket."""
        self.logger.info("stopping: generation %d is the last; agents keep their sets until their leases run out",
                         self.core.generation)
        if self.services is not None:
            self.services.stop()
        for thread in self.threads:  # the loops run for ever: os-ken's stop would wait on them
            hub.kill(thread)
        self.threads.clear()
        super().stop()

    def _hangup(self, signum: int, frame: Any) -> None:
        """SIGHUP: reload the configuration at the reload loop's next turn."""
        self.reload_requested = True

    def _reload(self) -> None:
        """Read the configuration and inventory again if asked; apply what can change while running."""
        if not self.reload_requested or CONFIG_PATH is None:
            return
        self.reload_requested = False
        now = time.time()
        try:
            candidate = reload.read(CONFIG_PATH)
        except ValueError as error:  # ConfigError, InventoryError: one line naming the file and key
            self.logger.error("reload refused, the running configuration stays: %s", error)
            self.live.reloaded(now, error=str(error))
            return
        changes = reload.changes(self.config, self.inventory, candidate)
        self.config = reload.effective(self.config, candidate.config)
        self.inventory = candidate.inventory
        self.logger.setLevel(self.config.log_level.upper())
        self.logger.info("reloaded %s: applied %s; needing a restart %s", CONFIG_PATH,
                         ", ".join(changes.live) or "nothing", ", ".join(changes.restart) or "nothing")
        self.live.reloaded(now, changes=changes)
        if changes.live:
            self._carry_out(self.core.reconfigure(now, self.config, self.inventory))

    def _supervised(self, step: Callable[[], None], wait: Callable[[], object]) -> None:
        """wait(), step(), forever; a step that raises is logged with its traceback and runs again."""
        while True:
            try:
                wait()
                step()
            except Exception:  # a dead loop would stop measuring silently
                self.logger.exception("%s failed; running it again in %g s", step.__name__, RESTART_BACKOFF_S)
                hub.sleep(RESTART_BACKOFF_S)

    def _carry_out(self, actions: Actions) -> None:
        """Do what the core decided: the one place that sends, delivers and stores. The
        agents get their sets before the generation is stored (seconds for a large fabric):
        an agent ahead of the store is followed when it reconnects (ControllerCore.agent_arrived)."""
        for dpid, message in actions.sends:
            if dpid in self.datapaths and self.core.may_send(dpid, message):
                self.datapaths[dpid].send_msg(message)
        if actions.replan:
            self.replan.set()
        if self.agent_server is not None:
            for host_ip in actions.deliver:
                self.agent_server.deliver(host_ip)
        if actions.topology is not None:
            self.store.save_topology(actions.topology, actions.measurements)
        if actions.generation is not None:
            self.store.save_generation(actions.generation)

    def _roles(self) -> None:
        self._carry_out(self.core.role_tick(time.time()))

    def _probe(self) -> None:
        self._carry_out(self.core.expire_links(time.time()))
        for dpid in self.core.ready_switches():  # stamped per switch, just before its probes leave
            self._carry_out(self.core.probe_switch(time.time(), dpid))

    def _poll_stats(self) -> None:
        self._carry_out(self.core.stats_round())

    def _replan(self) -> None:
        self.replan.clear()
        self._carry_out(self.core.reroute())
        hub.sleep(0)  # the switches' send loops put the flow mods out before planning holds this thread
        now, started = time.time(), time.perf_counter()
        actions = self.core.replan(now)
        self.live.planned(now, actions, time.perf_counter() - started)
        self._carry_out(actions)
        if self.agent_server is not None:  # a switch back, a host located: sets held back may go now
            self.agent_server.release_withheld()

    def _prune(self) -> None:
        retention = self.config.retention
        pruned = self.store.prune(retention.measurements_s, retention.generations)
        self.logger.debug("pruned %d measurement row(s) and %d generation(s)", pruned.measurements,
                          pruned.generations)

    def _agent_arrived(self, host_ip: str, hello: Hello) -> None:
        self.store.save_agent(host_ip, hello)
        self._carry_out(self.core.agent_arrived(host_ip, hello.applied_generation))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev: Any) -> None:
        """A switch connected."""
        self.datapaths[ev.msg.datapath.id] = ev.msg.datapath
        self.live.switch_connected(ev.msg.datapath.id)
        self._carry_out(self.core.switch_features(ev.msg.datapath.id, ev.msg.datapath, now=time.time()))

    @set_ev_cls(ofp_event.EventOFPRoleReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def role_reply(self, ev: Any) -> None:
        """A switch answered a role request."""
        msg = ev.msg
        self._carry_out(self.core.role_reply(time.time(), msg.datapath.id, msg.role, msg.generation_id))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error(self, ev: Any) -> None:
        """A switch refused a message; a stale role request means another instance leads it."""
        msg, ofproto = ev.msg, ev.msg.datapath.ofproto
        if (msg.type, msg.code) == (ofproto.OFPET_ROLE_REQUEST_FAILED, ofproto.OFPRRFC_STALE):
            self._carry_out(self.core.role_refused(time.time(), msg.datapath.id))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev: Any) -> None:
        """A switch is ready (MAIN) or gone (DEAD)."""
        dpid = ev.datapath.id
        if ev.state == MAIN_DISPATCHER:
            self._carry_out(self.core.switch_ready(dpid))
        elif self.datapaths.get(dpid) is ev.datapath:  # not an old connection of a reconnected switch
            del self.datapaths[dpid]
            self._carry_out(self.core.switch_gone(time.time(), dpid))

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def port_description(self, ev: Any) -> None:
        """A switch's ports, their addresses and speeds."""
        ports = [PortInfo(p.port_no, p.hw_addr, p.curr_speed) for p in ev.msg.body]
        self._carry_out(self.core.port_description(time.time(), ev.msg.datapath.id, ports))

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev: Any) -> None:
        """A port changed."""
        self._carry_out(self.core.port_status(ev.msg.datapath.id))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev: Any) -> None:
        """A frame sent up by a switch."""
        self._carry_out(self.core.packet_in(time.time(), ev.msg.datapath.id, ev.msg.match["in_port"], ev.msg.data))

    @set_ev_cls(ofp_event.EventOFPEchoReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def echo_reply(self, ev: Any) -> None:
        """A switch answered an echo request."""
        self.core.echo_reply(time.time(), ev.msg.datapath.id, ev.msg.data)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flow_stats(self, ev: Any) -> None:
        """A switch's flow statistics."""
        msg = ev.msg
        self.core.flow_stats(msg.datapath.id, msg.body, more=bool(msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE))


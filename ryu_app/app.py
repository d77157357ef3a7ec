"""The OTCP os-ken app: thin glue between OpenFlow events and the plain modules.

It keeps the topology (os-ken's topology service plus host learning), sends
delay probes and echo requests, polls flow statistics, and on every change
or interval re-plans: forwarding entries go to the switches, parameter
generations to SQLite and, through the agent server, to the hosts.
"""

import logging
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.lib.packet import arp as arp_packet
from os_ken.lib.packet import ethernet, ipv4, packet
from os_ken.ofproto import ofproto_v1_3
from os_ken.topology import event as topo_event

from ryu_app import arp, delay, forwarding, inventory, store
from ryu_app.agent_server import AgentServer
from ryu_app.flowcount import FlowCounter
from ryu_app.planner import Plan
from ryu_app.topology import Host, Topology

ETH_TYPE_LLDP = 0x88CC
_SETTLE_PROBE_ROUNDS = 3
# An ARP request for a host nobody answers for is forgotten after this long.
_ARP_PENDING_S = 5.0

# Set by ryu_app.launcher before os-ken loads this app.
CONFIG = None


class OTCPController(app_manager.OSKenApp):
    """Forwarding, measurement and per-path TCP parameters for one fabric."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if CONFIG is None:
            raise RuntimeError("start the OTCP app with `otcp-controller run --config FILE`")
        self.config = CONFIG
        self.logger.setLevel(getattr(logging, self.config["log_level"].upper()))
        self.inventory = inventory.load(self.config["inventory"]) if self.config["inventory"] else None
        self.topology = Topology(self.inventory)
        self.delays = delay.DelayEstimator(window=self.config["delay_window"])
        self.flow_counter = FlowCounter()
        self.store = store.Store(self.config["database"])
        self.generation = self.store.last_generation_number()
        self.datapaths = {}
        self.port_addresses = {}  # dpid -> {port_no: hw_addr}
        self.installed = {}  # dpid -> {(src_ip, dst_ip): out_port}
        self.published = {}  # host ip -> routes last published
        self.changed_at = time.time()
        self.replan = hub.Event()
        self.pending_arp = {}  # target ip -> [(asked_at, dpid, port, request)] awaiting an answer
        self._restore_hosts()
        self.agent_server = self._start_agent_server()
        self.threads.append(hub.spawn(self._probe_loop))
        self.threads.append(hub.spawn(self._stats_loop))
        self.threads.append(hub.spawn(self._plan_loop))

    def _restore_hosts(self):
        """Hosts known before a restart, so the first plans are complete."""
        for ip, mac, dpid, port in self.store.known_hosts():
            self.topology.hosts[ip] = Host(ip, mac, dpid, port)

    def _start_agent_server(self):
        agents = self.config["agents"]
        if agents["secret_file"] is None:
            self.logger.info("agent channel off: no agents.secret_file configured")
            return None
        with open(agents["secret_file"], "rb") as handle:
            secret = handle.read().strip()
        server = AgentServer(
            agents["host"], agents["port"], secret, on_ack=self._agent_acked, on_agent=self._agent_arrived,
            logger=self.logger,
        )
        server.start()
        return server

    def _agent_acked(self, host_ip, generation, results):
        self.store.save_ack(host_ip, generation, results)

    def _agent_arrived(self, host_ip, hello):
        """Record what the agent reports. An agent that already applied a generation this controller has not
        reached (its database was reset) would refuse every set as stale:
        number on past it and send that host its set again."""
        self.store.save_agent(host_ip, hello)
        applied = hello.get("applied_generation") or 0
        if applied >= self.generation:
            self.logger.warning("agent for %s applied generation %d; continuing from %d", host_ip, applied, applied + 1)
            self.generation = applied
            self.published.pop(host_ip, None)
            self.replan.set()

    def _topology_changed(self):
        self.changed_at = time.time()
        self.replan.set()

    # -- switches ------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        datapath = ev.msg.datapath
        ofproto, parser = datapath.ofproto, datapath.ofproto_parser
        # Start from a clean slate: entries of an earlier controller run go.
        datapath.send_msg(
            parser.OFPFlowMod(
                datapath=datapath, cookie=forwarding.COOKIE, cookie_mask=0xFFFF_FFFF_FFFF_FFFF,
                command=ofproto.OFPFC_DELETE, out_port=ofproto.OFPP_ANY, out_group=ofproto.OFPG_ANY,
                match=parser.OFPMatch(),
            )
        )
        datapath.send_msg(forwarding.table_miss_entry(datapath))
        self.installed[datapath.id] = {}

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def state_change(self, ev):
        datapath = ev.datapath
        if ev.state == MAIN_DISPATCHER:
            self.datapaths[datapath.id] = datapath
            datapath.send_msg(datapath.ofproto_parser.OFPPortDescStatsRequest(datapath, 0))
        elif ev.state == DEAD_DISPATCHER and datapath.id in self.datapaths:
            del self.datapaths[datapath.id]
            self._forget_switch(datapath.id)

    def _forget_switch(self, dpid):
        self.delays.forget_switch(dpid)
        self.flow_counter.forget_switch(dpid)
        self.installed.pop(dpid, None)
        self.port_addresses.pop(dpid, None)
        if self.topology.remove_switch(dpid):
            self._topology_changed()

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def port_description(self, ev):
        datapath = ev.msg.datapath
        ports = [p for p in ev.msg.body if p.port_no <= datapath.ofproto.OFPP_MAX]
        self.port_addresses[datapath.id] = {p.port_no: p.hw_addr for p in ports}
        speeds = {p.port_no: p.curr_speed * 1000 / 8 for p in ports}  # kb/s -> bytes/s
        if self.topology.add_switch(datapath.id, speeds):
            self._topology_changed()

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev):
        datapath = ev.msg.datapath
        datapath.send_msg(datapath.ofproto_parser.OFPPortDescStatsRequest(datapath, 0))

    @set_ev_cls(topo_event.EventSwitchLeave)
    def switch_leave(self, ev):
        self._forget_switch(ev.switch.dp.id)

    @set_ev_cls(topo_event.EventLinkAdd)
    def link_add(self, ev):
        src, dst = _link_ends(ev.link)
        if self.topology.add_link(src, dst):
            self._link_changed(src, dst, "up")
        elif self.topology.host_port(*src) or self.topology.host_port(*dst):
            self.logger.warning("ignoring LLDP link on a host port: %s -> %s", ev.link.src, ev.link.dst)

    @set_ev_cls(topo_event.EventLinkDelete)
    def link_delete(self, ev):
        src, dst = _link_ends(ev.link)
        if self.topology.remove_link(src, dst):
            self.delays.forget_link(src, dst)
            self._link_changed(src, dst, "down")

    def _link_changed(self, src, dst, state):
        self.logger.info("link s%d:%d -> s%d:%d %s", *src, *dst, state)
        self._topology_changed()

    # -- packets ---------------------------------------------------------------

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        now = time.time()
        msg = ev.msg
        datapath, in_port = msg.datapath, msg.match["in_port"]
        frame = packet.Packet(msg.data)
        eth = frame.get_protocol(ethernet.ethernet)
        if eth is None:
            return
        if eth.ethertype == ETH_TYPE_LLDP:
            probe = delay.parse_probe(msg.data)
            if probe is not None and not self.topology.host_port(datapath.id, in_port):
                self.delays.probe_received(probe, datapath.id, in_port, now)
            return
        request = frame.get_protocol(arp_packet.arp)
        if request is not None:
            self._learn(request.src_ip, eth.src, datapath.id, in_port)
            if request.opcode == arp_packet.ARP_REQUEST:
                self._answer_arp(datapath, in_port, request)
            return
        header = frame.get_protocol(ipv4.ipv4)
        if header is not None:
            self._learn(header.src, eth.src, datapath.id, in_port)
            self._deliver_first_packet(datapath, in_port, header, msg.data)

    def _deliver_first_packet(self, datapath, in_port, header, data):
        """A packet that missed the table: its pair's entries are not there
        yet (new pair, or sent but not yet applied). Plan if needed, then
        send it out of the port its entry names; the next switch does the same."""
        pair = (header.src, header.dst)
        if header.dst not in self.topology.hosts:
            return
        if pair not in self.installed.get(datapath.id, {}):
            # Forwarding now; storing and pushing parameters waits for the plan loop.
            self._plan_forwarding()
            self.replan.set()
        out_port = self.installed.get(datapath.id, {}).get(pair)
        self.logger.debug("missed packet %s -> %s at s%d: %s", *pair, datapath.id,
                          f"sent out of port {out_port}" if out_port else "no path")
        if out_port is not None and out_port != in_port:
            datapath.send_msg(forwarding.packet_out(datapath, out_port, data))

    def _learn(self, ip, mac, dpid, port):
        if ip == "0.0.0.0" or mac == arp.CONTROLLER_MAC:
            return
        if self.topology.learn_host(ip, mac, dpid, port):
            self.logger.info("host %s (%s) at s%d:%d", ip, mac, dpid, port)
            self._topology_changed()
        host = self.topology.hosts.get(ip)
        for _, waiting_dpid, waiting_port, request in self.pending_arp.pop(ip, []):
            if host is not None and waiting_dpid in self.datapaths:
                datapath = self.datapaths[waiting_dpid]
                datapath.send_msg(forwarding.packet_out(datapath, waiting_port, arp.reply_frame(request, host.mac)))

    def _answer_arp(self, datapath, in_port, request):
        target = self.topology.hosts.get(request.dst_ip)
        if target is not None:
            datapath.send_msg(forwarding.packet_out(datapath, in_port, arp.reply_frame(request, target.mac)))
            return
        self.logger.debug("ARP for unknown %s from s%d:%d: probing edge ports", request.dst_ip, datapath.id, in_port)
        now = time.time()
        self.pending_arp = {
            ip: fresh for ip, waiting in self.pending_arp.items()
            if (fresh := [w for w in waiting if now - w[0] < _ARP_PENDING_S])
        }
        self.pending_arp.setdefault(request.dst_ip, []).append((now, datapath.id, in_port, request))
        probe = arp.probe_frame(request.dst_ip)
        for dpid, port in self.topology.edge_ports():
            if dpid in self.datapaths:
                self.datapaths[dpid].send_msg(forwarding.packet_out(self.datapaths[dpid], port, probe))

    # -- measurement -----------------------------------------------------------

    def _probe_loop(self):
        while True:
            for dpid, datapath in list(self.datapaths.items()):
                now = time.time()
                self.delays.echo_sent(dpid, now)
                datapath.send_msg(datapath.ofproto_parser.OFPEchoRequest(datapath, data=b"otcp"))
                for port, hw_addr in self.port_addresses.get(dpid, {}).items():
                    if self.topology.host_port(dpid, port):
                        continue
                    sequence = self.delays.next_probe(dpid, port, time.time())
                    frame = delay.probe_frame(dpid, port, hw_addr, sequence)
                    datapath.send_msg(forwarding.packet_out(datapath, port, frame))
            hub.sleep(self.config["intervals"]["probe_s"])

    @set_ev_cls(ofp_event.EventOFPEchoReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def echo_reply(self, ev):
        if ev.msg.data == b"otcp":
            self.delays.echo_received(ev.msg.datapath.id, time.time())

    def _stats_loop(self):
        while True:
            for datapath in list(self.datapaths.values()):
                datapath.send_msg(forwarding.flow_stats_request(datapath))
            hub.sleep(self.config["intervals"]["flow_stats_s"])

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flow_stats(self, ev):
        self.flow_counter.update(ev.msg.datapath.id, forwarding.pair_counters(ev.msg.body))

    # -- planning ----------------------------------------------------------------

    def _plan_loop(self):
        while True:
            self.replan.wait(timeout=self.config["intervals"]["recompute_s"])
            self.replan.clear()
            try:
                self.replan_now()
            except Exception:  # keep the controller alive; the log says why
                self.logger.exception("planning failed")

    def _settled(self):
        """True once discovery has had a few probe rounds since the last change."""
        return time.time() - self.changed_at >= _SETTLE_PROBE_ROUNDS * self.config["intervals"]["probe_s"]

    def replan_now(self):
        """Plan the current fabric, sync forwarding, store and push parameters."""
        plan, delay_sources = self._plan_forwarding()
        link_rows = self._save_state(plan, delay_sources)
        if self._settled():
            self._publish(plan, link_rows)

    def _plan_forwarding(self):
        """Plan the current fabric and bring every switch's entries in line."""
        link_delays = {key: value for key, (value, _) in self.delays.delays().items()}
        fabric, delay_sources = self.topology.fabric(
            link_delays, self.flow_counter.active_pairs(), self.config["defaults"]
        )
        plan = Plan(fabric, self.config["bounds"])
        self._sync_forwarding(forwarding.desired_entries(plan, self.topology))
        return plan, delay_sources

    def _sync_forwarding(self, desired):
        for dpid, entries in desired.items():
            datapath = self.datapaths.get(dpid)
            if datapath is None or dpid not in self.installed:
                continue
            for message in forwarding.sync_messages(datapath, self.installed[dpid], entries):
                datapath.send_msg(message)
            self.installed[dpid] = dict(entries)

    def _save_state(self, plan, delay_sources):
        topo = self.topology
        names = {dpid: topo.switch_name(dpid) for dpid in topo.switches}
        links = {
            (names[s[0]], names[d[0]]): (*s, *d)
            for s, d in topo.links.items()
            if s[0] in names and d[0] in names
        }
        hosts = [(h.ip, topo.host_name(h.ip), h.mac, h.dpid, h.port) for h in topo.hosts.values()]
        self.store.save_topology(names, links, hosts)
        samples = {}
        for src, (_, count) in self.delays.delays().items():
            if src in topo.links and src[0] in names and topo.links[src][0] in names:
                samples[(names[src[0]], names[topo.links[src][0]])] = count
        flows_on = plan.link_flows()
        rows = [
            (u, v, facts.delay_s, delay_sources[(u, v)], samples.get((u, v), 0), facts.capacity_bytes_per_s,
             facts.buffer_bytes, flows_on.get((u, v), 0))
            for (u, v), facts in sorted(plan.fabric.links.items())
        ]
        self.store.save_link_measurements(rows)
        return rows

    def _publish(self, plan, link_rows):
        """Store and push a new generation if any host's parameters changed."""
        sets = {host: plan.parameter_set(host, 0)["routes"] for host in plan.hosts}
        changed = {h: routes for h, routes in sets.items() if self.published.get(plan.fabric.hosts[h]) != routes}
        if not changed:
            return
        self.generation += 1
        self.store.save_generation(self.generation, plan.records(), link_rows, plan.fabric.flows)
        self.logger.info("generation %d: new parameters for %d host(s)", self.generation, len(changed))
        for host, routes in changed.items():
            ip = plan.fabric.hosts[host]
            self.published[ip] = routes
            if self.agent_server is not None:
                self.agent_server.publish(ip, {"generation": self.generation, "routes": routes})


def _link_ends(link):
    """((src_dpid, src_port), (dst_dpid, dst_port)) of an os-ken topology Link."""
    return (link.src.dpid, link.src.port_no), (link.dst.dpid, link.dst.port_no)

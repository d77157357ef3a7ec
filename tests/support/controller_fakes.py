"""Switches, frames and a two-switch network for the controller tests, without a switch.

The network: s1 and s2 joined by s1:1 <-> s2:1; h1 on s1:2, h3 on s1:3
(port 3 stays empty unless a test learns h3), h2 on s2:2.
"""

from os_ken.lib.packet import arp as arp_packet
from os_ken.lib.packet import ethernet, ipv4, packet, tcp
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

from otcp.controller.config import ControllerConfig
from otcp.controller.core import ControllerCore, PortInfo

DEFAULTS = {"capacity_mbps": 100, "buffer_bytes": 85000, "host_link_delay_us": 10}
#: What the controller tests run with unless they say otherwise: one-second probe rounds,
#: 100 Mb/s links with 85 000 B buffers, and measurements taken as they come (no grid, no
#: tolerance, no refresh period, no hold, every packet a flow, no bound on a link's delay
#: but the probe timeout), so each test sees exactly the inputs it makes.
SETTINGS = {
    "intervals": {"probe_s": 1.0}, "delay_window": 10, "defaults": DEFAULTS,
    "stability": {"delay_step_us": 0, "delay_tolerance": 0.0, "refresh_s": 0, "flow_hold_s": 0.0,
                  "min_flow_packets": 1},
    "measurement": {"max_link_delay_us": 5e6, "host_rtt_max_age_s": 60, "host_rtt_min_samples": 3},
}
PORTS = {1: [1, 2, 3], 2: [1, 2]}
H1 = ("10.0.0.1", "00:00:00:00:00:01")
H2 = ("10.0.0.2", "00:00:00:00:00:02")
H3 = ("10.0.0.3", "00:00:00:00:00:03")


class FakeDatapath:
    """What os-ken's Datapath offers the app: ofproto, parser and send_msg.

    Messages are serialised as os-ken would before sending, so a malformed
    one fails the test.
    """

    def __init__(self, dpid):
        self.id = dpid
        self.ofproto = ofproto_v1_3
        self.ofproto_parser = ofproto_v1_3_parser
        self.sent = []

    def send_msg(self, message):
        message.set_xid(len(self.sent) + 1)
        message.serialize()
        self.sent.append(message)

    def take(self):
        """Messages sent since the last take."""
        sent, self.sent = self.sent, []
        return sent


def port_mac(dpid, port):
    return f"02:00:00:00:{dpid:02x}:{port:02x}"


def port_infos(dpid):
    """The port description of a switch, with the LOCAL port os-ken also reports."""
    return [PortInfo(port, port_mac(dpid, port), 100_000) for port in PORTS[dpid]] + [
        PortInfo(ofproto_v1_3.OFPP_LOCAL, port_mac(dpid, 0), 0)
    ]


def config_with(**sections):
    """The configuration of SETTINGS with sections changed: each a dict of the keys it changes."""
    settings = {key: dict(value) if isinstance(value, dict) else value for key, value in SETTINGS.items()}
    for key, changes in sections.items():
        settings[key] = {**settings.get(key, {}), **changes} if isinstance(changes, dict) else changes
    return ControllerConfig.model_validate(settings)


CORE_OPTIONS = ("inventory", "known_hosts", "generation", "logger")


def new_core(now=0.0, **options):
    """A core of config_with(sections) with one-second probe rounds: settled three seconds
    after a change. options: configuration sections (as config_with takes them) and the
    core's own keyword arguments (CORE_OPTIONS)."""
    sections = {key: value for key, value in options.items() if key not in CORE_OPTIONS}
    own = {key: value for key, value in options.items() if key in CORE_OPTIONS}
    return ControllerCore(config_with(**sections), now=now, **own)


def connected_core(now=0.0, **options):
    """A core with both switches ready, their ports described and the link discovered."""
    core = new_core(now, **options)
    for dpid in PORTS:
        core.switch_features(dpid, FakeDatapath(dpid))
        core.switch_ready(dpid)
        core.port_description(now, dpid, port_infos(dpid))
    core.link_added(now, (1, 1), (2, 1))
    core.link_added(now, (2, 1), (1, 1))
    return core


#: The three hosts as (ip, mac, dpid, port).
HOSTS = [(*H1, 1, 2), (*H2, 2, 2), (*H3, 1, 3)]


def learn_hosts(core, now, *hosts):
    """Each (ip, mac, dpid, port) host sends a gratuitous ARP."""
    for ip, mac, dpid, port in hosts:
        core.packet_in(now, dpid, port, arp_frame(arp_packet.ARP_REQUEST, (ip, mac), ip))


def arp_frame(opcode, src, dst_ip, dst_mac="00:00:00:00:00:00", eth_dst="ff:ff:ff:ff:ff:ff"):
    """An ARP request (or reply) from host src = (ip, mac)."""
    frame = packet.Packet()
    frame.add_protocol(ethernet.ethernet(dst=eth_dst, src=src[1], ethertype=0x0806))
    frame.add_protocol(arp_packet.arp(opcode=opcode, src_mac=src[1], src_ip=src[0], dst_mac=dst_mac, dst_ip=dst_ip))
    frame.serialize()
    return bytes(frame.data)


def ipv4_frame(src, dst):
    """An IPv4 packet from host src to host dst, each (ip, mac)."""
    frame = packet.Packet()
    frame.add_protocol(ethernet.ethernet(dst=dst[1], src=src[1], ethertype=0x0800))
    frame.add_protocol(ipv4.ipv4(src=src[0], dst=dst[0], proto=17))
    frame.serialize()
    return bytes(frame.data)


def tcp_frame(src, dst, src_port, dst_port, bits=tcp.TCP_SYN, ip_options=b""):
    """A TCP segment from host src to host dst, each (ip, mac); ip_options lengthen the IPv4 header."""
    frame = packet.Packet()
    frame.add_protocol(ethernet.ethernet(dst=dst[1], src=src[1], ethertype=0x0800))
    frame.add_protocol(ipv4.ipv4(header_length=5 + len(ip_options) // 4, src=src[0], dst=dst[0], proto=6,
                                 option=ip_options or None))
    frame.add_protocol(tcp.tcp(src_port=src_port, dst_port=dst_port, bits=bits))
    frame.serialize()
    return bytes(frame.data)


def parsed(message):
    """The protocols of a PacketOut's frame."""
    return packet.Packet(message.data)

"""Proxy ARP: the controller answers for hosts it knows, so ARP never floods
through the fabric. For an unknown target it asks the edge ports itself, from
its own address, so the answer (and nothing the controller sent) teaches it
where the target lives."""

from os_ken.lib.packet import arp, ethernet, packet

ETH_TYPE_ARP = 0x0806
# Locally administered; frames from it are the controller's own, never a host.
CONTROLLER_MAC = "02:07:c7:00:00:01"


def reply_frame(request: arp.arp, target_mac: str) -> bytes:
    """The ARP reply a host would send to an os-ken arp.arp request."""
    frame = packet.Packet()
    frame.add_protocol(ethernet.ethernet(dst=request.src_mac, src=target_mac, ethertype=ETH_TYPE_ARP))
    frame.add_protocol(
        arp.arp(
            opcode=arp.ARP_REPLY,
            src_mac=target_mac,
            src_ip=request.dst_ip,
            dst_mac=request.src_mac,
            dst_ip=request.src_ip,
        )
    )
    frame.serialize()
    return bytes(frame.data)


def probe_frame(target_ip: str) -> bytes:
    """An ARP probe (sender 0.0.0.0) from the controller for target_ip."""
    frame = packet.Packet()
    frame.add_protocol(ethernet.ethernet(dst="ff:ff:ff:ff:ff:ff", src=CONTROLLER_MAC, ethertype=ETH_TYPE_ARP))
    frame.add_protocol(
        arp.arp(opcode=arp.ARP_REQUEST, src_mac=CONTROLLER_MAC, src_ip="0.0.0.0", dst_mac="00:00:00:00:00:00",
                dst_ip=target_ip)
    )
    frame.serialize()
    return bytes(frame.data)

"""The programs the experiments run inside the emulated hosts, each ``python -m otcp.experiments.hostprogs.NAME``.

- ``incast_server`` / ``incast_client``: the synchronized-read workload (storage servers, the client's rounds);
- ``fairness_flows``: long flows into a sink that reports every flow's bytes;
- ``burst``: sequence-numbered UDP bursts for calibrating the switch;
- ``backlog_probe``: a qdisc's backlog (and the switch's input sockets) sampled over netlink;
- ``common``: what they share (the congestion control per socket, stopping on standard input's end).
"""

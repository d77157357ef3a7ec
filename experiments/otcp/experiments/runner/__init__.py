"""The runner core every experiment is built on; nothing in it is one experiment's.

- ``config``: ``ExperimentConfig``, the base configuration each experiment extends;
- ``emulation``: the Mininet network on Open vSwitch's userspace datapath with faithful buffers;
- ``ovs_sockets``: Open vSwitch's packet sockets raised out of reach while a network runs;
- ``network``: one topology running with its controller (``start_network``, ``Network``);
- ``controller``: the real OTCP controller as a child process (``ControllerProcess``, ``Controller``);
- ``agents``: the real OTCP agent in every host (``Agents``);
- ``schemes``: the schemes compared, and which of them can run here (``plan``);
- ``settings``: a scheme's commands per host as data (``scheme_commands``), run and undone in one place;
- ``counters``: every counter before and after a run as one ``Snapshot``; their difference a ``Change``;
- ``measure``: what is sampled while a run goes on (latency probe, backlog sampler, iperf3);
- ``ceiling``: the single-flow ceiling every run is judged against;
- ``progress``: the progress bar.
"""

"""``otcp-experiment simulate``: OTCP's incast and workloads on an ns-3 fabric at data-center rates and fan-in.

- ``src/``: the C++ scenario program (ns-3 3.44, Linux-like TCP: ``linux_tcp.h``), compiled at set-up;
- ``build``: compiles it into ``build/sim/`` (``python -m otcp.experiments.sim build``);
- ``fabric``: star, leaf-spine and fat-tree fabrics with per-tier rates, delays and buffers, their
  addresses, routes along the planner's switch paths, and their inventory;
- ``schemes``: the schemes the simulator runs and the TCP each gives a host;
- ``mapping``: the planner's route parameters as the scenario's per-connection settings;
- ``loop``: the closed loop: the controller's flow counting and the real planner at every poll;
- ``scenario``: one run of the program (scenario in, JSON lines out);
- ``incast``: the sweep and its summary.json, in the incast runner's format;
- ``workload``: the workload command's mixes, queries and background flows, in its summary format.
"""

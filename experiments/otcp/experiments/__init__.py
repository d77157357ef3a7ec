"""OTCP's experiments: TCP incast and the rest, in Mininet, under each remedy and OTCP.

- ``cli``: ``otcp-experiment``, the command line of every experiment;
- the experiments, each on the runner core: ``incast`` (the synchronized-read sweep),
  ``fairness`` (long flows), ``calibrate`` (the emulated switch's buffer and loss accounting),
  ``rtt_accuracy`` (the controller's round trips against ping), ``shell`` (Mininet's CLI with
  OTCP in place), ``switch_alternatives`` (the ways the bottleneck's buffer could be built);
- ``runner``: the core: the emulated network, the controller and agents, the schemes and
  their settings, the counters, the ceiling;
- ``hostprogs``: the programs that run inside the hosts;
- ``analysis``: statistics, results files, plots and results pages;
- ``kernel``: experiments on the kernel mechanisms alone, in a pair of namespaces.
"""

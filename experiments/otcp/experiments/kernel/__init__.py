"""Experiments on the kernel mechanisms alone, in a pair of namespaces without a
controller: the first connection under BPF enforcement, and DCTCP with the ECN
marker."""

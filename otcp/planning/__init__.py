"""Planning: the formulas, the fabric as they see it, shortest paths, the
all-pairs planner and the inventory an operator declares. Pure: no os-ken, no
sockets, no clock; shared by the live controller, ``otcp-controller plan`` and
the experiments."""

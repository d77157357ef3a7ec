"""Forwarding paths: one shortest path per switch pair, the same both ways.

The controller installs these paths and the planner evaluates the formulas
over them, so both must agree: paths come from networkx BFS on a graph built
in sorted order (deterministic tie-breaks), and the path from b to a is the
reverse of the path from a to b, so ACKs retrace the data path.
"""

import networkx as nx
import numpy as np

UNREACHABLE = -1


class SwitchPaths:
    """Shortest switch-level paths between every pair of switches.

    node_matrix[i, j, :hops[i, j] + 1] holds the switch indices of the path
    from switch i to switch j; hops is UNREACHABLE where there is none.
    """

    def __init__(self, switches, switch_links):
        self.switches = sorted(switches)
        self.index = {name: i for i, name in enumerate(self.switches)}
        graph = nx.Graph()
        graph.add_nodes_from(self.switches)
        graph.add_edges_from(sorted(tuple(sorted(link)) for link in switch_links))
        count = len(self.switches)
        trees = {name: nx.single_source_shortest_path(graph, name) for name in self.switches}
        longest = max((len(path) for tree in trees.values() for path in tree.values()), default=1)
        self.hops = np.full((count, count), UNREACHABLE, dtype=np.int32)
        self.node_matrix = np.full((count, count, longest), UNREACHABLE, dtype=np.int32)
        for i, a in enumerate(self.switches):
            for b, path in trees[a].items():
                j = self.index[b]
                if j < i:
                    continue
                indices = [self.index[name] for name in path]
                self.hops[i, j] = self.hops[j, i] = len(path) - 1
                self.node_matrix[i, j, : len(indices)] = indices
                self.node_matrix[j, i, : len(indices)] = indices[::-1]

    def path(self, a, b):
        """Switch names from a to b inclusive, or None if unreachable."""
        i, j = self.index[a], self.index[b]
        if self.hops[i, j] == UNREACHABLE:
            return None
        return [self.switches[k] for k in self.node_matrix[i, j, : self.hops[i, j] + 1]]


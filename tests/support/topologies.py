"""The integration tests' topology: a triangle, so a link can fail without
cutting any host off."""

from otcp.topo.fabrics import FabricTopo


class TriangleTopo(FabricTopo):
    """Three switches in a triangle (s1, s2, s3) and four hosts: h1, h2 on s1,
    h3 on s2, h4 on s3. Taking s1-s3 down moves h1 -> h4 onto s1-s2-s3."""

    def build(self, bw=100, buffer_bytes=85000):
        options = self._link_options(bw, buffer_bytes, None)
        s1, s2, s3 = (self.add_switch(f"s{i}") for i in (1, 2, 3))
        for a, b in ((s1, s2), (s2, s3), (s1, s3)):
            self.addLink(a, b, **options)
        for name, switch in (("h1", s1), ("h2", s1), ("h3", s2), ("h4", s3)):
            self.addLink(self.add_host(name), switch, **options)

"""Mininet topologies for OTCP experiments, each able to describe itself as an inventory."""

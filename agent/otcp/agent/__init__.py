"""OTCP host agent: applies per-destination TCP parameters as route attributes."""

"""Mininet experiment runner: TCP incast under each remedy and OTCP."""

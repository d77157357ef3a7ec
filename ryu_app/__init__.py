"""OTCP controller service: os-ken app, formulas, planner and state."""

"""Replaying policies on market traces: one simulator loop, the exact offline optimum, and evaluation."""

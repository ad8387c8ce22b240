"""Operators: SkyNomadOperator (deferrable gang job under a deadline) and SkyNomadProbeOperator."""

"""Clouds: one small interface (launch, poll, terminate, probe, copy checkpoint) over simulated, AWS and GCP."""

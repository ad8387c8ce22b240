"""GCP Compute Engine behind the Cloud interface: `GcpCloud` (cloud.py) and the pieces it is built from."""

from airflow_provider_skynomad.clouds.gcp.cloud import GcpCloud

__all__ = ["GcpCloud"]

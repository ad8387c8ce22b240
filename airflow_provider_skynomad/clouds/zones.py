"""Zone names: which cloud and region a zone belongs to, from its name alone.

AWS and GCP zone names cannot be confused (``us-east-1a`` has its region's number before the
letter, ``us-central1-a`` a dash before it), so routing a zone to its cloud needs no table. The
patterns live in market/zone_names.py, which checks a trace's zones before they are stored.
"""

from __future__ import annotations

from airflow_provider_skynomad.market.zone_names import cloud_of, region_of


def cloud_of_zone(zone: str) -> str:
    """``aws`` or ``gcp`` from a zone's name alone; ValueError for a name neither uses."""
    found = cloud_of(zone)
    if found is None:
        raise ValueError(
            f"zone {zone[:80]!r} is neither an AWS zone (like us-east-1a) nor a GCP zone (like us-central1-a)"
        )
    return found


def aws_region_of(zone: str) -> str:
    """us-east-1a → us-east-1."""
    return region_of("aws", zone)


def gcp_region_of(zone: str) -> str:
    """us-central1-a → us-central1."""
    return region_of("gcp", zone)

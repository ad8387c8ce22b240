"""Zone names: which cloud and region a zone belongs to, from its name alone.

AWS and GCP zone names cannot be confused (``us-east-1a`` has its region's number before the
letter, ``us-central1-a`` a dash before it), so routing a zone to its cloud needs no table.
"""

from __future__ import annotations

import re

_AWS_ZONE = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d+[a-z]$")  # us-east-1a, us-gov-west-1a
_GCP_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")  # us-central1-a, europe-west4-b


def cloud_of_zone(zone: str) -> str:
    """``aws`` or ``gcp`` from a zone's name alone; ValueError for a name neither uses."""
    if _AWS_ZONE.match(zone):
        return "aws"
    if _GCP_ZONE.match(zone):
        return "gcp"
    raise ValueError(f"zone {zone!r} is neither an AWS zone (like us-east-1a) nor a GCP zone (like us-central1-a)")


def aws_region_of(zone: str) -> str:
    """us-east-1a → us-east-1."""
    return zone[:-1] if zone and zone[-1].isalpha() else zone


def gcp_region_of(zone: str) -> str:
    """us-central1-a → us-central1."""
    return zone.rsplit("-", 1)[0]

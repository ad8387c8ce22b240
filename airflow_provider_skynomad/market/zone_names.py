"""Zone names as AWS and GCP write them: which cloud and region a name belongs to, and whether a
name is one at all.

Here, in the market layer, because a trace's rows are checked against them before they are stored
(`skynomad market import`) and the clouds route by them (clouds/zones.py). AWS and GCP zone names
cannot be confused (``us-east-1a`` has its region's number before the letter, ``us-central1-a`` a
dash before it). Both are short lowercase ASCII: GCP resource names are at most 63 characters, and
an AWS zone name is shorter still.
"""

from __future__ import annotations

import re

MAX_ZONE_CHARS = 63
AWS_ZONE = re.compile(r"[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]+[a-z]", re.ASCII)  # us-east-1a, us-gov-west-1a
GCP_ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]", re.ASCII)  # us-central1-a, europe-west4-b
EXPECTED = "an AWS zone such as us-east-1a or a GCP zone such as us-central1-a"


def cloud_of(zone: str) -> str | None:
    """``aws`` or ``gcp`` from a zone's name alone, None for a name neither uses."""
    if len(zone) > MAX_ZONE_CHARS:
        return None
    if AWS_ZONE.fullmatch(zone):
        return "aws"
    if GCP_ZONE.fullmatch(zone):
        return "gcp"
    return None


def region_of(cloud: str, zone: str) -> str:
    """us-east-1a → us-east-1 (aws); us-central1-a → us-central1 (gcp)."""
    if cloud == "gcp":
        return zone.rsplit("-", 1)[0]
    return zone[:-1] if zone and zone[-1].isalpha() else zone


def zone_problem(cloud: str, region: str, zone: str) -> tuple[str, str] | None:
    """What is wrong with a row's (cloud, region, zone), as (column, plain words); None if nothing."""
    found = cloud_of(zone)
    if found is None:
        return "zone", (
            f"{shown(zone)} is not a zone name: expected {EXPECTED} (lowercase ASCII, at most {MAX_ZONE_CHARS} "
            "characters)"
        )
    if cloud != found:
        return "cloud", f"{shown(cloud)} does not match zone {zone}, an {found.upper()} zone: expected {found!r}"
    if region != region_of(found, zone):
        return "region", f"{shown(region)} does not match zone {zone}: expected {region_of(found, zone)!r}"
    return None


def shown(text: str, limit: int = 40) -> str:
    """A name for an error message, cut short: a trace may hold one of any length."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text)} characters)"

"""Compute Engine's own rules that both the GCP cloud (cloud.py) and its request probe (probe.py) follow.

Here, below both, so the probe does not import the cloud that calls it: the errors that mean a
stock-out, the minimum billed time, and what a not-found answer looks like.
"""

from __future__ import annotations

CAPACITY_MARKERS = ("ZONE_RESOURCE_POOL_EXHAUSTED", "STOCKOUT", "does not have enough resources", "QUOTA_EXCEEDED")
BILLING_MINIMUM_HOURS = 1.0 / 60.0  # Compute Engine bills at least one minute per VM


def not_found(exc: Exception) -> bool:
    """Whether a Compute Engine call failed because the resource is not there (deleted already)."""
    return "404" in str(exc) or "NotFound" in type(exc).__name__ or "not found" in str(exc).lower()

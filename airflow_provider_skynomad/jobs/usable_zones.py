"""The zones a job may plan over: the market table's, less those its cloud cannot use.

A job that lists no zones takes every zone the market table has recent rows of. That table is
written by probes, imports and other deployments' tools, so it may name a zone no cloud of this
connection has (another cloud's, a region not configured, a name that is no zone at all). Such a
zone is left out and named in the job's log: one stray row must not stop every job from
starting. Zones the job lists itself are not filtered here: the cloud's check refuses them by name.
"""

from __future__ import annotations

import logging

from airflow_provider_skynomad.clouds.base import Cloud
from airflow_provider_skynomad.jobs.errors import SkyNomadInputError
from airflow_provider_skynomad.market.zone_names import shown


def leave_out_unusable(cloud: Cloud, zones: list[str], cloud_name: str, log: logging.Logger) -> list[str]:
    """`zones` without those `cloud` cannot use, which are logged; SkyNomadInputError if none is left."""
    unusable = cloud.unusable_zones(list(zones))
    if not unusable:
        return list(zones)
    words = "; ".join(f"{shown(zone)} ({why})" for zone, why in sorted(unusable.items()))
    usable = [zone for zone in zones if zone not in unusable]
    if not usable:
        raise SkyNomadInputError(
            f"the {cloud_name} cloud cannot use any zone the market table has: {words}; list the job's zones "
            "or probe zones this connection's clouds have; nothing was launched"
        )
    log.warning(
        "Leaving out %d zone(s) of the market table the %s cloud cannot use: %s", len(unusable), cloud_name, words
    )
    return usable

"""Policies by name: what `skynomad evaluate --policies` and the operator's `policy=` accept."""

from __future__ import annotations

from airflow_provider_skynomad.planner.base import Policy
from airflow_provider_skynomad.planner.policies.lookahead import LookaheadPolicy
from airflow_provider_skynomad.planner.policies.on_demand import OnDemandPolicy
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.policies.switching import SwitchingPolicy
from airflow_provider_skynomad.planner.policies.uniform_progress import EagerFailoverPolicy, UniformProgressPolicy

POLICIES = {
    "skynomad": SkyNomadPolicy,
    "on-demand": OnDemandPolicy,
    "uniform-progress": UniformProgressPolicy,
    "eager-failover": EagerFailoverPolicy,
    "lookahead": LookaheadPolicy,
    "skynomad-switching": SwitchingPolicy,
}


def get_policy(name: str, **params) -> Policy:
    """A fresh policy object; `uniform-progress` takes `zone=`, `skynomad` takes `forecaster=` etc."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {sorted(POLICIES)}") from None
    return factory(**params)

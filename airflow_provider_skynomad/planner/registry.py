"""Policies by name: what `skynomad evaluate --policies` and the operator's `policy=` accept."""

from __future__ import annotations

from .base import Policy
from .policies.lookahead import LookaheadPolicy
from .policies.on_demand import OnDemandPolicy
from .policies.skynomad import SkyNomadPolicy
from .policies.switching import SwitchingPolicy
from .policies.uniform_progress import EagerFailoverPolicy, UniformProgressPolicy

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

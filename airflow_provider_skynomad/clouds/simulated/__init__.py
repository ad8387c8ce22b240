"""The simulated cloud (a trace replayed) behind the Cloud interface: `SimulatedCloud` (cloud.py) and the pieces it
is built from.

`SimulatedCloud` is re-exported lazily: each group's supervisor runs ``python -m ...simulated.launcher``, and
importing the whole cloud (pandas, the trace market) before it would slow every launch and load the launcher
twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud

__all__ = ["SimulatedCloud"]


def __getattr__(name: str):
    if name == "SimulatedCloud":
        from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud

        return SimulatedCloud
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

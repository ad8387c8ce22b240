"""The cloud a `SkyNomadConfig` names, and the clock its market rows are stamped with.

The one place that maps a connection's cloud kind to a cloud class; every caller (the hook, the
probe DAG, the CLI) gets its cloud here, behind bounded API retries.
"""

from __future__ import annotations

from pathlib import Path

from airflow_provider_skynomad.clouds.base import Cloud
from airflow_provider_skynomad.config import CONFIG_FIELDS, SkyNomadConfig
from airflow_provider_skynomad.exceptions import SkyNomadConfigError
from airflow_provider_skynomad.utils.extras import require_extra


def make_cloud(config: SkyNomadConfig) -> Cloud:
    """The cloud a config names, behind bounded API retries. Imports lazily: a simulated run never
    loads boto3 or google.

    `cloud_options` go to the cloud's constructor; a key it does not take, or one the connection
    sets through its own field, is refused with SkyNomadConfigError naming it and the accepted keys.
    """
    import inspect

    if config.cloud == "multi":
        from airflow_provider_skynomad.clouds.multi import MultiCloud

        return MultiCloud({part.cloud: make_cloud(part) for part in config.parts})
    require_extra(config.cloud)  # aws / gcp without their extra: say which to install
    if config.cloud == "simulated":
        from airflow_provider_skynomad.clouds.simulated.cloud import SimulatedCloud as cls

        fixed = {"trace_path": config.trace_path, "state_dir": config.state_dir, "speed": config.speed}
        fields = {"trace_path": "trace_path", "state_dir": "state_dir", "speed": "speed"}
    elif config.cloud == "aws":
        from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud as cls

        fields = CONFIG_FIELDS["aws"]
        fixed = {arg: getattr(config, name) for arg, name in fields.items()}
    else:
        from airflow_provider_skynomad.clouds.gcp.cloud import GcpCloud as cls

        fields = CONFIG_FIELDS["gcp"]
        fixed = {arg: getattr(config, name) for arg, name in fields.items()}
    parameters = inspect.signature(cls).parameters.values()
    takes = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    accepted = [name for name in takes if name not in fixed]
    options = dict(config.cloud_options or {})
    for name in options:
        if name in fixed:
            raise SkyNomadConfigError(
                f"skynomad connection: cloud_options.{name} is set by the connection's own field "
                f"{fields[name]!r}; set it there (cloud_options the {config.cloud} cloud accepts: "
                f"{', '.join(accepted) or 'none'})"
            )
    unknown = [name for name in options if name not in accepted]
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in parameters):
        raise SkyNomadConfigError(
            f"skynomad connection: the {config.cloud} cloud does not accept cloud_options "
            f"{', '.join(repr(n) for n in unknown)}; accepted: {', '.join(accepted) or 'none'}"
        )
    from airflow_provider_skynomad.clouds.retry import with_retries

    return with_retries(cls(**fixed, **options))  # every caller gets bounded API retries (clouds/retry.py)


def market_now(config: SkyNomadConfig):
    """Now on the clock this connection's market rows are stamped with (a UTC pandas Timestamp).

    A real cloud's probes are stamped with the wall clock. The simulated cloud stamps them with
    its replayed trace's time (a week in 2025, run `speed` times faster): measured from the wall
    clock, every row is months old, so a window from now would be empty and every market stale.
    Its clock is read from the state directory every process shares (no trace is loaded);
    before the first job or probe has created it there are no rows of it either.
    """
    import pandas as pd

    wall = pd.Timestamp.now(tz="UTC")
    if config.cloud != "simulated":
        return wall
    from airflow_provider_skynomad.clouds.simulated.clock import SimClock, read_shared_settings

    try:
        settings = read_shared_settings(Path(config.state_dir).expanduser())
        epoch, speed, start = settings["epoch_wall"], settings["speed"], settings["trace_start"]
        clock = SimClock(float(epoch), float(speed), pd.Timestamp(start))
    except (OSError, ValueError, KeyError, TypeError):
        return wall
    return clock.now()

"""Provider metadata for Airflow's ProvidersManager (`apache_airflow_provider` entry point)."""

from __future__ import annotations

from . import __version__


def get_provider_info() -> dict:
    """What ProvidersManager reads without importing the hooks; tests/test_packaging.py checks it against the code."""
    return {
        "package-name": "airflow-provider-skynomad",
        "name": "SkyNomad",
        "description": "Deadline-bound GPU batch jobs on spot instances across regions (SkyNomad planner).",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "SkyNomad",
                "external-doc-url": "https://github.com/andylizf/skynomad-artifact",
                "tags": ["service"],
            }
        ],
        "operators": [
            {
                "integration-name": "SkyNomad",
                "python-modules": [
                    "airflow_provider_skynomad.operators.skynomad",
                    "airflow_provider_skynomad.operators.probe",
                ],
            }
        ],
        "triggers": [
            {"integration-name": "SkyNomad", "python-modules": ["airflow_provider_skynomad.triggers.skynomad"]}
        ],
        "hooks": [{"integration-name": "SkyNomad", "python-modules": ["airflow_provider_skynomad.hooks.skynomad"]}],
        "extra-links": ["airflow_provider_skynomad.links.skynomad.SkyNomadGroupLink"],
        "connection-types": [
            {
                "connection-type": "skynomad",
                "hook-class-name": "airflow_provider_skynomad.hooks.skynomad.SkyNomadHook",
                "hook-name": "SkyNomad",
                "ui-field-behaviour": {
                    "hidden-fields": ["extra"],
                    "relabeling": {
                        "host": "Market DB host (PostgreSQL; empty = embedded SQLite)",
                        "schema": "Market DB database",
                        "login": "Market DB user",
                        "password": "Market DB password",
                        "port": "Market DB port",
                    },
                    "placeholders": {"host": "127.0.0.1", "port": "5432", "schema": "skynomad"},
                },
                "conn-fields": {
                    "market_url": {
                        "label": "Market table URL",
                        "description": "SQLAlchemy URL of the market table; overrides the host fields. "
                        "Empty and no host: sqlite under $SKYNOMAD_HOME.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "cloud": {
                        "label": "Cloud",
                        "description": "Where jobs run: simulated (replays a trace, no account), aws or gcp.",
                        "schema": {"type": "string", "enum": ["simulated", "aws", "gcp"], "default": "simulated"},
                    },
                    "trace_path": {
                        "label": "Simulated: trace file",
                        "description": "Market trace the simulated cloud replays (default: bundled GCP H100 week).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "state_dir": {
                        "label": "Simulated: state directory",
                        "description": "Shared by worker, triggerer and retries (default: $SKYNOMAD_HOME/cloud).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "speed": {
                        "label": "Simulated: speed",
                        "description": "Simulated seconds per wall-clock second (3600 = one hour per second).",
                        "schema": {"type": ["number", "null"], "minimum": 0, "default": 3600},
                    },
                    "aws_conn_id": {
                        "label": "AWS: connection id",
                        "description": "Amazon provider connection used for EC2 (cloud = aws).",
                        "schema": {"type": ["string", "null"], "default": "aws_default"},
                    },
                    "checkpoint_bucket": {
                        "label": "AWS: checkpoint bucket pattern",
                        "description": "S3 bucket per region for checkpoints, e.g. my-ckpt-{region}.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "gcp_conn_id": {
                        "label": "GCP: connection id",
                        "description": "Google provider connection used for Compute Engine (cloud = gcp).",
                        "schema": {"type": ["string", "null"], "default": "google_cloud_default"},
                    },
                    "gcp_project": {
                        "label": "GCP: project id",
                        "description": "Project that owns the instances (default: the connection's project).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "cloud_connections": {
                        "label": "Several clouds: their connections",
                        "description": "To plan over AWS and GCP zones at once: the ids of a 'SkyNomad on AWS' "
                        "and a 'SkyNomad on GCP' connection, comma-separated (Cloud is then ignored).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "probe_budget_usd_per_day": {
                        "label": "Probe budget (USD per day)",
                        "description": "The most the skynomad_probe DAG spends per day on launch probes in "
                        "this connection's clouds; free signals (placement scores, prices) cost nothing.",
                        "schema": {"type": ["number", "null"], "minimum": 0},
                    },
                    "cloud_options": {
                        "label": "Cloud options",
                        "description": "JSON object of further arguments for the cloud, e.g. "
                        '{"source_instance_template": "..."} (gcp) or {"image_id": "ami-..."} (aws); '
                        "unknown keys are refused, naming the accepted ones.",
                        "schema": {"type": ["object", "null"]},
                    },
                },
            }
        ],
    }

"""AWS EC2 behind the Cloud interface: `AwsCloud` (cloud.py) and the pieces it is built from."""

from airflow_provider_skynomad.clouds.aws.cloud import AwsCloud

__all__ = ["AwsCloud"]

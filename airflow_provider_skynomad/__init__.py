"""SkyNomad: deadline-bound GPU batch jobs on spot instances across regions, as an Airflow provider."""

# The one copy of the version: pyproject.toml reads it (hatch `dynamic = ["version"]`) and
# get_provider_info() reports it. Keep this module free of imports: every process loads it.
__version__ = "0.1.0"

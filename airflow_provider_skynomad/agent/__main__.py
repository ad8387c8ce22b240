"""``python -m airflow_provider_skynomad.agent run ...``: what an instance's boot script starts."""

import sys

from airflow_provider_skynomad.agent.cli import main

sys.exit(main())

"""``python -m airflow_provider_skynomad.cli ...``: the `skynomad` command without its console script."""

import sys

from airflow_provider_skynomad.cli import main

sys.exit(main())

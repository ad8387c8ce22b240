"""Probing: which markets to pay a probe for (plan), what the planner knows at a run (state), and one run's
probes carried out and billed (round); the probe operator and DAG are the Airflow glue around them."""

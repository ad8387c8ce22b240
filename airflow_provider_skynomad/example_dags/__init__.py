"""Runnable example DAGs; `skynomad demo` and the tests run them through Airflow."""

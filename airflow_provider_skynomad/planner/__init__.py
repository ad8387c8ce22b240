"""The planner: one pure decision function per policy, shared by the simulator, the Airflow trigger and the tests."""

"""The workload agent: runs on every instance a job launches and wraps the user's command.

It restores the job's newest complete checkpoint from the job's store prefix, runs the
workload with ``SKYNOMAD_CHECKPOINT_DIR`` and ``SKYNOMAD_PROGRESS_FILE``, uploads each
checkpoint the workload completes, watches the interruption notice, and exits with a code the
cloud adapters map to finished / failed / preempted. The contract is docs/agent.md.

Why a package of its own, importing nothing from Airflow (and nothing heavy at import time):
an instance image installs this package with ``--no-deps`` plus one cloud SDK, and the
simulated cloud starts one agent per group at up to one simulated hour per wall second, so
its start-up must cost tens of milliseconds. Keep this module free of imports.
"""

EXIT_FINISHED = 0  # the workload exited 0; its output is uploaded
EXIT_FAILED = 1  # the workload failed (not during a notice); its stderr tail is printed and recorded
EXIT_USAGE = 2  # the agent's own arguments or store are wrong
EXIT_PREEMPTED = 3  # notice seen, workload stopped, last checkpoint uploaded where time allowed

CHECKPOINT_DIR_ENV = "SKYNOMAD_CHECKPOINT_DIR"
PROGRESS_FILE_ENV = "SKYNOMAD_PROGRESS_FILE"
PROGRESS_FILE = "progress.json"

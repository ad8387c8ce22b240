"""The job runtime: what a SkyNomad job remembers, how a decision is carried out, and how events are handled.

- `record`: the typed `JobRecord` kept in the task state store (plain JSON only at that boundary);
- `runner`: `JobRunner.start` / `resume` / `handle(event)` → `Defer` or `Finish`;
- `watch`: one decision step as the trigger runs it (look, plan, say whether to wake the worker);
- `carry_out` and `drive`: a planner `Decision` carried out against a `Cloud`, request written first;
- `events`: the typed trigger → worker message; `narrate`: plain-words log lines and the live status;
- `deadline`, `summary`, `errors`: deadlines in cloud hours, the XCom summary, the errors users see.

The Airflow glue (`operators/`, `triggers/`) is thin over this package.
"""

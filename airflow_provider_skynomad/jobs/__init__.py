"""The job runtime: what a SkyNomad job remembers, how a decision is carried out, and how events are handled.

- `record`: the typed `JobRecord` kept in the task state store (plain JSON only at that boundary);
- `worker`: what runs on the worker: `JobWorker.start` / `resume` / `report` → `Defer` or `Finish`;
- `controller`, `watch` and `steps`: what runs in the trigger: each step a look (`Watch`), and
  `JobSteps.handle(event)` acting on it at once; `clock` times the steps, `unanswered` is the one
  rule for a database or an API that does not answer;
- `run`: one job as both sides act on it (`JobRun`: record, store, cloud, markets, policy), over one
  `store.RecordStore`; `markets` builds the market view, `learn` what the controller measures;
- `carry_out` and `drive`: a planner `Decision` carried out against a `Cloud`, request written first,
  returning what happened (`Carried`) for the caller to record;
- `events`: the typed trigger → worker message; `narrate`: plain-words log lines and the live status;
- `deadline`, `summary`, `errors`: deadlines in cloud hours, the XCom summary, the errors users see.

The Airflow glue (`operators/`, `triggers/`) is thin over this package.
"""

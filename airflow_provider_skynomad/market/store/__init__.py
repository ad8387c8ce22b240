"""The market database: the observation table, the signals and probe-spend tables beside it, and how they are
written in bulk, migrated, compacted and summarised."""

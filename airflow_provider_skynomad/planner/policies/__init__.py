"""One small module per policy, each built from the shared pieces in the planner package."""

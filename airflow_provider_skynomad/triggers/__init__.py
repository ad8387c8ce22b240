"""Triggers: wait on the cloud between decisions; every action happens back on a worker."""

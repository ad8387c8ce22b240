"""Hooks: the `skynomad` connection (market database + cloud) and the clouds behind it."""

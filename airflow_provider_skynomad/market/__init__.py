"""Market data: spot/on-demand observations per zone, read from traces or the market table."""

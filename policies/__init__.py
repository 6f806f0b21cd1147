"""Default policy files shipped with rtd (data, not code)."""

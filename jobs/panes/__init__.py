"""A service's windows as panes, sessions and de-duplication ids (both aggregation steps)."""

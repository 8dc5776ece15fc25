"""The Streamlit dashboard: reads results from Redis (only via `tidegauge.core.store`), draws them.

`dashboard.run` is the `tidegauge dashboard` command, `dashboard.app` the Streamlit script,
`dashboard.data` the typed reads and frames, `dashboard.figures` the pure plotly figure builders.
"""

"""The Streamlit dashboard: reads results from Redis (only via `tidegauge.core.store`), draws them.

Serving: `dashboard.run` is the `tidegauge dashboard` command (flags and launcher),
`dashboard.server` the server it runs (the page plus the wall page), `dashboard.app` the
Streamlit page (layout only), `dashboard.wall` the wall page for many screens.

Reading: `dashboard.data` reads one refresh's `Snapshot`, `dashboard.shared` shares it and what
is derived from it between viewers, `dashboard.view_url` is a view as URL parameters.

Pure, unit-tested shaping of a snapshot, one module per concept: `dashboard.windows` (per-window
series), `dashboard.time_domains` (event vs processing time), `dashboard.latency_range`,
`dashboard.lateness`, `dashboard.health` (per batch), `dashboard.job_status`,
`dashboard.dead_letters`, `dashboard.headline` (the top row), `dashboard.times` (times for
display); `dashboard.panels` puts them together for both pages.

Drawing: `dashboard.figures` builds plotly figures, `dashboard.marks` draws alert firings and
annotations on them, `dashboard.chart` and `dashboard.copy_button` are the page's components.
"""

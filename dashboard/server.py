"""The dashboard's web server: Streamlit's page (app.py) plus the wall page (wall.py).

`tidegauge dashboard` runs `streamlit run dashboard/server.py -- FLAGS`; Streamlit finds the
`st.App` below and serves the page as usual, with the wall page's two routes and the server's
metrics and readiness (dashboard/metrics.py) beside it on the same port. Streamlit makes
sys.argv `[server.py, *FLAGS]` for the app and the page alike.
"""

from __future__ import annotations

import sys

import streamlit as st

from dashboard import data, metrics
from dashboard.run import APP_PATH, app_settings
from dashboard.wall import routes

_settings = app_settings(sys.argv[1:])
app = st.App(
    str(APP_PATH),
    routes=[
        *routes(_settings),
        # the server's own figures and readiness (dashboard/metrics.py)
        *metrics.routes(lambda: data.client(_settings.redis.url)),
    ],
)

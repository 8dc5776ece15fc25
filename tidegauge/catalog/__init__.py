"""The service catalog: owners, tiers and SLOs per service, as versions in event time."""

#: The module that registers the exact SLO counts (a metric and its fields), loaded like a plugin
#: by every process that writes or reads them.
SLO_COUNTS_PLUGIN = "tidegauge.catalog.slo_counts"

"""The service catalog: owners, tiers and SLOs per service, as versions in event time."""

"""The top floor: the `tidegauge` command and the local stack it starts (services, demo)."""

"""The Spark runtime under every stage: session, Java, class archive, Python worker daemon."""

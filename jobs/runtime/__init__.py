"""The Spark process the pipeline starts: session, Java, class archive, Python worker daemon."""

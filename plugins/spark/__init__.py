"""The Spark plugin: sink, Structured Streaming source and the ``rmqk demo`` job (in progress)."""

"""The handler module examples/orderly-python.toml names (``ledger.handlers:write_batch``)."""

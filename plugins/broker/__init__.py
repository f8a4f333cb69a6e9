"""rmqk.plugins.broker (in progress)."""

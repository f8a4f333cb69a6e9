"""rmqk.plugins.allocation (in progress)."""

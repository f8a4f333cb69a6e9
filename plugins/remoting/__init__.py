"""rmqk.plugins.remoting (in progress)."""

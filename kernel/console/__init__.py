"""Terminal-facing helpers shared by the application and command plugins (not the kernel
proper: nothing here is a contract a plugin implements)."""

"""All a plugin may import from the kernel, beside :mod:`rmqk.model` and :mod:`rmqk.wire`.

:mod:`~rmqk.spi.hookspecs` (the hooks and ``hookimpl``), :mod:`~rmqk.spi.contracts`
(what each plugin kind provides), :mod:`~rmqk.spi.transport` (the remoting
transport protocol), :mod:`~rmqk.spi.consume` (the consume-service contract and its
outcome types), :mod:`~rmqk.spi.contexts` (what event hooks receive),
:mod:`~rmqk.spi.commands` (a CLI sub-command) and :mod:`~rmqk.spi.options` (how a
plugin declares and validates its options). Nothing here imports the engine or the
application at module level.
"""

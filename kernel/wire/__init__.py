"""RocketMQ 4.9.8's wire: remoting frames and headers, stored and pulled message records,
the JSON bodies Java tools decode, request signing and TLS contexts.

Shared by the tcp transport plugin (the client side) and the embedded broker; each
codec has a compiled speedup (``_speedups``, ``_headers``) with the same pure-Python
code beside it (``RMQK_NO_EXTENSIONS=1`` selects it).
"""

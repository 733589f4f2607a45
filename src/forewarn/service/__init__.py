"""The running service: engine + store + clock, and the ASGI server that exposes the surfaces."""

"""Run `forewarn` with a different event loop or HTTP parser, without touching src/ (used by imds_vs_nginx.py).

    FOREWARN_BENCH_LOOP=uvloop   asyncio.run() gets a uvloop loop (forewarn's CLI calls asyncio.run itself, so
                                 uvicorn's own loop="auto" choice never applies to it)
    FOREWARN_BENCH_HTTP=h11      uvicorn's http="auto" resolves to h11 instead of httptools
    FOREWARN_BENCH_NODELAY=1     the listening sockets are created with proto=IPPROTO_TCP, so that asyncio's
                                 selector transport sets TCP_NODELAY on accepted connections (it only does so
                                 when sock.proto == IPPROTO_TCP; forewarn.service.server._listen passes proto 0)
    FOREWARN_BENCH_NOPROXY=1     uvicorn.Config(proxy_headers=False): no ProxyHeadersMiddleware around the app

Everything after the script name is forewarn's own command line, e.g. ``serve --fleet f.yaml ...``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys


def _listen_tcp(host: str, port: int) -> socket.socket:
    """forewarn.service.server._listen, but with an explicit IPPROTO_TCP."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def main() -> None:
    loop = os.environ.get("FOREWARN_BENCH_LOOP", "")
    if loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    elif loop not in ("", "asyncio"):
        sys.exit(f"_forewarn_variant: unknown FOREWARN_BENCH_LOOP {loop!r}")

    http = os.environ.get("FOREWARN_BENCH_HTTP", "")
    if http in ("h11", "httptools"):
        import uvicorn.config

        uvicorn.config.HTTP_PROTOCOLS["auto"] = uvicorn.config.HTTP_PROTOCOLS[http]
    elif http not in ("", "auto"):
        sys.exit(f"_forewarn_variant: unknown FOREWARN_BENCH_HTTP {http!r}")

    if os.environ.get("FOREWARN_BENCH_NODELAY", "") not in ("", "0"):
        import forewarn.service.server

        forewarn.service.server._listen = _listen_tcp

    if os.environ.get("FOREWARN_BENCH_NOPROXY", "") not in ("", "0"):
        import functools

        import forewarn.service.server
        import uvicorn

        forewarn.service.server.uvicorn = type(
            "uvicorn", (), {"Config": functools.partial(uvicorn.Config, proxy_headers=False), "Server": uvicorn.Server}
        )

    from forewarn.cli.main import main as forewarn_main

    sys.argv = ["forewarn", *sys.argv[1:]]
    forewarn_main()


if __name__ == "__main__":
    main()

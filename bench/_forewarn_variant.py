"""Run `forewarn` with a different event loop or HTTP parser, without touching src/ (used by imds_vs_nginx.py).

    FOREWARN_BENCH_LOOP=uvloop   asyncio.run() gets a uvloop loop (forewarn's CLI calls asyncio.run itself, so
                                 uvicorn's own loop="auto" choice never applies to it)
    FOREWARN_BENCH_HTTP=h11      uvicorn's http="auto" resolves to h11 instead of httptools

Everything after the script name is forewarn's own command line, e.g. ``serve --fleet f.yaml ...``.
"""

from __future__ import annotations

import asyncio
import os
import sys


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

    from forewarn.cli.main import main as forewarn_main

    sys.argv = ["forewarn", *sys.argv[1:]]
    forewarn_main()


if __name__ == "__main__":
    main()

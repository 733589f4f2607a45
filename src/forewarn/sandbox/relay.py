"""The relay: what carries a namespace's connections to 169.254.169.254:80 to forewarn's metadata listener.

It holds listening sockets inside the namespaces and, for each connection accepted there, opens one to the server
from the namespace's own relay address (127.253.x.y, registered with the server as that VM), then copies bytes both
ways until both sides are done. It knows nothing of HTTP: what the program sends is what forewarn reads, headers and
all, and the answer comes back byte for byte. One event loop in one daemon thread serves every namespace of a
process.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from concurrent.futures import Future
from typing import Any


class Relay:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="forewarn sandbox relay", daemon=True)
        self._thread.start()
        self._routes: dict[str, _Route] = {}

    def add(self, key: str, listeners: list[socket.socket], target: tuple[str, int], source: str) -> None:
        """Serve ``listeners`` (sockets in a namespace): each connection goes to ``target`` from ``source``."""
        self._call(self._add(key, listeners, target, source))

    def remove(self, key: str) -> None:
        """Stop listening for ``key`` and cut its open connections."""
        if key in self._routes:
            self._call(self._remove(key))

    def close(self) -> None:
        for key in list(self._routes):
            self.remove(key)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    def _call(self, coroutine: Any) -> Any:
        future: Future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(30)

    async def _add(self, key: str, listeners: list[socket.socket], target: tuple[str, int], source: str) -> None:
        route = _Route(target, source)
        for listener in listeners:
            route.servers.append(await asyncio.start_server(route.serve, sock=listener))
        self._routes[key] = route

    async def _remove(self, key: str) -> None:
        route = self._routes.pop(key)
        for server in route.servers:
            server.close()
        for writer in list(route.writers):
            writer.transport.abort()
        for server in route.servers:
            await server.wait_closed()


class _Route:
    def __init__(self, target: tuple[str, int], source: str):
        self.target = target
        self.source = source
        self.servers: list[asyncio.Server] = []
        self.writers: set[asyncio.StreamWriter] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(
                    *self.target, local_addr=(self.source, 0)
                )
            except OSError:
                # forewarn is not there (stopped, or restarting): the program sees its connection reset, as it
                # would if the real endpoint were down.
                writer.transport.abort()
                return
            self.writers.add(upstream_writer)
            try:
                await asyncio.gather(_copy(reader, upstream_writer), _copy(upstream_reader, writer))
            finally:
                self.writers.discard(upstream_writer)
                upstream_writer.close()
        finally:
            self.writers.discard(writer)
            writer.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # the half-close an HTTP/1.0 client or a server's close sends on
    except OSError:
        writer.transport.abort()

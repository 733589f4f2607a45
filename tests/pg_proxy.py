"""A TCP proxy on loopback in front of PostgreSQL, which a test cuts (and restores) to put the database out of a
server's reach, or which breaks a connection at the COMMIT of a command."""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit, urlunsplit


class PgProxy:
    """A TCP proxy on loopback in front of PostgreSQL that a test can cut (and restore), or that can break a
    connection at the COMMIT of a command (a transaction that wrote the journal)."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._links: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        # "after": COMMIT reaches the server, its answer is lost; "before": it does not; "outage": it does not, and
        # the proxy is cut (until ``open``)
        self.commit_trap: str | None = None
        self.trapped = threading.Event()
        self.open()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Refuse new connections and break every open one."""
        listener, self._listener = self._listener, None
        if listener is not None:
            _sever(listener)  # shutdown first: a bare close leaves the socket listening under a blocked accept()
        with self._lock:
            links, self._links = self._links, []
        for client, server in links:
            _sever(client)
            _sever(server)

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._links.append((client, server))
            marked = {"write": False}  # has this connection's open transaction written the journal?
            threading.Thread(target=self._pump, args=(client, server, marked), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, None), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, marked: dict | None) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if marked is not None:
                    if b"INSERT INTO forewarn_journal" in data:  # a command's commit (sent as text: a new server)
                        marked["write"] = True
                    if b"COMMIT\x00" in data and marked["write"] and self.commit_trap:
                        mode, self.commit_trap = self.commit_trap, None
                        if mode == "outage":  # the COMMIT never arrives, and the database stays out of reach
                            self.cut()
                            self.trapped.set()
                            return
                        _sever(source)  # forewarn sees its connection close before any answer could reach it
                        if mode == "after":
                            target.sendall(data)  # PostgreSQL reads the COMMIT before the end of the stream
                        _sever(target)
                        self.trapped.set()
                        return
                target.sendall(data)
        except OSError:
            pass
        _sever(source)
        _sever(target)


def _sever(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def through(url: str, port: int) -> str:
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


def upstream(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432

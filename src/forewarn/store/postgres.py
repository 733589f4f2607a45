"""PostgreSQL store, for deployments that share one database. The URL is a libpq URL (``postgresql://...``)."""

from __future__ import annotations

import contextlib

import psycopg

from forewarn.store.base import SQLStore, StoreError


class PostgresStore(SQLStore):
    name = "postgresql"
    marker = "%s"
    journal_id_type = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"

    def __init__(self, url: str):
        try:
            connection = psycopg.connect(url, autocommit=False, connect_timeout=10)
        except psycopg.Error as error:
            raise StoreError(f"cannot connect to PostgreSQL at {_redacted(url)}: {error}".strip()) from None
        super().__init__(connection, f"postgresql:{_redacted(url)}")

    @contextlib.contextmanager
    def _transaction(self):
        try:
            with self.connection.transaction():
                with self.connection.cursor() as cursor:
                    yield cursor
        except psycopg.Error as error:
            raise StoreError(f"{self.description}: {error}".strip()) from None


def _redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url

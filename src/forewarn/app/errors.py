"""What the application tells the surfaces when it cannot do what they ask, in its own terms rather than a database's."""

from __future__ import annotations


class Unavailable(Exception):
    """A change could not be made durable now (the database failed or is out of reach): nothing was changed. Each
    surface answers with its own retryable error, and tells clients to come back after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after

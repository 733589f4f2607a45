"""Errors the core raises for commands it refuses. Surfaces translate them into their own wire style."""


class CoreError(Exception):
    """A command was refused; nothing was changed."""


class NotFound(CoreError):
    """A command named something (VM, host, event) that does not exist."""


class Conflict(CoreError):
    """A command is valid in itself but not in the current state (e.g. cancel a Started event)."""


class Invalid(CoreError):
    """A command's arguments are malformed or out of range."""
